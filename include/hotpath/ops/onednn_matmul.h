// The int8 matrix product c = a · w (int8 × int8 → exact int32 sums) through Debian's libdnnl (oneDNN v2)
// called directly, on its brgemm kernels: AMX (brg:avx512_core_amx, Sapphire Rapids and later) or AVX512_VNNI
// (brg:avx512_core_vnni: Cascade Lake, Ice Lake, Zen 4). The weight is reordered once into the kernel's blocked
// layout and each row count gets its own primitive, where LibTorch's at::_int_mm takes the plain weight on every
// call (docs/inference.md has the measured ratios). Without such a kernel (no VNNI, ONEDNN_MAX_CPU_ISA below it)
// the constructor refuses and the caller keeps its own product (Int8Linear: at::_int_mm or hotpath's int8_gemm).
// Same sums bit for bit: it is integer arithmetic. Torch-free, like onednn_conv.h, and for the same reason.
//
//   OneDnnInt8Matmul mm(768, 3072, weight_kn);           // throws hotpath::Error without a brgemm kernel
//   if (!mm.try_run(a, 128, c)) { /* past kMaxRowCounts row counts: run another product */ }
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace hotpath::ops {

class OneDnnInt8Matmul {
 public:
  // Distinct row counts a product keeps a primitive for (each a JIT kernel of a few hundred KiB).
  static constexpr int kMaxRowCounts = 32;

  // "" when this build calls oneDNN's library directly, else why it does not.
  static std::string unavailable();

  // weight_kn: [k, n] int8, row-major (at::_int_mm's mat2), not copied: it must outlive this object (a new row
  // count may want it in another layout; Int8Linear keeps it anyway, and a copy would be a third copy of every int8
  // weight). Throws hotpath::Error naming the product when oneDNN has no brgemm kernel for it here (neither AMX
  // nor AVX512_VNNI, ONEDNN_MAX_CPU_ISA below them, a build without libdnnl).
  OneDnnInt8Matmul(std::int64_t k, std::int64_t n, const std::int8_t* weight_kn);
  OneDnnInt8Matmul(OneDnnInt8Matmul&&) noexcept;
  OneDnnInt8Matmul& operator=(OneDnnInt8Matmul&&) noexcept;
  OneDnnInt8Matmul(const OneDnnInt8Matmul&) = delete;
  OneDnnInt8Matmul& operator=(const OneDnnInt8Matmul&) = delete;
  ~OneDnnInt8Matmul();

  // c [m, n] int32 (row-major) = a [m, k] int8 (row-major) · weight. Returns false, writing nothing, for an m
  // past the kMaxRowCounts row counts it already has primitives for, or one oneDNN has no brgemm kernel for (AMX:
  // 1-3 rows at some shapes, in oneDNN 2.6). Safe to call from several threads at once.
  [[nodiscard]] bool try_run(const std::int8_t* a, std::int64_t m, std::int32_t* c) const;

  [[nodiscard]] std::int64_t k() const;
  [[nodiscard]] std::int64_t n() const;
  // oneDNN's implementation, e.g. "brg:avx512_core_amx_int8" or "brg:avx512_core_vnni".
  [[nodiscard]] const std::string& implementation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::ops
