// The server's routes over the model runners (torch here, Beast not: http_server.cpp is the only Beast TU).
#include "hotpath/serve/routes.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <numeric>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "hotpath/core/error.h"
#include "hotpath/core/json.h"
#include "hotpath/infer/classifier.h"
#include "hotpath/serve/kserve.h"
#include "hotpath/text/bert_normalizer.h"

namespace hotpath::serve {

using Clock = std::chrono::steady_clock;
using OJson = nlohmann::ordered_json;

struct Router::Call {
  HttpRequest request;  // owns the body the parsed binary tensors point into
  Responder respond;
  std::string id;     // the KServe request id, else a server counter
  std::string model;  // empty for server routes
  std::int64_t batch = 0;
  std::chrono::microseconds queue{0}, compute{0};
};

namespace {

std::string dump(const OJson& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

HttpResponse json_response(int status, const OJson& j) {
  HttpResponse r;
  r.status = status;
  r.body = dump(j);
  return r;
}

// "a/b/c" → {"a","b","c"} (empty segments dropped).
std::vector<std::string_view> segments(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < path.size()) {
    const std::size_t j = path.find('/', i);
    const std::size_t end = j == std::string_view::npos ? path.size() : j;
    if (end > i) out.push_back(path.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

std::string query_value(std::string_view query, std::string_view key) {
  std::size_t i = 0;
  while (i <= query.size()) {
    const std::size_t j = query.find('&', i);
    const std::string_view kv = query.substr(i, (j == std::string_view::npos ? query.size() : j) - i);
    const std::size_t eq = kv.find('=');
    if (kv.substr(0, eq) == key) return eq == std::string_view::npos ? std::string() : std::string(kv.substr(eq + 1));
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
  return {};
}

OJson tensor_specs(const std::vector<TensorSpec>& specs) {
  OJson a = OJson::array();
  for (const TensorSpec& s : specs) a.push_back({{"name", s.name}, {"datatype", s.datatype}, {"shape", s.shape}});
  return a;
}

at::ScalarType scalar_type(std::string_view datatype) {
  if (datatype == "BOOL") return at::kBool;
  if (datatype == "UINT8") return at::kByte;
  if (datatype == "INT8") return at::kChar;
  if (datatype == "INT16") return at::kShort;
  if (datatype == "INT32") return at::kInt;
  if (datatype == "INT64") return at::kLong;
  if (datatype == "FP16") return at::kHalf;
  if (datatype == "BF16") return at::kBFloat16;
  if (datatype == "FP32") return at::kFloat;
  if (datatype == "FP64") return at::kDouble;
  return at::ScalarType::Undefined;  // UINT16/32/64: no lossless widening checked here; refused below
}

// One request input as a tensor of the model's datatype: integers widen to INT64, FP16/BF16/FP64 become FP32
// (what Triton clients send for these models); anything else keeps its type and the runner names the mismatch.
at::Tensor input_tensor(const RequestInput& in, const ModelMetadata& meta) {
  const at::ScalarType type = scalar_type(in.datatype);
  if (type == at::ScalarType::Undefined) {
    throw ServeError(400, "model " + meta.name + ": input '" + in.name + "' has datatype " + in.datatype +
                              ", which this server does not convert (send INT64/INT32 or FP32)");
  }
  at::Tensor t = at::empty(in.shape, at::TensorOptions().dtype(type));
  if (!in.bytes.empty()) std::memcpy(t.data_ptr(), in.bytes.data(), in.bytes.size());
  for (const TensorSpec& spec : meta.inputs) {
    if (spec.name != in.name) continue;
    const bool integer = type == at::kByte || type == at::kChar || type == at::kShort || type == at::kInt;
    const bool floating = type == at::kHalf || type == at::kBFloat16 || type == at::kDouble;
    if (spec.datatype == "INT64" && integer) return t.to(at::kLong);
    if (spec.datatype == "FP32" && floating) return t.to(at::kFloat);
  }
  return t;
}

std::span<const std::uint8_t> tensor_bytes(const at::Tensor& t) {
  return {static_cast<const std::uint8_t*>(t.data_ptr()), static_cast<std::size_t>(t.nbytes())};
}

}  // namespace

std::vector<std::string> body_texts(std::string_view body, std::string_view content_type) {
  const bool jsonl = content_type.starts_with("application/jsonl") ||
                     content_type.starts_with("application/x-ndjson") || content_type.starts_with("application/json");
  const bool binary = content_type.starts_with("image/") || content_type.starts_with("audio/") ||
                      content_type.starts_with("video/") || content_type.starts_with("application/octet-stream");
  if (binary) {
    throw ServeError(400, "body: Content-Type " + printable(content_type, 64) +
                              " is not text: a text model takes text/plain (one text per line) or application/jsonl");
  }
  // A JPEG or any binary body is refused whole, before it is split into "texts" at its 0x0a bytes.
  if (const std::size_t bad = text::find_invalid_utf8(body); bad != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(body[bad]));
    throw ServeError(400, "body: not UTF-8 text (byte " + std::string(byte) + " at offset " + std::to_string(bad) +
                              "): a text model takes text/plain (one text per line) or application/jsonl");
  }
  if (const std::size_t nul = body.find('\0'); nul != std::string_view::npos) {
    throw ServeError(400, "body: a NUL byte at offset " + std::to_string(nul) +
                              " (binary data, not text): a text model takes text/plain or application/jsonl");
  }
  std::vector<std::string> texts;
  std::size_t line_number = 0;
  while (!body.empty()) {
    const std::size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view{} : body.substr(nl + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (!jsonl) {
      texts.emplace_back(line);
      continue;
    }
    const std::string where = "body line " + std::to_string(line_number);
    nlohmann::json j;
    try {
      j = parse_json(line, where);
    } catch (const Error& e) {
      throw ServeError(400, e.what());
    }
    if (j.is_object() && j.contains("text") && j["text"].is_string()) j = j["text"];
    if (!j.is_string()) throw ServeError(400, where + ": expected a JSON string or {\"text\": \"...\"}");
    texts.push_back(j.get<std::string>());
  }
  return texts;
}

namespace {

// A request with a method its route does not take: 405 with Allow.
struct WrongMethod {
  std::string allow, message;
};

HttpResponse error_response(const ServeError& e) {
  HttpResponse r = json_error(e.http_status(), e.what());
  if (e.retry_after_s() > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s()));
  return r;
}

std::string models_list(const std::vector<ModelRunner*>& models) {
  std::string names;
  for (const ModelRunner* m : models) names += (names.empty() ? "" : ", ") + m->metadata().name;
  return names;
}

}  // namespace

// The parse threads: a FIFO of calls, no bound of its own (each connection holds at most one request, and the
// transport bounds connections and buffered bytes).
struct Router::Workers {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> tasks;
  bool stopping = false;
  std::vector<std::thread> threads;

  explicit Workers(int count) {
    for (int i = 0; i < count; ++i) threads.emplace_back([this] { run(); });
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;
  ~Workers() { stop(); }

  bool post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex);
      if (stopping) return false;
      tasks.push_back(std::move(task));
    }
    wake.notify_one();
    return true;
  }
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || !tasks.empty(); });
        if (tasks.empty()) return;  // stopping, and nothing left
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();  // dispatch() answers every failure itself
    }
  }
  void stop() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
};

