#include "hotpath/ops/autocast_ops.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <variant>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"

namespace hotpath::ops {
namespace {

// Native bf16 math only with AVX512_BF16: oneDNN runs bf16 on plain AVX-512 (BW/VL/DQ, torch's
// mkldnn_bf16_device_check) by converting to fp32 inside its kernels, and that is slower than fp32 — a
// [4096, 384] × [384, 1536] linear took 0.277 s in bf16 vs 0.090 s in fp32 on a 2-core AVX-512 VNNI CPU
// without BF16 (torch 2.15, 2 threads); below AVX-512 ATen's bf16 conv/matmul are reference loops. So
// there bf16-rounded operands on the fp32 kernels win. HOTPATH_BF16_MATH=native|fp32 forces one.
const cpu::OpDispatch kDispatch{"bf16_math",
                                {{"native", cpu::Isa::kAvx512Bf16}, {"fp32", cpu::Isa::kScalar}},
                                {.override_env = "HOTPATH_BF16_MATH"}};

at::Tensor round_to_bf16(const at::Tensor& t) {
  return t.defined() ? t.to(at::kBFloat16).to(at::kFloat) : t;
}

// Runs the wrapped op with autocast switched off (the operands are already rounded by hand).
class AutocastOff {
 public:
  AutocastOff() : guard_(c10::autocast_dispatch_keyset) {}

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

}  // namespace

AutocastGuard::AutocastGuard(at::DeviceType device, std::optional<at::ScalarType> dtype)
    : device_(device), active_(dtype) {
  if (!active_) return;
  prev_enabled_ = at::autocast::is_autocast_enabled(device_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, *dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_, prev_dtype_);
}

Bf16Math bf16_math() { return kDispatch.select() == 0 ? Bf16Math::kNative : Bf16Math::kFp32; }
const char* bf16_math_name() { return kDispatch.describe(); }

bool emulates_bf16(const at::Tensor& input) {
  return input.device().is_cpu() && at::autocast::is_autocast_enabled(at::kCPU) &&
         at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16 && bf16_math() == Bf16Math::kFp32;
}

at::Tensor conv2d(torch::nn::Conv2dImpl& conv, const at::Tensor& input) {
  const auto& options = conv.options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&options.padding());
  if (!emulates_bf16(input) || padding == nullptr || !std::holds_alternative<torch::enumtype::kZeros>(options.padding_mode())) {
    return conv.forward(input);
  }
  at::Tensor out;
  {
    AutocastOff off;
    out = at::conv2d(round_to_bf16(input), round_to_bf16(conv.weight), round_to_bf16(conv.bias), *options.stride(),
                     **padding, *options.dilation(), options.groups());
  }
  return out.to(at::kBFloat16);
}

at::Tensor autocast_linear(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias) {
  if (!emulates_bf16(input)) return at::linear(input, weight, bias);
  at::Tensor out;
  {
    AutocastOff off;
    out = at::linear(round_to_bf16(input), round_to_bf16(weight), round_to_bf16(bias));
  }
  return out.to(at::kBFloat16);
}

at::Tensor linear(torch::nn::LinearImpl& fc, const at::Tensor& input) {
  if (!emulates_bf16(input)) return fc.forward(input);
  return autocast_linear(input, fc.weight, fc.bias);
}

at::Tensor autocast_matmul(const at::Tensor& a, const at::Tensor& b) {
  if (!emulates_bf16(a)) return at::matmul(a, b);
  at::Tensor out;
  {
    AutocastOff off;
    out = at::matmul(round_to_bf16(a), round_to_bf16(b));
  }
  return out.to(at::kBFloat16);
}

}  // namespace hotpath::ops
