#include "hotpath/core/random.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>

namespace hotpath {
namespace {

TEST(Rng, SameStreamIdsGiveSameSequence) {
  Rng a = Rng::for_stream(7, {1, 2});
  Rng b = Rng::for_stream(7, {1, 2});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

TEST(Rng, DifferentStreamIdsDiffer) {
  Rng a = Rng::for_stream(7, {1, 2});
  Rng b = Rng::for_stream(7, {2, 1});
  Rng c = Rng::for_stream(8, {1, 2});
  const auto x = a.next_u64();
  EXPECT_NE(x, b.next_u64());
  EXPECT_NE(x, c.next_u64());
}

TEST(Rng, UniformIsInUnitIntervalWithMeanOneHalf) {
  Rng r(1);
  double sum = 0;
  constexpr int kN = 200000;
  for (int i = 0; i < kN; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / kN, 0.5, 0.005);
}

TEST(Rng, UniformIntCoversInclusiveRangeEvenly) {
  Rng r(3);
  std::array<int, 5> counts{};
  constexpr int kN = 100000;
  for (int i = 0; i < kN; ++i) {
    const auto v = r.uniform_int(-2, 2);
    ASSERT_GE(v, -2);
    ASSERT_LE(v, 2);
    ++counts[static_cast<std::size_t>(v + 2)];
  }
  for (int c : counts) EXPECT_NEAR(c, kN / 5, 600);
}

}  // namespace
}  // namespace hotpath