Router::Router(std::vector<ModelRunner*> models, Metrics& metrics, RouterOptions options)
    : models_(std::move(models)), metrics_(metrics), options_(std::move(options)) {
  HOTPATH_CHECK(options_.parse_threads >= 1 && options_.parse_threads <= 64, "serve: --parse-threads ",
                options_.parse_threads, " out of range (1..64)");
  workers_ = std::make_unique<Workers>(options_.parse_threads);
}

Router::~Router() { stop_workers(); }

void Router::stop_workers() { workers_->stop(); }

void Router::begin_drain() { draining_ = true; }

bool Router::ready() const {
  return !draining_ && std::all_of(models_.begin(), models_.end(), [](const ModelRunner* m) { return m->ready(); });
}

ModelRunner& Router::model(const std::string& name, const std::string& version) const {
  for (ModelRunner* m : models_) {
    if (m->metadata().name != name) continue;
    const auto& versions = m->metadata().versions;
    if (!version.empty() && std::find(versions.begin(), versions.end(), version) == versions.end()) {
      throw ServeError(404, "model " + name + " has no version '" + printable(version, 32) + "' (versions: " +
                                versions.front() + ")");
    }
    return *m;
  }
  throw ServeError(404, "unknown model '" + printable(name, 64) + "' (serving: " + models_list(models_) + ")");
}

