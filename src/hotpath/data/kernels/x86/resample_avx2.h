// Private to resample.cpp: the AVX2 horizontal pass for 3-channel uint8 images, the hot loop of
// decode_box_resized (about three quarters of the scalar resample time). Bit-identical to the
// scalar reference in resample.cpp, which the tests compare it against.
//
// PIL's weights have 22 fractional bits, too many for a 16-bit multiply, so each weight is split
// as k = hi * 2^11 + lo (both fit in int16) and vpmaddwd runs once per half; the sums are exact.
#pragma once

#include "hotpath/core/cpu.h"  // HOTPATH_X86_KERNELS

#ifdef HOTPATH_X86_KERNELS
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hotpath::data::x86 {

constexpr int kSplitBits = 11;
constexpr int kTapsPerGroup = 4;
constexpr int kGroupInt16s = 64;  // four vectors of 16 int16: hi and lo weights of taps 0-1 and 2-3

inline int tap_groups(int ksize) { return (ksize + kTapsPerGroup - 1) / kTapsPerGroup; }
inline std::size_t packed_size(int ksize, int out_w) {
  return static_cast<std::size_t>((out_w + 1) / 2) * static_cast<std::size_t>(tap_groups(ksize)) * kGroupInt16s;
}

// Output pixels go in pairs, A in the low 128-bit lane and B in the high one. Per pair and group
// of 4 taps the pixels are arranged (16-bit) as [R0 R1 G0 G1 B0 B1 0 0] for taps 0-1 and the same
// for taps 2-3; this lays out the weights to match: hi01, lo01, hi23, lo23.
inline void pack_rgb_weights(const std::int32_t* kk, int ksize, int out_w, std::int16_t* packed) {
  const int groups = tap_groups(ksize);
  for (int pair = 0; pair < (out_w + 1) / 2; ++pair) {
    for (int g = 0; g < groups; ++g) {
      std::int16_t* v = packed + (static_cast<std::ptrdiff_t>(pair) * groups + g) * kGroupInt16s;
      for (int i = 0; i < kGroupInt16s; ++i) v[i] = 0;
      for (int lane = 0; lane < 2; ++lane) {
        const int xx = std::min(2 * pair + lane, out_w - 1);  // an odd last pixel pairs with itself
        for (int t2 = 0; t2 < 2; ++t2) {      // taps 0-1 or 2-3 of the group
          for (int odd = 0; odd < 2; ++odd) {
            const int t = g * kTapsPerGroup + 2 * t2 + odd;
            const std::int32_t k = t < ksize ? kk[static_cast<std::ptrdiff_t>(xx) * ksize + t] : 0;
            std::int16_t* hi = v + t2 * 32 + lane * 8;
            std::int16_t* lo = hi + 16;
            for (int ch = 0; ch < 3; ++ch) {
              hi[ch * 2 + odd] = static_cast<std::int16_t>(k >> kSplitBits);
              lo[ch * 2 + odd] = static_cast<std::int16_t>(k & ((1 << kSplitBits) - 1));
            }
          }
        }
      }
    }
  }
}

// Per output pair (ResampleScratch::pairs): byte offsets of the first taps of A and B in a row,
// the tap groups to run, and how far from the row start the pair's loads read.
enum PairField { kOffsetA = 0, kOffsetB = 1, kGroups = 2, kReach = 3 };
using PairPlan = std::array<std::int32_t, 4>;

inline void plan_pairs(const std::int32_t* bounds, int out_w, PairPlan* plans) {
  for (int a = 0; a < out_w; a += 2) {
    const int b = std::min(a + 1, out_w - 1);
    PairPlan& p = plans[a / 2];
    p[kOffsetA] = bounds[2 * a] * 3;
    p[kOffsetB] = bounds[2 * b] * 3;
    p[kGroups] = (std::max(bounds[2 * a + 1], bounds[2 * b + 1]) + kTapsPerGroup - 1) / kTapsPerGroup;
    p[kReach] = std::max(p[kOffsetA], p[kOffsetB]) + 12 * p[kGroups] + 4;
  }
}

// Filters one pair; returns [RA GA BA x] in the low 32 bits of the low lane and [RB GB BB x] in
// the high lane. kTwoTaps: no pixel has more than two taps (every upscale), so taps 2-3 are zero.
template <bool kTwoTaps>
__attribute__((target("avx2"), always_inline)) inline __m256i filter_pair(const std::uint8_t* line, const PairPlan& p,
                                                                         const __m256i* w, __m256i taps01,
                                                                         __m256i taps23, __m256i half,
                                                                         int precision_bits) {
  __m256i acc_hi = _mm256_setzero_si256();
  __m256i acc_lo = _mm256_setzero_si256();
  for (int g = 0; g < p[kGroups]; ++g, w += 4) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(line + p[kOffsetA] + 12 * g))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(line + p[kOffsetB] + 12 * g)), 1);
    const __m256i v01 = _mm256_shuffle_epi8(v, taps01);
    acc_hi = _mm256_add_epi32(acc_hi, _mm256_madd_epi16(v01, _mm256_loadu_si256(w)));
    acc_lo = _mm256_add_epi32(acc_lo, _mm256_madd_epi16(v01, _mm256_loadu_si256(w + 1)));
    if constexpr (!kTwoTaps) {
      const __m256i v23 = _mm256_shuffle_epi8(v, taps23);
      acc_hi = _mm256_add_epi32(acc_hi, _mm256_madd_epi16(v23, _mm256_loadu_si256(w + 2)));
      acc_lo = _mm256_add_epi32(acc_lo, _mm256_madd_epi16(v23, _mm256_loadu_si256(w + 3)));
    }
  }
  __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(acc_hi, kSplitBits), _mm256_add_epi32(acc_lo, half));
  sum = _mm256_sra_epi32(sum, _mm_cvtsi32_si128(precision_bits));  // lanes: [RA GA BA 0 | RB GB BB 0]
  return _mm256_packus_epi16(_mm256_packs_epi32(sum, sum), sum);   // clip8, within each lane
}

