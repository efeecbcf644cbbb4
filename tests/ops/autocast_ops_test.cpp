// conv2d/linear/matmul under bf16 autocast: the fp32-math path gives autocast's numbers (operands and
// results rounded to bf16 where autocast rounds them), native autocast agrees within bf16 precision,
// and outside autocast they are the module's own forward.
#include "hotpath/ops/autocast_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdlib>

#include "hotpath/core/cpu.h"
#include "models/model_test_support.h"

namespace hotpath::ops {
namespace {

at::Tensor bf16_round(const at::Tensor& t) { return t.to(at::kBFloat16).to(at::kFloat); }

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor fa = a.to(at::kFloat), fb = b.to(at::kFloat);
  return ((fa - fb).abs().max() / fb.abs().max().clamp_min(1e-12)).item<double>();
}

// Native bf16 math from the avx512_bf16 dispatch level up (oneDNN's bf16 kernels), fp32 math below it —
// through the cap, so an AVX-512 machine also takes the AVX2 machine's path.
TEST(AutocastOps, Bf16MathFollowsTheDispatchCap) {
  EXPECT_EQ(bf16_math(), bf16_math());
  EXPECT_NE(std::string(bf16_math_name()), "");
  if (std::getenv("HOTPATH_BF16_MATH") != nullptr) GTEST_SKIP() << "HOTPATH_BF16_MATH forces " << bf16_math_name();
  EXPECT_EQ(bf16_math(), cpu::allows(cpu::Isa::kAvx512Bf16) ? Bf16Math::kNative : Bf16Math::kFp32) << bf16_math_name();
  const cpu::ScopedMaxIsa cap(cpu::Isa::kAvx2);
  EXPECT_EQ(bf16_math(), Bf16Math::kFp32);
  EXPECT_EQ(std::string(bf16_math_name()).rfind("fp32 (native: ", 0), 0U) << bf16_math_name();
}

TEST(AutocastOps, OutsideAutocastIsTheModulesForward) {
  at::manual_seed(0);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3).stride(2).padding(1));
  torch::nn::Linear fc(16, 4);
  const at::Tensor x = at::randn({2, 3, 9, 9});
  const at::Tensor v = at::randn({5, 16});
  EXPECT_FALSE(emulates_bf16(x));
  EXPECT_TRUE(at::equal(conv2d(*conv, x), conv->forward(x)));
  EXPECT_TRUE(at::equal(linear(*fc, v), fc->forward(v)));
}

TEST(AutocastOps, Fp32MathRoundsWhereAutocastRounds) {
  const cpu::ScopedMaxIsa cap(cpu::Isa::kAvx2);  // AVX-512 CPUs too: below avx512, bf16 math is fp32
  if (bf16_math() != Bf16Math::kFp32) GTEST_SKIP() << bf16_math_name();
  at::manual_seed(1);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(4, 6, 3).stride(1).padding(1).groups(2));
  const at::Tensor x = at::randn({2, 4, 7, 7}).contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor y;
  {
    AutocastGuard autocast(at::kCPU, at::kBFloat16);
    EXPECT_TRUE(emulates_bf16(x));
    y = conv2d(*conv, x);
  }
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  const at::Tensor expected =
      at::conv2d(bf16_round(x), bf16_round(conv->weight), bf16_round(conv->bias), 1, 1, 1, 2).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(y, expected));
}

TEST(AutocastOps, ConvMatchesNativeAutocastForwardAndGradients) {
  at::manual_seed(2);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(8, 16, 3).stride(2).padding(1).bias(false));
  const at::Tensor x0 = at::randn({2, 8, 12, 12});
  auto run = [&](bool ours) {
    conv->zero_grad();
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor y;
    {
      AutocastGuard autocast(at::kCPU, at::kBFloat16);
      y = ours ? conv2d(*conv, x) : conv->forward(x);
    }
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    (y.to(at::kFloat) * at::linspace(-1, 1, y.numel()).view(y.sizes())).sum().backward();
    return std::tuple{y.detach(), x.grad().clone(), conv->weight.grad().clone()};
  };
  const auto [y_ours, gx_ours, gw_ours] = run(true);
  const auto [y_ref, gx_ref, gw_ref] = run(false);
  EXPECT_EQ(gx_ours.scalar_type(), at::kFloat);
  EXPECT_LT(max_rel(y_ours, y_ref), 1e-2);
  EXPECT_LT(max_rel(gx_ours, gx_ref), 1e-2);
  EXPECT_LT(max_rel(gw_ours, gw_ref), 1e-2);
}

TEST(AutocastOps, LinearAndMatmulMatchNativeAutocast) {
  at::manual_seed(3);
  torch::nn::Linear fc(32, 24);
  const at::Tensor x = at::randn({3, 5, 32});
  const at::Tensor a = at::randn({2, 4, 6, 8}), b = at::randn({2, 4, 8, 6});
  at::Tensor ours, ref, mm_ours, mm_ref;
  {
    AutocastGuard autocast(at::kCPU, at::kBFloat16);
    ours = linear(*fc, x);
    ref = fc->forward(x);
    mm_ours = autocast_matmul(a, b);
    mm_ref = at::matmul(a, b);
  }
  EXPECT_EQ(ours.scalar_type(), at::kBFloat16);
  EXPECT_EQ(mm_ours.scalar_type(), at::kBFloat16);
  EXPECT_LT(max_rel(ours, ref), 1e-2);
  EXPECT_LT(max_rel(mm_ours, mm_ref), 1e-2);
}

}  // namespace
}  // namespace hotpath::ops
