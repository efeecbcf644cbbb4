#include "hotpath/models/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- tiling --------------------------------------------------------------------------------------
// Packed rows are padded to kPad floats (two 16-lane vectors) so every micro-kernel column step is
// whole; padding is zero (K, V, Q) or −inf (the key bias), so it never changes a result.
constexpr std::int64_t kPad = 32;
constexpr std::int64_t kFwdQueries = 32;   // query rows per forward task
constexpr std::int64_t kFwdKeys = 128;     // keys per online-softmax step
constexpr std::int64_t kBwdQueries = 64;   // backward tile: queries ...
constexpr std::int64_t kBwdKeys = 64;      // ... × keys
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// One (batch, head) as the kernels see it: row-major [L, d] inputs of element type T (float, or bf16
// as its raw 16 bits), the key bias row (0 keep, −inf masked or padding; Lkp entries) and whether
// every key is masked (scores are then all equal: zero).
struct HeadArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* bias = nullptr;
  bool uniform = false;
  std::int64_t lq = 0;
  std::int64_t lk = 0;
  std::int64_t d = 0;
  float scale = 1.0F;
};

struct ForwardArgs {
  HeadArgs head;
  void* out = nullptr;   // [Lq, d], T
  float* lse = nullptr;  // [Lq]
  std::int64_t q0 = 0;   // query rows [q0, q1) of this task
  std::int64_t q1 = 0;
  bool pack_kv = true;   // false: the scratch still holds this head's packed K and V
};

struct BackwardArgs {
  HeadArgs head;
  const void* out = nullptr;   // forward output [Lq, d], T
  const void* dout = nullptr;  // [Lq, d], T
  const float* lse = nullptr;  // [Lq]
  void* dq = nullptr;          // [Lq, d], T
  void* dk = nullptr;          // [Lk, d], T
  void* dv = nullptr;          // [Lk, d], T
};

std::int64_t forward_scratch_floats(std::int64_t lk, std::int64_t d) {
  const std::int64_t dp = round_up(d, kPad);
  const std::int64_t lkp = round_up(lk, kFwdKeys);
  return 2 * dp * lkp + 2 * kFwdQueries * dp + kFwdQueries * kFwdKeys + 2 * kFwdQueries;
}

std::int64_t backward_scratch_floats(std::int64_t lq, std::int64_t lk, std::int64_t d) {
  const std::int64_t dp = round_up(d, kPad);
  const std::int64_t lkp = round_up(lk, kBwdKeys);
  return 3 * lq * dp + 3 * dp * lkp + 2 * kBwdKeys * dp + 2 * kBwdQueries * kBwdKeys + 2 * lq;
}

// ---- loops over raw buffers, written once for W-lane vectors ---------------------------------------
// Every body is always-inline and compiled inside a per-ISA entry point (baseline: W = 4, AVX2+FMA:
// W = 8, AVX-512F: W = 16). Vectors cross helpers by reference only, so no vector ever passes a
// function boundary (whose ABI would differ between the compilations).
#define HOTPATH_BODY inline __attribute__((always_inline))

template <int W>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef std::int32_t I __attribute__((vector_size(4 * W)));
};

template <int W>
HOTPATH_BODY void load(typename Lanes<W>::F& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
template <int W>
HOTPATH_BODY void store(float* p, const typename Lanes<W>::F& v) {
  std::memcpy(p, &v, sizeof v);
}
template <int W>
HOTPATH_BODY void splat(typename Lanes<W>::F& v, float x) {
  v = typename Lanes<W>::F{} + x;
}
template <int W>
HOTPATH_BODY float hmax(const typename Lanes<W>::F& v) {
  float m = v[0];
  for (int i = 1; i < W; ++i) m = std::max(m, v[i]);
  return m;
}
template <int W>
HOTPATH_BODY float hsum(const typename Lanes<W>::F& v) {
  float s = 0.0F;
  for (int i = 0; i < W; ++i) s += v[i];
  return s;
}

// e^x lane-wise (Cephes expf: range reduction by ln 2, degree-5 polynomial; ~2 ulp). Lanes below
// −87 (masked scores: −inf) give exactly 0, like std::exp's underflow; no lane is ever +inf here
// because the running max is subtracted first.
template <int W>
HOTPATH_BODY void exp_inplace(typename Lanes<W>::F& x) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  const auto underflow = x < -87.0F;
  x = x < -87.0F ? F{} - 87.0F : x;
  x = x > 88.0F ? F{} + 88.0F : x;
  const F magic = F{} + 12582912.0F;  // 1.5·2^23: adding and subtracting it rounds to an integer
  const F n = (x * 1.44269504088896341F + magic) - magic;
  F r = x - n * 0.693359375F;
  r = r - n * -2.12194440e-4F;
  F p = F{} + 1.9875691500E-4F;
  p = p * r + 1.3981999507E-3F;
  p = p * r + 8.3334519073E-3F;
  p = p * r + 4.1665795894E-2F;
  p = p * r + 1.6666665459E-1F;
  p = p * r + 5.0000001201E-1F;
  p = p * r * r + r + 1.0F;
  const I bits = (__builtin_convertvector(n, I) + 127) << 23;
  F two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  x = underflow ? F{} : p * two_n;
}

