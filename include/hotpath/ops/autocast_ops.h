// hotpath/ops/autocast_ops.h — convolution and linear layers under bf16 autocast on CPUs that have
// no bf16 arithmetic.
//
//   hotpath::ops::AutocastGuard autocast(at::kCPU, at::kBFloat16);
//   at::Tensor y = hotpath::ops::conv2d(*conv, x);   // == conv->forward(x) under autocast
//   at::Tensor z = hotpath::ops::linear(*fc, y);     // == fc->forward(y) under autocast
//
// Why: under CPU bf16 autocast, ATen casts a convolution's or matmul's operands to bf16 and runs a
// bf16 kernel. oneDNN has fast bf16 kernels only on CPUs with AVX-512 (BW/VL/DQ; native bf16 math
// with AVX512_BF16/AMX) — the same test torch's `mkldnn._is_mkldnn_bf16_supported()` makes. Elsewhere
// (AVX2 CPUs such as this project's 2-core AMD EPYC) ATen falls back to reference loops: a ResNet-50
// training step runs 10–15× slower than in fp32, a BERT linear 8× slower.
//
// On those CPUs these functions give autocast's numbers the fast way: the operands are rounded to
// bf16 exactly where autocast rounds them (input, weight, bias), the product is computed by the fp32
// kernels (what a bf16 kernel does inside: fp32 accumulation of bf16 products, which are exact in
// fp32), and the result is rounded to bf16, autocast's output dtype. Gradients pass the same casts in
// reverse, so they are rounded to bf16 at the same points as under native autocast. Results differ
// from a native bf16 kernel only by fp32 summation order. Activations stay bf16 between layers, as
// with autocast. Outside bf16 autocast, on CUDA, or with native bf16 math, they are exactly the
// module's own forward.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <optional>

namespace hotpath::ops {

// Autocast for a region (a forward pass and its loss), as `with torch.autocast(device, dtype)`: on for
// one device type with one dtype, the previous state restored and the cast cache cleared when the
// outermost region ends. An empty dtype makes it a no-op (fp32 training).
class AutocastGuard {
 public:
  AutocastGuard(at::DeviceType device, std::optional<at::ScalarType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  at::DeviceType device_;
  std::optional<at::ScalarType> active_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kFloat;
};

enum class Bf16Math {
  kNative,  // autocast's own bf16 kernels (CPU dispatch level avx512 — AVX-512 BW/VL/DQ — or forced)
  kFp32,    // bf16-rounded operands, fp32 kernels, bf16-rounded results (see above)
};

// Op "bf16_math" of the CPU dispatch (core/cpu.h): native from the avx512 level up, so the cap
// (HOTPATH_MAX_ISA=avx2, cpu::set_max_isa) gives an AVX2 machine's choice; HOTPATH_BF16_MATH=native|fp32
// in the environment forces one (read once; a bad value is an error).
Bf16Math bf16_math();
// The choice and why, e.g. "fp32 (native: this CPU lacks AVX-512 F/BW/DQ/VL)", for logs and benchmark JSON.
const char* bf16_math_name();

// True when a CPU op on `input` runs under bf16 autocast and bf16_math() is kFp32.
bool emulates_bf16(const at::Tensor& input);

// conv->forward(input) / fc->forward(input), taking the kFp32 path when emulates_bf16(input).
at::Tensor conv2d(torch::nn::Conv2dImpl& conv, const at::Tensor& input);
at::Tensor linear(torch::nn::LinearImpl& fc, const at::Tensor& input);
// at::linear(input, weight, bias) with the same rule (bias may be undefined); named apart from the
// module overloads because argument-dependent lookup would also find at::linear / at::matmul.
at::Tensor autocast_linear(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias);
// at::matmul(a, b) with the same rule (attention's QKᵀ and PV).
at::Tensor autocast_matmul(const at::Tensor& a, const at::Tensor& b);

}  // namespace hotpath::ops
