// ops::OneDnnConv (oneDNN's library called directly) against its twin, ATen's conv2d on an explicitly padded
// input + residual + activation: every geometry the image models lower to (1x1, 3x3, the stem's 3 channels,
// depthwise 3x3 / 5x5 at stride 2 with TensorFlow's asymmetric "same" padding, grouped, dilated, batches > 1),
// every activation, with and without bias and residual; several threads at once; bad geometry; the ISA that
// oneDNN picks under ONEDNN_MAX_CPU_ISA (ctest runs this binary capped to AVX2 and under QEMU's Haswell too).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/ops/onednn_conv.h"

namespace hotpath::ops {
namespace {

struct Case {
  std::int64_t batch, in, size, out, kernel, stride, groups, dilation;
  std::array<std::int64_t, 4> pad;  // top, left, bottom, right
};

at::Tensor activate(at::Tensor y, ConvActivation act) {
  switch (act) {
    case ConvActivation::kNone: return y;
    case ConvActivation::kRelu: return y.relu();
    case ConvActivation::kRelu6: return y.clamp(0, 6);
    case ConvActivation::kGelu: return at::gelu(y);
    case ConvActivation::kSilu: return at::silu(y);
    case ConvActivation::kSigmoid: return y.sigmoid();
  }
  return y;
}

ConvGeometry geometry_of(const Case& c) {
  ConvGeometry g;
  g.batch = c.batch;
  g.in_channels = c.in;
  g.height = c.size;
  g.width = c.size + 1;  // not square: height and width are not swapped
  g.out_channels = c.out;
  g.kernel_h = g.kernel_w = c.kernel;
  g.groups = c.groups;
  g.stride = {c.stride, c.stride};
  g.dilation = {c.dilation, c.dilation};
  g.padding = c.pad;
  return g;
}

struct Outputs {
  at::Tensor got, want;
};

Outputs run_case(const Case& c, ConvActivation act, bool bias, bool residual,
                 ConvAlgorithm algorithm = ConvAlgorithm::kAuto) {
  const ConvGeometry g = geometry_of(c);
  const at::Tensor x = at::randn({g.batch, g.in_channels, g.height, g.width});
  const at::Tensor w = at::randn({g.out_channels, g.in_channels / g.groups, g.kernel_h, g.kernel_w}) * 0.3;
  const at::Tensor b = bias ? at::randn({g.out_channels}) : at::Tensor();
  const at::Tensor xp = at::constant_pad_nd(x, {g.padding[1], g.padding[3], g.padding[0], g.padding[2]}, 0.0);
  at::Tensor want = at::conv2d(xp, w, b, at::IntArrayRef{c.stride, c.stride}, at::IntArrayRef{0, 0},
                               at::IntArrayRef{c.dilation, c.dilation}, c.groups);
  EXPECT_EQ(want.size(2), g.out_height());
  EXPECT_EQ(want.size(3), g.out_width());
  at::Tensor r;
  if (residual) {
    r = at::randn(want.sizes()).contiguous(at::MemoryFormat::ChannelsLast);
    want = want + r;
  }
  want = activate(want, act);
  const OneDnnConv conv(g, w.contiguous().data_ptr<float>(), bias ? b.data_ptr<float>() : nullptr,
                        {.activation = act, .residual = residual, .algorithm = algorithm});
  const at::Tensor xc = x.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor got = at::empty(want.sizes(), want.options().memory_format(at::MemoryFormat::ChannelsLast));
  conv.run(xc.data_ptr<float>(), got.data_ptr<float>(), residual ? r.data_ptr<float>() : nullptr);
  return {got, want};
}

double rel_error(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-12);
}

class OneDnnConvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = OneDnnConv::unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};