// C[r, :N] (+)= Σ_k A(r, k) · B[k, :N] for R rows at once, A(r, k) = A[r·a_rs + k·a_cs] (so A may be
// read transposed), N a multiple of 2W. Each column step keeps R×2 accumulators in registers and
// streams B's rows: 2 vector loads and R broadcasts feed 2R FMAs.
template <int W, int R>
HOTPATH_BODY void gemm_rows(const float* a, std::int64_t a_rs, std::int64_t a_cs, const float* b, std::int64_t ldb,
                            float* c, std::int64_t ldc, std::int64_t k_len, std::int64_t n, bool accumulate) {
  using F = typename Lanes<W>::F;
  for (std::int64_t c0 = 0; c0 < n; c0 += 2 * W) {
    F acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (accumulate) {
        load<W>(acc[r][0], c + r * ldc + c0);
        load<W>(acc[r][1], c + r * ldc + c0 + W);
      } else {
        acc[r][0] = F{};
        acc[r][1] = F{};
      }
    }
    for (std::int64_t kk = 0; kk < k_len; ++kk) {
      F b0;
      F b1;
      load<W>(b0, b + kk * ldb + c0);
      load<W>(b1, b + kk * ldb + c0 + W);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        F av;
        splat<W>(av, a[r * a_rs + kk * a_cs]);
        acc[r][0] += av * b0;
        acc[r][1] += av * b1;
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      store<W>(c + r * ldc + c0, acc[r][0]);
      store<W>(c + r * ldc + c0 + W, acc[r][1]);
    }
  }
}

template <int W>
HOTPATH_BODY void gemm(std::int64_t m, const float* a, std::int64_t a_rs, std::int64_t a_cs, const float* b,
                       std::int64_t ldb, float* c, std::int64_t ldc, std::int64_t k_len, std::int64_t n,
                       bool accumulate) {
  std::int64_t r = 0;
  for (; r + 4 <= m; r += 4) gemm_rows<W, 4>(a + r * a_rs, a_rs, a_cs, b, ldb, c + r * ldc, ldc, k_len, n, accumulate);
  for (; r < m; ++r) gemm_rows<W, 1>(a + r * a_rs, a_rs, a_cs, b, ldb, c + r * ldc, ldc, k_len, n, accumulate);
}

// bf16 travels as its upper 16 bits of an fp32; narrowing rounds to nearest even (NaN stays NaN).
HOTPATH_BODY float widen(float x) { return x; }
HOTPATH_BODY float widen(std::uint16_t x) { return __builtin_bit_cast(float, static_cast<std::uint32_t>(x) << 16); }
HOTPATH_BODY void narrow(float x, float& out) { out = x; }
HOTPATH_BODY void narrow(float x, std::uint16_t& out) {
  const auto u = __builtin_bit_cast(std::uint32_t, x);
  const std::uint32_t rounded = (u + 0x7FFFU + ((u >> 16) & 1U)) >> 16;
  out = static_cast<std::uint16_t>(x != x ? 0x7FC0U : rounded);
}

// dst[r, :dp] = src[r, :d] · scale, zero-padded to dp columns.
template <typename T>
HOTPATH_BODY void pack_rows(const T* src, std::int64_t rows, std::int64_t d, std::int64_t dp, float scale, float* dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < d; ++c) dst[r * dp + c] = widen(src[r * d + c]) * scale;
    for (std::int64_t c = d; c < dp; ++c) dst[r * dp + c] = 0.0F;
  }
}

