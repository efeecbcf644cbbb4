// One model package behind a bounded FIFO and a batcher thread. submit() checks a request completely (so a
// batch never fails because of one bad request in it) and queues it; the batcher takes the longest prefix of
// the queue that fits max_batch_size once it is full, reaches a preferred size, or its oldest request has
// waited max_queue_delay; text rows are padded to the length bucket of the batch's longest row; each request
// gets its own rows of the outputs back.
#include "hotpath/serve/model_runner.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/infer/predictor.h"
#include "hotpath/serve/metrics.h"
#include "hotpath/text/text_batch_tensor.h"

namespace hotpath::serve {
namespace {

using Clock = std::chrono::steady_clock;
using infer::PackageKind;

constexpr int kRetryAfterSeconds = 1;

std::string kserve_datatype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "FP32";
    case at::kLong: return "INT64";
    case at::kInt: return "INT32";
    case at::kBFloat16: return "BF16";
    default: return c10::toString(t);
  }
}

std::string shape_text(c10::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::chrono::microseconds micros(Clock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d); }

BatchingOptions checked(BatchingOptions o, const std::string& name) {
  HOTPATH_CHECK(o.max_batch_size >= 1 && o.max_batch_size <= 4096, "serve: model ", name, ": max_batch_size ",
                o.max_batch_size, " outside [1, 4096]");
  HOTPATH_CHECK(o.max_queue_delay.count() >= 0 && o.max_queue_delay <= std::chrono::seconds(10), "serve: model ",
                name, ": max_queue_delay ", o.max_queue_delay.count(), " µs outside [0, 10 s]");
  HOTPATH_CHECK(o.max_queue_size >= 1 && o.max_queue_size <= 1'000'000, "serve: model ", name, ": max_queue_size ",
                o.max_queue_size, " outside [1, 1000000]");
  HOTPATH_CHECK(o.queue_timeout.count() >= 1, "serve: model ", name, ": queue_timeout must be at least 1 ms");
  for (const std::int64_t p : o.preferred_batch_sizes) {
    HOTPATH_CHECK(p >= 1 && p <= o.max_batch_size, "serve: model ", name, ": preferred batch size ", p,
                  " outside [1, max_batch_size ", o.max_batch_size, "]");
  }
  for (const std::int64_t b : o.length_buckets) {
    HOTPATH_CHECK(b >= 1 && b <= 65536, "serve: model ", name, ": length bucket ", b, " outside [1, 65536]");
  }
  HOTPATH_CHECK(o.threads >= 0 && o.threads <= 1024, "serve: model ", name, ": threads ", o.threads,
                " outside [0, 1024]");
  return o;
}

// A model package (the server runs packages in the engine, never a run directory's training model).
infer::Package read_model_package(const std::filesystem::path& dir) {
  infer::Package p = infer::read_package(dir);
  HOTPATH_CHECK(p.layout == infer::PackageLayout::kModelPackage, dir.string(),
                ": a training run directory (model.json), not a model package; export it first with hotpath export");
  return p;
}

}  // namespace

ServeError::ServeError(int http_status, const std::string& message, int retry_after_s)
    : std::runtime_error(message), http_status_(http_status), retry_after_s_(retry_after_s) {}

std::string one_line_message(const std::exception& e) {
  constexpr std::size_t kMaxBytes = 1000;
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  const std::string_view text = torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
  std::string line;
  bool pending_break = false;
  for (const char c : text) {
    if (c == '\n' || c == '\r') {
      pending_break = !line.empty();
      continue;
    }
    if (pending_break) {
      if (c == ' ' || c == '\t') continue;  // the next line's indent
      while (!line.empty() && line.back() == ' ') line.pop_back();
      line += "; ";
      pending_break = false;
    }
    if (line.size() >= kMaxBytes) {
      line += "...";
      break;
    }
    line += c;
  }
  return line;
}

struct ModelRunner::Impl {
  struct Request {
    std::vector<at::Tensor> inputs;  // graph order, contiguous
    std::int64_t rows = 0;
    std::int64_t length = 0;  // text: tokens per row
    Clock::time_point enqueued;
    InferCallback done;
  };

  std::string name;
  BatchingOptions options;
  Metrics& metrics;
  infer::Predictor predictor;  // the engine, the package's tokenizer and text facts (vocab sizes, pad id)
  const infer::Package& package;
  ModelMetadata metadata;
  bool text = false;
  std::int64_t pad_id = 0;
  std::vector<std::int64_t> buckets;  // text: sorted, each ≤ max_length, the last == max_length