const char* activation_name(ConvActivation act) {
  switch (act) {
    case ConvActivation::kNone: return "none";
    case ConvActivation::kRelu: return "relu";
    case ConvActivation::kRelu6: return "relu6";
    case ConvActivation::kGelu: return "gelu";
    case ConvActivation::kSilu: return "silu";
    case ConvActivation::kSigmoid: return "sigmoid";
  }
  return "?";
}

class OneDnnConvActivation : public ::testing::TestWithParam<ConvActivation> {
 protected:
  void SetUp() override {
    if (const std::string why = OneDnnConv::unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(OneDnnConvActivation, MatchesATensConvOnEveryGeometryTheModelsLowerTo) {
  at::manual_seed(1);
  const std::vector<Case> cases = {
      {1, 16, 9, 24, 1, 1, 1, 1, {0, 0, 0, 0}},     // pointwise
      {3, 8, 10, 16, 3, 1, 1, 1, {1, 1, 1, 1}},     // 3x3, batch 3
      {1, 3, 32, 8, 3, 2, 1, 1, {0, 0, 1, 1}},      // the stem, TF "same" at stride 2
      {2, 12, 16, 12, 3, 2, 12, 1, {0, 0, 1, 1}},   // depthwise 3x3 stride 2, asymmetric
      {1, 12, 14, 12, 5, 2, 12, 1, {1, 1, 2, 2}},   // depthwise 5x5 stride 2, asymmetric
      {1, 24, 7, 24, 5, 1, 24, 1, {2, 2, 2, 2}},    // depthwise 5x5
      {2, 8, 8, 12, 3, 1, 2, 1, {1, 1, 1, 1}},      // grouped
      {1, 8, 12, 8, 3, 1, 1, 2, {2, 2, 2, 2}},      // dilated
      {1, 16, 12, 32, 1, 2, 1, 1, {0, 0, 0, 0}},    // ResNet's strided 1x1 downsample
      {1, 3, 20, 16, 7, 2, 1, 1, {3, 3, 3, 3}},     // ResNet's 7x7 stem
  };
  // oneDNN may have no direct kernel for a geometry on a CPU (a grouped conv of 4 channels per group on AVX2
  // has only GEMM-based ones, which OneDnnConv skips): the constructor refuses it and the engine keeps ATen's
  // path. The shapes the image models are made of must never be refused.
  const std::vector<bool> may_refuse = {false, false, true, false, false, false, true, true, false, true};
  ASSERT_EQ(may_refuse.size(), cases.size());
  const bool avx512 = cpu::detected_isa() >= cpu::Isa::kAvx512 && std::getenv("ONEDNN_MAX_CPU_ISA") == nullptr;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    for (const bool residual : {false, true}) {
      const bool bias = (i + static_cast<std::size_t>(residual)) % 2 == 0;
      try {
        const Outputs r = run_case(cases[i], GetParam(), bias, residual);
        EXPECT_LT(rel_error(r.got, r.want), 1e-5) << "case " << i << (bias ? ", bias" : "") << (residual ? ", residual" : "");
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("no direct kernel"), std::string::npos) << what;
        EXPECT_TRUE(may_refuse[i] && !avx512) << "case " << i << ": " << what;
        if (!residual) std::cout << "case " << i << " refused: " << what << "\n";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Every, OneDnnConvActivation,
                         ::testing::Values(ConvActivation::kNone, ConvActivation::kRelu, ConvActivation::kRelu6,
                                           ConvActivation::kGelu, ConvActivation::kSilu, ConvActivation::kSigmoid),
                         [](const auto& p) { return std::string(activation_name(p.param)); });

// oneDNN's Winograd F(2x2, 3x3) kernel (AVX-512; blocked activations, reordered around it) for the 3x3 stride-1
// convs of a ResNet, forced and by kAuto's rule; a second batch size shares the first one's reordered weights.
TEST_F(OneDnnConvTest, WinogradAndTheAutomaticChoiceMatchATensConv) {
  at::manual_seed(4);
  const bool avx512 = cpu::detected_isa() >= cpu::Isa::kAvx512 && std::getenv("ONEDNN_MAX_CPU_ISA") == nullptr;
  for (const Case& c : {Case{1, 64, 14, 64, 3, 1, 1, 1, {1, 1, 1, 1}}, Case{2, 32, 28, 48, 3, 1, 1, 1, {1, 1, 1, 1}},
                        Case{16, 3, 16, 8, 3, 1, 1, 1, {1, 1, 1, 1}}}) {  // 3 input channels: a stem
    for (const ConvActivation act : {ConvActivation::kNone, ConvActivation::kRelu, ConvActivation::kSilu}) {
      try {
        const Outputs r = run_case(c, act, /*bias=*/true, /*residual=*/false, ConvAlgorithm::kWinograd);
        EXPECT_LT(rel_error(r.got, r.want), 1e-5) << "winograd, " << c.in << " channels, " << activation_name(act);
      } catch (const Error& e) {
        // AVX-512 has the kernel, with a relu post-op but not a swish one.
        EXPECT_FALSE(avx512 && act != ConvActivation::kSilu) << activation_name(act) << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find("no Winograd kernel"), std::string::npos) << e.what();
      }
      const Outputs r = run_case(c, act, true, false, ConvAlgorithm::kAuto);
      EXPECT_LT(rel_error(r.got, r.want), 1e-5) << "auto, " << c.in << " channels, " << activation_name(act);
    }
  }
  // Batch 1 then batch 3 of one weight: the second conv shares the first one's reordered weights.
  const ConvGeometry g1 = geometry_of({1, 32, 14, 32, 3, 1, 1, 1, {1, 1, 1, 1}});  // 14x15 output: Winograd's plane
  ConvGeometry g3 = g1;
  g3.batch = 3;
  const at::Tensor w = at::randn({32, 32, 3, 3});
  const at::Tensor b = at::randn({32});
  const OneDnnConv one(g1, w.data_ptr<float>(), b.data_ptr<float>(), {.activation = ConvActivation::kRelu});
  const OneDnnConv three(g3, w.data_ptr<float>(), b.data_ptr<float>(),
                         {.activation = ConvActivation::kRelu, .same_weights = &one});
  std::cout << "batch 1: " << one.implementation() << "; batch 3: " << three.implementation() << "\n";
  EXPECT_EQ(one.winograd(), one.implementation().find("wino") != std::string::npos);
  if (avx512) {
    EXPECT_TRUE(one.winograd() && three.winograd()) << one.implementation();
    const std::vector<float> w7(32 * 32 * 9, 0.01F);
    ConvGeometry small = g1;  // a 7x8 output: below kWinogradMinPlane, direct
    small.height = 7;
    small.width = 8;
    EXPECT_FALSE(OneDnnConv(small, w7.data(), nullptr).winograd());
  }
  const at::Tensor x = at::randn({3, 32, g1.height, g1.width});
  const at::Tensor want = at::conv2d(x, w, b, 1, 1).relu();
  const at::Tensor xc = x.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor got = at::empty(want.sizes(), want.options().memory_format(at::MemoryFormat::ChannelsLast));
  three.run(xc.data_ptr<float>(), got.data_ptr<float>());
  EXPECT_LT(rel_error(got, want), 1e-5);
  at::Tensor got1 = at::empty({1, 32, g1.height, g1.width}, want.options().memory_format(at::MemoryFormat::ChannelsLast));
  const at::Tensor x1 = xc.narrow(0, 0, 1).contiguous(at::MemoryFormat::ChannelsLast);
  one.run(x1.data_ptr<float>(), got1.data_ptr<float>());
  EXPECT_LT(rel_error(got1, want.narrow(0, 0, 1)), 1e-5);
}

TEST_F(OneDnnConvTest, RunsFromSeveralThreadsAtOnceWithTheSerialResults) {
  at::manual_seed(2);
  const Case c{2, 16, 12, 16, 3, 1, 1, 1, {1, 1, 1, 1}};
  const ConvGeometry g = geometry_of(c);
  const at::Tensor w = at::randn({16, 16, 3, 3});
  const at::Tensor b = at::randn({16});
  const OneDnnConv conv(g, w.data_ptr<float>(), b.data_ptr<float>(), {.activation = ConvActivation::kRelu});
  constexpr int kThreads = 4;
  std::vector<at::Tensor> xs, serial, parallel;
  for (int t = 0; t < kThreads; ++t) {
    xs.push_back(at::randn({g.batch, g.in_channels, g.height, g.width}).contiguous(at::MemoryFormat::ChannelsLast));
    const auto out = [&] {
      return at::empty({g.batch, g.out_channels, g.out_height(), g.out_width()},
                       at::TensorOptions().memory_format(at::MemoryFormat::ChannelsLast));
    };
    serial.push_back(out());
    parallel.push_back(out());
    conv.run(xs.back().data_ptr<float>(), serial.back().data_ptr<float>());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 20; ++k) conv.run(xs[t].data_ptr<float>(), parallel[t].data_ptr<float>());
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(at::equal(serial[t], parallel[t])) << "thread " << t;
}

TEST_F(OneDnnConvTest, RefusesBadGeometryAndAMissingResidualWithOneLine) {
  const std::vector<float> w(64 * 9, 0.1F);
  const auto refuses = [&](ConvGeometry g, const std::string& needle) {
    try {
      const OneDnnConv conv(g, w.data(), nullptr);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  ConvGeometry g;
  g.in_channels = 4;
  g.height = g.width = 6;
  g.out_channels = 4;
  g.kernel_h = g.kernel_w = 3;
  ConvGeometry zero = g;
  zero.in_channels = 0;
  refuses(zero, "must be positive");
  ConvGeometry groups = g;
  groups.groups = 3;
  refuses(groups, "do not split into 3 groups");
  ConvGeometry big = g;
  big.kernel_h = big.kernel_w = 9;
  refuses(big, "gives no output");
  ConvGeometry pad = g;
  pad.padding = {-1, 0, 0, 0};
  refuses(pad, "padding must be >= 0");
  const OneDnnConv plain(g, w.data(), nullptr);
  std::vector<float> x(4 * 36, 1.0F), y(4 * 16), r(4 * 16);
  EXPECT_THROW(plain.run(x.data(), y.data(), r.data()), Error);
}

// oneDNN reads ONEDNN_MAX_CPU_ISA (which hotpath's own cap sets, core/cpu.h) and the CPUID: capped to AVX2, or
// on a CPU without AVX-512 (QEMU's Haswell), no kernel is an AVX-512 one.
TEST_F(OneDnnConvTest, PicksKernelsWithinTheIsaOneDnnIsAllowed) {
  ConvGeometry g;
  g.in_channels = 32;
  g.height = g.width = 8;
  g.out_channels = 32;
  g.kernel_h = g.kernel_w = 3;
  g.padding = {1, 1, 1, 1};
  const std::vector<float> w(32 * 32 * 9, 0.01F);
  const OneDnnConv conv(g, w.data(), nullptr, {.activation = ConvActivation::kRelu, .algorithm = ConvAlgorithm::kDirect});
  const std::string impl = conv.implementation();
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const bool capped = cap != nullptr && std::string(cap).rfind("AVX2", 0) == 0;
  std::cout << "oneDNN implementation: " << impl << (capped ? " (ONEDNN_MAX_CPU_ISA=AVX2)" : "") << "\n";
  if (capped || cpu::detected_isa() < cpu::Isa::kAvx512) {
    EXPECT_EQ(impl.find("avx512"), std::string::npos) << impl;
  } else {
    EXPECT_NE(impl.find("avx512"), std::string::npos) << impl;
  }
}

}  // namespace
}  // namespace hotpath::ops
