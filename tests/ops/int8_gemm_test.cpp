#include "hotpath/ops/int8_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"

namespace hotpath::ops {
namespace {

using cpu::Isa;

std::vector<Isa> levels() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (cpu::allows(isa)) out.push_back(isa);
  }
  return out;
}

// The exact product in double (sums far below 2^53), as int32.
at::Tensor exact(const at::Tensor& a, const at::Tensor& b) {
  return a.to(at::kDouble).mm(b.to(at::kDouble)).to(at::kInt);
}

at::Tensor run(const at::Tensor& a, const Int8PackedB& b) {
  at::Tensor c = at::full({a.size(0), b.n}, -7, at::kInt);  // every element must be written
  int8_gemm_out(a, b, c);
  return c;
}

// a · b from the packed b equals the exact product at every ISA level this machine allows.
void expect_exact_at_every_isa(const at::Tensor& a, const at::Tensor& b, const Int8PackedB& packed) {
  const at::Tensor want = exact(a, b);
  for (const Isa isa : levels()) {
    const cpu::ScopedMaxIsa cap(isa);
    SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " " + std::to_string(a.size(0)) + "x" + std::to_string(a.size(1)) +
                 "x" + std::to_string(b.size(1)));
    EXPECT_TRUE(at::equal(run(a, packed), want));
  }
}

// K and N not multiples of the 4 × 16 packing, M not of the 4/8-row micro-kernels; A holds -128.
TEST(Int8Gemm, EqualsTheExactProductForOddShapesAtEveryIsa) {
  for (const auto& [m, k, n] : {std::tuple{1, 1, 1}, {3, 5, 17}, {13, 768, 40}, {67, 130, 33}, {129, 768, 768},
                                {9, 3, 100}, {200, 64, 16}}) {
    at::manual_seed(m * 1000 + k + n);
    const at::Tensor a = at::randint(-128, 128, {m, k}, at::kChar);
    const at::Tensor b = at::randint(-127, 128, {k, n}, at::kChar);
    const Int8PackedB packed = int8_gemm_pack(b);
    EXPECT_EQ(packed.k, k);
    EXPECT_EQ(packed.n, n);
    expect_exact_at_every_isa(a, b, packed);
  }
}

// 7-bit weights (|b| ≤ 63) take the AVX2 kernel's u8·s8 product, a + 128 against b with −128·Σb preloaded: the
// same exact sums for odd shapes (the K tail outside the correction), A at -128 and 127, b at ±63.
TEST(Int8Gemm, SevenBitWeightsTakeTheU8ProductWithTheSameExactSumsAtEveryIsa) {
  for (const auto& [m, k, n] : {std::tuple{1, 1, 1}, {3, 5, 17}, {13, 768, 40}, {67, 130, 33}, {9, 3, 100},
                                {200, 64, 16}, {6, 3071, 50}}) {
    at::manual_seed(m * 7 + k + n);
    at::Tensor a = at::randint(-128, 128, {m, k}, at::kChar);
    a[0].fill_(-128);
    if (m > 1) a[1].fill_(127);
    at::Tensor b = at::randint(-63, 64, {k, n}, at::kChar);
    b.select(1, 0).fill_(k % 2 == 0 ? 63 : -63);
    const Int8PackedB packed = int8_gemm_pack(b);
    EXPECT_TRUE(packed.seven_bit);
    expect_exact_at_every_isa(a, b, packed);
  }
  EXPECT_FALSE(int8_gemm_pack(at::full({4, 4}, 64, at::kChar)).seven_bit);
  EXPECT_FALSE(int8_gemm_pack(at::full({4, 4}, -64, at::kChar)).seven_bit);
  const cpu::ScopedMaxIsa avx2(Isa::kAvx2);
  EXPECT_EQ(int8_gemm_prefers_seven_bit_weights(), cpu::allows(Isa::kAvx2));
}

