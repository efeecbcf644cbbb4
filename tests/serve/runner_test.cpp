// ModelRunner on tiny packages the test exports itself: batching never mixes requests' rows (each answer
// equals the engine run on that request alone), text rows padded into one batch equal unpadded runs, the
// bounded queue refuses at once, drain and queue timeout, request checks, and the /v1 input conveniences.
#include "hotpath/serve/model_runner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/export.h"
#include "hotpath/infer/sentence_embed.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "hotpath/serve/metrics.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

namespace hotpath::serve {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// cnn_small, 1×12×12 gray images, 3 classes, random init: an image_classifier package.
const fs::path& image_package() {
  static const test::TempDir dir;
  static const fs::path pkg = [] {
    const fs::path p = dir.path() / "cnn";
    infer::ExportSource source;
    source.model = "cnn_small";
    source.random_init = true;
    source.num_classes = 3;
    source.channels = 1;
    source.image_size = 12;
    infer::ExportOptions options;
    options.out = p;
    (void)infer::export_package(source, options);
    return p;
  }();
  return pkg;
}

// A one-layer BERT (vocab 30, hidden 16, 32 positions) as a Hugging Face directory, exported as a text
// classifier or a sentence embedder.
fs::path text_package(bool classifier) {
  static const test::TempDir dir;
  const fs::path pkg = dir.path() / (classifier ? "cls-pkg" : "emb-pkg");
  if (fs::exists(pkg)) return pkg;
  const fs::path hf = test::write_tiny_hf_bert(dir.path() / (classifier ? "hf-cls" : "hf-emb"), classifier);
  infer::ExportSource source;
  source.model_dir = hf.string();
  infer::ExportOptions options;
  options.out = pkg;
  (void)infer::export_package(source, options);
  return pkg;
}

// Results of callbacks, waited for by the test thread.
struct Answer {
  std::exception_ptr error;
  InferResult result;
};

InferCallback into(std::promise<Answer>& p) {
  return [&p](std::exception_ptr e, InferResult r) { p.set_value({std::move(e), std::move(r)}); };
}

int status_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const ServeError& s) {
    return s.http_status();
  } catch (...) {
    return -1;
  }
}

// Throws unless submit refuses with `status`; returns the message.
std::string refusal(ModelRunner& runner, std::vector<NamedTensor> inputs, int status) {
  try {
    runner.submit(std::move(inputs), [](std::exception_ptr, InferResult) {});
  } catch (const ServeError& e) {
    EXPECT_EQ(e.http_status(), status) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "submit accepted the request";
  return "";
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Blocks the batcher inside a callback until released: deterministic queue states.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool entered = false, open = false;
  InferCallback callback() {
    return [this](std::exception_ptr, InferResult) {
      std::unique_lock lock(m);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return open; });
    };
  }
  void wait_entered() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  void release() {
    const std::lock_guard lock(m);
    open = true;
    cv.notify_all();
  }
};

std::vector<NamedTensor> image_rows(std::int64_t n) { return {{"images", at::randn({n, 1, 12, 12})}}; }

TEST(ModelRunner, MetadataDescribesTheImagePackageAndWarmUpMakesItReady) {
  Metrics metrics;
  ModelRunner runner("cnn", image_package(), {.max_batch_size = 4}, metrics);
  const ModelMetadata& m = runner.metadata();
  EXPECT_EQ(m.name, "cnn");
  EXPECT_EQ(m.platform, "hotpath_fp32");
  EXPECT_EQ(m.kind, infer::PackageKind::kImageClassifier);
  ASSERT_EQ(m.inputs.size(), 1U);
  EXPECT_EQ(m.inputs[0].name, "images");
  EXPECT_EQ(m.inputs[0].datatype, "FP32");
  EXPECT_EQ(m.inputs[0].shape, (std::vector<std::int64_t>{-1, 1, 12, 12}));
  ASSERT_EQ(m.outputs.size(), 1U);
  EXPECT_EQ(m.outputs[0].name, "logits");
  EXPECT_EQ(m.outputs[0].shape, (std::vector<std::int64_t>{-1, 3}));
  EXPECT_EQ(m.labels, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(m.max_batch_size, 4);
  EXPECT_FALSE(runner.ready());
  runner.warm_up();
  EXPECT_TRUE(runner.ready());
}

TEST(ModelRunner, ConcurrentRequestsEachGetExactlyTheirOwnRows) {
  Metrics metrics;
  ModelRunner runner("cnn", image_package(), {.max_batch_size = 8, .max_queue_delay = 2ms, .max_queue_size = 1024},
                     metrics);
  runner.warm_up();
  const infer::Engine reference = infer::Engine::load(image_package().string());
  constexpr int kThreads = 6, kPerThread = 12;
  std::atomic<int> wrong{0}, failed{0}, batched{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::int64_t rows = 1 + (t + i) % 3;
        const at::Tensor x = at::randn({rows, 1, 12, 12});
        std::promise<Answer> p;
        runner.submit({{"images", x}}, into(p));
        const Answer a = p.get_future().get();
        if (a.error) {
          ++failed;
          continue;
        }
        const at::Tensor want = reference.run({x}).front();
        if (a.result.outputs.size() != 1 || a.result.outputs[0].tensor.sizes() != want.sizes() ||
            max_diff(a.result.outputs[0].tensor, want) > 1e-5) {
          ++wrong;
        }
        if (a.result.batch_size > rows) ++batched;
      }
    });
  }
  for (std::thread& c : clients) c.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(batched, 0) << "no request shared a batch with another";
}