void Router::handle(HttpRequest request, const Responder& respond) {
  auto call = std::make_shared<Call>(Call{std::move(request), respond, {}, {}});
  const bool work = call->request.body.size() > options_.inline_body_bytes || call->request.path().starts_with("/v1/");
  if (!work) return dispatch(call);
  if (!workers_->post([this, call] { dispatch(call); })) {
    call->id = "r" + std::to_string(next_id_++);
    finish(*call, json_error(503, "the server is shutting down"), nullptr);
  }
}

void Router::dispatch(const std::shared_ptr<Call>& call) {
  try {
    route(call);
  } catch (const WrongMethod& e) {
    HttpResponse r = json_error(405, e.message);
    r.headers.emplace_back("Allow", e.allow);
    finish(*call, std::move(r), nullptr);
  } catch (const ServeError& e) {
    finish(*call, error_response(e), nullptr);
  } catch (const Error& e) {  // the codec's and parsers' bad-input errors
    finish(*call, json_error(400, one_line_message(e)), nullptr);
  } catch (const std::exception& e) {  // LibTorch's c10::Error among others: its message, never its backtrace
    finish(*call, json_error(500, "internal error: " + one_line_message(e)), nullptr);
  }
}

void Router::log_transport_error(const HttpResponse& response) {
  if (options_.log == nullptr) return;
  std::string error;
  try {
    error = nlohmann::json::parse(response.body).value("error", "");
  } catch (const std::exception&) {
  }
  const OJson line{{"id", "r" + std::to_string(next_id_++)}, {"method", ""}, {"path", ""}, {"model", ""},
                   {"status", response.status}, {"batch", 0}, {"queue_us", 0}, {"compute_us", 0}, {"total_us", 0},
                   {"error", error}};
  const std::string text = dump(line) + "\n";
  std::lock_guard lock(log_mutex_);
  std::fwrite(text.data(), 1, text.size(), options_.log);
  std::fflush(options_.log);
}

void Router::finish(Call& call, HttpResponse response, const InferResult* result) {
  const auto total = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - call.request.received);
  if (!call.model.empty()) {
    metrics_.count_request(call.model, response.status);
    if (result != nullptr) metrics_.observe_request(call.model, result->queue_time, result->compute_time, total);
  }
  const int status = response.status;
  call.respond.send(std::move(response));
  if (options_.log == nullptr) return;
  OJson line{{"id", call.id},
             {"method", call.request.method},
             {"path", std::string(call.request.path())},
             {"model", call.model},
             {"status", status},
             {"batch", result ? result->batch_size : 0},
             {"queue_us", result ? result->queue_time.count() : 0},
             {"compute_us", result ? result->compute_time.count() : 0},
             {"total_us", total.count()}};
  const std::string text = dump(line) + "\n";
  std::lock_guard lock(log_mutex_);
  std::fwrite(text.data(), 1, text.size(), options_.log);
  std::fflush(options_.log);
}

