#include "hotpath/ops/int8_gemm.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/Utils.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "serial_note.h"

#ifdef HOTPATH_X86_KERNELS
#include <immintrin.h>
#endif

namespace hotpath::ops {
namespace {

constexpr std::int64_t kPanel = 16;               // columns per panel
constexpr std::int64_t kGroupBytes = kPanel * 4;  // one group of 4 k for 16 columns

struct GemmArgs {
  const std::int8_t* a = nullptr;  // [M, K], row stride lda
  std::int64_t lda = 0;
  const std::int8_t* b = nullptr;  // packed
  std::int32_t* c = nullptr;       // [M, N], row stride ldc
  std::int64_t ldc = 0;
  std::int64_t k = 0;
  std::int64_t n = 0;
  std::int64_t groups = 0;  // ceil(K / 4)
  const std::int32_t* column_offset = nullptr;  // packed B's −128·Σ b over the full groups (seven_bit only)
  bool seven_bit = false;                       // every |b| ≤ 63: the u8·s8 kernel's sums are exact
};

// The 4 bytes of row `a` at group g as one int32 (zero past K: the packed B is zero there too).
inline std::int32_t load_group(const std::int8_t* a, std::int64_t g, std::int64_t k) {
  std::int32_t v = 0;
  const std::int64_t first = g * 4;
  std::memcpy(&v, a + first, static_cast<std::size_t>(std::min<std::int64_t>(4, k - first)));
  return v;
}

// Calls step(group, a) for each group of 4 k, a = the MR rows' 4 bytes there as int32 (the last group zero-padded
// past K). Inlined into each ISA's kernel, so the step runs with that kernel's instructions.
template <int MR, typename Step>
inline __attribute__((always_inline)) void for_each_group(const GemmArgs& g, std::int64_t row0, const Step& step) {
  const std::int64_t full = g.k / 4;
  std::int32_t av[MR];
  for (std::int64_t grp = 0; grp < full; ++grp) {
    for (int r = 0; r < MR; ++r) std::memcpy(&av[r], g.a + (row0 + r) * g.lda + grp * 4, 4);
    step(grp, av);
  }
  if (full < g.groups) {
    for (int r = 0; r < MR; ++r) av[r] = load_group(g.a + (row0 + r) * g.lda, full, g.k);
    step(full, av);
  }
}

// Stores one row's 16 sums of panel p, cut at N.
inline void store_row(const std::int32_t* sums, const GemmArgs& g, std::int64_t row, std::int64_t p) {
  const std::int64_t col = p * kPanel;
  std::memcpy(g.c + row * g.ldc + col, sums, static_cast<std::size_t>(std::min(kPanel, g.n - col)) * 4);
}

// ---- portable: the same packing, plain loops --------------------------------------------------------
void panel_portable(const GemmArgs& g, std::int64_t row0, std::int64_t rows, std::int64_t p) {
  const std::int8_t* panel = g.b + p * g.groups * kGroupBytes;
  for (std::int64_t r = row0; r < row0 + rows; ++r) {
    std::int32_t sums[kPanel] = {};
    const std::int8_t* a = g.a + r * g.lda;
    for (std::int64_t grp = 0; grp < g.groups; ++grp) {
      const std::int8_t* bg = panel + grp * kGroupBytes;
      for (std::int64_t j = 0; j < 4 && grp * 4 + j < g.k; ++j) {
        const std::int32_t av = a[grp * 4 + j];
        for (std::int64_t c = 0; c < kPanel; ++c) sums[c] += av * bg[c * 4 + j];
      }
    }
    store_row(sums, g, r, p);
  }
}

#ifdef HOTPATH_X86_KERNELS
// Adds the products of the last, partial group (K % 4 k) to one row's 16 sums of panel p: the vector kernels run
// over the full groups only, so that one loop body keeps every accumulator in a register.
inline void add_tail(std::int32_t* sums, const GemmArgs& g, std::int64_t row, std::int64_t p) {
  const std::int64_t full = g.k / 4;
  if (full == g.groups) return;
  const std::int8_t* bg = g.b + (p * g.groups + full) * kGroupBytes;
  const std::int8_t* a = g.a + row * g.lda + full * 4;
  for (std::int64_t j = 0; j < g.k - full * 4; ++j) {
    for (std::int64_t c = 0; c < kPanel; ++c) sums[c] += std::int32_t{a[j]} * bg[c * 4 + j];
  }
}

// ---- AVX2: 4 rows × 16 columns per step, 8 accumulators in registers -------------------------------
// Two products, chosen by the packed B:
//  - any 8-bit B: vpmaddubsw(|a|, b·sign(a)) — exact for any a (|a| ≤ 128 unsigned) and |b| ≤ 127, at the
//    cost of a vpabsb and two vpsignb per row and group;
//  - 7-bit B (|b| ≤ 63): vpmaddubsw(a + 128, b) — u8·s8 as MLAS runs it, a pair at most 2·255·63 = 32130, so
//    exact too, with the −128·Σb correction preloaded into the accumulators. About 1.35× the first on Zen 3.
// (Target pragmas, not attributes: the lambdas inside inherit them.)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
template <int MR, bool kSevenBit>
void rows_avx2(const GemmArgs& g, std::int64_t row0, std::int64_t p) {
  static_assert(MR >= 1 && MR <= 4);
  const std::int8_t* bp = g.b + p * g.groups * kGroupBytes;
  const std::int8_t* a0 = g.a + row0 * g.lda;
  const std::int64_t lda = g.lda;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i init0 = _mm256_setzero_si256();
  __m256i init1 = init0;
  if constexpr (kSevenBit) {
    init0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.column_offset + p * kPanel));
    init1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.column_offset + p * kPanel + 8));
  }
  __m256i c00 = init0, c01 = init1, c10 = init0, c11 = init1, c20 = init0, c21 = init1, c30 = init0, c31 = init1;
  const auto row = [&](const std::int8_t* ap, __m256i b0, __m256i b1, __m256i& x0, __m256i& x1)
                       __attribute__((always_inline)) {
    std::int32_t v = 0;
    std::memcpy(&v, ap, 4);
    const __m256i a4 = _mm256_set1_epi32(v);
    if constexpr (kSevenBit) {
      const __m256i au = _mm256_xor_si256(a4, flip);  // a + 128 as u8
      x0 = _mm256_add_epi32(x0, _mm256_madd_epi16(_mm256_maddubs_epi16(au, b0), ones));
      x1 = _mm256_add_epi32(x1, _mm256_madd_epi16(_mm256_maddubs_epi16(au, b1), ones));
    } else {
      const __m256i aa = _mm256_abs_epi8(a4);
      x0 = _mm256_add_epi32(x0, _mm256_madd_epi16(_mm256_maddubs_epi16(aa, _mm256_sign_epi8(b0, a4)), ones));
      x1 = _mm256_add_epi32(x1, _mm256_madd_epi16(_mm256_maddubs_epi16(aa, _mm256_sign_epi8(b1, a4)), ones));
    }
  };
  const std::int64_t full = g.k / 4;
  for (std::int64_t grp = 0; grp < full; ++grp, bp += kGroupBytes) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + 32));
    const std::int8_t* ap = a0 + grp * 4;
    row(ap, b0, b1, c00, c01);
    if constexpr (MR > 1) row(ap + lda, b0, b1, c10, c11);
    if constexpr (MR > 2) row(ap + 2 * lda, b0, b1, c20, c21);
    if constexpr (MR > 3) row(ap + 3 * lda, b0, b1, c30, c31);
  }
  const __m256i out[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
  const bool direct = full == g.groups && (p + 1) * kPanel <= g.n;  // no K tail, all 16 columns inside N
  for (int r = 0; r < MR; ++r) {
    if (direct) {
      std::int32_t* dst = g.c + (row0 + r) * g.ldc + p * kPanel;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), out[r][0]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8), out[r][1]);
      continue;
    }
    alignas(32) std::int32_t sums[kPanel];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums), out[r][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums + 8), out[r][1]);
    add_tail(sums, g, row0 + r, p);
    store_row(sums, g, row0 + r, p);
  }
}

