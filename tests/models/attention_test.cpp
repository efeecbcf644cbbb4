// Fused attention against the plain ATen reference: outputs and q/k/v gradients in fp32 and bf16,
// with and without padding masks (a fully masked sequence too), lengths off the tile sizes, head_dim
// 32/64/odd, batch > 1, every ISA compilation this CPU runs, and the kernel switch and fallbacks.
#include "hotpath/models/attention.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "models/model_test_support.h"

namespace hotpath::models {
namespace {

struct Case {
  std::int64_t batch, heads, lq, lk, d;
  bool mask;
  std::int64_t last_keeps = 0;  // > 0: the last sequence keeps only this many keys (blocks of padding)
};

std::string describe(const Case& c, at::ScalarType type) {
  std::ostringstream out;
  out << "[" << c.batch << "," << c.heads << "," << c.lq << "x" << c.lk << "," << c.d << "] "
      << (c.mask ? "masked " : "") << c10::toString(type) << " on " << attention_kernel_name();
  return out.str();
}

// Sequence b keeps its first lk - 7·b keys (at least one): right padding as a BERT batch has it.
at::Tensor padding_mask(std::int64_t batch, std::int64_t lk) {
  at::Tensor mask = at::ones({batch, lk}, at::kLong);
  for (std::int64_t b = 1; b < batch; ++b) mask[b].slice(0, std::max<std::int64_t>(1, lk - 7 * b)).fill_(0);
  return mask;
}

struct Inputs {
  at::Tensor q, k, v, mask, dout;
};

Inputs make_inputs(const Case& c, std::uint64_t seed) {
  at::manual_seed(seed);
  Inputs in;
  in.q = at::randn({c.batch, c.heads, c.lq, c.d});
  in.k = at::randn({c.batch, c.heads, c.lk, c.d});
  in.v = at::randn({c.batch, c.heads, c.lk, c.d});
  in.dout = at::randn({c.batch, c.heads, c.lq, c.d});
  if (c.mask) in.mask = padding_mask(c.batch, c.lk);
  if (c.last_keeps > 0) in.mask[c.batch - 1].slice(0, c.last_keeps).fill_(0);
  return in;
}

// Output and gradients of `kernel` on copies of the inputs cast to `type`, returned as fp32.
std::vector<at::Tensor> run(const Inputs& in, at::ScalarType type, AttentionKernel kernel) {
  at::Tensor q = in.q.to(type).requires_grad_();
  at::Tensor k = in.k.to(type).requires_grad_();
  at::Tensor v = in.v.to(type).requires_grad_();
  at::Tensor out = attention(q, k, v, in.mask, kernel);
  EXPECT_EQ(out.scalar_type(), type);
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {in.dout.to(type)});
  return {out.to(at::kFloat), grads[0].to(at::kFloat), grads[1].to(at::kFloat), grads[2].to(at::kFloat)};
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got - want).abs().max().item<double>();
  const double scale = std::max(1.0, want.abs().max().item<double>());
  EXPECT_LE(err, tol * scale) << what << ": max |fused - reference| = " << err << " (scale " << scale << ")";
  EXPECT_FALSE(got.isnan().any().item<bool>()) << what;
}

// fp32: fused vs reference within 1e-5. bf16: fused (fp32 math on bf16 inputs, bf16 result) vs the
// fp32 reference on the same bf16 values within 1e-2 — the bf16 reference itself rounds its scores
// and probabilities to bf16 and is the less accurate of the two.
void check_case(const Case& c, std::uint64_t seed) {
  const Inputs in = make_inputs(c, seed);
  const char* names[] = {"output", "dq", "dk", "dv"};
  {
    const auto fused = run(in, at::kFloat, AttentionKernel::kFused);
    const auto ref = run(in, at::kFloat, AttentionKernel::kReference);
    for (int i = 0; i < 4; ++i) expect_close(fused[i], ref[i], 1e-5, describe(c, at::kFloat) + " " + names[i]);
  }
  {
    Inputs rounded{in.q.to(at::kBFloat16).to(at::kFloat), in.k.to(at::kBFloat16).to(at::kFloat),
                   in.v.to(at::kBFloat16).to(at::kFloat), in.mask, in.dout.to(at::kBFloat16).to(at::kFloat)};
    const auto fused = run(in, at::kBFloat16, AttentionKernel::kFused);
    const auto ref = run(rounded, at::kFloat, AttentionKernel::kReference);
    for (int i = 0; i < 4; ++i) expect_close(fused[i], ref[i], 1e-2, describe(c, at::kBFloat16) + " " + names[i]);
  }
}