TEST(ModelRunner, FullBatchRunsAtOnceAndPreferredSizeWithoutWaitingForTheDelay) {
  Metrics metrics;
  {
    ModelRunner runner("cnn", image_package(), {.max_batch_size = 4, .max_queue_delay = 5s}, metrics);
    std::promise<Answer> p[4];
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& pi : p) runner.submit(image_rows(1), into(pi));
    for (auto& pi : p) {
      const Answer a = pi.get_future().get();
      ASSERT_FALSE(a.error);
      EXPECT_EQ(a.result.batch_size, 4);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);  // not the 5 s delay (a bound, not a timing claim)
  }
  {
    ModelRunner runner("cnn", image_package(),
                       {.max_batch_size = 8, .max_queue_delay = 5s, .preferred_batch_sizes = {3}}, metrics);
    std::promise<Answer> a, b;
    runner.submit(image_rows(1), into(a));
    runner.submit(image_rows(2), into(b));
    EXPECT_EQ(a.get_future().get().result.batch_size, 3);
    EXPECT_EQ(b.get_future().get().result.batch_size, 3);
  }
  // One batch of 4 and one of 3 (the probe and warm-up batches are not requests and not counted).
  const std::string page = metrics.render_prometheus();
  EXPECT_NE(page.find("hotpath_batch_size_bucket{model=\"cnn\",le=\"2\"} 0"), std::string::npos) << page;
  EXPECT_NE(page.find("hotpath_batch_size_bucket{model=\"cnn\",le=\"4\"} 2"), std::string::npos) << page;
}

TEST(ModelRunner, FullQueueIsRefusedAtOnceWith503AndRetryAfter) {
  Metrics metrics;
  ModelRunner runner("cnn", image_package(), {.max_batch_size = 1, .max_queue_delay = 0us, .max_queue_size = 2},
                     metrics);
  Gate gate;
  runner.submit(image_rows(1), gate.callback());
  gate.wait_entered();  // the batcher is held inside the first callback: nothing leaves the queue
  std::promise<Answer> q1, q2;
  runner.submit(image_rows(1), into(q1));
  runner.submit(image_rows(1), into(q2));
  EXPECT_EQ(runner.queue_depth(), 2U);
  try {
    runner.submit(image_rows(1), [](std::exception_ptr, InferResult) {});
    ADD_FAILURE() << "a full queue accepted a request";
  } catch (const ServeError& e) {
    EXPECT_EQ(e.http_status(), 503);
    EXPECT_GT(e.retry_after_s(), 0);
    EXPECT_NE(std::string(e.what()).find("queue full"), std::string::npos) << e.what();
  }
  EXPECT_NE(metrics.render_prometheus().find("nv_inference_pending_request_count{model=\"cnn\",version=\"1\"} 2"),
            std::string::npos);
  gate.release();
  EXPECT_FALSE(q1.get_future().get().error);
  EXPECT_FALSE(q2.get_future().get().error);
}