template <bool kSevenBit>
void panel_avx2_as(const GemmArgs& g, std::int64_t row0, std::int64_t rows, std::int64_t p) {
  std::int64_t r = row0;
  for (; r + 4 <= row0 + rows; r += 4) rows_avx2<4, kSevenBit>(g, r, p);
  switch (row0 + rows - r) {
    case 3: rows_avx2<3, kSevenBit>(g, r, p); break;
    case 2: rows_avx2<2, kSevenBit>(g, r, p); break;
    case 1: rows_avx2<1, kSevenBit>(g, r, p); break;
    default: break;
  }
}

void panel_avx2(const GemmArgs& g, std::int64_t row0, std::int64_t rows, std::int64_t p) {
  if (g.seven_bit) {
    panel_avx2_as<true>(g, row0, rows, p);
  } else {
    panel_avx2_as<false>(g, row0, rows, p);
  }
}
#pragma GCC pop_options

// ---- AVX-512BW: 8 rows × 16 columns per step, one zmm per row ------------------------------------------
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
template <int MR>
void rows_avx512(const GemmArgs& g, std::int64_t row0, std::int64_t p) {
  const std::int8_t* panel = g.b + p * g.groups * kGroupBytes;
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i zero = _mm512_setzero_si512();
  __m512i acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_si512();
  const auto step = [&](std::int64_t grp, const std::int32_t* av) {
    const __m512i b = _mm512_loadu_si512(panel + grp * kGroupBytes);
    for (int r = 0; r < MR; ++r) {
      const __m512i a4 = _mm512_set1_epi32(av[r]);
      const __m512i bs = _mm512_mask_sub_epi8(b, _mm512_movepi8_mask(a4), zero, b);  // b · sign(a)
      acc[r] = _mm512_add_epi32(acc[r], _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(a4), bs), ones));
    }
  };
  for_each_group<MR>(g, row0, step);
  for (int r = 0; r < MR; ++r) {
    alignas(64) std::int32_t sums[kPanel];
    _mm512_store_si512(sums, acc[r]);
    store_row(sums, g, row0 + r, p);
  }
}