const std::vector<Case> kCases = {
    {2, 3, 40, 40, 64, false},    // one tile, batch > 1
    {2, 2, 77, 77, 32, true},     // odd length, padding mask
    {3, 2, 131, 131, 64, true},   // past one key block (128) and two backward tiles (64)
    {1, 2, 19, 150, 40, true},    // Lq != Lk, head_dim not a multiple of the 32-float padding
    {2, 1, 260, 260, 32, false},  // several forward key blocks: the online rescale
    {2, 1, 40, 300, 32, true, 20},  // whole blocks of padding keys, skipped forward and backward
};

class AttentionIsaTest : public ::testing::TestWithParam<AttentionIsa> {
 protected:
  void SetUp() override {
    try {
      set_attention_isa(GetParam());
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();  // this CPU lacks the instructions (AVX-512 on the AVX2 dev machine)
    }
  }
  void TearDown() override { set_attention_isa(AttentionIsa::kAuto); }
};

TEST_P(AttentionIsaTest, MatchesReferenceForwardAndBackward) {
  std::uint64_t seed = 1;
  for (const Case& c : kCases) check_case(c, seed++);
}

TEST_P(AttentionIsaTest, FullyMaskedSequenceAveragesValuesWithoutQkGradient) {
  const Case c{3, 2, 21, 21, 32, true};
  Inputs in = make_inputs(c, 7);
  in.mask[1].fill_(0);  // every key of sequence 1 masked
  const auto fused = run(in, at::kFloat, AttentionKernel::kFused);
  const auto ref = run(in, at::kFloat, AttentionKernel::kReference);
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) expect_close(fused[i], ref[i], 1e-5, std::string("fully masked ") + names[i]);
  // What the reference gives: each query of sequence 1 gets the mean of its values; q, k get nothing.
  const at::Tensor mean_v = in.v[1].mean(-2, /*keepdim=*/true).expand({c.heads, c.lq, c.d});
  expect_close(fused[0][1], mean_v, 1e-5, "fully masked output = mean of v");
  EXPECT_EQ(fused[1][1].abs().max().item<float>(), 0.0F);
  EXPECT_EQ(fused[2][1].abs().max().item<float>(), 0.0F);
  EXPECT_GT(fused[1][0].abs().max().item<float>(), 0.0F);  // the other sequences do get gradients
}

INSTANTIATE_TEST_SUITE_P(Isa, AttentionIsaTest,
                         ::testing::Values(AttentionIsa::kAuto, AttentionIsa::kPortable, AttentionIsa::kAvx2,
                                           AttentionIsa::kAvx512),
                         [](const auto& param_info) {
                           switch (param_info.param) {
                             case AttentionIsa::kAuto: return std::string("Auto");
                             case AttentionIsa::kPortable: return std::string("Portable");
                             case AttentionIsa::kAvx2: return std::string("Avx2");
                             case AttentionIsa::kAvx512: return std::string("Avx512");
                           }
                           return std::string("Unknown");
                         });

TEST(Attention, MaskDtypesAgree) {
  const Case c{2, 2, 33, 33, 32, true};
  const Inputs in = make_inputs(c, 3);
  const at::Tensor want = fused_attention(in.q, in.k, in.v, in.mask);
  for (auto type : {at::kBool, at::kInt, at::kFloat}) {
    const at::Tensor got = fused_attention(in.q, in.k, in.v, in.mask.to(type));
    EXPECT_TRUE(at::equal(got, want)) << c10::toString(type);
  }
  // A mask of ones is no mask.
  EXPECT_TRUE(at::allclose(fused_attention(in.q, in.k, in.v, at::ones({2, 33}, at::kBool)),
                           fused_attention(in.q, in.k, in.v, at::Tensor()), 1e-6, 1e-6));
}