  std::mutex engine_mutex;  // Engine::run is one caller at a time: the batcher, or warm_up before it serves
  mutable std::mutex mutex;
  std::condition_variable cv;       // the batcher: work arrived or stop
  std::condition_variable idle_cv;  // wait_idle: queue and engine empty
  std::deque<Request> queue;
  bool running_batch = false;
  bool draining = false;
  bool stopping = false;
  std::atomic<bool> ready{false};
  std::thread batcher;

  Impl(std::string n, const std::filesystem::path& dir, BatchingOptions o, Metrics& m)
      : name(std::move(n)),
        options(checked(std::move(o), name)),
        metrics(m),
        predictor(infer::Predictor::load(read_model_package(dir), {.threads = options.threads})),
        package(predictor.package()) {
    text = package.kind != PackageKind::kImageClassifier;
    if (text) {
      // Packages exported from a bare config (benchmark shapes) have no tokenizer: they take KServe tensors
      // only, and the /v1 text conveniences answer 400.
      pad_id = *package.text.pad_id;
      const std::int64_t max_length = package.text.max_length;
      for (const std::int64_t b : options.length_buckets) {
        if (b < max_length) buckets.push_back(b);
      }
      buckets.push_back(max_length);
      std::sort(buckets.begin(), buckets.end());
      buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
    }
    build_metadata();
    batcher = std::thread([this] { batcher_loop(); });
  }

  ~Impl() {
    {
      const std::lock_guard lock(mutex);
      stopping = true;
    }
    cv.notify_all();
    if (batcher.joinable()) batcher.join();
  }

