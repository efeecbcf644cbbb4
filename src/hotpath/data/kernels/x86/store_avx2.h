// Private to store.cpp: AVX2 loops for 3-channel samples (deinterleave to CHW planes, convert,
// scale, round to bf16, mirror rows). Same arithmetic as the reference loops in store.cpp
// (x * scale + bias as a multiply then an add, no FMA), so the results are bit-identical.
#pragma once

#include "hotpath/core/cpu.h"  // HOTPATH_X86_KERNELS

#ifdef HOTPATH_X86_KERNELS
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hotpath::data::x86 {

__attribute__((target("avx2"))) inline __m128i pick(__m128i lo, __m128i from_lo, __m128i hi, __m128i from_hi) {
  return _mm_or_si128(_mm_shuffle_epi8(lo, from_lo), _mm_shuffle_epi8(hi, from_hi));
}

// R, G and B of 8 packed RGB pixels (exactly the 24 bytes at p) in the low 8 bytes of r, g, b.
__attribute__((target("avx2"))) inline void split_rgb8(const std::uint8_t* p, __m128i& r, __m128i& g, __m128i& b) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));      // bytes 0..15
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8));  // bytes 8..23
  constexpr char z = -128;
  r = pick(lo, _mm_setr_epi8(0, 3, 6, 9, 12, 15, z, z, z, z, z, z, z, z, z, z), hi,
           _mm_setr_epi8(z, z, z, z, z, z, 10, 13, z, z, z, z, z, z, z, z));
  g = pick(lo, _mm_setr_epi8(1, 4, 7, 10, 13, z, z, z, z, z, z, z, z, z, z, z), hi,
           _mm_setr_epi8(z, z, z, z, z, 8, 11, 14, z, z, z, z, z, z, z, z));
  b = pick(lo, _mm_setr_epi8(2, 5, 8, 11, 14, z, z, z, z, z, z, z, z, z, z, z), hi,
           _mm_setr_epi8(z, z, z, z, z, 9, 12, 15, z, z, z, z, z, z, z, z));
}

__attribute__((target("avx2"))) inline __m256 affine8(__m128i bytes, __m256 scale, __m256 bias) {
  const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  return _mm256_add_ps(_mm256_mul_ps(x, scale), bias);
}

// Round-to-nearest-even to bfloat16, as the reference: (bits + 0x7FFF + lsb) >> 16.
__attribute__((target("avx2"))) inline __m128i bf16x8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
}

// Writers of 8 converted values; T is float or std::uint16_t (bf16).
__attribute__((target("avx2"))) inline void put8(float* dst, __m256 v) { _mm256_storeu_ps(dst, v); }
__attribute__((target("avx2"))) inline void put8(std::uint16_t* dst, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), bf16x8(v));
}

// n pixels to three planes (dst, dst + plane, dst + 2 * plane). Returns how many pixels it did
// (a multiple of 8); the caller finishes the rest with the reference loop.
template <typename T>
__attribute__((target("avx2"))) int chw_rgb_avx2(const std::uint8_t* in, int n, T* dst, std::size_t plane,
                                                 const float* scale, const float* bias) {
  const __m256 s0 = _mm256_set1_ps(scale[0]), s1 = _mm256_set1_ps(scale[1]), s2 = _mm256_set1_ps(scale[2]);
  const __m256 b0 = _mm256_set1_ps(bias[0]), b1 = _mm256_set1_ps(bias[1]), b2 = _mm256_set1_ps(bias[2]);
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    __m128i r, g, b;
    split_rgb8(in + 3 * x, r, g, b);
    put8(dst + x, affine8(r, s0, b0));
    put8(dst + plane + x, affine8(g, s1, b1));
    put8(dst + 2 * plane + x, affine8(b, s2, b2));
  }
  return x;
}

// n pixels to packed HWC: 24 values per step with the per-channel constants in a 3-vector cycle.
template <typename T>
__attribute__((target("avx2"))) int hwc_rgb_avx2(const std::uint8_t* in, int n, T* dst, const float* scale,
                                                 const float* bias) {
  const __m256 s[3] = {_mm256_setr_ps(scale[0], scale[1], scale[2], scale[0], scale[1], scale[2], scale[0], scale[1]),
                       _mm256_setr_ps(scale[2], scale[0], scale[1], scale[2], scale[0], scale[1], scale[2], scale[0]),
                       _mm256_setr_ps(scale[1], scale[2], scale[0], scale[1], scale[2], scale[0], scale[1], scale[2])};
  const __m256 b[3] = {_mm256_setr_ps(bias[0], bias[1], bias[2], bias[0], bias[1], bias[2], bias[0], bias[1]),
                       _mm256_setr_ps(bias[2], bias[0], bias[1], bias[2], bias[0], bias[1], bias[2], bias[0]),
                       _mm256_setr_ps(bias[1], bias[2], bias[0], bias[1], bias[2], bias[0], bias[1], bias[2])};
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    for (int k = 0; k < 3; ++k) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + 3 * x + 8 * k));
      put8(dst + 3 * x + 8 * k, affine8(bytes, s[k], b[k]));
    }
  }
  return x;
}

// n pixels to uint8 planes.
__attribute__((target("avx2"))) inline int chw_rgb_u8_avx2(const std::uint8_t* in, int n, std::uint8_t* dst,
                                                           std::size_t plane) {
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    __m128i r, g, b;
    split_rgb8(in + 3 * x, r, g, b);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + x), r);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + plane + x), g);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 2 * plane + x), b);
  }
  return x;
}

// out pixel i = in pixel n-1-i (3 bytes each), 5 pixels per shuffle. Reads only in[0, 3n);
// writes out[0, 3n] (one byte past the last pixel: `out` needs that spare byte).
__attribute__((target("avx2"))) inline void mirror_rgb_avx2(const std::uint8_t* in, int n, std::uint8_t* out) {
  const __m128i reverse5 = _mm_setr_epi8(12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2, -128);
  int i = 0;
  // The load for output i starts at input pixel n-5-i and covers 16 bytes: in bounds from i = 1.
  for (; i < n && i < 1; ++i) std::memcpy(out + 3 * i, in + 3 * (n - 1 - i), 3);
  for (; i + 5 <= n; i += 5) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 3 * (n - 5 - i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * i), _mm_shuffle_epi8(v, reverse5));
  }
  for (; i < n; ++i) std::memcpy(out + 3 * i, in + 3 * (n - 1 - i), 3);
}

}  // namespace hotpath::data::x86
#endif  // HOTPATH_X86_KERNELS