TEST(ModelRunner, DrainRefusesNewRequestsAndFinishesQueuedOnes) {
  Metrics metrics;
  ModelRunner runner("cnn", image_package(), {.max_batch_size = 1, .max_queue_delay = 0us}, metrics);
  runner.warm_up();
  Gate gate;
  runner.submit(image_rows(1), gate.callback());
  gate.wait_entered();
  std::promise<Answer> queued;
  runner.submit(image_rows(1), into(queued));
  runner.begin_drain();
  EXPECT_FALSE(runner.ready());
  (void)refusal(runner, image_rows(1), 503);
  EXPECT_FALSE(runner.wait_idle(std::chrono::steady_clock::now() + 50ms));  // still held by the gate
  gate.release();
  EXPECT_TRUE(runner.wait_idle(std::chrono::steady_clock::now() + 30s));
  EXPECT_FALSE(queued.get_future().get().error);
}

TEST(ModelRunner, RequestQueuedPastTheTimeoutIsAnswered504WithoutRunning) {
  Metrics metrics;
  ModelRunner runner("cnn", image_package(),
                     {.max_batch_size = 1, .max_queue_delay = 0us, .queue_timeout = 20ms}, metrics);
  Gate gate;
  runner.submit(image_rows(1), gate.callback());
  gate.wait_entered();
  std::promise<Answer> late;
  runner.submit(image_rows(1), into(late));
  std::this_thread::sleep_for(100ms);
  gate.release();
  const Answer a = late.get_future().get();
  ASSERT_TRUE(a.error);
  EXPECT_EQ(status_of(a.error), 504);
  EXPECT_TRUE(a.result.outputs.empty());
}

TEST(ModelRunner, DestructorAnswersEveryQueuedRequest) {
  Metrics metrics;
  std::promise<Answer> p[3];
  {
    ModelRunner runner("cnn", image_package(), {.max_batch_size = 8, .max_queue_delay = 10s}, metrics);
    for (auto& pi : p) runner.submit(image_rows(1), into(pi));
  }
  for (auto& pi : p) {
    auto f = pi.get_future();
    ASSERT_EQ(f.wait_for(0s), std::future_status::ready);
    EXPECT_FALSE(f.get().error);
  }
}

TEST(ModelRunner, BadRequestsAre400NamingTheInput) {
  Metrics metrics;
  ModelRunner runner("cnn", image_package(), {.max_batch_size = 4}, metrics);
  EXPECT_NE(refusal(runner, {{"pixels", at::randn({1, 1, 12, 12})}}, 400).find("unknown input 'pixels'"),
            std::string::npos);
  EXPECT_NE(refusal(runner, {}, 400).find("'images' is missing"), std::string::npos);
  EXPECT_NE(refusal(runner, {{"images", at::randn({1, 1, 12, 12}).to(at::kDouble)}}, 400).find("expected FP32"),
            std::string::npos);
  EXPECT_NE(refusal(runner, {{"images", at::randn({1, 3, 12, 12})}}, 400).find("expected [-1, 1, 12, 12]"),
            std::string::npos);
  EXPECT_NE(refusal(runner, {{"images", at::randn({1, 12, 12})}}, 400).find("has shape [1, 12, 12]"),
            std::string::npos);
  EXPECT_NE(refusal(runner, {{"images", at::randn({0, 1, 12, 12})}}, 400).find("images"), std::string::npos);
  EXPECT_NE(refusal(runner, image_rows(5), 400).find("max_batch_size is 4"), std::string::npos);
  EXPECT_NE(refusal(runner, {{"images", at::randn({1, 1, 12, 12})}, {"images", at::randn({1, 1, 12, 12})}}, 400)
                .find("given twice"),
            std::string::npos);
  // ... and the runner still serves.
  std::promise<Answer> ok;
  runner.submit(image_rows(2), into(ok));
  EXPECT_FALSE(ok.get_future().get().error);
}