TEST(Attention, NonContiguousInputsAreAccepted) {
  const Case c{2, 3, 24, 24, 32, false};
  const Inputs in = make_inputs(c, 4);
  // [B, L, H, d] transposed to [B, H, L, d]: how a model's projection output arrives.
  const at::Tensor q = in.q.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_FALSE(q.is_contiguous());
  EXPECT_TRUE(at::allclose(fused_attention(q, in.k, in.v, in.mask), reference_attention(in.q, in.k, in.v, in.mask),
                           1e-5, 1e-5));
}

TEST(Attention, AutoFallsBackToReferenceForOtherDtypes) {
  const Case c{1, 2, 10, 10, 16, true};
  const Inputs in = make_inputs(c, 5);
  const at::Tensor q = in.q.to(at::kDouble);
  const at::Tensor k = in.k.to(at::kDouble);
  const at::Tensor v = in.v.to(at::kDouble);
  EXPECT_STREQ(attention_skip_reason(q, k, v, in.mask), "dtype is neither float32 nor bfloat16");
  EXPECT_TRUE(at::equal(fused_attention(q, k, v, in.mask), reference_attention(q, k, v, in.mask)));
  EXPECT_THROW(attention(q, k, v, in.mask, AttentionKernel::kFused), Error);
  EXPECT_EQ(attention_skip_reason(in.q, in.k, in.v, in.mask), nullptr);
  EXPECT_NE(attention_skip_reason(in.q, in.k.to(at::kBFloat16), in.v, in.mask), nullptr);
}

TEST(Attention, BadShapesThrowWhicheverKernel) {
  const at::Tensor q = at::randn({2, 2, 8, 16});
  for (auto kernel : {AttentionKernel::kReference, AttentionKernel::kFused, AttentionKernel::kAuto}) {
    EXPECT_THROW(attention(q, at::randn({2, 2, 8, 8}), at::randn({2, 2, 8, 8}), {}, kernel), Error);
    EXPECT_THROW(attention(q, q, q, at::ones({2, 9}), kernel), Error);
    EXPECT_THROW(attention(q[0], q[0], q[0], {}, kernel), Error);
  }
}

TEST(Attention, KernelNameSaysWhichLoopsRun) {
  const std::string name = attention_kernel_name();
  EXPECT_TRUE(name.rfind("avx512", 0) == 0 || name.rfind("avx2", 0) == 0 || name.rfind("portable", 0) == 0) << name;
  EXPECT_EQ(name.find("serial"), std::string::npos) << "built without OpenMP: " << name;
  set_attention_isa(AttentionIsa::kPortable);
  EXPECT_EQ(std::string(attention_kernel_name()).rfind("portable: pinned", 0), 0U);
  set_attention_isa(AttentionIsa::kAuto);
}

TEST(Attention, RunsUnderNoGradAndInferenceMode) {
  const Case c{2, 2, 30, 30, 32, true};
  const Inputs in = make_inputs(c, 8);
  const at::Tensor want = reference_attention(in.q, in.k, in.v, in.mask);
  {
    at::NoGradGuard no_grad;
    const at::Tensor q = in.q.clone().requires_grad_();
    const at::Tensor out = fused_attention(q, in.k, in.v, in.mask);
    EXPECT_FALSE(out.requires_grad());
    EXPECT_TRUE(at::allclose(out, want, 1e-5, 1e-5));
  }
  {
    c10::InferenceMode inference;
    const at::Tensor q = in.q.clone();
    EXPECT_TRUE(at::allclose(fused_attention(q, in.k.clone(), in.v.clone(), in.mask), want, 1e-5, 1e-5));
  }
}

TEST(Attention, SameResultWhateverTheThreadCount) {
  const Case c{2, 4, 70, 70, 64, true};
  const Inputs in = make_inputs(c, 6);
  const auto one = run(in, at::kFloat, AttentionKernel::kFused);
  at::set_num_threads(2);
  const auto two = run(in, at::kFloat, AttentionKernel::kFused);
  at::set_num_threads(1);
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << i;
}

}  // namespace
}  // namespace hotpath::models