// The horizontal pass over `rows` rows. Pairs whose 16-byte loads would run past `readable_end`
// (only near the end of the last row) go to `scalar_pixel`, the reference code.
template <bool kTwoTaps, typename ScalarPixel>
__attribute__((target("avx2"))) void horizontal_rgb_avx2_impl(const std::uint8_t* in, std::ptrdiff_t in_stride,
                                                              int rows, std::uint8_t* out, std::ptrdiff_t out_stride,
                                                              int out_w, const PairPlan* plans, int ksize,
                                                              const std::int16_t* packed,
                                                              const std::uint8_t* readable_end, int precision_bits,
                                                              ScalarPixel scalar_pixel) {
  const int groups = tap_groups(ksize);
  const __m256i taps01 = _mm256_setr_epi8(0, -128, 3, -128, 1, -128, 4, -128, 2, -128, 5, -128, -128, -128, -128, -128,
                                          0, -128, 3, -128, 1, -128, 4, -128, 2, -128, 5, -128, -128, -128, -128, -128);
  const __m256i taps23 = _mm256_setr_epi8(6, -128, 9, -128, 7, -128, 10, -128, 8, -128, 11, -128, -128, -128, -128, -128,
                                          6, -128, 9, -128, 7, -128, 10, -128, 8, -128, 11, -128, -128, -128, -128, -128);
  const __m256i half = _mm256_set1_epi32(1 << (precision_bits - 1));
  const int pairs = (out_w + 1) / 2;
  // All pairs but the last end with b + 1 < out_w, so their 4-byte stores stay inside the row.
  const int inner_pairs = pairs - 1;
  std::int32_t max_reach = 0;
  for (int i = 0; i < pairs; ++i) max_reach = std::max(max_reach, plans[i][kReach]);
  const auto weights = [&](int pair) {
    return reinterpret_cast<const __m256i*>(packed + static_cast<std::ptrdiff_t>(pair) * groups * kGroupInt16s);
  };
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* line = in + y * in_stride;
    std::uint8_t* dst = out + y * out_stride;
    const bool row_safe = line + max_reach <= readable_end;
    for (int i = 0; i < pairs; ++i) {
      const PairPlan& p = plans[i];
      const int a = 2 * i;
      const int b = std::min(a + 1, out_w - 1);
      if (!row_safe && line + p[kReach] > readable_end) {
        scalar_pixel(line, dst, a);
        if (b != a) scalar_pixel(line, dst, b);
        continue;
      }
      const __m256i bytes = filter_pair<kTwoTaps>(line, p, weights(i), taps01, taps23, half, precision_bits);
      if (i < inner_pairs) {
        // Four-byte stores; each fourth byte is overwritten by the next pixel.
        _mm_storeu_si32(dst + 3 * a, _mm256_castsi256_si128(bytes));
        _mm_storeu_si32(dst + 3 * b, _mm256_extracti128_si256(bytes, 1));
      } else {
        const auto rgb_a = static_cast<std::uint32_t>(_mm256_cvtsi256_si32(bytes));
        const auto rgb_b = static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(bytes, 1)));
        std::memcpy(dst + 3 * a, &rgb_a, 3);
        if (b != a) std::memcpy(dst + 3 * b, &rgb_b, 3);
      }
    }
  }
}

