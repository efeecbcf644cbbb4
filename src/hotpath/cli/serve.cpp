// `hotpath serve PKG... --port P`: model packages behind a KServe v2 / Triton-compatible HTTP server with
// dynamic batching, a bounded queue, Prometheus metrics and a graceful drain on SIGTERM/SIGINT.
//   hotpath serve pkg/resnet-int8 pkg/minilm --port 8000
//   curl -s localhost:8000/v2/models/resnet-int8   (docs/serving.md)
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/serve/http_server.h"
#include "hotpath/serve/metrics.h"
#include "hotpath/serve/model_runner.h"
#include "hotpath/serve/routes.h"

namespace hotpath::cli {
namespace {

// The command line's values: batching and transport options bind to the library's structs (their defaults are
// the library's); the durations are whole numbers of the unit in the flag's name, converted in run().
struct ServeArgs {
  std::vector<std::string> packages;
  std::vector<std::string> named;  // NAME=PKG
  serve::BatchingOptions batching;
  serve::HttpServerOptions http;
  std::int64_t max_queue_delay_us = serve::BatchingOptions{}.max_queue_delay.count();
  std::int64_t queue_timeout_ms = serve::BatchingOptions{}.queue_timeout.count();
  std::int64_t request_timeout_ms = serve::HttpServerOptions{}.request_timeout.count();
  std::int64_t idle_timeout_ms = serve::HttpServerOptions{}.idle_timeout.count();
  int parse_threads = serve::RouterOptions{}.parse_threads;
  double drain_timeout_s = 30;  // the command's own: how long SIGTERM waits for the requests in flight
};

bool valid_model_name(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return name != "." && name != "..";
}

void run(const ServeArgs& a) {
  struct Model {
    std::string name, dir;
  };
  std::vector<Model> models;
  for (const std::string& dir : a.packages) {
    std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
    models.push_back({name, dir});
  }
  for (const std::string& spec : a.named) {
    const auto eq = spec.find('=');
    HOTPATH_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), "serve: --name ", printable(spec),
                  ": expected NAME=PKG");
    models.push_back({spec.substr(0, eq), spec.substr(eq + 1)});
  }
  HOTPATH_CHECK(!models.empty(), "serve: no model packages (give PKG... or --name NAME=PKG)");
  for (std::size_t i = 0; i < models.size(); ++i) {
    HOTPATH_CHECK(valid_model_name(models[i].name), "serve: model name '", printable(models[i].name),
                  "' (from ", printable(models[i].dir), "): use letters, digits, '_', '-', '.' (or --name NAME=PKG)");
    for (std::size_t j = 0; j < i; ++j) {
      HOTPATH_CHECK(models[i].name != models[j].name, "serve: two models named '", models[i].name, "' (",
                    models[j].dir, ", ", models[i].dir, "): name one with --name NAME=PKG");
    }
  }
  HOTPATH_CHECK(a.drain_timeout_s >= 0, "serve: --drain-timeout-s must be >= 0");

  serve::BatchingOptions batching = a.batching;
  batching.max_queue_delay = std::chrono::microseconds(a.max_queue_delay_us);
  batching.queue_timeout = std::chrono::milliseconds(a.queue_timeout_ms);

  serve::Router* router_ptr = nullptr;  // set once the models are warm; the server starts after that
  serve::HttpServerOptions http = a.http;
  http.request_timeout = std::chrono::milliseconds(a.request_timeout_ms);
  http.idle_timeout = std::chrono::milliseconds(a.idle_timeout_ms);
  http.on_transport_error = [&router_ptr](const serve::HttpResponse& response) {
    if (router_ptr != nullptr) router_ptr->log_transport_error(response);
  };

  // Declared first so it is destroyed last: the runners' last callbacks still post to its connections.
  serve::HttpServer server(http, [&router_ptr](serve::HttpRequest request, serve::Responder respond) {
    router_ptr->handle(std::move(request), respond);
  });
  serve::Metrics metrics;
  std::vector<std::unique_ptr<serve::ModelRunner>> runners;
  std::vector<serve::ModelRunner*> pointers;
  for (const Model& m : models) {
    try {
      runners.push_back(std::make_unique<serve::ModelRunner>(m.name, m.dir, batching, metrics));
    } catch (const Error& e) {
      const std::string where = "serve: model " + m.name;
      if (std::string_view(e.what()).starts_with(where)) throw;  // the runner named it already
      throw e.with_context(where);
    }
    pointers.push_back(runners.back().get());
  }
  for (auto& runner : runners) runner->warm_up();
  serve::Router router(pointers, metrics,
                       {.parse_threads = a.parse_threads, .transport_stats = [&server] { return server.stats(); }});
  router_ptr = &router;
  // Whichever way run() ends: the runners go first (their last callbacks use the router and post answers to
  // the server), then the server stops (no I/O thread calls the router any more), then the router goes.
  struct ServerStops {
    serve::HttpServer& server;
    ~ServerStops() { server.stop(); }
  } server_stops{server};
  struct RunnersFirst {
    serve::Router& router;
    std::vector<std::unique_ptr<serve::ModelRunner>>& runners;
    ~RunnersFirst() {
      router.stop_workers();  // a parse thread may still be submitting to a runner
      runners.clear();
    }
  } runners_first{router, runners};

