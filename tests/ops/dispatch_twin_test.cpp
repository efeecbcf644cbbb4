// Every fast path against its reference twin at every ISA level this machine has, through the CPU
// dispatch cap (core/cpu.h): one table of ops × shapes, instantiated for scalar, avx2, avx512 and
// avx512_bf16, so an AVX-512 machine also tests the AVX2 and portable loops (and HOTPATH_MAX_ISA=avx2
// limits the run to what an AVX2 machine would do). Each row names the variant the op must pick at
// each level — the cap is honoured — and a check that compares the fast path with its twin:
//   resample, store_sample   the loops at the level vs the reference loops (scalar cap): bit for bit
//   dropout                  fused kernel vs dropout_add_reference (ATen, same mask): bit for bit
//   batch_norm_relu          fused vs ATen batch_norm + relu within 1e-4, and vs the portable loops bit for bit
//   attention                fused vs reference_attention, forward and backward: fp32 1e-5, bf16 1e-2
//   bf16_math                hotpath's conv2d/linear under bf16 autocast vs autocast's own: 1e-2
// The ops' own tests (attention_test, fused_bn_relu_test, ...) cover more shapes and behaviours.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/data/kernels/resample.h"
#include "hotpath/data/transforms.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/ops/dropout.h"
#include "hotpath/ops/fused_bn_relu.h"

namespace hotpath::cpu {
void PrintTo(Isa isa, std::ostream* out) { *out << isa_name(isa); }  // test names and messages
}  // namespace hotpath::cpu