// dst[c, :ldt] = src[:rows, c]ᵀ for c < dp (rows beyond `rows` and columns beyond d are zero).
template <typename T>
HOTPATH_BODY void pack_transposed(const T* src, std::int64_t rows, std::int64_t d, std::int64_t dp, std::int64_t ldt,
                                  float* dst) {
  std::fill(dst, dst + dp * ldt, 0.0F);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < d; ++c) dst[c * ldt + r] = widen(src[r * d + c]);
}

template <typename T>
HOTPATH_BODY void unpack_rows(const float* src, std::int64_t rows, std::int64_t dp, std::int64_t d, float scale,
                              T* dst) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < d; ++c) narrow(src[r * dp + c] * scale, dst[r * d + c]);
}

// One forward task: queries [q0, q1) of one head. Scratch: Kᵀ [dp, Lkp], V [Lkp, dp] (kept across
// tasks of the same head), then Q·scale, O, S tiles and the running max/sum.
template <int W, typename T>
HOTPATH_BODY void forward_body(const ForwardArgs& a, float* scratch) {
  using F = typename Lanes<W>::F;
  const HeadArgs& h = a.head;
  const std::int64_t d = h.d;
  const std::int64_t dp = round_up(d, kPad);
  const std::int64_t lkp = round_up(h.lk, kFwdKeys);
  float* kt = scratch;
  float* vp = kt + dp * lkp;
  float* qs = vp + lkp * dp;
  float* o = qs + kFwdQueries * dp;
  float* s = o + kFwdQueries * dp;
  float* row_max = s + kFwdQueries * kFwdKeys;
  float* row_sum = row_max + kFwdQueries;
  if (a.pack_kv) {
    pack_transposed(static_cast<const T*>(h.k), h.lk, d, dp, lkp, kt);
    pack_rows(static_cast<const T*>(h.v), h.lk, d, dp, 1.0F, vp);
    std::fill(vp + h.lk * dp, vp + lkp * dp, 0.0F);
  }
  for (std::int64_t q0 = a.q0; q0 < a.q1; q0 += kFwdQueries) {
    const std::int64_t mq = std::min(kFwdQueries, a.q1 - q0);
    pack_rows(static_cast<const T*>(h.q) + q0 * d, mq, d, dp, h.scale, qs);
    std::fill(o, o + mq * dp, 0.0F);
    std::fill(row_max, row_max + mq, kNegInf);
    std::fill(row_sum, row_sum + mq, 0.0F);
    for (std::int64_t k0 = 0; k0 < lkp; k0 += kFwdKeys) {
      const std::int64_t nk = std::min(kFwdKeys, h.lk - k0);
      if (h.uniform) {
        std::fill(s, s + mq * kFwdKeys, 0.0F);
      } else {
        gemm<W>(mq, qs, dp, 1, kt + k0, lkp, s, kFwdKeys, d, kFwdKeys, false);
      }
      // Online softmax: fold this block's max into the running one, rescale what came before.
      for (std::int64_t r = 0; r < mq; ++r) {
        float* sr = s + r * kFwdKeys;
        F vmax;
        splat<W>(vmax, kNegInf);
        for (std::int64_t j = 0; j < kFwdKeys; j += W) {
          F x;
          F bias;
          load<W>(x, sr + j);
          load<W>(bias, h.bias + k0 + j);
          x += bias;
          store<W>(sr + j, x);
          vmax = x > vmax ? x : vmax;
        }
        const float old_max = row_max[r];
        const float new_max = std::max(old_max, hmax<W>(vmax));
        const float shift = new_max == kNegInf ? 0.0F : new_max;  // nothing kept yet: P stays 0
        F vshift;
        splat<W>(vshift, shift);
        F vsum{};
        for (std::int64_t j = 0; j < kFwdKeys; j += W) {
          F x;
          load<W>(x, sr + j);
          x -= vshift;
          exp_inplace<W>(x);
          vsum += x;
          store<W>(sr + j, x);
        }
        const float alpha = std::exp(old_max - shift);  // old_max = −inf → 0
        row_max[r] = new_max;
        row_sum[r] = row_sum[r] * alpha + hsum<W>(vsum);
        if (alpha != 1.0F) {
          float* orow = o + r * dp;
          for (std::int64_t c = 0; c < dp; ++c) orow[c] *= alpha;
        }
      }
      gemm<W>(mq, s, kFwdKeys, 1, vp + k0 * dp, dp, o, dp, nk, dp, true);
    }
    T* out = static_cast<T*>(a.out) + q0 * d;
    for (std::int64_t r = 0; r < mq; ++r) {
      const float inv = 1.0F / row_sum[r];
      for (std::int64_t c = 0; c < d; ++c) narrow(o[r * dp + c] * inv, out[r * d + c]);
      a.lse[q0 + r] = row_max[r] + std::log(row_sum[r]);
    }
  }
}