void Router::route(const std::shared_ptr<Call>& call) {
  const HttpRequest& req = call->request;
  const std::vector<std::string_view> seg = segments(req.path());
  const auto need = [&](const char* method) {
    if (req.method != method) {
      throw WrongMethod{method, "method " + printable(req.method, 16) + " not allowed on " +
                                    printable(req.path(), 200) + " (use " + method + ")"};
    }
  };
  call->id = "r" + std::to_string(next_id_++);
  if (seg.size() == 1 && seg[0] == "metrics") {
    need("GET");
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_.render_prometheus();
    if (options_.transport_stats) r.body += render_transport_prometheus(options_.transport_stats());
    return finish(*call, std::move(r), nullptr);
  }
  if (seg.empty() || (seg[0] != "v2" && seg[0] != "v1")) {
    throw ServeError(404, "no route for " + printable(req.path(), 200) + " (KServe v2 under /v2, /v1 conveniences, /metrics)");
  }
  if (seg[0] == "v2" && seg.size() == 1) {
    need("GET");
    return finish(*call,
                  json_response(200, {{"name", "hotpath"},
                                      {"version", kServerVersion},
                                      {"extensions", {"binary_tensor_data"}}}),
                  nullptr);
  }
  if (seg[0] == "v2" && seg.size() == 3 && seg[1] == "health" && seg[2] == "live") {
    need("GET");
    return finish(*call, json_response(200, {{"live", true}}), nullptr);
  }
  if (seg[0] == "v2" && seg.size() == 3 && seg[1] == "health" && seg[2] == "ready") {
    need("GET");
    if (ready()) return finish(*call, json_response(200, {{"ready", true}}), nullptr);
    return finish(*call,
                  json_response(503, {{"ready", false},
                                      {"error", draining_ ? "draining: the server is shutting down"
                                                          : "not ready: models are still warming up"}}),
                  nullptr);
  }
  // /v2/models/NAME[/versions/V][/ready|/infer]   /v1/models/NAME/classify|embed
  if (seg.size() < 3 || seg[1] != "models") throw ServeError(404, "no route for " + printable(req.path(), 200));
  const std::string name(seg[2]);
  std::size_t at = 3;
  std::string version;
  if (seg[0] == "v2" && seg.size() >= 5 && seg[3] == "versions") {
    version = std::string(seg[4]);
    at = 5;
  }
  const std::string_view action = seg.size() > at ? seg[at] : std::string_view{};
  if (seg.size() > at + 1) throw ServeError(404, "no route for " + printable(req.path(), 200));
  ModelRunner& runner = model(name, version);
  const ModelMetadata& meta = runner.metadata();
  call->model = meta.name;

  if (seg[0] == "v2" && action.empty()) {
    need("GET");
    return finish(*call,
                  json_response(200, {{"name", meta.name},
                                      {"versions", meta.versions},
                                      {"platform", meta.platform},
                                      {"inputs", tensor_specs(meta.inputs)},
                                      {"outputs", tensor_specs(meta.outputs)}}),
                  nullptr);
  }
  if (seg[0] == "v2" && action == "ready") {
    need("GET");
    const bool ok = runner.ready() && !draining_;
    OJson j{{"name", meta.name}, {"ready", ok}};
    if (!ok) j["error"] = draining_ ? "draining: the server is shutting down" : "not ready: warming up";
    return finish(*call, json_response(ok ? 200 : 503, j), nullptr);
  }
  if (seg[0] == "v2" && action == "infer") {
    need("POST");
    return infer_v2(call, runner, meta);
  }
  if (seg[0] == "v1" && (action == "classify" || action == "embed")) {
    need("POST");
    return classify_or_embed_v1(call, runner, meta, action);
  }
  throw ServeError(404, "no route for " + printable(req.path(), 200));
}

void Router::infer_v2(const std::shared_ptr<Call>& call, ModelRunner& runner, const ModelMetadata& meta) {
  const HttpRequest& req = call->request;
  std::optional<std::size_t> header_length;
  if (req.has_header("inference-header-content-length")) {
    header_length = parse_header_length(req.header("inference-header-content-length"));
  }
  auto parsed = std::make_shared<InferRequest>(parse_infer_request(req.body, header_length));
  if (!parsed->id.empty()) call->id = parsed->id;
  std::vector<std::string> available;
  for (const TensorSpec& s : meta.outputs) available.push_back(s.name);
  auto selected = std::make_shared<std::vector<std::string>>(select_outputs(*parsed, available));
  std::vector<NamedTensor> inputs;
  for (const RequestInput& in : parsed->inputs) inputs.push_back({in.name, input_tensor(in, meta)});
  runner.submit(std::move(inputs), [this, call, parsed, selected](std::exception_ptr error, InferResult result) {
    try {
      if (error) std::rethrow_exception(error);
      std::vector<ResponseOutput> outs;
      std::vector<at::Tensor> keep;
      for (const std::string& output : *selected) {
        for (const NamedTensor& t : result.outputs) {
          if (t.name != output) continue;
          keep.push_back(t.tensor.contiguous().to(at::kFloat));
          outs.push_back({output, "FP32", std::vector<std::int64_t>(t.tensor.sizes().begin(), t.tensor.sizes().end()),
                          tensor_bytes(keep.back())});
        }
      }
      EncodedInferResponse encoded = encode_infer_response(*parsed, call->model, "1", outs);
      HttpResponse r;
      r.body = std::move(encoded.body);
      if (encoded.header_length) {
        r.content_type = "application/octet-stream";
        r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*encoded.header_length));
      }
      call->batch = result.batch_size;
      finish(*call, std::move(r), &result);
    } catch (const ServeError& e) {
      finish(*call, error_response(e), nullptr);
    } catch (const std::exception& e) {
      finish(*call, json_error(500, "internal error: " + one_line_message(e)), nullptr);
    }
  });
}