namespace hotpath::ops {
namespace {

using cpu::Isa;

// "" when a and b agree within tol (relative to max(1, max|b|)), else what differed.
std::string compare(const std::string& what, const at::Tensor& a, const at::Tensor& b, double tol) {
  if (a.sizes() != b.sizes()) return what + ": shapes differ";
  const at::Tensor fa = a.to(at::kFloat), fb = b.to(at::kFloat);
  if (tol == 0.0) return at::equal(fa, fb) ? "" : what + ": not bit-identical";
  const double err = (fa - fb).abs().max().item<double>();
  const double scale = std::max(1.0, fb.abs().max().item<double>());
  if (err <= tol * scale && !fa.isnan().any().item<bool>()) return "";
  std::ostringstream out;
  out << what << ": max |fast - twin| = " << err << " > " << tol << " x " << scale;
  return out.str();
}

// Runs f with the cap lowered to scalar: the reference loops of the ops whose twin is their own
// portable compilation.
template <typename F>
auto at_scalar(F f) {
  const cpu::ScopedMaxIsa cap(Isa::kScalar);
  return f();
}

// ---- the checks: "" or what differed --------------------------------------------------------------

std::string check_resample() {
  std::mt19937 gen(3);
  const struct {
    int w, h, channels, out_w, out_h;
    data::Box box;
  } shapes[] = {{300, 200, 3, 224, 224, {10.5, 3.25, 250, 180, false}},
                {97, 61, 3, 33, 47, {0, 0, 97, 61, true}},
                {64, 64, 1, 100, 30, {4, 4, 50, 50, false}},
                {51, 40, 4, 17, 80, {1, 2, 40, 30, true}}};
  for (const auto& s : shapes) {
    std::vector<std::uint8_t> src(static_cast<std::size_t>(s.w) * s.h * s.channels);
    for (auto& v : src) v = static_cast<std::uint8_t>(gen());
    auto run = [&] {
      std::vector<std::uint8_t> out(static_cast<std::size_t>(s.out_w) * s.out_h * s.channels);
      data::ResampleScratch scratch;
      data::resample_bilinear(src.data(), s.w, s.h, static_cast<std::ptrdiff_t>(s.w) * s.channels, s.channels, s.box,
                              out.data(), s.out_w, s.out_h, scratch);
      return out;
    };
    if (run() != at_scalar(run)) {
      return "resample " + std::to_string(s.w) + "x" + std::to_string(s.h) + "x" + std::to_string(s.channels) +
             ": not bit-identical";
    }
  }
  return "";
}

std::string check_store_sample() {
  std::mt19937 gen(4);
  for (const int w : {1, 37, 300}) {
    for (const int channels : {1, 3}) {
      std::vector<std::uint8_t> img(static_cast<std::size_t>(w) * 2 * channels);
      for (auto& v : img) v = static_cast<std::uint8_t>(gen());
      for (auto type : {data::PixelType::kUInt8, data::PixelType::kFloat32, data::PixelType::kBFloat16}) {
        for (auto layout : {data::PixelLayout::kCHW, data::PixelLayout::kHWC}) {
          for (const bool flip : {false, true}) {
            const data::StoreFormat format{.type = type, .layout = layout};
            auto run = [&] {
              std::vector<std::uint8_t> out(img.size() * 4);
              data::store_sample(img.data(), w, 2, channels, flip, {}, format, out.data());
              return out;
            };
            if (run() != at_scalar(run)) {
              return "store_sample w " + std::to_string(w) + " channels " + std::to_string(channels) + " type " +
                     std::to_string(static_cast<int>(type)) + " layout " + std::to_string(static_cast<int>(layout)) +
                     " flip " + std::to_string(flip) + ": not bit-identical";
            }
          }
        }
      }
    }
  }
  return "";
}

std::string check_dropout() {
  at::manual_seed(5);
  const std::vector<std::vector<std::int64_t>> shapes = {{1000}, {3, 77, 129}};
  const std::pair<at::ScalarType, at::ScalarType> dtypes[] = {
      {at::kFloat, at::kFloat}, {at::kBFloat16, at::kFloat}, {at::kBFloat16, at::kBFloat16}};
  std::uint64_t seed = 1;
  for (const auto& shape : shapes) {
    for (const auto& [tx, tr] : dtypes) {
      const at::Tensor x = at::randn(shape).to(tx);
      const at::Tensor r = at::randn(shape).to(tr);
      const DropoutDraw draw{0.1, seed++, 0};
      if (dropout_skip_reason(x, r) != nullptr) return std::string("dropout: skipped: ") + dropout_skip_reason(x, r);
      const std::string what = "dropout " + std::string(c10::toString(tx)) + " + " + c10::toString(tr);
      std::string diff = compare(what, dropout_add(x, r, draw), dropout_add_reference(x, r, draw), 0.0);
      if (diff.empty()) diff = compare(what + " (no residual)", fused_dropout(x, draw), dropout_add_reference(x, {}, draw), 0.0);
      if (!diff.empty()) return diff;
    }
  }
  return "";
}

std::string check_batch_norm_relu() {
  for (const bool nhwc : {true, false}) {
    for (const std::int64_t c : {3, 32, 130}) {
      at::manual_seed(6);
      const at::Tensor x0 = at::randn({4, c, 7, 9}) * 2.0 + 0.5;
      const at::Tensor gy = at::randn({4, c, 7, 9});
      const at::Tensor w0 = at::randn({c});
      const at::Tensor b0 = at::randn({c}) * 0.5;
      auto run = [&](bool fused) {
        const at::Tensor x =
            x0.contiguous(nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous).requires_grad_(true);
        const at::Tensor w = w0.clone().requires_grad_(true);
        const at::Tensor b = b0.clone().requires_grad_(true);
        const at::Tensor rm = at::zeros({c});
        const at::Tensor rv = at::ones({c});
        const at::Tensor y = fused ? batch_norm_relu(x, w, b, rm, rv, true, 0.1, 1e-5)
                                   : at::relu(at::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, false));
        const auto g = torch::autograd::grad({y}, {x, w, b}, {gy});
        return std::vector<at::Tensor>{y.detach(), rv, g[0], g[1], g[2]};
      };
      const std::string what = std::string("batch_norm_relu ") + (nhwc ? "NHWC" : "NCHW") + " C=" + std::to_string(c);
      const auto fast = run(true);
      const auto twin = run(false);
      const auto portable = at_scalar([&] { return run(true); });
      const char* names[] = {" y", " running_var", " dx", " dw", " db"};
      for (std::size_t i = 0; i < fast.size(); ++i) {
        std::string diff = compare(what + names[i], fast[i], twin[i], 1e-4);
        if (diff.empty()) diff = compare(what + names[i] + " vs portable", fast[i], portable[i], 0.0);
        if (!diff.empty()) return diff;
      }
    }
  }
  return "";
}

std::string check_attention() {
  const struct {
    std::int64_t batch, heads, lq, lk, d;
    bool mask;
    double dropout;
  } shapes[] = {{2, 2, 77, 77, 32, true, 0.0}, {1, 2, 19, 150, 40, true, 0.1}, {2, 1, 260, 260, 64, false, 0.0}};
  std::uint64_t seed = 7;
  for (const auto& s : shapes) {
    at::manual_seed(static_cast<std::int64_t>(seed));
    const at::Tensor q0 = at::randn({s.batch, s.heads, s.lq, s.d});
    const at::Tensor k0 = at::randn({s.batch, s.heads, s.lk, s.d});
    const at::Tensor v0 = at::randn({s.batch, s.heads, s.lk, s.d});
    const at::Tensor dout = at::randn({s.batch, s.heads, s.lq, s.d});
    at::Tensor mask;
    if (s.mask) {
      mask = at::ones({s.batch, s.lk}, at::kLong);
      mask[s.batch - 1].slice(0, s.lk / 2).fill_(0);
    }
    const AttentionDropout dropout{s.dropout, seed++, 0};
    for (const at::ScalarType type : {at::kFloat, at::kBFloat16}) {
      auto run = [&](AttentionKernel kernel, at::ScalarType t) {
        const auto cast = [&](const at::Tensor& x) {  // bf16 inputs; the twin sees the same values in fp32
          return x.to(type).to(t).requires_grad_(true);
        };
        const at::Tensor q = cast(q0), k = cast(k0), v = cast(v0);
        const at::Tensor out = attention(q, k, v, mask, kernel, dropout);
        const auto g = torch::autograd::grad({out}, {q, k, v}, {dout.to(type).to(t)});
        return std::vector<at::Tensor>{out.detach(), g[0], g[1], g[2]};
      };
      const auto fast = run(AttentionKernel::kFused, type);
      const auto twin = run(AttentionKernel::kReference, at::kFloat);
      const char* names[] = {" output", " dq", " dk", " dv"};
      std::ostringstream what;
      what << "attention [" << s.batch << "," << s.heads << "," << s.lq << "x" << s.lk << "," << s.d << "] "
           << c10::toString(type) << (s.mask ? " masked" : "") << " dropout " << s.dropout;
      for (std::size_t i = 0; i < fast.size(); ++i) {
        const std::string diff = compare(what.str() + names[i], fast[i], twin[i], type == at::kFloat ? 1e-5 : 1e-2);
        if (!diff.empty()) return diff;
      }
    }
  }
  return "";
}

// Under bf16 autocast: hotpath's conv2d/linear (fp32 math on bf16-rounded operands below avx512_bf16,
// autocast's own kernels from there up) against the modules' own forward under autocast.
std::string check_bf16_math() {
  at::manual_seed(8);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(8, 16, 3).stride(2).padding(1));
  torch::nn::Linear fc(32, 24);
  const at::Tensor x = at::randn({2, 8, 12, 12});
  const at::Tensor t = at::randn({3, 5, 32});
  AutocastGuard autocast(at::kCPU, at::kBFloat16);
  if (emulates_bf16(x) != (bf16_math() == Bf16Math::kFp32)) return "bf16_math: emulates_bf16 disagrees with bf16_math()";
  std::string diff = compare("bf16_math conv2d", conv2d(*conv, x), conv->forward(x), 1e-2);
  if (diff.empty()) diff = compare("bf16_math linear", linear(*fc, t), fc->forward(t), 1e-2);
  return diff;
}