// One backward task: a whole head (dq sums over every key block, so it stays with one thread).
template <int W, typename T>
HOTPATH_BODY void backward_body(const BackwardArgs& a, float* scratch) {
  using F = typename Lanes<W>::F;
  const HeadArgs& h = a.head;
  const std::int64_t d = h.d;
  const std::int64_t dp = round_up(d, kPad);
  const std::int64_t lq = h.lq;
  const std::int64_t lk = h.lk;
  const std::int64_t lkp = round_up(lk, kBwdKeys);
  float* qs = scratch;         // [Lq, dp] q·scale
  float* dos = qs + lq * dp;   // [Lq, dp] dO
  float* dqs = dos + lq * dp;  // [Lq, dp] dq / scale
  float* kt = dqs + lq * dp;   // [dp, Lkp] kᵀ
  float* kp = kt + dp * lkp;   // [Lkp, dp] k
  float* vt = kp + lkp * dp;   // [dp, Lkp] vᵀ
  float* dkb = vt + dp * lkp;  // [kBwdKeys, dp] dk of this key block
  float* dvb = dkb + kBwdKeys * dp;
  float* p = dvb + kBwdKeys * dp;  // [kBwdQueries, kBwdKeys]
  float* ds = p + kBwdQueries * kBwdKeys;
  float* delta = ds + kBwdQueries * kBwdKeys;  // [Lq] rowsum(dO∘O)
  float* lse = delta + lq;                     // [Lq]

  const T* out = static_cast<const T*>(a.out);
  const T* dout = static_cast<const T*>(a.dout);
  pack_rows(static_cast<const T*>(h.q), lq, d, dp, h.scale, qs);
  pack_rows(dout, lq, d, dp, 1.0F, dos);
  std::fill(dqs, dqs + lq * dp, 0.0F);
  pack_transposed(static_cast<const T*>(h.k), lk, d, dp, lkp, kt);
  pack_rows(static_cast<const T*>(h.k), lk, d, dp, 1.0F, kp);
  std::fill(kp + lk * dp, kp + lkp * dp, 0.0F);
  pack_transposed(static_cast<const T*>(h.v), lk, d, dp, lkp, vt);
  for (std::int64_t i = 0; i < lq; ++i) {
    float acc = 0.0F;
    for (std::int64_t c = 0; c < d; ++c) acc += widen(dout[i * d + c]) * widen(out[i * d + c]);
    delta[i] = acc;
    lse[i] = a.lse[i];
  }

  for (std::int64_t k0 = 0; k0 < lk; k0 += kBwdKeys) {
    const std::int64_t nk = std::min(kBwdKeys, lk - k0);
    std::fill(dkb, dkb + kBwdKeys * dp, 0.0F);
    std::fill(dvb, dvb + kBwdKeys * dp, 0.0F);
    for (std::int64_t q0 = 0; q0 < lq; q0 += kBwdQueries) {
      const std::int64_t mq = std::min(kBwdQueries, lq - q0);
      // P = exp(S + bias − lse): the forward's probabilities, recomputed.
      if (h.uniform) {
        std::fill(p, p + mq * kBwdKeys, 0.0F);
      } else {
        gemm<W>(mq, qs + q0 * dp, dp, 1, kt + k0, lkp, p, kBwdKeys, d, kBwdKeys, false);
      }
      for (std::int64_t r = 0; r < mq; ++r) {
        float* pr = p + r * kBwdKeys;
        F vlse;
        splat<W>(vlse, lse[q0 + r]);
        for (std::int64_t j = 0; j < kBwdKeys; j += W) {
          F x;
          F bias;
          load<W>(x, pr + j);
          load<W>(bias, h.bias + k0 + j);
          x = x + bias - vlse;
          exp_inplace<W>(x);
          store<W>(pr + j, x);
        }
      }
      // dV += Pᵀ·dO (P read transposed).
      gemm<W>(nk, p, 1, kBwdKeys, dos + q0 * dp, dp, dvb, dp, mq, dp, true);
      if (h.uniform) continue;  // the output does not depend on q or k: dS = 0
      // dP = dO·Vᵀ; dS = P∘(dP − D).
      gemm<W>(mq, dos + q0 * dp, dp, 1, vt + k0, lkp, ds, kBwdKeys, d, kBwdKeys, false);
      for (std::int64_t r = 0; r < mq; ++r) {
        float* dsr = ds + r * kBwdKeys;
        const float* pr = p + r * kBwdKeys;
        F vdelta;
        splat<W>(vdelta, delta[q0 + r]);
        for (std::int64_t j = 0; j < kBwdKeys; j += W) {
          F x;
          F pv;
          load<W>(x, dsr + j);
          load<W>(pv, pr + j);
          x = pv * (x - vdelta);
          store<W>(dsr + j, x);
        }
      }
      // dq/scale += dS·K; dk += dSᵀ·(q·scale).
      gemm<W>(mq, ds, kBwdKeys, 1, kp + k0 * dp, dp, dqs + q0 * dp, dp, nk, dp, true);
      gemm<W>(nk, ds, 1, kBwdKeys, qs + q0 * dp, dp, dkb, dp, mq, dp, true);
    }
    unpack_rows(dkb, nk, dp, d, 1.0F, static_cast<T*>(a.dk) + k0 * d);
    unpack_rows(dvb, nk, dp, d, 1.0F, static_cast<T*>(a.dv) + k0 * d);
  }
  unpack_rows(dqs, lq, dp, d, h.scale, static_cast<T*>(a.dq));
}

