// Private to hotpath_models: the counter-based hash behind every dropout mask hotpath draws — the fused
// attention kernel's (attention_kernels.inc) and the fused hidden dropout's (dropout.cpp) — kept in one
// place so the two cannot drift apart.
//
//   std::uint64_t row_key = detail::mix64(stream_key ^ row);     // per stream/row: full avalanche
//   U bits = lane + (counter + lo);                               // U: std::uint32_t or a GCC vector of it
//   detail::lowbias32(bits); bits ^= hi; detail::lowbias32(bits); // 32 random bits per counter
//
// A mask element then depends only on (seed, offset, its coordinates): not on the thread count, the
// vector width or the tensor's layout, so backward and activation checkpointing regenerate it exactly.
#pragma once

#include <cstdint>

namespace hotpath::ops::detail {

// splitmix64's step (golden-ratio increment + finaliser): a 64-bit bijection with full avalanche;
// derives stream and row keys.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Wellons' lowbias32: two multiply-xorshift rounds, a bijection of 32 bits with low avalanche bias;
// 32-bit lane multiplies, so it vectorises on every ISA. U is std::uint32_t or a GCC vector of it. In
// place (by reference) and always inlined: a 32-byte vector passed by value into code built without
// AVX would change the ABI (-Wpsabi); inlined, each caller gets its own ISA's instructions.
template <typename U>
[[gnu::always_inline]] inline void lowbias32(U& x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
}

}  // namespace hotpath::ops::detail
