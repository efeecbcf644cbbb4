// hotpath/serve/routes.h — what `hotpath serve` answers, over the models' runners: KServe v2 (server and
// model metadata, health, readiness, infer with JSON or binary tensors), Prometheus /metrics, and the /v1
// conveniences (classify an image or texts, embed texts). One JSON log line per request on stderr.
//
//   Router router({&resnet_runner, &minilm_runner}, metrics);
//   HttpServer server(options, [&](HttpRequest req, Responder respond) { router.handle(std::move(req), respond); });
//   router.begin_drain();   // /v2/health/ready → 503 from now on
#pragma once

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/serve/http_server.h"
#include "hotpath/serve/metrics.h"
#include "hotpath/serve/model_runner.h"

namespace hotpath::serve {

inline constexpr const char* kServerVersion = "0.1.0";

struct RouterOptions {
  std::FILE* log = stderr;  // one JSON line per request; nullptr: none
  int default_top_k = 0;  // /v1 classify without ?top_k=; 0: each package's own (config.json postprocess.top_k)
  // Parsing, decoding and tokenizing are work: an I/O thread that did them for a 28 MB JSON body kept every other
  // connection waiting for seconds. Bodies over inline_body_bytes and every /v1 request are handled on
  // parse_threads worker threads instead; small requests (health, metadata, a small infer) stay on the I/O thread.
  // The workers' backlog is bounded by what the transport admits (--max-connections, --max-buffered-bytes).
  std::size_t inline_body_bytes = 64u << 10;
  int parse_threads = 1;
  // The transport's state for /metrics (HttpServer::stats); null: not rendered.
  std::function<TransportStats()> transport_stats = nullptr;
};

// The texts of a /v1 classify or embed body: JSON lines (a string or {"text": ...} per line) for
// application/json[l] and application/x-ndjson, else one text per line; blank lines are skipped. A body that is
// not UTF-8, holds a NUL byte, or comes as a binary Content-Type (image/*, audio/*, video/*,
// application/octet-stream) is a ServeError 400 naming the offset: a JPEG is refused whole, never split into
// "texts" at its 0x0a bytes.
std::vector<std::string> body_texts(std::string_view body, std::string_view content_type);

class Router {
 public:
  // The runners must outlive the router; names are their metadata().name. Starts the parse threads.
  Router(std::vector<ModelRunner*> models, Metrics& metrics, RouterOptions options = {});
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;
  ~Router();  // stop_workers()

  // An HttpHandler: answers at once (metadata, errors), hands the request to a parse thread (large bodies, /v1),
  // or parks `respond` with the model's runner. Never parses a large body on the calling (I/O) thread.
  void handle(HttpRequest request, const Responder& respond);

  // Runs what the parse threads hold, then joins them (before the runners go away); later large requests → 503.
  void stop_workers();

  // One log line (and a hotpath_requests_total count under model "") for an answer the transport gave itself
  // (HttpServerOptions::on_transport_error: 400 malformed HTTP, 408, 413, 431).
  void log_transport_error(const HttpResponse& response);

  void begin_drain();        // server readiness → 503
  [[nodiscard]] bool ready() const;  // every model warm, not draining

 private:
  struct Call;
  struct Workers;
  void dispatch(const std::shared_ptr<Call>& call);
  void route(const std::shared_ptr<Call>& call);
  // POST /v2/models/NAME[/versions/V]/infer (KServe v2) and POST /v1/models/NAME/classify|embed, once routed.
  void infer_v2(const std::shared_ptr<Call>& call, ModelRunner& runner, const ModelMetadata& meta);
  void classify_or_embed_v1(const std::shared_ptr<Call>& call, ModelRunner& runner, const ModelMetadata& meta,
                            std::string_view action);
  void finish(Call& call, HttpResponse response, const InferResult* result);
  ModelRunner& model(const std::string& name, const std::string& version) const;

  std::vector<ModelRunner*> models_;
  Metrics& metrics_;
  RouterOptions options_;
  std::atomic<bool> draining_{false};
  std::atomic<std::uint64_t> next_id_{1};
  std::mutex log_mutex_;
  std::unique_ptr<Workers> workers_;
};

}  // namespace hotpath::serve