// ---- one compilation per ISA ----------------------------------------------------------------------
struct Kernels {
  const char* name;
  void (*forward_f32)(const ForwardArgs&, float*);
  void (*forward_bf16)(const ForwardArgs&, float*);
  void (*backward_f32)(const BackwardArgs&, float*);
  void (*backward_bf16)(const BackwardArgs&, float*);
};

void forward_portable_f32(const ForwardArgs& a, float* s) { forward_body<4, float>(a, s); }
void forward_portable_bf16(const ForwardArgs& a, float* s) { forward_body<4, std::uint16_t>(a, s); }
void backward_portable_f32(const BackwardArgs& a, float* s) { backward_body<4, float>(a, s); }
void backward_portable_bf16(const BackwardArgs& a, float* s) { backward_body<4, std::uint16_t>(a, s); }
const Kernels kPortable{"portable", forward_portable_f32, forward_portable_bf16, backward_portable_f32,
                        backward_portable_bf16};

#if defined(__x86_64__)
#define HOTPATH_AVX2 __attribute__((target("avx2,fma")))
HOTPATH_AVX2 void forward_avx2_f32(const ForwardArgs& a, float* s) { forward_body<8, float>(a, s); }
HOTPATH_AVX2 void forward_avx2_bf16(const ForwardArgs& a, float* s) { forward_body<8, std::uint16_t>(a, s); }
HOTPATH_AVX2 void backward_avx2_f32(const BackwardArgs& a, float* s) { backward_body<8, float>(a, s); }
HOTPATH_AVX2 void backward_avx2_bf16(const BackwardArgs& a, float* s) { backward_body<8, std::uint16_t>(a, s); }
const Kernels kAvx2{"avx2", forward_avx2_f32, forward_avx2_bf16, backward_avx2_f32, backward_avx2_bf16};

