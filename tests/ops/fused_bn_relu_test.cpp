// Fused BatchNorm2d + ReLU against ATen's batch_norm + relu (the reference): outputs, running
// statistics, gradients, both layouts, odd sizes, eval mode, determinism, the fallbacks, SmallCnn.
#include "hotpath/ops/fused_bn_relu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/batchnorm.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/models/vision/cnn.h"
#include "models/model_test_support.h"

namespace hotpath::ops {
namespace {

cpu::Choice dispatch_choice(const std::string& op) {
  for (cpu::Choice& c : cpu::dispatch_choices()) {
    if (c.op == op) return c;
  }
  ADD_FAILURE() << op << " is not in the dispatch report";
  return {};
}

struct Case {
  std::int64_t n, c, h, w;
  bool channels_last;
  bool training;
  double mean = 0.5;  // offset of the input, to exercise the variance's cancellation
};

std::string describe(const Case& k) {
  std::ostringstream out;
  out << "[" << k.n << "," << k.c << "," << k.h << "," << k.w << "] " << (k.channels_last ? "NHWC" : "NCHW") << " "
      << (k.training ? "train" : "eval") << " mean " << k.mean;
  return out.str();
}

at::Tensor layout(const at::Tensor& t, bool channels_last) {
  return t.contiguous(channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// |a - b| <= atol + rtol * |b| everywhere.
::testing::AssertionResult close(const at::Tensor& a, const at::Tensor& b, double atol, double rtol) {
  if (a.sizes() != b.sizes()) return ::testing::AssertionFailure() << "shapes differ";
  const at::Tensor excess = (a - b).abs() - (b.abs() * rtol + atol);
  if (excess.max().item<double>() <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max abs diff " << max_abs_diff(a, b);
}

struct Outputs {
  at::Tensor y, running_mean, running_var, grad_input, grad_weight, grad_bias;
  at::Tensor initial_mean, initial_var;
};

// One forward + backward through `op` (the fused op or the reference) from identical leaves.
template <typename Op>
Outputs run(const Case& k, Op op, std::uint64_t seed = 1) {
  at::manual_seed(static_cast<std::int64_t>(seed));
  const at::Tensor x0 = at::randn({k.n, k.c, k.h, k.w}) * 2.0 + k.mean;
  const at::Tensor w0 = at::randn({k.c});  // some negative scales: the ReLU mask then flips sides
  const at::Tensor b0 = at::randn({k.c}) * 0.5;
  const at::Tensor rm = at::randn({k.c}) * 0.1;
  const at::Tensor rv = at::rand({k.c}) + 0.5;
  const at::Tensor gy = at::randn({k.n, k.c, k.h, k.w});  // NCHW: the backward must re-layout it

  const at::Tensor x = layout(x0, k.channels_last).requires_grad_(true);
  const at::Tensor w = w0.clone().requires_grad_(true);
  const at::Tensor b = b0.clone().requires_grad_(true);
  Outputs o;
  o.initial_mean = rm;
  o.initial_var = rv;
  o.running_mean = rm.clone();
  o.running_var = rv.clone();
  o.y = op(x, w, b, o.running_mean, o.running_var, k.training);
  const auto grads = torch::autograd::grad({o.y}, {x, w, b}, {gy});
  o.grad_input = grads[0];
  o.grad_weight = grads[1];
  o.grad_bias = grads[2];
  return o;
}

at::Tensor fused(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& rm,
                 const at::Tensor& rv, bool training) {
  return batch_norm_relu(x, w, b, rm, rv, training, 0.1, 1e-5);
}

at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& rm,
                     const at::Tensor& rv, bool training) {
  return at::relu(at::batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5, false));
}

// ATen in float64, cast back: the truth when ATen's own fp32 result is the less accurate one.
at::Tensor reference64(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& rm,
                       const at::Tensor& rv, bool training) {
  const at::Tensor rm64 = rm.to(at::kDouble);
  const at::Tensor rv64 = rv.to(at::kDouble);
  const at::Tensor y = reference(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble), rm64, rv64, training);
  rm.copy_(rm64);
  rv.copy_(rv64);
  return y.to(at::kFloat);
}

void expect_matches_aten(const Case& k) {
  SCOPED_TRACE(describe(k));
  const at::Tensor x = layout(at::zeros({k.n, k.c, k.h, k.w}), k.channels_last);
  ASSERT_EQ(batch_norm_relu_skip_reason(x, at::ones({k.c}), at::zeros({k.c}), at::zeros({k.c}), at::ones({k.c}),
                                        k.training),
            nullptr);
  const Outputs got = run(k, fused);
  const Outputs want = run(k, reference);
  EXPECT_TRUE(got.y.is_contiguous(k.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous));
  EXPECT_TRUE(close(got.y, want.y, 1e-5, 1e-5)) << "output";
  EXPECT_TRUE(close(got.running_mean, want.running_mean, 1e-5, 1e-5)) << "running_mean";
  EXPECT_TRUE(close(got.running_var, want.running_var, 1e-5, 1e-5)) << "running_var";
  EXPECT_TRUE(close(got.grad_input, want.grad_input, 1e-4, 1e-4)) << "grad_input";
  EXPECT_TRUE(close(got.grad_weight, want.grad_weight, 1e-4, 1e-4)) << "grad_weight";
  EXPECT_TRUE(close(got.grad_bias, want.grad_bias, 1e-4, 1e-4)) << "grad_bias";
  EXPECT_GT(got.grad_input.abs().sum().item<double>(), 0.0) << "an all-zero gradient would prove nothing";
}

TEST(FusedBnRelu, TrainingMatchesAtenChannelsLast) {
  // N*H*W = 105 and 4: not multiples of 8; C = 1, 3, 32, 130: scalar tails and long channel rows.
  for (const std::int64_t c : {1, 3, 32, 130}) {
    expect_matches_aten({3, c, 5, 7, true, true});
    expect_matches_aten({4, c, 1, 1, true, true});
  }
  expect_matches_aten({16, 32, 28, 28, true, true});  // 2^15+ rows: several chunks
}

// |mean| >> std: ATen's fp32 output is itself ~1e-4 off here, so the truth is ATen in float64. Forward
// only: a 1e-5 change of a value next to zero flips its ReLU mask and moves the gradient sums by |dy|.
TEST(FusedBnRelu, LargeMeanKeepsTheVarianceAccurate) {
  for (const bool nhwc : {true, false}) {
    const Case k{16, 32, 28, 28, nhwc, true, 100.0};
    SCOPED_TRACE(describe(k));
    const Outputs got = run(k, fused);
    const Outputs want = run(k, reference64);
    EXPECT_TRUE(close(got.y, want.y, 2e-5, 1e-5)) << "output";
    EXPECT_TRUE(close(got.running_mean, want.running_mean, 1e-5, 1e-6)) << "running_mean";
    EXPECT_TRUE(close(got.running_var, want.running_var, 1e-5, 1e-5)) << "running_var";
  }
}

TEST(FusedBnRelu, TrainingMatchesAtenContiguous) {
  for (const std::int64_t c : {1, 3, 32, 130}) expect_matches_aten({3, c, 5, 7, false, true});
  expect_matches_aten({2, 3, 1, 1, false, true});
  expect_matches_aten({8, 16, 29, 31, false, true, -50.0});
}

TEST(FusedBnRelu, EvalUsesRunningStatistics) {
  for (const bool nhwc : {true, false}) {
    for (const std::int64_t c : {1, 3, 32, 130}) expect_matches_aten({3, c, 5, 7, nhwc, false});
    expect_matches_aten({1, 8, 1, 1, nhwc, false});  // one value per channel is fine in eval
  }
  // Running statistics are read, never written, in eval.
  const Outputs got = run({2, 4, 3, 3, true, false}, fused);
  EXPECT_TRUE(at::equal(got.running_mean, got.initial_mean));
  EXPECT_TRUE(at::equal(got.running_var, got.initial_var));
}

TEST(FusedBnRelu, IsBitIdenticalAcrossRunsAndThreadCounts) {
  for (const bool nhwc : {true, false}) {
    const Case k{8, 32, 28, 28, nhwc, true};
    const Outputs a = run(k, fused);
    const Outputs b = run(k, fused);
    at::set_num_threads(2);
    const Outputs c = run(k, fused);
    at::set_num_threads(1);
    for (const Outputs* o : {&b, &c}) {
      EXPECT_TRUE(at::equal(a.y, o->y));
      EXPECT_TRUE(at::equal(a.running_mean, o->running_mean));
      EXPECT_TRUE(at::equal(a.running_var, o->running_var));
      EXPECT_TRUE(at::equal(a.grad_input, o->grad_input));
      EXPECT_TRUE(at::equal(a.grad_weight, o->grad_weight));
      EXPECT_TRUE(at::equal(a.grad_bias, o->grad_bias));
    }
  }
}

// The baseline-x86-64 and AVX2 loops add in the same order and use no FMA: identical bits, so a
// checkpoint resumes bit-exactly on a machine with the other instruction set.
TEST(FusedBnRelu, PortableAndAvx2KernelsAgreeBitForBit) {
  cpu::reset_max_isa();
  if (const std::string why = cpu::isa_skip_reason(cpu::Isa::kAvx2); !why.empty()) GTEST_SKIP() << why;
  for (const bool nhwc : {true, false}) {
    for (const std::int64_t c : {3, 32, 130}) {
      const Case k{4, c, 7, 9, nhwc, true};
      SCOPED_TRACE(describe(k));
      const Outputs avx2 = run(k, fused);
      Outputs portable;
      {
        const cpu::ScopedMaxIsa cap(cpu::Isa::kScalar);
        EXPECT_EQ(dispatch_choice("batch_norm_relu").variant, "portable");
        portable = run(k, fused);
      }
      EXPECT_EQ(dispatch_choice("batch_norm_relu").variant, "avx2");
      EXPECT_TRUE(at::equal(avx2.y, portable.y));
      EXPECT_TRUE(at::equal(avx2.running_var, portable.running_var));
      EXPECT_TRUE(at::equal(avx2.grad_input, portable.grad_input));
      EXPECT_TRUE(at::equal(avx2.grad_weight, portable.grad_weight));
    }
  }
}

// at::parallel_for is header-inline: compiled without OpenMP it would quietly run on one thread.
TEST(FusedBnRelu, IsBuiltToRunOnAtensThreads) {
  EXPECT_EQ(dispatch_choice("batch_norm_relu").note.find("serial"), std::string::npos);
}

TEST(FusedBnRelu, FallsBackToAtenAndSaysWhy) {
  const at::Tensor w = at::ones({4});
  const at::Tensor b = at::zeros({4});
  const at::Tensor rm = at::zeros({4});
  const at::Tensor rv = at::ones({4});
  const at::Tensor x = at::randn({2, 4, 5, 6});
  EXPECT_NE(batch_norm_relu_skip_reason(x.to(at::kBFloat16), w, b, rm, rv, true), nullptr);
  EXPECT_NE(batch_norm_relu_skip_reason(x.transpose(2, 3), w, b, rm, rv, true), nullptr);
  EXPECT_NE(batch_norm_relu_skip_reason(x, at::Tensor(), at::Tensor(), rm, rv, true), nullptr);
  EXPECT_NE(batch_norm_relu_skip_reason(x, w, b, at::Tensor(), at::Tensor(), true), nullptr);
  EXPECT_NE(batch_norm_relu_skip_reason(at::randn({1, 4, 1, 1}), w, b, rm, rv, true), nullptr);

  // A strided view goes through ATen and still gives ATen's answer, gradients included.
  const Case k{2, 4, 5, 5, false, true};  // square: the transposed output keeps gy's shape
  const auto strided = [](auto op) {
    return [op](const at::Tensor& x_, const at::Tensor& w_, const at::Tensor& b_, const at::Tensor& rm_,
                const at::Tensor& rv_, bool training) { return op(x_.transpose(2, 3), w_, b_, rm_, rv_, training); };
  };
  const Outputs got = run(k, strided(fused));
  const Outputs want = run(k, strided(reference));
  EXPECT_TRUE(at::equal(got.y, want.y));
  EXPECT_TRUE(at::equal(got.grad_input, want.grad_input));
  EXPECT_TRUE(at::equal(got.running_var, want.running_var));

  // bf16 (what reaches BN under CPU autocast) keeps ATen's dtype and numbers.
  const at::Tensor xb = x.to(at::kBFloat16);
  EXPECT_TRUE(at::equal(batch_norm_relu(xb, w, b, rm.clone(), rv.clone(), true, 0.1, 1e-5),
                        at::batch_norm(xb, w, b, rm.clone(), rv.clone(), true, 0.1, 1e-5, false).relu()));
  // One value per channel in training: at::batch_norm's answer, and the module's own error.
  const at::Tensor one = at::randn({1, 4, 1, 1});
  EXPECT_TRUE(at::allclose(batch_norm_relu(one, w, b, rm.clone(), rv.clone(), true, 0.1, 1e-5),
                           at::batch_norm(one, w, b, rm.clone(), rv.clone(), true, 0.1, 1e-5, false).relu(), 0.0, 0.0,
                           /*equal_nan=*/true));
  torch::nn::BatchNorm2d bn(4);
  EXPECT_THROW(fused_bn_relu(*bn, one), c10::Error);
}

// A NaN reaches the loss (the trainer stops on a NaN loss), as through ATen: relu(NaN) is NaN.
TEST(FusedBnRelu, NanPropagatesLikeAten) {
  for (const bool training : {true, false}) {
    at::Tensor x = layout(at::randn({2, 3, 4, 4}), true);
    x[1][2][3][0] = std::numeric_limits<float>::quiet_NaN();
    const at::Tensor w = at::ones({3});
    const at::Tensor b = at::zeros({3});
    const at::Tensor got = batch_norm_relu(x, w, b, at::zeros({3}), at::ones({3}), training, 0.1, 1e-5);
    const at::Tensor want = reference(x, w, b, at::zeros({3}), at::ones({3}), training);
    EXPECT_TRUE(at::equal(got.isnan(), want.isnan())) << (training ? "train" : "eval");
    EXPECT_TRUE(got.isnan().any().item<bool>());
  }
}

// The module form does what bn->forward(x).relu_() does to the module: counts the batch and
// updates the running statistics (fixed momentum and momentum=None's cumulative average).
TEST(FusedBnRelu, ModuleFormKeepsTheModulesBookkeeping) {
  for (const bool cumulative : {false, true}) {
    auto options = torch::nn::BatchNorm2dOptions(6);
    if (cumulative) options.momentum(std::nullopt);
    torch::nn::BatchNorm2d fused_bn(options);
    torch::nn::BatchNorm2d aten_bn(options);
    const at::Tensor x = layout(at::randn({4, 6, 5, 5}) + 1.0, true);
    ASSERT_EQ(fused_bn_relu_skip_reason(*fused_bn, x), nullptr);
    for (int step = 0; step < 3; ++step) {
      const at::Tensor got = fused_bn_relu(*fused_bn, x * (step + 1));
      const at::Tensor want = aten_bn->forward(x * (step + 1)).relu_();
      EXPECT_TRUE(close(got, want, 1e-5, 1e-5)) << "step " << step;
    }
    EXPECT_EQ(fused_bn->num_batches_tracked.item<std::int64_t>(), 3);
    EXPECT_TRUE(close(fused_bn->running_mean, aten_bn->running_mean, 1e-5, 1e-5));
    EXPECT_TRUE(close(fused_bn->running_var, aten_bn->running_var, 1e-5, 1e-5));
    fused_bn->eval();
    aten_bn->eval();
    EXPECT_TRUE(close(fused_bn_relu(*fused_bn, x), aten_bn->forward(x).relu_(), 1e-5, 1e-5));
    EXPECT_EQ(fused_bn->num_batches_tracked.item<std::int64_t>(), 3) << "eval does not count batches";
  }
  torch::nn::BatchNorm2d plain(torch::nn::BatchNorm2dOptions(6).affine(false));
  EXPECT_NE(fused_bn_relu_skip_reason(*plain, at::randn({2, 6, 3, 3})), nullptr);
  EXPECT_EQ(fused_bn_relu(*plain, at::randn({2, 6, 3, 3})).min().item<float>(), 0.0f);
}

// SmallCnn's forward (fused) against its own nn.Sequential run layer by layer through ATen.
TEST(FusedBnRelu, SmallCnnForwardAndGradientsMatchTheSequential) {
  for (const bool nhwc : {true, false}) {
    at::manual_seed(3);
    auto fused_net = std::make_shared<models::SmallCnn>(models::SmallCnnConfig{.width = 8, .num_classes = 5, .in_channels = 1});
    auto aten_net = std::make_shared<models::SmallCnn>(models::SmallCnnConfig{.width = 8, .num_classes = 5, .in_channels = 1});
    {
      at::NoGradGuard no_grad;
      const auto from = fused_net->named_parameters();
      for (auto& p : aten_net->named_parameters()) p.value().copy_(from[p.key()]);
    }
    const at::Tensor images = layout(at::randn({6, 1, 12, 12}), nhwc);
    const at::Tensor got = fused_net->forward(images);
    const at::Tensor want = aten_net->classifier->forward(aten_net->features->forward(images).flatten(1));
    EXPECT_TRUE(close(got, want, 1e-4, 1e-4));
    got.square().sum().backward();
    want.square().sum().backward();
    const auto want_params = aten_net->named_parameters();
    for (const auto& p : fused_net->named_parameters()) {
      EXPECT_TRUE(close(p.value().grad(), want_params[p.key()].grad(), 1e-4, 1e-3)) << p.key();
    }
    const auto want_buffers = aten_net->named_buffers();
    for (const auto& b : fused_net->named_buffers()) {
      if (b.value().scalar_type() == at::kLong) {
        EXPECT_TRUE(at::equal(b.value(), want_buffers[b.key()])) << b.key();
      } else {
        EXPECT_TRUE(close(b.value(), want_buffers[b.key()], 1e-5, 1e-5)) << b.key();
      }
    }
  }
}

}  // namespace
}  // namespace hotpath::ops