TEST(ModelRunner, ImageBodiesGoThroughThePackagesEvalPreprocessing) {
  Metrics metrics;
  ModelRunner runner("cnn", image_package(), {}, metrics);
  std::vector<std::uint8_t> px(20 * 16);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 37 % 251);
  const std::vector<std::byte> png = data::encode_png(px.data(), 20, 16, 1);
  const std::span<const std::uint8_t> body(reinterpret_cast<const std::uint8_t*>(png.data()), png.size());
  const std::vector<NamedTensor> in = runner.inputs_from_image(body);
  ASSERT_EQ(in.size(), 1U);
  EXPECT_EQ(in[0].name, "images");
  EXPECT_TRUE(at::equal(in[0].tensor, runner.package().image.apply(png).unsqueeze(0)));
  const std::vector<std::uint8_t> garbage = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'};
  try {
    (void)runner.inputs_from_image(garbage);
    ADD_FAILURE() << "garbage decoded";
  } catch (const ServeError& e) {
    EXPECT_EQ(e.http_status(), 400);
    EXPECT_NE(std::string(e.what()).find("JPEG/PNG"), std::string::npos) << e.what();
  }
  const std::vector<std::uint8_t> cut(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(body.size() / 2));
  EXPECT_THROW((void)runner.inputs_from_image(cut), ServeError);
  EXPECT_THROW((void)runner.inputs_from_texts(std::vector<std::string>{"text"}), ServeError);
}

// Rows of different lengths padded into one batch (to the bucket of the longest) give each request what
// the engine gives that request alone, unpadded.
TEST(ModelRunner, TextRowsPaddedIntoOneBatchEqualUnpaddedSingleRuns) {
  Metrics metrics;
  const fs::path pkg = text_package(true);
  ModelRunner runner("bert", pkg, {.max_batch_size = 4, .max_queue_delay = 5s, .length_buckets = {8, 16}}, metrics);
  runner.warm_up();
  const ModelMetadata& m = runner.metadata();
  ASSERT_EQ(m.inputs.size(), 3U);
  EXPECT_EQ(m.inputs[0].name, "input_ids");
  EXPECT_EQ(m.inputs[0].datatype, "INT64");
  EXPECT_EQ(m.inputs[0].shape, (std::vector<std::int64_t>{-1, -1}));
  EXPECT_EQ(m.outputs[0].shape, (std::vector<std::int64_t>{-1, 2}));
  const infer::Engine reference = infer::Engine::load(pkg.string());
  const std::vector<std::vector<std::string>> requests = {
      {"the cat"}, {"the dog ran far away on the mat", "a cat sat"}, {"a dog ran far far far away from the cat on a mat"}};
  std::vector<std::vector<NamedTensor>> inputs;
  for (const auto& texts : requests) inputs.push_back(runner.inputs_from_texts(texts));
  EXPECT_EQ(inputs[0][0].tensor.size(1), 4);  // [CLS] the cat [SEP]: unpadded
  std::promise<Answer> p[3];
  for (std::size_t i = 0; i < 3; ++i) runner.submit(inputs[i], into(p[i]));
  for (std::size_t i = 0; i < 3; ++i) {
    const Answer a = p[i].get_future().get();
    ASSERT_FALSE(a.error);
    EXPECT_EQ(a.result.batch_size, 4);
    std::vector<at::Tensor> alone;
    for (const NamedTensor& t : inputs[i]) alone.push_back(t.tensor);
    const at::Tensor want = reference.run(alone).front();
    ASSERT_EQ(a.result.outputs[0].tensor.sizes(), want.sizes());
    EXPECT_LT(max_diff(a.result.outputs[0].tensor, want), 1e-5) << "request " << i;
  }
}

TEST(ModelRunner, TextRequestsWithBadIdsOrLengthsAre400) {
  Metrics metrics;
  ModelRunner runner("bert", text_package(true), {}, metrics);
  const auto text = [](at::Tensor ids) {
    return std::vector<NamedTensor>{{"input_ids", ids},
                                    {"attention_mask", at::ones_like(ids)},
                                    {"token_type_ids", at::zeros_like(ids)}};
  };
  EXPECT_NE(refusal(runner, text(at::full({1, 4}, std::int64_t{30})), 400).find("value 30"), std::string::npos);
  EXPECT_NE(refusal(runner, text(at::full({1, 4}, std::int64_t{-1})), 400).find("outside [0, 29]"), std::string::npos);
  EXPECT_NE(refusal(runner, text(at::ones({1, 33}, at::kLong)), 400).find("max_length is 32"), std::string::npos);
  EXPECT_NE(refusal(runner, text(at::ones({1, 4}, at::kInt)), 400).find("expected INT64"), std::string::npos);
  std::vector<NamedTensor> mismatched = text(at::ones({2, 4}, at::kLong));
  mismatched[1].tensor = at::ones({2, 5}, at::kLong);
  EXPECT_NE(refusal(runner, mismatched, 400).find("the shapes must match"), std::string::npos);
  std::vector<NamedTensor> bad_mask = text(at::ones({1, 4}, at::kLong));
  bad_mask[1].tensor = at::full({1, 4}, std::int64_t{2});
  EXPECT_NE(refusal(runner, bad_mask, 400).find("attention_mask"), std::string::npos);
  const std::string invalid_utf8 = "caf\xc3";
  try {
    (void)runner.inputs_from_texts(std::vector<std::string>{"fine", invalid_utf8});
    ADD_FAILURE() << "invalid UTF-8 accepted";
  } catch (const ServeError& e) {
    EXPECT_EQ(e.http_status(), 400);
  }
  EXPECT_THROW((void)runner.inputs_from_texts(std::vector<std::string>{}), ServeError);
  EXPECT_THROW((void)runner.inputs_from_image(std::vector<std::uint8_t>{1, 2, 3}), ServeError);
}