  void build_metadata() {
    metadata.name = name;
    metadata.platform = std::string("hotpath_") + infer::precision_name(package.precision);
    metadata.kind = package.kind;
    metadata.labels = package.labels;
    metadata.max_batch_size = options.max_batch_size;
    for (const infer::ValueSpec& spec : predictor.input_specs()) {
      TensorSpec t{spec.name, kserve_datatype(spec.dtype), spec.shape};
      if (!t.shape.empty()) t.shape[0] = -1;
      if (!text && t.shape.size() == 4) {
        t.shape = {-1, package.image.channels, package.image.image_size, package.image.image_size};
      }
      metadata.inputs.push_back(std::move(t));
    }
    // Output widths from one probe row: whatever the graph ends with, the metadata says what it returns.
    const std::vector<at::Tensor> out =
        predictor.run(probe_inputs(1, text ? std::min<std::int64_t>(buckets.front(), 8) : 0));
    const std::vector<std::string> names = predictor.output_names();
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::vector<std::int64_t> shape(out[i].sizes().begin(), out[i].sizes().end());
      if (!shape.empty()) shape[0] = -1;
      metadata.outputs.push_back({names[i], "FP32", std::move(shape)});
    }
  }

  // Zero images, or [CLS]-free rows of token 0 with a full mask: inputs of a given shape for warm-up and probing.
  std::vector<at::Tensor> probe_inputs(std::int64_t rows, std::int64_t length) const {
    if (!text) {
      return {at::zeros({rows, package.image.channels, package.image.image_size, package.image.image_size}, at::kFloat)};
    }
    return {at::full({rows, length}, pad_id, at::kLong),
            at::full({rows, length}, std::int64_t{1}, at::kLong), at::zeros({rows, length}, at::kLong)};
  }

  // ---- submit: every check that could otherwise fail a shared batch --------------------------------------
  Request check_request(std::vector<NamedTensor> inputs) const {
    const auto& specs = metadata.inputs;
    std::vector<at::Tensor> ordered(specs.size());
    for (NamedTensor& in : inputs) {
      const auto it = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.name == in.name; });
      if (it == specs.end()) {
        std::string expected;
        for (const TensorSpec& s : specs) expected += (expected.empty() ? "" : ", ") + s.name;
        throw ServeError(400, "model " + name + ": unknown input '" + printable(in.name) + "', expected " + expected);
      }
      const auto i = static_cast<std::size_t>(it - specs.begin());
      if (ordered[i].defined()) throw ServeError(400, "model " + name + ": input '" + in.name + "' given twice");
      if (!in.tensor.defined()) throw ServeError(400, "model " + name + ": input '" + in.name + "' has no data");
      ordered[i] = std::move(in.tensor);
    }
    Request r;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const TensorSpec& s = specs[i];
      const at::Tensor& t = ordered[i];
      const std::string where = "model " + name + ": input '" + s.name + "'";
      if (!t.defined()) throw ServeError(400, where + " is missing");
      if (kserve_datatype(t.scalar_type()) != s.datatype) {
        throw ServeError(400, where + " has datatype " + kserve_datatype(t.scalar_type()) + ", expected " + s.datatype);
      }
      if (!t.device().is_cpu()) throw ServeError(400, where + " is not in host memory");
      bool shape_ok = t.dim() == static_cast<std::int64_t>(s.shape.size());
      for (std::size_t d = 0; shape_ok && d < s.shape.size(); ++d) {
        const std::int64_t n = t.size(static_cast<std::int64_t>(d));
        shape_ok = n >= 1 && (s.shape[d] == -1 || n == s.shape[d]);
      }
      if (!shape_ok) {
        throw ServeError(400, where + " has shape " + shape_text(t.sizes()) + ", expected " + shape_text(s.shape) +
                                  " (-1: any size ≥ 1)");
      }
      if (i == 0) {
        r.rows = t.size(0);
        if (text) r.length = t.size(1);
      } else if (t.size(0) != r.rows || (text && t.size(1) != r.length)) {
        throw ServeError(400, where + " has shape " + shape_text(t.sizes()) + ", but input '" + specs[0].name +
                                  "' has " + shape_text(ordered[0].sizes()) + "; the shapes must match");
      }
    }
    if (r.rows > options.max_batch_size) {
      throw ServeError(400, "model " + name + ": " + std::to_string(r.rows) + " rows in one request, max_batch_size is " +
                                std::to_string(options.max_batch_size));
    }
    if (text) check_text_values(ordered, r.length);
    for (at::Tensor& t : ordered) t = t.contiguous();
    r.inputs = std::move(ordered);
    return r;
  }

  void check_text_values(const std::vector<at::Tensor>& in, std::int64_t length) const {
    const std::int64_t max_length = package.text.max_length;
    if (length > max_length) {
      throw ServeError(400, "model " + name + ": sequences of " + std::to_string(length) +
                                " tokens, the package's max_length is " + std::to_string(max_length));
    }
    // [input_ids, attention_mask, token_type_ids]; each value range the engine relies on.
    const std::int64_t hi[3] = {package.text.vocab_size - 1, 1, package.text.type_vocab_size - 1};
    for (std::size_t i = 0; i < in.size() && i < 3; ++i) {
      const at::Tensor t = in[i].contiguous();
      const std::int64_t* p = t.const_data_ptr<std::int64_t>();
      for (std::int64_t k = 0; k < t.numel(); ++k) {
        if (p[k] < 0 || p[k] > hi[i]) {
          throw ServeError(400, "model " + name + ": input '" + metadata.inputs[i].name + "' value " +
                                    std::to_string(p[k]) + " at flat index " + std::to_string(k) +
                                    " outside [0, " + std::to_string(hi[i]) + "]");
        }
      }
    }
  }

  void submit(std::vector<NamedTensor> inputs, InferCallback done) {
    Request r = check_request(std::move(inputs));
    r.done = std::move(done);
    {
      const std::lock_guard lock(mutex);
      if (draining || stopping) {
        throw ServeError(503, "model " + name + " is shutting down", kRetryAfterSeconds);
      }
      if (queue.size() >= options.max_queue_size) {
        throw ServeError(503, "model " + name + ": queue full (" + std::to_string(queue.size()) + " requests)",
                         kRetryAfterSeconds);
      }
      r.enqueued = Clock::now();
      queue.push_back(std::move(r));
      metrics.set_queue_depth(name, static_cast<std::int64_t>(queue.size()));
    }
    cv.notify_one();
  }

  // ---- the batcher ----------------------------------------------------------------------------------------
  // How many requests from the queue's front to run now; 0: wait (until `wake`).
  std::size_t ready_prefix(Clock::time_point now, Clock::time_point& wake) const {
    std::int64_t rows = 0;
    std::size_t k = 0, preferred = 0;
    while (k < queue.size() && rows + queue[k].rows <= options.max_batch_size) {
      rows += queue[k].rows;
      ++k;
      const auto& p = options.preferred_batch_sizes;
      if (std::find(p.begin(), p.end(), rows) != p.end()) preferred = k;
    }
    // Full (or the next request does not fit): run. A preferred size reached: run the largest one.
    if (rows == options.max_batch_size || k < queue.size() || stopping) return k;
    if (preferred > 0) return preferred;
    wake = queue.front().enqueued + options.max_queue_delay;
    return now >= wake ? k : 0;
  }

  void batcher_loop() {
    const c10::InferenceMode inference;  // the outputs are sliced here: views of inference tensors
    std::unique_lock lock(mutex);
    for (;;) {
      if (queue.empty()) {
        if (stopping) return;
        idle_cv.notify_all();
        cv.wait(lock);
        continue;
      }
      const Clock::time_point now = Clock::now();
      // Requests queued past queue_timeout are answered 504 and never run.
      std::vector<Request> expired;
      while (!queue.empty() && now - queue.front().enqueued > options.queue_timeout) {
        expired.push_back(std::move(queue.front()));
        queue.pop_front();
      }
      Clock::time_point wake = now;
      const std::size_t take = queue.empty() ? 0 : ready_prefix(now, wake);
      std::vector<Request> batch;
      for (std::size_t i = 0; i < take; ++i) {
        batch.push_back(std::move(queue.front()));
        queue.pop_front();
      }
      if (expired.empty() && batch.empty()) {
        cv.wait_until(lock, wake);
        continue;
      }
      metrics.set_queue_depth(name, static_cast<std::int64_t>(queue.size()));
      running_batch = true;
      lock.unlock();
      for (Request& r : expired) {
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - r.enqueued);
        answer(r, std::make_exception_ptr(ServeError(504, "model " + name + ": queued " + std::to_string(waited.count()) +
                                                              " ms, longer than the queue timeout of " +
                                                              std::to_string(options.queue_timeout.count()) + " ms")),
               {});
      }
      if (!batch.empty()) run_batch(batch, now);
      lock.lock();
      running_batch = false;
    }
  }

  std::int64_t bucket_of(std::int64_t length) const {
    return *std::lower_bound(buckets.begin(), buckets.end(), length);  // the last bucket is max_length ≥ length
  }

  // The engine inputs of `batch`: its requests' rows stacked; text rows padded to the bucket of the longest.
  std::vector<at::Tensor> batch_inputs(const std::vector<Request>& batch, std::int64_t rows) const {
    if (batch.size() == 1 && !text) return batch.front().inputs;
    if (!text) {
      std::vector<at::Tensor> parts;
      for (const Request& r : batch) parts.push_back(r.inputs[0]);
      return {at::cat(parts, 0)};
    }
    std::int64_t longest = 0;
    for (const Request& r : batch) longest = std::max(longest, r.length);
    const std::int64_t l = bucket_of(longest);
    std::vector<at::Tensor> out = {at::full({rows, l}, pad_id, at::kLong),
                                   at::zeros({rows, l}, at::kLong), at::zeros({rows, l}, at::kLong)};
    std::int64_t row = 0;
    for (const Request& r : batch) {
      for (std::size_t i = 0; i < out.size(); ++i) out[i].narrow(0, row, r.rows).narrow(1, 0, r.length).copy_(r.inputs[i]);
      row += r.rows;
    }
    return out;
  }

  void run_batch(std::vector<Request>& batch, Clock::time_point started) {
    std::int64_t rows = 0;
    for (const Request& r : batch) rows += r.rows;
    std::vector<at::Tensor> outputs;
    std::exception_ptr error;
    const Clock::time_point t0 = Clock::now();
    try {
      const std::vector<at::Tensor> in = batch_inputs(batch, rows);
      const std::lock_guard engine_lock(engine_mutex);
      outputs = predictor.run(in);
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(ServeError(500, "model " + name + ": inference failed: " + one_line_message(e)));
    }
    const Clock::time_point t1 = Clock::now();
    metrics.observe_batch(name, rows);
    std::int64_t row = 0;
    for (Request& r : batch) {
      InferResult result;
      result.batch_size = rows;
      result.queue_time = micros(started - r.enqueued);
      result.compute_time = micros(t1 - t0);
      if (!error) {
        for (std::size_t i = 0; i < outputs.size(); ++i) {
          result.outputs.push_back({metadata.outputs[i].name, outputs[i].narrow(0, row, r.rows)});
        }
      }
      row += r.rows;
      answer(r, error, std::move(result));
    }
  }

  static void answer(Request& r, std::exception_ptr error, InferResult result) {
    try {
      r.done(std::move(error), std::move(result));
    } catch (...) {  // a callback's failure is the HTTP layer's to report; it must not take the batcher down
    }
  }

  void warm_up() {
    std::vector<std::int64_t> lengths = text ? buckets : std::vector<std::int64_t>{0};
    for (const std::int64_t l : lengths) {
      for (const std::int64_t rows : {options.max_batch_size, std::int64_t{1}}) {
        const std::lock_guard engine_lock(engine_mutex);
        (void)predictor.run(probe_inputs(rows, l));
      }
    }
    ready = true;
  }

  void begin_drain() {
    {
      const std::lock_guard lock(mutex);
      draining = true;
    }
    ready = false;
    cv.notify_all();
  }

  bool wait_idle(Clock::time_point deadline) {
    std::unique_lock lock(mutex);
    return idle_cv.wait_until(lock, deadline, [&] { return queue.empty() && !running_batch; });
  }
};