void panel_avx512(const GemmArgs& g, std::int64_t row0, std::int64_t rows, std::int64_t p) {
  std::int64_t r = row0;
  for (; r + 8 <= row0 + rows; r += 8) rows_avx512<8>(g, r, p);
  if (r + 4 <= row0 + rows) {
    rows_avx512<4>(g, r, p);
    r += 4;
  }
  for (; r < row0 + rows; ++r) rows_avx512<1>(g, r, p);
}
#pragma GCC pop_options
#endif

std::string gemm_note() {
  std::string note = "runs where at::_int_mm would take its scalar loop (no oneDNN int8: this CPU lacks AVX512_VNNI)";
  if (std::strlen(detail::kSerialNote) != 0) note.append("; ").append(detail::kSerialNote);
  return note;
}
const char* gemm_note_cstr() {
  static const std::string note = gemm_note();
  return note.c_str();
}

const cpu::OpDispatch kGemmDispatch{"int8_gemm",
                                    {{"avx512", cpu::Isa::kAvx512, cpu::kX86Kernels},
                                     {"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels},
                                     {"portable", cpu::Isa::kScalar}},
                                    {.note = gemm_note_cstr()}};

using PanelFn = void (*)(const GemmArgs&, std::int64_t, std::int64_t, std::int64_t);

PanelFn panel_kernel() {
  const std::size_t chosen = kGemmDispatch.select();
#ifdef HOTPATH_X86_KERNELS
  if (chosen == 0) return panel_avx512;
  if (chosen == 1) return panel_avx2;
#endif
  (void)chosen;
  return panel_portable;
}

}  // namespace

Int8PackedB int8_gemm_pack(const at::Tensor& b) {
  HOTPATH_CHECK(b.defined() && b.scalar_type() == at::kChar && b.dim() == 2 && b.device().is_cpu(),
                "int8_gemm_pack: expected a CPU int8 matrix [K, N]; got ",
                b.defined() ? b.toString() : std::string("an undefined tensor"), " ",
                b.defined() ? b.sizes() : c10::IntArrayRef{});
  const std::int64_t k = b.size(0);
  const std::int64_t n = b.size(1);
  HOTPATH_CHECK(k > 0 && n > 0, "int8_gemm_pack: B ", b.sizes(), " is empty");
  HOTPATH_CHECK(b.min().item<int>() >= -127, "int8_gemm_pack: B holds -128; expected values in [-127, 127]");
  const std::int64_t groups = (k + 3) / 4;
  const std::int64_t panels = (n + kPanel - 1) / kPanel;
  Int8PackedB out;
  out.data = at::empty({panels * groups * kGroupBytes}, b.options().dtype(at::kChar));
  out.k = k;
  out.n = n;
  const at::Tensor src = b.contiguous();
  const std::int8_t* s = src.const_data_ptr<std::int8_t>();
  std::int8_t* d = out.data.mutable_data_ptr<std::int8_t>();
  out.seven_bit = b.max().item<int>() <= 63 && b.min().item<int>() >= -63;
  if (out.seven_bit) {  // −128 · Σ_k b[k][n] over the full groups of 4 k (the AVX2 u8 kernel's correction)
    out.column_offset = at::empty({panels * kPanel}, b.options().dtype(at::kInt));
    std::int32_t* off = out.column_offset.mutable_data_ptr<std::int32_t>();
    std::fill_n(off, panels * kPanel, 0);
    for (std::int64_t row = 0; row < (k / 4) * 4; ++row) {
      for (std::int64_t col = 0; col < n; ++col) off[col] -= 128 * std::int32_t{s[row * n + col]};
    }
  }
  for (std::int64_t p = 0; p < panels; ++p) {
    for (std::int64_t grp = 0; grp < groups; ++grp) {
      std::int8_t* dst = d + (p * groups + grp) * kGroupBytes;
      for (std::int64_t c = 0; c < kPanel; ++c) {
        for (std::int64_t j = 0; j < 4; ++j) {
          const std::int64_t row = grp * 4 + j;
          const std::int64_t col = p * kPanel + c;
          dst[c * 4 + j] = row < k && col < n ? s[row * n + col] : std::int8_t{0};
        }
      }
    }
  }
  return out;
}