// A package exported from a bare config has no tokenizer: tensors are served, texts are a 400.
TEST(ModelRunner, TextPackageWithoutTokenizerServesTensorsOnly) {
  const test::TempDir dir;
  const fs::path pkg = dir.path() / "no-tokenizer";
  fs::copy(text_package(true), pkg);
  fs::remove(pkg / "vocab.txt");
  fs::remove(pkg / "tokenizer_config.json");
  Metrics metrics;
  ModelRunner runner("bert", pkg, {.max_batch_size = 2}, metrics);
  const at::Tensor ids = at::randint(0, 30, {2, 6}, at::kLong);
  std::promise<Answer> p;
  runner.submit({{"input_ids", ids}, {"attention_mask", at::ones_like(ids)}, {"token_type_ids", at::zeros_like(ids)}},
                into(p));
  const Answer a = p.get_future().get();
  ASSERT_FALSE(a.error);
  const at::Tensor want = infer::Engine::load(pkg.string()).run({ids, at::ones_like(ids), at::zeros_like(ids)}).front();
  EXPECT_LT(max_diff(a.result.outputs[0].tensor, want), 1e-5);
  try {
    (void)runner.inputs_from_texts(std::vector<std::string>{"the cat"});
    ADD_FAILURE() << "texts accepted without a tokenizer";
  } catch (const ServeError& e) {
    EXPECT_EQ(e.http_status(), 400);
    EXPECT_NE(std::string(e.what()).find("no tokenizer"), std::string::npos) << e.what();
  }
}

TEST(ModelRunner, SentenceEmbedderAnswersTheEncodersEmbeddings) {
  Metrics metrics;
  const fs::path pkg = text_package(false);
  ModelRunner runner("minilm", pkg, {.max_batch_size = 8}, metrics);
  runner.warm_up();
  EXPECT_EQ(runner.metadata().kind, infer::PackageKind::kSentenceEmbedder);
  ASSERT_EQ(runner.metadata().outputs.size(), 1U);
  EXPECT_EQ(runner.metadata().outputs[0].name, "sentence_embedding");
  EXPECT_EQ(runner.metadata().outputs[0].shape, (std::vector<std::int64_t>{-1, 16}));
  const std::vector<std::string> texts = {"the cat sat on the mat", "a dog", "far away"};
  std::promise<Answer> p;
  runner.submit(runner.inputs_from_texts(texts), into(p));
  const Answer a = p.get_future().get();
  ASSERT_FALSE(a.error);
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const at::Tensor want = infer::SentenceEncoder::from_package(infer::read_package(pkg)).encode(views);
  EXPECT_LT(max_diff(a.result.outputs[0].tensor, want), 1e-5);
}

TEST(ModelRunner, BadOptionsAndPackagesAreOneLineErrors) {
  Metrics metrics;
  EXPECT_THROW(ModelRunner("x", image_package(), {.max_batch_size = 0}, metrics), Error);
  EXPECT_THROW(ModelRunner("x", image_package(), {.max_batch_size = 4, .preferred_batch_sizes = {8}}, metrics), Error);
  EXPECT_THROW(ModelRunner("x", image_package(), {.max_queue_size = 0}, metrics), Error);
  const test::TempDir empty;
  EXPECT_THROW(ModelRunner("x", empty.path(), {}, metrics), Error);
}

}  // namespace
}  // namespace hotpath::serve
