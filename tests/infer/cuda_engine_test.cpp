// Label gpu: the inference engine on CUDA in fp16 (folded graph, cuDNN convs channels-last, SDPA attention,
// pinned input staging) against the same graph on the CPU in fp32: image families and a BERT classifier
// with a padded batch. One test runs without a GPU (ctest entry cuda_tests.refusals, label fast): asking
// for CUDA there is refused with one line.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <iostream>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/lower.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/text/bert.h"
#include "support/cuda_test_support.h"

namespace hotpath::infer {
namespace {

const at::Device kCuda(at::kCUDA, 0);

// max |a − b| / max(1, max |b|), as engine_test.cpp.
double rel_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(1.0, b.abs().max().item<double>());
  return (a - b).abs().max().item<double>() / scale;
}

struct VisionCase {
  const char* name;
  std::int64_t size;
};

class CudaEngineVision : public ::testing::TestWithParam<VisionCase> {};

// Of the rows whose fp32 top-1 leads top-2 by more than 2 × `bound` (the error the test allows), how many have
// another argmax in `got`; `decided` is set to how many rows that is. Rows below are near-ties any rounding may flip.
std::int64_t decided_rows_that_flip(const at::Tensor& got, const at::Tensor& want, double bound, std::int64_t& decided) {
  const auto top2 = want.topk(2, 1);
  const at::Tensor margin = std::get<0>(top2).select(1, 0) - std::get<0>(top2).select(1, 1);
  const at::Tensor sure = margin > 2 * bound;
  decided = sure.sum().item<std::int64_t>();
  return (sure & (got.argmax(1) != want.argmax(1))).sum().item<std::int64_t>();
}

// fp16 activations: ~1e-3 relative error per layer; 2e-2 over ResNet-50's depth, and the same top-1.
// The BatchNorm statistics come from the data (a few train-mode passes), as in a trained network: with the
// init-time statistics (mean 0, var 1) EfficientNet's activations shrink block after block (kaiming fan-out init
// of the depthwise convs) until its logits are ~1e-3, where a 2e-2 bound says nothing and fp16 rounds the
// ranking of near-equal logits (gpu-run-1's argmax failure). The error is relative to the logits' own scale.
TEST_P(CudaEngineVision, Fp16MatchesTheCpuFp32Graph) {
  HOTPATH_REQUIRE_CUDA();
  const VisionCase c = GetParam();
  at::manual_seed(7);
  auto model = models::create_model(c.name, {.num_classes = 10, .in_channels = 3});
  {
    const at::NoGradGuard no_grad;
    // Weights initialised to zero (ViT's head, as torchvision's) get random values: zero logits compare nothing.
    for (auto& p : model->parameters()) {
      if (p.dim() >= 2 && p.abs().max().item<double>() == 0.0) p.normal_(0.0, 0.02);
    }
    model->train();
    for (int i = 0; i < 3; ++i) model->forward(at::randn({8, 3, c.size, c.size}));
  }
  model->eval();
  const Graph g = lower_image_model(*model, {.channels = 3, .image_size = c.size});
  const at::Tensor x = at::randn({8, 3, c.size, c.size});
  const at::Tensor want = Engine::from_graph(g, {.threads = 4}).run({x}).front();
  const double scale = want.abs().max().item<double>();
  ASSERT_GT(scale, 1e-2) << c.name << ": logits too small to compare (max |logit| " << scale << ")";
  for (const at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    const Engine gpu = Engine::from_graph(g, {.device = kCuda, .cuda_dtype = dtype});
    const at::Tensor got = gpu.run({x}).front();
    ASSERT_TRUE(got.device().is_cpu());
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    const double tol = dtype == at::kHalf ? 2e-2 : 6e-2;  // bf16 keeps 8 bits of mantissa, fp16 11
    const double error = (got - want).abs().max().item<double>() / scale;
    std::int64_t decided = 0;
    const std::int64_t flipped = decided_rows_that_flip(got, want, tol * scale, decided);
    std::cout << "[ measured ] " << c.name << " " << c10::toString(dtype) << ": max |logit| " << scale
              << ", max error / max |logit| " << error << ", argmax equal on "
              << got.argmax(1).eq(want.argmax(1)).sum().item<std::int64_t>() << "/" << want.size(0) << " rows ("
              << decided << " decided by more than twice the bound)\n";
    EXPECT_LT(error, tol) << c.name << " " << c10::toString(dtype);
    EXPECT_EQ(flipped, 0) << c.name << " " << c10::toString(dtype);
    EXPECT_NE(gpu.describe().find("device: cuda:0"), std::string::npos) << gpu.describe();
  }
}

// The init-time statistics as gpu-run-1 ran them: printed for the record (the scale fp16 meets there), the
// error bounded against max(1, max |logit|) as before, argmax compared only where that bound decides it.
TEST_P(CudaEngineVision, Fp16AtInitStatisticsStaysWithinTheAbsoluteBound) {
  HOTPATH_REQUIRE_CUDA();
  const VisionCase c = GetParam();
  at::manual_seed(7);
  auto model = models::create_model(c.name, {.num_classes = 10, .in_channels = 3});
  model->eval();
  const Graph g = lower_image_model(*model, {.channels = 3, .image_size = c.size});
  const at::Tensor x = at::randn({4, 3, c.size, c.size});
  const at::Tensor want = Engine::from_graph(g, {.threads = 4}).run({x}).front();
  const at::Tensor got = Engine::from_graph(g, {.device = kCuda, .cuda_dtype = at::kHalf}).run({x}).front();
  std::int64_t decided = 0;
  const double bound = 2e-2 * std::max(1.0, want.abs().max().item<double>());
  const std::int64_t flipped = decided_rows_that_flip(got, want, bound, decided);
  std::cout << "[ measured ] " << c.name << " at init statistics, fp16: max |logit| " << want.abs().max().item<double>()
            << ", max |error| " << (got - want).abs().max().item<double>() << ", argmax equal on "
            << got.argmax(1).eq(want.argmax(1)).sum().item<std::int64_t>() << "/4 rows (" << decided << " decided)\n";
  EXPECT_LT(rel_error(got, want), 2e-2) << c.name;
  EXPECT_EQ(flipped, 0) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Families, CudaEngineVision,
                         ::testing::Values(VisionCase{"resnet50", 64}, VisionCase{"efficientnet_b0", 64},
                                           VisionCase{"vit_tiny", 224}),
                         [](const ::testing::TestParamInfo<VisionCase>& p) { return std::string(p.param.name); });

TEST(CudaEngineText, BertFp16MatchesTheCpuWithAPaddedBatch) {
  HOTPATH_REQUIRE_CUDA();
  formats::BertConfig c;
  c.vocab_size = 100;
  c.hidden_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 256;
  c.max_position_embeddings = 64;
  c.num_labels = 3;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  at::manual_seed(3);
  models::BertForSequenceClassification model(c);
  model.eval();
  const Graph g = lower_text_classifier(model);
  const at::Tensor ids = at::randint(1, 100, {4, 48}, at::kLong);
  at::Tensor mask = at::ones({4, 48}, at::kLong);
  mask[1].narrow(0, 20, 28).zero_();
  mask[3].narrow(0, 5, 43).zero_();
  const at::Tensor types = at::zeros({4, 48}, at::kLong);
  const at::Tensor want = Engine::from_graph(g, {.threads = 4}).run({ids, mask, types}).front();
  const Engine gpu = Engine::from_graph(g, {.device = kCuda});
  const at::Tensor got = gpu.run({ids, mask, types}).front();
  EXPECT_LT(rel_error(got, want), 2e-2);
  // Optional inputs left out: the engine makes the mask and types on the device.
  const at::Tensor all_attended = gpu.run({ids}).front();
  const at::Tensor cpu_all = Engine::from_graph(g, {.threads = 4}).run({ids}).front();
  EXPECT_LT(rel_error(all_attended, cpu_all), 2e-2);
  EXPECT_NE(gpu.describe().find("attention SDPA"), std::string::npos) << gpu.describe();
}

TEST(CudaEngineRefusals, WithoutAGpuCudaIsRefusedWithOneLine) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present: the refusal cannot be seen here";
  at::manual_seed(1);
  auto model = models::create_model("cnn_small", {.num_classes = 4, .in_channels = 1});
  const Graph g = lower_image_model(*model, {.channels = 1, .image_size = 28});
  try {
    (void)Engine::from_graph(g, {.device = kCuda});
    FAIL() << "an engine on cuda:0 was made without a GPU";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda:0 was asked for but no CUDA device is available"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace hotpath::infer