void int8_gemm_out(const at::Tensor& a, const Int8PackedB& b, const at::Tensor& c) {
  HOTPATH_CHECK(b.data.defined() && b.k > 0 && b.n > 0, "int8_gemm_out: B is not packed (int8_gemm_pack)");
  HOTPATH_CHECK(a.defined() && a.scalar_type() == at::kChar && a.dim() == 2 && a.size(1) == b.k && a.is_contiguous(),
                "int8_gemm_out: a must be a contiguous int8 matrix [M, ", b.k, "]; got ",
                a.defined() ? a.toString() : std::string("an undefined tensor"), " ",
                a.defined() ? a.sizes() : c10::IntArrayRef{});
  const std::int64_t m = a.size(0);
  HOTPATH_CHECK(c.defined() && c.scalar_type() == at::kInt && c.dim() == 2 && c.size(0) == m && c.size(1) == b.n &&
                    c.stride(1) == 1,
                "int8_gemm_out: c must be int32 [", m, ", ", b.n, "] with contiguous rows; got ",
                c.defined() ? c.toString() : std::string("an undefined tensor"), " ",
                c.defined() ? c.sizes() : c10::IntArrayRef{});
  if (m == 0) return;
  GemmArgs g;
  g.a = a.const_data_ptr<std::int8_t>();
  g.lda = a.size(1);
  g.b = b.data.const_data_ptr<std::int8_t>();
  g.c = c.mutable_data_ptr<std::int32_t>();
  g.ldc = c.stride(0);
  g.k = b.k;
  g.n = b.n;
  g.groups = (b.k + 3) / 4;
  g.seven_bit = b.seven_bit;
  g.column_offset = b.seven_bit ? b.column_offset.const_data_ptr<std::int32_t>() : nullptr;
  const PanelFn kernel = panel_kernel();
  // Tasks: row blocks (≤ 64 rows: their A stays in L2 across the panels) × panels, a thread's range running
  // through one block's panels before the next block.
  constexpr std::int64_t kRowBlock = 64;
  const std::int64_t panels = (b.n + kPanel - 1) / kPanel;
  const std::int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  at::parallel_for(0, blocks * panels, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t row0 = (t / panels) * kRowBlock;
      kernel(g, row0, std::min(kRowBlock, m - row0), t % panels);
    }
  });
}

bool int8_gemm_prefers_seven_bit_weights() {
  return kGemmDispatch.select() == 1;  // the AVX2 variant: only it has a faster product for 7-bit weights
}

bool int8_gemm_replaces_int_mm() {
  // at::native::_int_mm_out_cpu: oneDNN when userEnabledMkldnn() && is_avx512_vnni_supported(), else its loop.
  return !(at::globalContext().userEnabledMkldnn() && at::cpu::is_avx512_vnni_supported());
}

namespace {

// $HOTPATH_INT8_MATMUL, read once: -1 auto, 0 int_mm, 1 int8_gemm.
int forced_int8_matmul() {
  static const int forced = [] {
    const char* v = std::getenv("HOTPATH_INT8_MATMUL");  // NOLINT(concurrency-mt-unsafe): read once
    if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "auto") return -1;
    if (std::string_view(v) == "int8_gemm") return 1;
    if (std::string_view(v) == "int_mm") return 0;
    throw Error(std::string("$HOTPATH_INT8_MATMUL: '") + v + "' is not one of auto, int8_gemm, int_mm");
  }();
  return forced;
}

}  // namespace

bool int8_gemm_by_default() {
  const int forced = forced_int8_matmul();
  return forced < 0 ? int8_gemm_replaces_int_mm() : forced == 1;
}

bool int8_onednn_brgemm_by_default() { return forced_int8_matmul() < 0 && !int8_gemm_replaces_int_mm(); }

}  // namespace hotpath::ops
