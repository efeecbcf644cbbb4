// hotpath/ops/int8_gemm.h — hotpath's own s8·s8 → s32 matrix product, for the CPUs where LibTorch's
// at::_int_mm has no fast path.
//
//   const Int8PackedB b = int8_gemm_pack(w_kn);   // int8 [K, N], once, at load
//   int8_gemm_out(q, b, acc);                      // q int8 [M, K] → acc int32 [M, N]
//
// LibTorch runs _int_mm through oneDNN only where at::cpu::is_avx512_vnni_supported() (and oneDNN is
// enabled); everywhere else — AVX2-only CPUs, AVX-512 without VNNI, AVX-VNNI-only clients — it takes a
// scalar loop, 13× slower than an fp32 GEMM (issue 29). int8_gemm_replaces_int_mm() asks LibTorch that
// same question, so Int8Linear takes this GEMM exactly where _int_mm would be scalar.
//
// The kernels multiply with vpmaddubsw on |a| and b·sign(a) (vpsignb; AVX-512: a masked negate), then
// vpmaddwd into int32: a pair of products is at most 2·128·127 = 32512, so the int16 step never
// saturates and the sums are exact for any a and b in [-127, 127] (8-bit weights, no 7-bit requantization).
// Where every weight fits 7 bits (|b| ≤ 63, Int8Linear's 7-bit weights) the AVX2 kernel multiplies u8·s8 as
// MLAS does, vpmaddubsw(a + 128, b) with −128·Σb preloaded: exact too (a pair is at most 2·255·63 < 2^15) and
// about 1.35× faster on Zen 3, as it drops the vpabsb/vpsignb per row.
// B is packed once into panels of 16 columns × 4 k (K and N zero-padded). Variants: AVX-512BW, AVX2 and a
// portable loop over the same packing, chosen by the CPU dispatch (op "int8_gemm", core/cpu.h); all give
// the same int32 sums, equal to at::_int_mm's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hotpath::ops {

// B [K, N] packed for int8_gemm_out: panels of 16 columns; within a panel, groups of 4 k, each group 16
// columns × 4 bytes (column-major within the group).
struct Int8PackedB {
  at::Tensor data;  // int8, ceil(N/16) · ceil(K/4) · 64 bytes
  std::int64_t k = 0;
  std::int64_t n = 0;
  bool seven_bit = false;    // every |b| ≤ 63: the AVX2 kernel takes its u8·s8 product
  at::Tensor column_offset;  // seven_bit: int32 [ceil(N/16) · 16], −128 · Σ b[k][n] over k < 4·⌊K/4⌋
};

// Packs b (int8 [K, N], any strides, values in [-127, 127]: -128 is refused, its negation overflows).
Int8PackedB int8_gemm_pack(const at::Tensor& b);

// c [M, N] (int32, contiguous rows: stride(1) == 1) = a [M, K] (int8, contiguous) · B. Exact.
void int8_gemm_out(const at::Tensor& a, const Int8PackedB& b, const at::Tensor& c);

// Whether the variant the CPU dispatch picks now (HOTPATH_MAX_ISA included) multiplies 7-bit weights faster
// than 8-bit ones: the AVX2 kernel (u8·s8, 1.35×). Int8Linear::prepare(kAuto) requantizes to 7 bits there.
bool int8_gemm_prefers_seven_bit_weights();

// Whether LibTorch's at::_int_mm takes its scalar loop here (no oneDNN int8 matmul: the CPU lacks
// AVX512_VNNI, or oneDNN is disabled): where Int8Linear runs int8_gemm_out instead. Asked of LibTorch
// each call (cheap), as _int_mm itself does.
bool int8_gemm_replaces_int_mm();

// What Int8MatmulKernel::kAuto runs: $HOTPATH_INT8_MATMUL (read once) = "int8_gemm" or "int_mm" forces one
// (benchmarks: an AVX2 CPU's product on a VNNI one), "auto" or unset: int8_gemm exactly where
// int8_gemm_replaces_int_mm(). Another value throws hotpath::Error naming the variable.
bool int8_gemm_by_default();
// Whether kAuto tries oneDNN's brgemm kernel called directly (onednn_matmul.h) before at::_int_mm: where _int_mm has
// oneDNN's VNNI path (so int8_gemm does not replace it) and $HOTPATH_INT8_MATMUL is unset or "auto".
bool int8_onednn_brgemm_by_default();

}  // namespace hotpath::ops
