// hotpath/ops/int8_linear.h — dynamic INT8 Linear for inference: int8 weights (per output channel),
// int8 activations quantized per row on the fly, int32 accumulation, one fused float epilogue.
//
//   auto [w8, w_scale] = Int8Linear::quantize_weight(linear->weight);        // once, at export
//   Int8Linear op = Int8Linear::prepare(w8, w_scale, linear->bias);          // once, at engine load
//   at::Tensor y = op.forward(x, "gelu");                                    // x [..., I] f32 or bf16
//
// forward(x) = act(x_q·W_qᵀ · x_scale[m]·w_scale[n] + bias[n] (+ residual)) where x_q = round(x[m]/x_scale[m]),
// x_scale[m] = max|x[m, :]|/127 (symmetric, one scale per row) and W_q = round(W[n]/w_scale[n]),
// w_scale[n] = max|W[n, :]|/127. Three steps: a fused row-absmax + quantize kernel, at::_int_mm (oneDNN
// s8·s8→s32; VNNI where the CPU has it), and one epilogue kernel (both scales, bias, residual, activation;
// f32 out, or bf16 when x is bf16). The two kernels are compiled for AVX-512, AVX2 and the baseline and
// chosen by the CPU dispatch (op "int8_linear", core/cpu.h; kernels in int8_kernels.h); forward_reference() is
// the twin in ATen ops.
//
// LibTorch runs _int_mm through oneDNN only on CPUs with AVX512_VNNI; elsewhere its scalar loop would
// make INT8 13× slower than fp32, so prepare() packs the weight for hotpath's own int8_gemm there
// (int8_gemm.h: AVX-512BW/AVX2 vpmaddubsw with exact sums; on AVX2, kAuto requantizes to 7-bit weights for
// its u8·s8 product, 1.35× faster than its exact 8-bit one). Where oneDNN runs without
// VNNI (ONEDNN_MAX_CPU_ISA capped below it) it multiplies u8·s8 pairs into saturating int16 (its "int8
// computation nuances"): 8-bit weights then give wrong sums, 7-bit weights ([-63, 63]) exact ones, so
// prepare() requantizes the weight to 7 bits there (Int8MatmulMode::kAuto). int8_linear_matmul_note() says
// which of the three runs.
// onednn::qlinear_pointwise.tensor (prepacked weight, oneDNN's own fused epilogue) was measured too
// (bench/int8_bench.cpp, one thread, busy 2-core AVX-512 VNNI): faster at 768→3072 (~120 vs ~150 ms at
// M = 4096: no int32 round trip), twice as slow at 3072→768 (~134 vs ~71 ms; part of it the bench's unfused ATen abs().max() for the
// per-tensor scale), a tie at M = 128; and it takes
// one activation scale per tensor: 0.013–0.014 relative error vs 0.011 per row. Not kept: per-row accuracy
// with no loss overall; its per-tensor form would need its own twin and calibration.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "hotpath/ops/int8_gemm.h"
#include "hotpath/ops/onednn_matmul.h"
#include "hotpath/ops/int8_kernels.h"

namespace hotpath::ops {

class Int8Linear {
 public:
  // Per-output-channel symmetric quantization of a float weight [O, I]: (int8 [O, I] in [-127, 127],
  // f32 scale [O]); an all-zero row gets scale 1.
  static std::pair<at::Tensor, at::Tensor> quantize_weight(const at::Tensor& weight);

  // weight int8 [O, I], weight_scale f32 [O] (> 0), bias f32 [O] or undefined. Throws hotpath::Error
  // naming the argument and what was expected.
  // kernel: which product runs (kAuto: hotpath's int8_gemm where at::_int_mm would be scalar, int8_gemm.h).
  static Int8Linear prepare(const at::Tensor& weight_int8, const at::Tensor& weight_scale, const at::Tensor& bias,
                            Int8MatmulMode mode = Int8MatmulMode::kAuto,
                            Int8MatmulKernel kernel = Int8MatmulKernel::kAuto);

  // x [..., I] float32 or bfloat16 → [..., O] in x's dtype. act is one of infer::kActivations (graph.h);
  // residual (optional, [..., O], f32 or bf16) is added before the activation.
  [[nodiscard]] at::Tensor forward(const at::Tensor& x, std::string_view act = "none",
                                   const at::Tensor& residual = at::Tensor()) const;
  // forward() into caller-owned memory (the engine's planned buffers): out contiguous with M·O elements
  // (M = x.numel() / I) in f32 or bf16; buf.q int8 M·I, buf.x_scale f32 [M], buf.acc int32 [rows, O] (rows ≥ 1:
  // the matmul runs in blocks of that many rows; acc_rows(M) is what forward() uses). quantized = true: buf.q
  // and buf.x_scale already hold x's row quantization (layer_norm_rows_out wrote them) and x is not read.
  // Same kernels as forward(), so the same bits.
  struct Buffers {
    at::Tensor q, x_scale, acc;
  };
  void forward_out(const at::Tensor& x, std::string_view act, const at::Tensor& residual, const at::Tensor& out,
                   const Buffers& buf, bool quantized = false) const;
  [[nodiscard]] std::int64_t acc_rows(std::int64_t m) const;

  // The same computation in ATen ops (quantize, _int_mm, scale, bias, residual, activation): the twin.
  [[nodiscard]] at::Tensor forward_reference(const at::Tensor& x, std::string_view act = "none",
                                             const at::Tensor& residual = at::Tensor()) const;

  [[nodiscard]] std::int64_t in_features() const { return weight_kn_.size(0); }
  [[nodiscard]] std::int64_t out_features() const { return weight_kn_.size(1); }
  [[nodiscard]] int weight_bits() const { return weight_bits_; }
  // Whether forward() multiplies with hotpath's int8_gemm (its packed weight) rather than at::_int_mm.
  [[nodiscard]] bool uses_int8_gemm() const { return packed_.data.defined(); }
  // Whether forward() multiplies with oneDNN's brgemm kernel called directly (at::_int_mm past its row counts).
  [[nodiscard]] bool uses_onednn_brgemm() const { return brgemm_ != nullptr; }
  // The weight as stored for the matmul, int8 [I, O] contiguous, and its scales (7-bit ones included).
  [[nodiscard]] const at::Tensor& weight_kn() const { return weight_kn_; }
  [[nodiscard]] const at::Tensor& weight_scale() const { return weight_scale_; }

 private:
  Int8Linear() = default;
  at::Tensor weight_kn_;     // int8 [I, O] contiguous: _int_mm's mat2
  at::Tensor weight_scale_;  // f32 [O]
  at::Tensor bias_;          // f32 [O] or undefined
  Int8PackedB packed_;       // weight_kn_ packed for int8_gemm_out, where that runs (else empty)
  // oneDNN's brgemm product (onednn_matmul.h), where that runs (else null); it reads weight_kn_'s storage, which
  // every copy shares.
  std::shared_ptr<const OneDnnInt8Matmul> brgemm_;
  int weight_bits_ = 8;
};

}  // namespace hotpath::ops
