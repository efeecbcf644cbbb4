// Fused attention against the plain ATen reference: outputs and q/k/v gradients in fp32 and bf16,
// with and without padding masks (a fully masked sequence too), lengths off the tile sizes, head_dim
// 32/64/odd, batch > 1, every ISA level this CPU has (through the dispatch cap), and the kernel switch
// and fallbacks.
// Dropout on the probabilities: fused vs reference with the same mask (p 0.1 and 0.5), the mask's
// statistics and its dependence on seed, offset and coordinates only, seeds from the default generator.
#include "hotpath/ops/attention.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "models/model_test_support.h"
#include "ops/isa_param_test.h"

namespace hotpath::ops {
namespace {

struct Case {
  std::int64_t batch, heads, lq, lk, d;
  bool mask;
  std::int64_t last_keeps = 0;  // > 0: the last sequence keeps only this many keys (blocks of padding)
};

std::string describe(const Case& c, at::ScalarType type, const AttentionDropout& dropout = {}) {
  std::ostringstream out;
  out << "[" << c.batch << "," << c.heads << "," << c.lq << "x" << c.lk << "," << c.d << "] "
      << (c.mask ? "masked " : "") << c10::toString(type) << " on " << attention_kernel_name();
  if (dropout.p > 0.0) out << " dropout " << dropout.p;
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
std::vector<at::Tensor> run(const Inputs& in, at::ScalarType type, AttentionKernel kernel,
                            const AttentionDropout& dropout = {}) {
  at::Tensor q = in.q.to(type).requires_grad_();
  at::Tensor k = in.k.to(type).requires_grad_();
  at::Tensor v = in.v.to(type).requires_grad_();
  at::Tensor out = attention(q, k, v, in.mask, kernel, dropout);
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
void check_case(const Case& c, std::uint64_t seed, const AttentionDropout& dropout = {}) {
  const Inputs in = make_inputs(c, seed);
  const char* names[] = {"output", "dq", "dk", "dv"};
  {
    const auto fused = run(in, at::kFloat, AttentionKernel::kFused, dropout);
    const auto ref = run(in, at::kFloat, AttentionKernel::kReference, dropout);
    for (int i = 0; i < 4; ++i)
      expect_close(fused[i], ref[i], 1e-5, describe(c, at::kFloat, dropout) + " " + names[i]);
  }
  {
    Inputs rounded{in.q.to(at::kBFloat16).to(at::kFloat), in.k.to(at::kBFloat16).to(at::kFloat),
                   in.v.to(at::kBFloat16).to(at::kFloat), in.mask, in.dout.to(at::kBFloat16).to(at::kFloat)};
    const auto fused = run(in, at::kBFloat16, AttentionKernel::kFused, dropout);
    const auto ref = run(rounded, at::kFloat, AttentionKernel::kReference, dropout);
    for (int i = 0; i < 4; ++i)
      expect_close(fused[i], ref[i], 1e-2, describe(c, at::kBFloat16, dropout) + " " + names[i]);
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

// Every ISA level this CPU has, through the dispatch cap (core/cpu.h): an AVX-512 machine also runs
// the AVX2 and portable loops.
class AttentionIsaTest : public test::IsaParamTest<&attention_kernel_name> {};

TEST_P(AttentionIsaTest, MatchesReferenceForwardAndBackward) {
  std::uint64_t seed = 1;
  for (const Case& c : kCases) check_case(c, seed++);
}

// The same cases with dropout: the reference applies attention_dropout_mask, the kernels hash it again
// (forward and backward), so any disagreement between the three shows up here.
TEST_P(AttentionIsaTest, DropoutMatchesReferenceForwardAndBackward) {
  std::uint64_t seed = 11;
  for (const double p : {0.1, 0.5}) {
    for (const Case& c : kCases) {
      check_case(c, seed, AttentionDropout{p, /*seed=*/seed * 977, /*offset=*/seed % 3});
      ++seed;
    }
  }
  // A fully masked sequence (uniform probabilities) is dropped out like any other.
  const Case c{3, 2, 21, 21, 32, true};
  Inputs in = make_inputs(c, 7);
  in.mask[1].fill_(0);
  const AttentionDropout dropout{0.3, 5, 0};
  const auto fused = run(in, at::kFloat, AttentionKernel::kFused, dropout);
  const auto ref = run(in, at::kFloat, AttentionKernel::kReference, dropout);
  for (int i = 0; i < 4; ++i) expect_close(fused[i], ref[i], 1e-5, "fully masked, dropout 0.3: " + std::to_string(i));
}

// The hash as attention.cpp defines it, one element at a time: splitmix64's finaliser keys each head
// and row, two lowbias32 rounds make the key's bits.
std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
std::uint32_t lowbias32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  return x ^ (x >> 16);
}
// Keys pair up within blocks of 32: key 32g + t and key 32g + 16 + t (t < 16) share the hash of
// counter 16g + t, the first taking its low 16 bits, the second its high 16 bits.
bool scalar_keep(const AttentionDropout& d, std::uint64_t b, std::uint64_t h, std::uint64_t i, std::uint64_t j) {
  const std::uint64_t head = mix64(mix64(mix64(mix64(d.seed) ^ d.offset) ^ b) ^ h);
  const std::uint64_t row = mix64(head ^ i);
  const auto counter = static_cast<std::uint32_t>(j / 32 * 16 + j % 16);
  const std::uint32_t bits =
      lowbias32(lowbias32(counter + static_cast<std::uint32_t>(row)) ^ static_cast<std::uint32_t>(row >> 32));
  const std::uint32_t half = j % 32 < 16 ? bits & 0xFFFFU : bits >> 16;
  return half >= static_cast<std::uint32_t>(std::round(d.p * 65536.0));
}

// Every ISA's vector hash gives the scalar definition's mask, tails (lk not a multiple of 16) included.
TEST_P(AttentionIsaTest, DropoutMaskIsTheScalarHash) {
  const AttentionDropout dropout{0.25, 1234, 7};
  const at::Tensor keep = attention_dropout_mask(dropout, 2, 3, 37, 70);
  const auto k = keep.accessor<bool, 4>();
  std::int64_t wrong = 0;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t i = 0; i < 37; ++i)
        for (std::int64_t j = 0; j < 70; ++j)
          wrong += k[b][h][i][j] != scalar_keep(dropout, static_cast<std::uint64_t>(b), static_cast<std::uint64_t>(h),
                                               static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(j));
  EXPECT_EQ(wrong, 0) << "of " << keep.numel() << " on " << attention_kernel_name();
}

// Keyed by global sample index (data parallel): every ISA's fused forward and backward apply the
// reference's keyed mask; the mask of row b is the scalar hash of sample_index[b], not of b.
TEST_P(AttentionIsaTest, KeyedDropoutMatchesReferenceAndKeysRowsBySample) {
  const at::Tensor samples = at::tensor(std::vector<std::int64_t>{1001, 7, 52}, at::kLong);
  const AttentionDropout keyed{0.3, 41, 2, samples};
  check_case(Case{3, 2, 77, 77, 32, true}, 21, keyed);
  const at::Tensor keep = attention_dropout_mask(keyed, 3, 2, 9, 40);
  const auto k = keep.accessor<bool, 4>();
  std::int64_t wrong = 0;
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 9; ++i)
        for (std::int64_t j = 0; j < 40; ++j)
          wrong += k[b][h][i][j] != scalar_keep(keyed, static_cast<std::uint64_t>(samples[b].item<std::int64_t>()),
                                               static_cast<std::uint64_t>(h), static_cast<std::uint64_t>(i),
                                               static_cast<std::uint64_t>(j));
  EXPECT_EQ(wrong, 0) << "of " << keep.numel() << " on " << attention_kernel_name();
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

INSTANTIATE_TEST_SUITE_P(Isa, AttentionIsaTest, test::isa_levels(), test::isa_test_name);

// ---- dropout ----------------------------------------------------------------------------------------

double kept_fraction(const at::Tensor& keep) { return keep.to(at::kDouble).mean().item<double>(); }

// The kept fraction is 1 − p overall, per key position and per query row, and neighbouring rows and
// keys are independent (both kept ≈ (1 − p)²): 6σ bounds, so a wrong threshold or a hash that repeats
// along a row or across rows fails.
TEST(AttentionDropout, KeptFractionIsOneMinusPAndElementsAreIndependent) {
  for (const double p : {0.1, 0.5}) {
    const at::Tensor keep = attention_dropout_mask(AttentionDropout{p, 42, 0}, 4, 4, 64, 256).to(at::kDouble);
    const double n = static_cast<double>(keep.numel());
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(keep.mean().item<double>(), 1 - p, 6 * sigma) << "p " << p;
    // Per key position (1024 rows each) and per query row (256 keys each).
    const double col_sigma = std::sqrt(p * (1 - p) / 1024.0);
    const at::Tensor per_key = keep.mean({0, 1, 2});
    EXPECT_LE((per_key - (1 - p)).abs().max().item<double>(), 6 * col_sigma) << "p " << p;
    const double row_sigma = std::sqrt(p * (1 - p) / 256.0);
    const at::Tensor per_row = keep.mean(-1);
    EXPECT_LE((per_row - (1 - p)).abs().max().item<double>(), 6 * row_sigma) << "p " << p;
    // Pairs: neighbouring keys, neighbouring queries, neighbouring heads.
    const double both = (1 - p) * (1 - p);
    const double pair_sigma = std::sqrt(both * (1 - both) / (n / 2));
    const auto pair = [&](const at::Tensor& a, const at::Tensor& b) { return (a * b).mean().item<double>(); };
    EXPECT_NEAR(pair(keep.narrow(3, 0, 255), keep.narrow(3, 1, 255)), both, 6 * pair_sigma) << "keys, p " << p;
    // Keys 16 apart within a block of 32 share one hash (its two halves): still independent.
    const at::Tensor blocks = keep.view({4, 4, 64, 8, 2, 16});
    EXPECT_NEAR(pair(blocks.select(4, 0), blocks.select(4, 1)), both, 6 * pair_sigma) << "hash halves, p " << p;
    EXPECT_NEAR(pair(keep.narrow(2, 0, 63), keep.narrow(2, 1, 63)), both, 6 * pair_sigma) << "queries, p " << p;
    EXPECT_NEAR(pair(keep.narrow(1, 0, 3), keep.narrow(1, 1, 3)), both, 6 * pair_sigma) << "heads, p " << p;
  }
}

TEST(AttentionDropout, SeedAndOffsetSelectTheMaskCoordinatesFixIt) {
  const AttentionDropout base{0.1, 99, 3};
  const at::Tensor keep = attention_dropout_mask(base, 2, 2, 40, 50);
  EXPECT_TRUE(at::equal(keep, attention_dropout_mask(base, 2, 2, 40, 50)));  // same seed, same mask
  // Another seed or offset: a fresh mask, differing where exactly one of the two drops (≈ 2p(1−p)).
  for (const AttentionDropout& other : {AttentionDropout{0.1, 100, 3}, AttentionDropout{0.1, 99, 4}}) {
    const double differ = kept_fraction(keep != attention_dropout_mask(other, 2, 2, 40, 50));
    EXPECT_NEAR(differ, 2 * 0.1 * 0.9, 0.04) << other.seed << "/" << other.offset;
  }
  // Batches and heads differ from each other.
  EXPECT_GT(kept_fraction(keep[0][0] != keep[0][1]), 0.1);
  EXPECT_GT(kept_fraction(keep[0][0] != keep[1][0]), 0.1);
  // An element's fate depends on its (b, h, i, j) only: a larger shape holds this one as a corner, so
  // a sequence keeps its mask whatever the batch's padded length.
  const at::Tensor larger = attention_dropout_mask(base, 3, 4, 70, 130);
  EXPECT_TRUE(at::equal(larger.slice(0, 0, 2).slice(1, 0, 2).slice(2, 0, 40).slice(3, 0, 50), keep));
  // p = 0 keeps everything.
  EXPECT_TRUE(attention_dropout_mask(AttentionDropout{0.0, 99, 3}, 1, 1, 4, 4).all().item<bool>());
}

// Data parallel: the masks of a batch of 2B rows keyed by their global sample indices are the masks of its
// two halves keyed alike, whatever order the rows come in and whatever length each half is padded to; so
// are the fused kernel's outputs and gradients on the real (unpadded) positions.
TEST(AttentionDropout, KeyedBatchEqualsItsHalvesAtAnyPadding) {
  const std::vector<std::int64_t> g = {40, 3, 17, 8, 1000, 26};
  const at::Tensor all = at::tensor(g, at::kLong);
  const AttentionDropout full{0.2, 77, 5, all};
  const at::Tensor keep = attention_dropout_mask(full, 6, 2, 30, 30);
  // First half padded to 21, second half reversed and padded to 45.
  const at::Tensor first = attention_dropout_mask({0.2, 77, 5, all.slice(0, 0, 3).clone()}, 3, 2, 21, 21);
  EXPECT_TRUE(at::equal(first, keep.slice(0, 0, 3).slice(2, 0, 21).slice(3, 0, 21)));
  const at::Tensor reversed = all.slice(0, 3, 6).flip(0).contiguous();
  const at::Tensor second = attention_dropout_mask({0.2, 77, 5, reversed}, 3, 2, 45, 45);
  EXPECT_TRUE(at::equal(second.slice(2, 0, 30).slice(3, 0, 30), keep.slice(0, 3, 6).flip(0)));
  // Unkeyed, row b is keyed by b: the same batch split differs from the whole (what ranks got before).
  const at::Tensor flat_second = attention_dropout_mask({0.2, 77, 5}, 3, 2, 30, 30);
  EXPECT_FALSE(at::equal(flat_second, keep.slice(0, 3, 6)));
  // Sample index b is the unkeyed form: keys only rename the rows.
  EXPECT_TRUE(at::equal(attention_dropout_mask({0.2, 77, 5, at::arange(3, at::kLong)}, 3, 2, 30, 30), flat_second));

  // The fused kernel, forward and backward: sequences of length 13 in a batch padded to 30 and to 19.
  at::manual_seed(4);
  const at::Tensor q = at::randn({6, 2, 30, 16});
  const at::Tensor k = at::randn({6, 2, 30, 16});
  const at::Tensor v = at::randn({6, 2, 30, 16});
  at::Tensor mask = at::zeros({6, 30}, at::kLong);
  mask.slice(1, 0, 13).fill_(1);
  const auto grads_of = [&](const at::Tensor& rows, std::int64_t length, const at::Tensor& samples) {
    std::vector<at::Tensor> in;
    for (const at::Tensor& t : {q, k, v}) in.push_back(t.index_select(0, rows).slice(2, 0, length).contiguous().requires_grad_());
    const at::Tensor m = mask.index_select(0, rows).slice(1, 0, length).contiguous();
    const at::Tensor out = attention(in[0], in[1], in[2], m, AttentionKernel::kFused, {0.2, 77, 5, samples});
    const at::Tensor real = out.slice(2, 0, 13);
    const auto grads = torch::autograd::grad({real}, in, {at::ones_like(real)});
    return std::vector<at::Tensor>{real, grads[0].slice(2, 0, 13), grads[1].slice(2, 0, 13), grads[2].slice(2, 0, 13)};
  };
  const auto whole = grads_of(at::arange(6, at::kLong), 30, all);
  const at::Tensor rows = at::tensor(std::vector<std::int64_t>{5, 4, 3}, at::kLong);
  const auto half = grads_of(rows, 19, reversed);
  for (int i = 0; i < 4; ++i) expect_close(half[i], whole[i].index_select(0, rows), 1e-5, "keyed half " + std::to_string(i));
  // A sample index per batch row, or one line saying so.
  EXPECT_THROW(attention(q, k, v, mask, AttentionKernel::kFused, {0.2, 77, 5, all.slice(0, 0, 4).clone()}), Error);
  EXPECT_THROW(attention(q, k, v, mask, AttentionKernel::kFused, {0.2, 77, 5, all.to(at::kInt)}), Error);
}

TEST(AttentionDropout, SeedsComeFromTheDefaultGenerator) {
  at::manual_seed(5);
  const AttentionDropout first = AttentionDropout::from_generator(0.1);
  const AttentionDropout second = AttentionDropout::from_generator(0.1);
  EXPECT_NE(first.seed, second.seed);
  at::manual_seed(5);
  EXPECT_EQ(AttentionDropout::from_generator(0.0).seed, 0U);  // p = 0 draws nothing ...
  EXPECT_EQ(AttentionDropout::from_generator(0.1).seed, first.seed);  // ... so the stream is unchanged
  // fused_attention(…, p) = attention(…, kAuto, that draw): repeatable under at::manual_seed.
  const Case c{2, 2, 30, 30, 32, true};
  const Inputs in = make_inputs(c, 9);
  at::manual_seed(8);
  const at::Tensor once = fused_attention(in.q, in.k, in.v, in.mask, 0.2);
  at::manual_seed(8);
  const at::Tensor again = fused_attention(in.q, in.k, in.v, in.mask, 0.2);
  at::manual_seed(8);
  const AttentionDropout drawn = AttentionDropout::from_generator(0.2);
  EXPECT_TRUE(at::equal(once, again));
  EXPECT_TRUE(at::equal(once, attention(in.q, in.k, in.v, in.mask, AttentionKernel::kFused, drawn)));
  EXPECT_FALSE(at::allclose(once, fused_attention(in.q, in.k, in.v, in.mask, 0.2), 1e-3, 1e-3));  // next draw
  EXPECT_FALSE(at::allclose(once, fused_attention(in.q, in.k, in.v, in.mask), 1e-3, 1e-3));
}

TEST(AttentionDropout, ZeroIsNoDropoutAndBadProbabilitiesThrow) {
  const Case c{2, 2, 30, 30, 32, true};
  const Inputs in = make_inputs(c, 10);
  const auto plain = run(in, at::kFloat, AttentionKernel::kFused);
  const auto zero = run(in, at::kFloat, AttentionKernel::kFused, AttentionDropout{0.0, 77, 1});
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::equal(plain[i], zero[i])) << i;
  for (const double p : {-0.1, 1.0, std::numeric_limits<double>::quiet_NaN()}) {
    for (auto kernel : {AttentionKernel::kReference, AttentionKernel::kFused, AttentionKernel::kAuto})
      EXPECT_THROW(attention(in.q, in.k, in.v, in.mask, kernel, AttentionDropout{p, 1, 0}), Error) << p;
    EXPECT_THROW(AttentionDropout::from_generator(p), Error) << p;
  }
}

// The fallback (double here; CUDA likewise) applies the same mask as the kernels.
TEST(AttentionDropout, ReferenceFallbackAppliesTheSameMask) {
  const Case c{1, 2, 20, 20, 16, true};
  const Inputs in = make_inputs(c, 12);
  const AttentionDropout dropout{0.4, 3, 0};
  const at::Tensor dropped = attention(in.q.to(at::kDouble), in.k.to(at::kDouble), in.v.to(at::kDouble), in.mask,
                                       AttentionKernel::kAuto, dropout);
  const at::Tensor fused = attention(in.q, in.k, in.v, in.mask, AttentionKernel::kFused, dropout);
  EXPECT_TRUE(at::allclose(dropped.to(at::kFloat), fused, 1e-5, 1e-5));
}

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
  const cpu::ScopedMaxIsa cap(cpu::Isa::kScalar);
  const std::string capped = attention_kernel_name();
  EXPECT_EQ(capped.rfind("portable", 0), 0U) << capped;
  if (cpu::detected_isa() >= cpu::Isa::kAvx2 && std::getenv("HOTPATH_MAX_ISA") == nullptr) {
    EXPECT_NE(capped.find("capped by set_max_isa(scalar)"), std::string::npos) << capped;
  }
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
  for (const double p : {0.0, 0.1}) {
    const AttentionDropout dropout{p, 21, 0};
    const auto one = run(in, at::kFloat, AttentionKernel::kFused, dropout);
    at::set_num_threads(2);
    const auto two = run(in, at::kFloat, AttentionKernel::kFused, dropout);
    at::set_num_threads(1);
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << i << " p " << p;
  }
}

}  // namespace
}  // namespace hotpath::ops
