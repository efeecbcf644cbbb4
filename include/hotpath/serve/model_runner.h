// hotpath/serve/model_runner.h — one model package behind a bounded queue and a dynamic batcher: what the
// server's HTTP layer (http_server.h) hands requests to. Requests are checked against the model's inputs,
// queued (503 + Retry-After at once when the queue is full), merged into engine batches on the model's own
// batcher thread, and each request gets exactly its own rows back through its callback.
//
//   Metrics metrics;
//   ModelRunner runner("resnet", "pkg/resnet50-int8", {.max_batch_size = 16}, metrics);
//   runner.warm_up();                                     // ready() only after one batch per shape bucket
//   runner.submit({{"input", images}}, [](std::exception_ptr error, InferResult r) { ... });
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hotpath/infer/package.h"

namespace hotpath::serve {

class Metrics;  // metrics.h

// An error the client or the server state caused: the HTTP layer answers http_status with
// {"error": what()} (and Retry-After: retry_after_s when > 0).
class ServeError : public std::runtime_error {
 public:
  ServeError(int http_status, const std::string& message, int retry_after_s = 0);
  [[nodiscard]] int http_status() const { return http_status_; }
  [[nodiscard]] int retry_after_s() const { return retry_after_s_; }

 private:
  int http_status_;
  int retry_after_s_;
};

// An exception's message as one line for an HTTP error body or a log line: a c10::Error without its backtrace
// (what_without_backtrace()), line breaks folded into "; ", at most 1000 bytes. Never the stack of the server.
std::string one_line_message(const std::exception& e);

// A KServe tensor description: datatype "FP32" / "INT64"; -1 marks a variable dim; dim 0 is the batch.
struct TensorSpec {
  std::string name;
  std::string datatype;
  std::vector<std::int64_t> shape;
};

struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions{"1"};
  std::string platform;  // "hotpath_fp32" | "hotpath_bf16" | "hotpath_int8"
  infer::PackageKind kind = infer::PackageKind::kImageClassifier;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<std::string> labels;
  std::int64_t max_batch_size = 0;
};

struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};

struct InferResult {
  std::vector<NamedTensor> outputs;  // this request's rows only, in metadata().outputs order, float32 contiguous
  std::int64_t batch_size = 0;       // rows in the engine batch this request ran in
  std::chrono::microseconds queue_time{0}, compute_time{0};
};

// Called exactly once per accepted request, on the model's batcher thread (submit() refuses by throwing, and
// then never calls it). `error` is null on success, else a ServeError (4xx/5xx) or another exception (500).
using InferCallback = std::function<void(std::exception_ptr error, InferResult result)>;

struct BatchingOptions {
  std::int64_t max_batch_size = 32;                 // rows per engine call
  std::chrono::microseconds max_queue_delay{1000};  // wait at most this long for more rows before a partial batch
  std::vector<std::int64_t> preferred_batch_sizes{};  // run as soon as one of these is reached (empty: max_batch_size)
  std::size_t max_queue_size = 128;                 // queued requests; beyond → ServeError 503 + Retry-After, at once
  std::chrono::milliseconds queue_timeout{10000};   // still queued after this → ServeError 504, never run
  std::vector<std::int64_t> length_buckets{16, 32, 64, 128, 256, 512};  // text: rows padded to the longest's bucket
  int threads = 0;                                  // engine intra-op threads (0: LibTorch's setting)
};

class ModelRunner {
 public:
  // Loads the package (infer::read_package + Engine) and starts the batcher thread; not ready until
  // warm_up(). Bad options or a bad package throw hotpath::Error naming the field or file.
  ModelRunner(std::string name, const std::filesystem::path& package_dir, BatchingOptions options, Metrics& metrics);
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;
  ~ModelRunner();  // finishes queued requests (their callbacks run), then joins

  void warm_up();  // one engine batch per shape bucket; then ready() is true
  [[nodiscard]] bool ready() const;
  [[nodiscard]] const ModelMetadata& metadata() const;
  [[nodiscard]] const infer::Package& package() const;
  [[nodiscard]] const BatchingOptions& options() const;

  // Checks names, datatypes, ranks and fixed dims against metadata() (ServeError 400 naming the input and
  // what was expected), then enqueues; ServeError 503 (Retry-After) when the queue is full or the runner is
  // draining. On success `done` runs later, exactly once, on the batcher thread. The tensors are used until
  // then: they must own their memory (clone an at::from_blob view of a request buffer that may go away).
  void submit(std::vector<NamedTensor> inputs, InferCallback done);

  // /v1 conveniences. Image packages: encoded JPEG/PNG → inputs via the package's eval preprocessing
  // (ServeError 400 naming what is wrong with the body). Text packages: texts → input_ids/attention_mask/
  // token_type_ids rows, truncated to the package's max_length. The wrong kind, or a text package without
  // tokenizer files (exported from a bare config), → ServeError 400.
  [[nodiscard]] std::vector<NamedTensor> inputs_from_image(std::span<const std::uint8_t> encoded) const;
  [[nodiscard]] std::vector<NamedTensor> inputs_from_texts(std::span<const std::string> texts) const;

  void begin_drain();                                              // new submits → 503
  bool wait_idle(std::chrono::steady_clock::time_point deadline);  // true when nothing is queued or running
  [[nodiscard]] std::size_t queue_depth() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::serve
