// hotpath/core/random.h — small, fast, reproducible random numbers.
//
// Every random decision in hotpath is a pure function of (seed, stream ids...), never of thread
// timing, so a run is deterministic for a seed and a resumed run replays the same choices:
//
//   hotpath::Rng rng = hotpath::Rng::for_stream(seed, epoch, sample_index);
//   double u = rng.uniform();            // [0, 1)
//   int i = rng.uniform_int(0, 9);       // inclusive bounds
//
// The generator is xoshiro256** seeded through splitmix64.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace hotpath {

__extension__ using Uint128 = unsigned __int128;  // GCC/Clang extension; -Wpedantic wants the marker

inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) {
    std::uint64_t sm = seed;
    for (auto& word : s_) word = splitmix64(sm);
  }

  // A generator for one logical stream, e.g. (seed, epoch, sample): independent streams
  // for different id tuples, identical for equal ones.
  static Rng for_stream(std::uint64_t seed, std::initializer_list<std::uint64_t> ids) {
    std::uint64_t h = seed ^ 0x6A09E667F3BCC909ULL;
    for (std::uint64_t id : ids) {
      std::uint64_t sm = h ^ (id * 0x9E3779B97F4A7C15ULL + 0x3C6EF372FE94F82BULL);
      h = splitmix64(sm);
    }
    return Rng(h);
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform double in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [lo, hi] (inclusive), unbiased (Lemire's method).
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
    const std::uint64_t range = static_cast<std::uint64_t>(hi - lo) + 1;
    if (range == 0) return static_cast<std::int64_t>(next_u64());  // full 64-bit range
    Uint128 m = static_cast<Uint128>(next_u64()) * range;
    auto low = static_cast<std::uint64_t>(m);
    if (low < range) {
      const std::uint64_t threshold = (0 - range) % range;
      while (low < threshold) {
        m = static_cast<Uint128>(next_u64()) * range;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return lo + static_cast<std::int64_t>(m >> 64);
  }

  bool bernoulli(double p) { return uniform() < p; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace hotpath
