// hotpath/ops/int8_kernels.h — the element-wise kernels around hotpath's INT8 matmuls and convolutions:
// quantize activations (per row symmetric s8, per tensor affine u8) and dequantize int32 sums.
//
//   auto [q, x_scale] = int8_quantize_rows(x);                      // x [M, K] f32/bf16 → s8, f32 [M]
//   at::Tensor y = int8_dequantize_epilogue(at::_int_mm(q, w_kn), x_scale, w_scale, bias, {}, "gelu", at::kFloat);
//   at::Tensor u8 = int8_quantize_u8(image, 0.02, 128);            // [N, C, H, W] → u8 channels-last
//
// Each kernel is compiled for AVX-512, AVX2 and the baseline (GCC vectors) and chosen per call by the CPU
// dispatch (core/cpu.h): op "int8_linear" (row quantizer, epilogue) and op "int8_conv" (u8 quantizer),
// whose notes also say what the matmul / convolution itself runs (oneDNN is not capped by HOTPATH_MAX_ISA).
// Every variant rounds each product and sum as the ATen twins written in the tests do: quantizers are bit
// for bit, the epilogue too except its transcendental activations (~1e-7, polynomial exp and erf).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>
#include <utility>

namespace hotpath::ops {

// The int8 weights a matmul or convolution runs with (oneDNN's u8·s8 pairs saturate int16 without VNNI).
enum class Int8MatmulMode {
  kAuto,          // 8-bit weights, except 7-bit where oneDNN runs the product without VNNI or int8_gemm runs on AVX2
  kEightBit,      // keep the 8-bit weights (int8_gemm: exact and slower on AVX2; oneDNN without VNNI: wrong sums)
  kSevenBitWeights  // requantize the weights to [-63, 63] (twice the scale)
};


// Row-wise symmetric quantization of x [M, K] (f32 or bf16): (int8 [M, K], f32 scale [M]),
// scale = max|row|/qmax (1 for an all-zero row), q = round_half_even(x · (qmax/max|row|)).
std::pair<at::Tensor, at::Tensor> int8_quantize_rows(const at::Tensor& x, int qmax = 127);
// The same into caller-owned q (contiguous int8, M·K elements) and scale (contiguous f32 [M]).
void int8_quantize_rows_out(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale, int qmax = 127);

// out [M, N] = act(acc · x_scale[m] · w_scale[n] + bias[n] + residual[m, n]) from acc int32 [M, N];
// bias/residual optional (residual f32 or bf16, M·N elements); out_dtype f32 or bf16.
at::Tensor int8_dequantize_epilogue(const at::Tensor& acc, const at::Tensor& x_scale, const at::Tensor& w_scale,
                                    const at::Tensor& bias, const at::Tensor& residual, std::string_view act,
                                    at::ScalarType out_dtype);
// The same into `out` (contiguous f32/bf16, M·N elements): a row block of a larger output.
void int8_dequantize_epilogue_out(const at::Tensor& acc, const at::Tensor& x_scale, const at::Tensor& w_scale,
                                  const at::Tensor& bias, const at::Tensor& residual, std::string_view act,
                                  at::Tensor& out);

// out = LayerNorm(x + residual) over rows of x [M, K] (contiguous f32; residual optional, same shape),
// weight/bias f32 [K], with ATen's formula (biased variance; moments more precise than ATen's, ~1e-7
// apart). With q (int8, M·K) and x_scale (f32 [M]) defined, the row quantization of out is written in the
// same pass over each row, equal to int8_quantize_rows(out): the next int8 linear skips its quantizer.
// Op "int8_linear"'s dispatch; twin: at::layer_norm (+ int8_quantize_rows).
void layer_norm_rows_out(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                         const at::Tensor& bias, double eps, const at::Tensor& out, const at::Tensor& q = at::Tensor(),
                         const at::Tensor& x_scale = at::Tensor());

// Per-tensor affine quantization of an image batch x [N, C, H, W] (f32 or bf16, any memory format):
// u8 channels-last, q = clamp(round_half_even(x · (1/scale)) + zero_point, 0, 255).
at::Tensor int8_quantize_u8(const at::Tensor& x, double scale, std::int64_t zero_point);

// act(x) in ATen ops for every name of infer::kActivations (graph.h); throws naming the activation otherwise.
at::Tensor apply_activation_reference(const at::Tensor& x, std::string_view act);
// Throws hotpath::Error unless act is one of infer::kActivations.
void check_activation(std::string_view act, std::string_view where);

// Which product an Int8Linear runs: LibTorch's at::_int_mm, hotpath's int8_gemm (int8_gemm.h) or oneDNN's brgemm
// kernel (AMX or AVX512_VNNI) called directly (onednn_matmul.h; at::_int_mm past its row counts). kAuto takes
// int8_gemm exactly where _int_mm would run its scalar loop (int8_gemm_replaces_int_mm()), else the brgemm kernel
// where oneDNN has one, else _int_mm. kOneDnnBrgemm throws hotpath::Error where there is no brgemm kernel.
enum class Int8MatmulKernel { kAuto, kIntMm, kHotpathGemm, kOneDnnBrgemm };

// Whether oneDNN's int8 matmul has VNNI here: the CPU has AVX512_VNNI or AVX_VNNI and ONEDNN_MAX_CPU_ISA
// (read once) does not cap oneDNN below it. And the matmul's line in reports: "... VNNI ...: 8-bit weights",
// "... without VNNI: <why>): 7-bit weights ...", or "matmul hotpath int8_gemm (...)" where _int_mm is scalar.
bool int8_matmul_has_vnni();
const char* int8_linear_matmul_note();
// The convolution's line: "convolution onednn::qconv_pointwise (u8 x s8, VNNI): 8-bit weights" or the 7-bit one.
const char* int8_conv_note();

}  // namespace hotpath::ops
