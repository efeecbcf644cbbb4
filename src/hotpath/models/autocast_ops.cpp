#include "hotpath/models/autocast_ops.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdlib>
#include <string_view>
#include <variant>

#include "hotpath/core/error.h"

namespace hotpath::models {
namespace {

struct Bf16Choice {
  Bf16Math math;
  const char* name;
};

Bf16Choice detect_bf16_math() {
  if (const char* env = std::getenv("HOTPATH_BF16_MATH"); env != nullptr && *env != '\0') {
    const std::string_view value(env);
    HOTPATH_CHECK(value == "native" || value == "fp32", "HOTPATH_BF16_MATH: expected native or fp32, got '", value,
                  "'");
    return value == "native" ? Bf16Choice{Bf16Math::kNative, "native (HOTPATH_BF16_MATH=native)"}
                             : Bf16Choice{Bf16Math::kFp32, "fp32 (HOTPATH_BF16_MATH=fp32)"};
  }
#if defined(__x86_64__) || defined(__i386__)
  // torch's mkldnn_bf16_device_check(): oneDNN's bf16 kernels need AVX-512 BW/VL/DQ (emulated bf16
  // there, native with AVX512_BF16 or AMX); without them ATen's bf16 conv/matmul are reference loops.
  const bool onednn_bf16 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512dq");
  if (onednn_bf16) return {Bf16Math::kNative, "native (oneDNN bf16 kernels)"};
  return {Bf16Math::kFp32, "fp32 (CPU lacks AVX-512 bf16 kernels: bf16-rounded operands, fp32 math)"};
#else
  return {Bf16Math::kNative, "native"};
#endif
}

const Bf16Choice& bf16_choice() {
  static const Bf16Choice choice = detect_bf16_math();
  return choice;
}

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

Bf16Math bf16_math() { return bf16_choice().math; }
const char* bf16_math_name() { return bf16_choice().name; }

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

}  // namespace hotpath::models