  server.start();
  std::string names;
  for (const Model& m : models) names += (names.empty() ? "" : ", ") + m.name;
  std::printf("serve: ready on http://%s:%d (models: %s)\n", a.http.host.c_str(), server.port(), names.c_str());
  std::fflush(stdout);

  const int signal = server.wait_for_signal();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(a.drain_timeout_s));
  std::fprintf(stderr, "serve: signal %d: draining (no new connections; up to %g s for %zu requests in flight)\n",
               signal, a.drain_timeout_s, server.in_flight());
  router.begin_drain();
  server.begin_drain();
  for (auto& runner : runners) runner->begin_drain();
  for (auto& runner : runners) runner->wait_idle(deadline);
  // Requests whose bytes were already on the wire when the listener closed are still read and answered (503
  // from a draining runner): wait until nothing has been in flight for a moment, not just once.
  bool answered = false;
  do {
    answered = server.wait_answered(deadline);
    if (answered) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (answered && server.in_flight() != 0);
  const std::size_t left = server.in_flight();
  server.stop();
  HOTPATH_CHECK(answered, "serve: drain timeout: ", left, " requests still unanswered after --drain-timeout-s ",
                a.drain_timeout_s);
  std::fprintf(stderr, "serve: drained, every accepted request answered\n");
}

}  // namespace

void add_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve model packages over HTTP: KServe v2 / Triton protocol, dynamic batching (docs/serving.md)");
  cmd->add_option("packages", args->packages, "Model package directories (hotpath export); named by their folder");
  cmd->add_option("--name", args->named, "NAME=PKG: a package under another name (repeatable)");
  cmd->add_option("--host", args->http.host, "Address to listen on");
  cmd->add_option("--port", args->http.port, "TCP port (0: any free port, printed in the ready line)")->check(CLI::Range(0, 65535));
  cmd->add_option("--max-batch-size", args->batching.max_batch_size, "Rows per engine call")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-queue-delay-us", args->max_queue_delay_us,
                  "Wait at most this long for more rows before running a partial batch")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{10'000'000}));
  cmd->add_option("--preferred-batch-sizes", args->batching.preferred_batch_sizes,
                  "Run a batch as soon as it reaches one of these sizes")
      ->delimiter(',');
  cmd->add_option("--max-queue-size", args->batching.max_queue_size, "Queued requests per model; beyond: 503 + Retry-After")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  cmd->add_option("--queue-timeout-ms", args->queue_timeout_ms, "A request queued longer is answered 504")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  cmd->add_option("--threads", args->batching.threads, "Engine intra-op threads per model (0: LibTorch's default)")
      ->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_option("--io-threads", args->http.io_threads, "HTTP I/O threads")->check(CLI::Range(1, 64));
  cmd->add_option("--request-timeout-ms", args->request_timeout_ms,
                  "A request not fully received this long after its first byte gets 408")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  cmd->add_option("--idle-timeout-ms", args->idle_timeout_ms, "Keep-alive connections idle this long are closed")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  cmd->add_option("--drain-timeout-s", args->drain_timeout_s,
                  "On SIGTERM/SIGINT: finish queued and in-flight requests within this many seconds")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--max-body-bytes", args->http.max_body_bytes,
                  "Larger request bodies get 413 (the body is read and dropped)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", args->http.max_header_bytes, "Larger request headers get 431")
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--max-buffered-bytes", args->http.max_buffered_bytes,
                  "Request bytes all connections may hold together; a request past it gets 503 + Retry-After before "
                  "its body is read (at least --max-body-bytes + --max-header-bytes)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--max-connections", args->http.max_connections,
                  "Open connections; one more is answered 503 + Retry-After and closed")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--parse-threads", args->parse_threads,
                  "Threads that parse large bodies and /v1 requests (decode, tokenize), off the I/O threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