template <typename ScalarPixel>
void horizontal_rgb_avx2(const std::uint8_t* in, std::ptrdiff_t in_stride, int rows, std::uint8_t* out,
                         std::ptrdiff_t out_stride, int out_w, const std::int32_t* bounds, int ksize,
                         const std::int16_t* packed, PairPlan* plans, const std::uint8_t* readable_end,
                         int precision_bits, ScalarPixel scalar_pixel) {
  plan_pairs(bounds, out_w, plans);
  int max_taps = 0;
  for (int xx = 0; xx < out_w; ++xx) max_taps = std::max(max_taps, bounds[2 * xx + 1]);
  if (max_taps <= 2) {
    horizontal_rgb_avx2_impl<true>(in, in_stride, rows, out, out_stride, out_w, plans, ksize, packed, readable_end,
                                   precision_bits, scalar_pixel);
  } else {
    horizontal_rgb_avx2_impl<false>(in, in_stride, rows, out, out_stride, out_w, plans, ksize, packed, readable_end,
                                    precision_bits, scalar_pixel);
  }
}

__attribute__((target("avx2"))) inline __m256i widen(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The vertical pass: out row yy = sum over taps of in row (first + t) * k[t], 32 bytes at a time
// with the sums held in registers (the reference's chunked loop keeps them in memory). Exact
// 32-bit products like the reference: weights up to 2^22 times 8-bit pixels. Returns the bytes
// per row it did (a multiple of 32); the caller finishes the rest with the reference loop.
__attribute__((target("avx2"))) inline int vertical_avx2(const std::uint8_t* in, std::ptrdiff_t in_stride,
                                                         int row_bytes, std::uint8_t* out, std::ptrdiff_t out_stride,
                                                         int out_h, const std::int32_t* bounds, const std::int32_t* kk,
                                                         int ksize, int precision_bits) {
  const int done = row_bytes / 32 * 32;
  const __m256i half = _mm256_set1_epi32(1 << (precision_bits - 1));
  const __m128i shift = _mm_cvtsi32_si128(precision_bits);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int yy = 0; yy < out_h; ++yy) {
    const std::uint8_t* first = in + static_cast<std::ptrdiff_t>(bounds[2 * yy]) * in_stride;
    const int n = bounds[2 * yy + 1];
    const std::int32_t* k = kk + static_cast<std::ptrdiff_t>(yy) * ksize;
    std::uint8_t* dst = out + yy * out_stride;
    for (int i = 0; i < done; i += 32) {
      __m256i a0 = half, a1 = half, a2 = half, a3 = half;
      for (int t = 0; t < n; ++t) {
        const std::uint8_t* src = first + t * in_stride + i;
        const __m256i kt = _mm256_set1_epi32(k[t]);
        a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(widen(src), kt));
        a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(widen(src + 8), kt));
        a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(widen(src + 16), kt));
        a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(widen(src + 24), kt));
      }
      const __m256i p01 = _mm256_packs_epi32(_mm256_sra_epi32(a0, shift), _mm256_sra_epi32(a1, shift));
      const __m256i p23 = _mm256_packs_epi32(_mm256_sra_epi32(a2, shift), _mm256_sra_epi32(a3, shift));
      // packs/packus work per 128-bit lane; the permute restores the byte order.
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bytes);
    }
  }
  return done;
}

}  // namespace hotpath::data::x86
#endif  // HOTPATH_X86_KERNELS