// Compiled, never run on the AVX2-only development machine: the same bodies with 16-lane vectors.
#define HOTPATH_AVX512 __attribute__((target("avx512f,avx2,fma")))
HOTPATH_AVX512 void forward_avx512_f32(const ForwardArgs& a, float* s) { forward_body<16, float>(a, s); }
HOTPATH_AVX512 void forward_avx512_bf16(const ForwardArgs& a, float* s) { forward_body<16, std::uint16_t>(a, s); }
HOTPATH_AVX512 void backward_avx512_f32(const BackwardArgs& a, float* s) { backward_body<16, float>(a, s); }
HOTPATH_AVX512 void backward_avx512_bf16(const BackwardArgs& a, float* s) { backward_body<16, std::uint16_t>(a, s); }
const Kernels kAvx512{"avx512", forward_avx512_f32, forward_avx512_bf16, backward_avx512_f32, backward_avx512_bf16};

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
  return has;
}
bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") != 0;
  return has;
}
#else
bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
#endif

std::atomic<AttentionIsa> g_isa{AttentionIsa::kAuto};

const Kernels& kernels() {
#if defined(__x86_64__)
  switch (g_isa.load(std::memory_order_relaxed)) {
    case AttentionIsa::kPortable: return kPortable;
    case AttentionIsa::kAvx2: return kAvx2;
    case AttentionIsa::kAvx512: return kAvx512;
    case AttentionIsa::kAuto: break;
  }
  if (cpu_has_avx512()) return kAvx512;
  if (cpu_has_avx2()) return kAvx2;
#endif
  return kPortable;
}

// ---- drivers ----------------------------------------------------------------------------------------

// The key bias row per batch ([B, Lkp]: 0 keep, −inf masked or padding) and whether a batch has every
// key masked (its scores are then all equal, as in the reference's lowest-filled rows).
struct KeyBias {
  at::Tensor bias;
  std::vector<char> uniform;
};

KeyBias key_bias(const at::Tensor& mask, std::int64_t batch, std::int64_t lk, std::int64_t lkp) {
  KeyBias kb;
  kb.bias = at::full({batch, lkp}, kNegInf, at::kFloat);
  kb.uniform.assign(static_cast<std::size_t>(batch), 0);
  float* bias = kb.bias.data_ptr<float>();
  if (mask.numel() == 0) {  // no mask
    for (std::int64_t b = 0; b < batch; ++b) std::fill(bias + b * lkp, bias + b * lkp + lk, 0.0F);
    return kb;
  }
  const at::Tensor keep = mask.ne(0).to(at::kCPU).contiguous();
  const bool* kp = keep.const_data_ptr<bool>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const bool any = std::any_of(kp + b * lk, kp + (b + 1) * lk, [](bool x) { return x; });
    kb.uniform[static_cast<std::size_t>(b)] = any ? 0 : 1;
    for (std::int64_t j = 0; j < lk; ++j) bias[b * lkp + j] = (!any || kp[b * lk + j]) ? 0.0F : kNegInf;
  }
  return kb;
}

std::size_t element_size(const at::Tensor& t) { return t.element_size(); }

// Forward over tasks (batch, head, block of queries); returns the output and the logsumexp [B, H, Lq].
std::pair<at::Tensor, at::Tensor> fused_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& mask) {
  const std::int64_t batch = q.size(0);
  const std::int64_t heads = q.size(1);
  const std::int64_t lq = q.size(2);
  const std::int64_t lk = k.size(2);
  const std::int64_t d = q.size(3);
  const KeyBias kb = key_bias(mask, batch, lk, round_up(lk, kFwdKeys));
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({batch, heads, lq}, q.options().dtype(at::kFloat));
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const Kernels& ker = kernels();
  const auto run = bf16 ? ker.forward_bf16 : ker.forward_f32;
  const std::size_t es = element_size(q);
  const auto* qp = static_cast<const char*>(q.const_data_ptr());
  const auto* kptr = static_cast<const char*>(k.const_data_ptr());
  const auto* vptr = static_cast<const char*>(v.const_data_ptr());
  auto* op = static_cast<char*>(out.data_ptr());
  float* lp = lse.data_ptr<float>();
  const float* bias = kb.bias.const_data_ptr<float>();
  const std::int64_t lkp = kb.bias.size(1);
  const std::int64_t blocks = (lq + kFwdQueries - 1) / kFwdQueries;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const std::int64_t scratch_floats = forward_scratch_floats(lk, d);
  at::parallel_for(0, batch * heads * blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> scratch(static_cast<std::size_t>(scratch_floats));
    std::int64_t packed_head = -1;
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t bh = t / blocks;
      const std::int64_t blk = t % blocks;
      const std::int64_t b = bh / heads;
      ForwardArgs a;
      a.head.q = qp + static_cast<std::size_t>(bh * lq * d) * es;
      a.head.k = kptr + static_cast<std::size_t>(bh * lk * d) * es;
      a.head.v = vptr + static_cast<std::size_t>(bh * lk * d) * es;
      a.head.bias = bias + b * lkp;
      a.head.uniform = kb.uniform[static_cast<std::size_t>(b)] != 0;
      a.head.lq = lq;
      a.head.lk = lk;
      a.head.d = d;
      a.head.scale = scale;
      a.out = op + static_cast<std::size_t>(bh * lq * d) * es;
      a.lse = lp + bh * lq;
      a.q0 = blk * kFwdQueries;
      a.q1 = std::min(lq, a.q0 + kFwdQueries);
      a.pack_kv = packed_head != bh;
      packed_head = bh;
      run(a, scratch.data());
    }
  });
  return {out, lse};
}