// ---- the table ----------------------------------------------------------------------------------

struct TwinCase {
  const char* op;            // its name in the dispatch report
  const char* by_level[4];   // the variant it must pick at scalar, avx2, avx512, avx512_bf16
  std::string (*check)();    // fast path vs reference twin: "" or what differed
};

const TwinCase kTable[] = {
    {"resample", {"reference", "avx2", "avx2", "avx2"}, check_resample},
    {"store_sample", {"reference", "avx2", "avx2", "avx2"}, check_store_sample},
    {"dropout", {"portable", "avx2", "avx2", "avx2"}, check_dropout},
    {"batch_norm_relu", {"portable", "avx2", "avx2", "avx2"}, check_batch_norm_relu},
    {"attention", {"portable", "avx2", "avx512", "avx512"}, check_attention},
    {"bf16_math", {"fp32", "fp32", "fp32", "native"}, check_bf16_math},
};

void PrintTo(const TwinCase& row, std::ostream* out) { *out << row.op; }

class DispatchTwin : public ::testing::TestWithParam<std::tuple<TwinCase, Isa>> {
 protected:
  void TearDown() override { cpu::reset_max_isa(); }
};

TEST_P(DispatchTwin, FastPathMatchesReferenceTwin) {
  const auto& [row, level] = GetParam();
  cpu::reset_max_isa();
  if (const std::string why = cpu::isa_skip_reason(level); !why.empty()) GTEST_SKIP() << why;
  cpu::set_max_isa(level);
  const cpu::Choice* choice = nullptr;
  const std::vector<cpu::Choice> choices = cpu::dispatch_choices();
  for (const cpu::Choice& c : choices) {
    if (c.op == row.op) choice = &c;
  }
  ASSERT_NE(choice, nullptr) << row.op << " is not in the dispatch report";
  // HOTPATH_BF16_MATH may force bf16_math's variant; builds without x86 kernels (clang) run portable ones.
  if (choice->reason.rfind("forced by ", 0) != 0 && cpu::kX86Kernels) {
    EXPECT_EQ(choice->variant, row.by_level[static_cast<int>(level)]) << choice->reason;
  }
  EXPECT_EQ(row.check(), "") << "at " << cpu::isa_name(level) << ": " << choice->variant << " " << choice->reason;
}

INSTANTIATE_TEST_SUITE_P(Table, DispatchTwin,
                         ::testing::Combine(::testing::ValuesIn(kTable),
                                            ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16)),
                         [](const auto& param_info) {
                           const TwinCase& row = std::get<0>(param_info.param);
                           return std::string(row.op) + "_" + cpu::isa_name(std::get<1>(param_info.param));
                         });

// Every op with an ISA choice is in the table (a new OpDispatch needs a row here).
TEST(DispatchTwin, TableCoversEveryRegisteredOp) {
  for (const cpu::Choice& c : cpu::dispatch_choices()) {
    bool found = false;
    for (const TwinCase& row : kTable) found = found || c.op == row.op;
    EXPECT_TRUE(found) << c.op << " has no twin row";
  }
}

}  // namespace
}  // namespace hotpath::ops