ModelRunner::ModelRunner(std::string name, const std::filesystem::path& package_dir, BatchingOptions options,
                         Metrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(name), package_dir, std::move(options), metrics)) {}

ModelRunner::~ModelRunner() = default;

void ModelRunner::warm_up() { impl_->warm_up(); }
bool ModelRunner::ready() const { return impl_->ready; }
const ModelMetadata& ModelRunner::metadata() const { return impl_->metadata; }
const infer::Package& ModelRunner::package() const { return impl_->package; }
const BatchingOptions& ModelRunner::options() const { return impl_->options; }

void ModelRunner::submit(std::vector<NamedTensor> inputs, InferCallback done) {
  impl_->submit(std::move(inputs), std::move(done));
}

std::vector<NamedTensor> ModelRunner::inputs_from_image(std::span<const std::uint8_t> encoded) const {
  const Impl& m = *impl_;
  if (m.text) {
    throw ServeError(400, "model " + m.name + " is a " + infer::package_kind_name(m.package.kind) +
                              ": send text, not an image");
  }
  if (encoded.empty()) throw ServeError(400, "model " + m.name + ": the request body is empty, expected a JPEG or PNG image");
  try {
    at::Tensor x = m.predictor.image_input(std::as_bytes(encoded));
    return {{m.metadata.inputs.front().name, x.unsqueeze(0).contiguous()}};
  } catch (const std::exception& e) {
    throw ServeError(400, "model " + m.name + ": the body is not a decodable JPEG/PNG image: " + one_line_message(e));
  }
}