// Backward over tasks (batch, head): dq, dk, dv in q's dtype.
variable_list fused_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                             const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout) {
  const std::int64_t batch = q.size(0);
  const std::int64_t heads = q.size(1);
  const std::int64_t lq = q.size(2);
  const std::int64_t lk = k.size(2);
  const std::int64_t d = q.size(3);
  const std::int64_t lkp = round_up(lk, kBwdKeys);
  const KeyBias kb = key_bias(mask, batch, lk, lkp);
  at::Tensor dq = at::empty_like(q);
  at::Tensor dk = at::empty_like(k);
  at::Tensor dv = at::empty_like(v);
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const Kernels& ker = kernels();
  const auto run = bf16 ? ker.backward_bf16 : ker.backward_f32;
  const std::size_t es = element_size(q);
  const auto at_row = [es](const at::Tensor& t, std::int64_t offset) {
    return static_cast<const char*>(t.const_data_ptr()) + static_cast<std::size_t>(offset) * es;
  };
  const auto at_row_mut = [es](at::Tensor& t, std::int64_t offset) {
    return static_cast<char*>(t.data_ptr()) + static_cast<std::size_t>(offset) * es;
  };
  const float* bias = kb.bias.const_data_ptr<float>();
  const float* lp = lse.const_data_ptr<float>();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const std::int64_t scratch_floats = backward_scratch_floats(lq, lk, d);
  at::parallel_for(0, batch * heads, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> scratch(static_cast<std::size_t>(scratch_floats));
    for (std::int64_t bh = t0; bh < t1; ++bh) {
      const std::int64_t b = bh / heads;
      BackwardArgs a;
      a.head.q = at_row(q, bh * lq * d);
      a.head.k = at_row(k, bh * lk * d);
      a.head.v = at_row(v, bh * lk * d);
      a.head.bias = bias + b * lkp;
      a.head.uniform = kb.uniform[static_cast<std::size_t>(b)] != 0;
      a.head.lq = lq;
      a.head.lk = lk;
      a.head.d = d;
      a.head.scale = scale;
      a.out = at_row(out, bh * lq * d);
      a.dout = at_row(dout, bh * lq * d);
      a.lse = lp + bh * lq;
      a.dq = at_row_mut(dq, bh * lq * d);
      a.dk = at_row_mut(dk, bh * lk * d);
      a.dv = at_row_mut(dv, bh * lk * d);
      run(a, scratch.data());
    }
  });
  return {dq, dk, dv};
}

// Inputs: q, k, v (contiguous, one dtype), mask (empty: none). Saved: q, k, v, mask, out, lse.
struct FusedAttention : public torch::autograd::Function<FusedAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask) {
    auto [out, lse] = fused_forward(q, k, v, mask);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["mask"] = mask;  // not differentiable
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor mask = ctx->saved_data["mask"].toTensor();
    const at::Tensor dout = grads[0].contiguous();
    variable_list g = fused_backward(saved[0], saved[1], saved[2], mask, saved[3], saved[4], dout);
    g.emplace_back();  // mask
    return g;
  }
};