void Router::classify_or_embed_v1(const std::shared_ptr<Call>& call, ModelRunner& runner, const ModelMetadata& meta,
                                  std::string_view action) {
  const HttpRequest& req = call->request;
  const bool image = meta.kind == infer::PackageKind::kImageClassifier;
  std::vector<NamedTensor> inputs;
  if (action == "embed" && meta.kind != infer::PackageKind::kSentenceEmbedder) {
    throw ServeError(400, "model " + meta.name + " is a " + infer::package_kind_name(meta.kind) +
                              ": POST /v1/models/" + meta.name + "/classify, embed is for sentence_embedder models");
  }
  if (action == "classify" && meta.kind == infer::PackageKind::kSentenceEmbedder) {
    throw ServeError(400, "model " + meta.name + " is a sentence_embedder: POST /v1/models/" + meta.name + "/embed");
  }
  if (image) {
    const auto* data = reinterpret_cast<const std::uint8_t*>(req.body.data());
    inputs = runner.inputs_from_image({data, req.body.size()});
  } else {
    const std::vector<std::string> lines = body_texts(req.body, req.header("content-type"));
    inputs = runner.inputs_from_texts(lines);
  }
  int top_k = options_.default_top_k > 0 ? options_.default_top_k
                                         : static_cast<int>(runner.package().postprocess.top_k);
  if (const std::string k = query_value(req.query(), "top_k"); !k.empty()) {
    const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), top_k);
    if (ec != std::errc() || end != k.data() + k.size() || top_k < 1) {
      throw ServeError(400, "top_k: expected a positive integer, got '" + printable(k, 32) + "'");
    }
  }
  const bool embed = action == "embed";
  runner.submit(std::move(inputs), [this, call, image, embed, top_k, &meta](std::exception_ptr error, InferResult result) {
    try {
      if (error) std::rethrow_exception(error);
      const at::Tensor out = result.outputs.front().tensor.contiguous().to(at::kFloat);
      OJson j{{"model", meta.name}};
      if (embed) {
        OJson rows = OJson::array();
        for (std::int64_t r = 0; r < out.size(0); ++r) {
          const float* p = out[r].data_ptr<float>();
          rows.push_back(std::vector<double>(p, p + out.size(1)));
        }
        j["dim"] = out.size(1);
        j["embeddings"] = std::move(rows);
      } else {
        OJson results = OJson::array();
        for (const std::vector<infer::TopK>& row : infer::top_k(out, top_k, meta.labels)) {
          OJson top = OJson::array();
          for (const infer::TopK& t : row) top.push_back({{"index", t.index}, {"label", t.label}, {"prob", t.prob}});
          results.push_back({{"top", std::move(top)}});
        }
        if (image) {
          j["top"] = results.front()["top"];
        } else {
          j["results"] = std::move(results);
        }
      }
      call->batch = result.batch_size;
      finish(*call, json_response(200, j), &result);
    } catch (const ServeError& e) {
      finish(*call, error_response(e), nullptr);
    } catch (const std::exception& e) {
      finish(*call, json_error(500, "internal error: " + one_line_message(e)), nullptr);
    }
  });
}

}  // namespace hotpath::serve