// The largest products at every position: |a| = 128 and 127 against b = ±127 over K = 4096. A pair of
// products is 2·128·127 = 32512 < 2^15: the int16 step of vpmaddubsw never saturates.
TEST(Int8Gemm, ExtremeValuesNeverSaturate) {
  const std::int64_t k = 4096;
  at::Tensor a = at::empty({4, k}, at::kChar);
  a[0].fill_(-128);
  a[1].fill_(127);
  a[2].copy_(at::arange(k).remainder(2).mul(255).sub(128).to(at::kChar));  // -128, 127, -128, ...
  a[3].fill_(-127);
  at::Tensor b = at::empty({k, 20}, at::kChar);
  b.select(1, 0).fill_(127);
  b.select(1, 1).fill_(-127);
  b.narrow(1, 2, 18).copy_(at::arange(k * 18).remainder(2).mul(254).sub(127).view({k, 18}).to(at::kChar));
  const Int8PackedB packed = int8_gemm_pack(b);
  const at::Tensor want = exact(a, b);
  EXPECT_EQ(want[0][0].item<int>(), -128 * 127 * 4096);
  for (const Isa isa : levels()) {
    const cpu::ScopedMaxIsa cap(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    EXPECT_TRUE(at::equal(run(a, packed), want));
  }
}

// c may be a column block of a wider matrix (rows contiguous, stride(0) > N); nothing beside it is written.
TEST(Int8Gemm, WritesIntoRowsOfAWiderOutputOnly) {
  const at::Tensor a = at::randint(-128, 128, {10, 50}, at::kChar);
  const at::Tensor b = at::randint(-127, 128, {50, 21}, at::kChar);
  at::Tensor wide = at::full({10, 40}, 5, at::kInt);
  at::Tensor c = wide.narrow(1, 3, 21);
  int8_gemm_out(a, int8_gemm_pack(b), c);
  EXPECT_TRUE(at::equal(c, exact(a, b)));
  EXPECT_TRUE((wide.narrow(1, 0, 3) == 5).all().item<bool>());
  EXPECT_TRUE((wide.narrow(1, 24, 16) == 5).all().item<bool>());
  at::Tensor empty = at::empty({0, 21}, at::kInt);
  int8_gemm_out(at::empty({0, 50}, at::kChar), int8_gemm_pack(b), empty);  // M = 0: nothing to do
}

TEST(Int8Gemm, RefusesBadInputsNamingWhatWasExpected) {
  const auto message = [](const auto& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  at::Tensor b = at::ones({8, 4}, at::kChar);
  b[3][2] = -128;
  EXPECT_NE(message([&] { (void)int8_gemm_pack(b); }).find("-128; expected values in [-127, 127]"), std::string::npos);
  EXPECT_NE(message([&] { (void)int8_gemm_pack(at::ones({8, 4})); }).find("expected a CPU int8 matrix [K, N]"),
            std::string::npos);
  EXPECT_NE(message([&] { (void)int8_gemm_pack(at::ones({0, 4}, at::kChar)); }).find("is empty"), std::string::npos);
  const Int8PackedB packed = int8_gemm_pack(at::ones({8, 4}, at::kChar));
  at::Tensor c = at::empty({2, 4}, at::kInt);
  EXPECT_NE(message([&] { int8_gemm_out(at::ones({2, 7}, at::kChar), packed, c); }).find("[M, 8]"), std::string::npos);
  EXPECT_NE(message([&] { int8_gemm_out(at::ones({2, 8}, at::kChar).t().contiguous().t(), packed, c); }).find("contiguous"),
            std::string::npos);
  at::Tensor wrong = at::empty({2, 5}, at::kInt);
  EXPECT_NE(message([&] { int8_gemm_out(at::ones({2, 8}, at::kChar), packed, wrong); }).find("c must be int32 [2, 4]"),
            std::string::npos);
  EXPECT_NE(message([&] { int8_gemm_out(at::ones({2, 8}, at::kChar), Int8PackedB{}, c); }).find("not packed"),
            std::string::npos);
}

// The choice is LibTorch's own: _int_mm uses oneDNN exactly when oneDNN is enabled and the CPU has AVX512_VNNI.
TEST(Int8Gemm, ReplacesIntMmExactlyWhereLibTorchRunsItsScalarLoop) {
  __builtin_cpu_init();
  EXPECT_EQ(int8_gemm_replaces_int_mm(), !__builtin_cpu_supports("avx512vnni"));
  bool found = false;
  for (const cpu::Choice& c : cpu::dispatch_choices()) {
    if (c.op != "int8_gemm") continue;
    found = true;
    EXPECT_NE(c.note.find("scalar loop"), std::string::npos) << c.note;
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace hotpath::ops