void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  HOTPATH_CHECK(q.defined() && k.defined() && v.defined(), "attention: q, k and v must be defined tensors");
  HOTPATH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be [batch, heads, length, head_dim]; got ",
                q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  HOTPATH_CHECK(k.sizes() == v.sizes(), "attention: k ", k.sizes(), " and v ", v.sizes(), " must have one shape");
  HOTPATH_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3), "attention: q ",
                q.sizes(), " and k ", k.sizes(), " must agree in batch, heads and head_dim");
  HOTPATH_CHECK(q.size(3) > 0 && k.size(2) > 0, "attention: head_dim and key length must be positive; got q ",
                q.sizes(), ", k ", k.sizes());
  if (mask.defined()) {
    HOTPATH_CHECK(mask.dim() == 2 && mask.size(0) == k.size(0) && mask.size(1) == k.size(2),
                  "attention: key_padding_mask must be [batch, key length] = [", k.size(0), ", ", k.size(2), "]; got ",
                  mask.sizes());
  }
}

// The dtype's lowest finite value, which masked scores are filled with (HF BERT's convention).
at::Scalar lowest_value(at::ScalarType type) {
  switch (type) {
    case at::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case at::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case at::kDouble: return std::numeric_limits<double>::lowest();
    default: return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}

}  // namespace

const char* attention_skip_reason(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& key_padding_mask) {
  if (!q.device().is_cpu() || !k.device().is_cpu() || !v.device().is_cpu()) return "not CPU tensors";
  if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) return "q, k and v differ in dtype";
  if (q.scalar_type() != at::kFloat && q.scalar_type() != at::kBFloat16) return "dtype is neither float32 nor bfloat16";
  if (key_padding_mask.defined() && !key_padding_mask.device().is_cpu()) return "the mask is not a CPU tensor";
  if (q.numel() == 0) return "empty input";
  return nullptr;
}

at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& key_padding_mask) {
  check_shapes(q, k, v, key_padding_mask);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  if (key_padding_mask.defined()) {
    const at::Tensor masked =
        key_padding_mask.eq(0).to(scores.device()).view({key_padding_mask.size(0), 1, 1, key_padding_mask.size(1)});
    scores = scores.masked_fill(masked, lowest_value(scores.scalar_type()));
  }
  return at::matmul(at::softmax(scores, -1), v);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_padding_mask,
                     AttentionKernel kernel) {
  check_shapes(q, k, v, key_padding_mask);
  if (kernel == AttentionKernel::kReference) return reference_attention(q, k, v, key_padding_mask);
  const char* why = attention_skip_reason(q, k, v, key_padding_mask);
  if (why != nullptr) {
    HOTPATH_CHECK(kernel != AttentionKernel::kFused, "attention: the fused kernel cannot run: ", why);
    return reference_attention(q, k, v, key_padding_mask);
  }
  // An undefined tensor cannot pass through Function::apply: "no mask" travels as an empty one.
  const at::Tensor mask = key_padding_mask.defined() ? key_padding_mask : at::empty({0}, at::kBool);
  return FusedAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), mask);
}

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& key_padding_mask) {
  return attention(q, k, v, key_padding_mask, AttentionKernel::kAuto);
}

void set_attention_isa(AttentionIsa isa) {
  HOTPATH_CHECK(isa != AttentionIsa::kAvx2 || cpu_has_avx2(),
                "attention: the AVX2 kernels were requested but this CPU (or build) lacks AVX2+FMA");
  HOTPATH_CHECK(isa != AttentionIsa::kAvx512 || cpu_has_avx512(),
                "attention: the AVX-512 kernels were requested but this CPU (or build) lacks AVX-512F");
  g_isa.store(isa, std::memory_order_relaxed);
}

const char* attention_kernel_name() {
#ifdef _OPENMP
#define HOTPATH_SERIAL ""
#else
#define HOTPATH_SERIAL ", serial: built without OpenMP"
#endif
  const Kernels& k = kernels();
  if (&k == &kPortable) {
    if (g_isa.load(std::memory_order_relaxed) == AttentionIsa::kPortable) return "portable: pinned" HOTPATH_SERIAL;
    return cpu_has_avx2() ? "portable" HOTPATH_SERIAL : "portable: this CPU (or build) lacks AVX2+FMA" HOTPATH_SERIAL;
  }
#if defined(__x86_64__)
  if (&k == &kAvx2) return "avx2" HOTPATH_SERIAL;
#endif
  return "avx512" HOTPATH_SERIAL;
#undef HOTPATH_SERIAL
}

}  // namespace hotpath::models