std::vector<NamedTensor> ModelRunner::inputs_from_texts(std::span<const std::string> texts) const {
  const Impl& m = *impl_;
  if (!m.text) throw ServeError(400, "model " + m.name + " is an image_classifier: send an image, not text");
  if (m.predictor.tokenizer() == nullptr) {
    throw ServeError(400, "model " + m.name + ": the package has no tokenizer files (tokenizer.json or vocab.txt): "
                              "send input_ids, attention_mask and token_type_ids tensors to /v2/models/" + m.name + "/infer");
  }
  if (texts.empty()) throw ServeError(400, "model " + m.name + ": no texts in the request");
  if (static_cast<std::int64_t>(texts.size()) > m.options.max_batch_size) {
    throw ServeError(400, "model " + m.name + ": " + std::to_string(texts.size()) + " texts in one request, max_batch_size is " +
                              std::to_string(m.options.max_batch_size));
  }
  std::vector<std::string_view> views(texts.begin(), texts.end());
  text::TextBatchTensors t;
  try {
    t = m.predictor.text_inputs(views);
  } catch (const std::exception& e) {
    throw ServeError(400, "model " + m.name + ": " + one_line_message(e));
  }
  return {{"input_ids", std::move(t.input_ids)}, {"attention_mask", std::move(t.attention_mask)},
          {"token_type_ids", std::move(t.token_type_ids)}};
}

void ModelRunner::begin_drain() { impl_->begin_drain(); }
bool ModelRunner::wait_idle(std::chrono::steady_clock::time_point deadline) { return impl_->wait_idle(deadline); }

std::size_t ModelRunner::queue_depth() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->queue.size();
}

}  // namespace hotpath::serve
