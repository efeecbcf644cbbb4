#include "hotpath/ops/int8_conv.h"

#include <ATen/ATen.h>
#include <ATen/core/List.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "hotpath/core/error.h"
#include "hotpath/ops/int8_kernels.h"

namespace hotpath::ops {
namespace {

// The registered C++ types of the oneDNN ops (ATen/native/quantized/cpu/qconv.h, QConvoneDNN): a typed
// handle must name exactly these, or the dispatcher refuses it ("wrong signature").
using IntList = c10::List<std::int64_t>;
using ScalarList = c10::List<std::optional<at::Scalar>>;
using QConvPointwise = at::Tensor(at::Tensor, double, std::int64_t, at::Tensor, at::Tensor, at::Tensor,
                                  std::optional<at::Tensor>, IntList, IntList, IntList, std::int64_t, double,
                                  std::int64_t, std::optional<c10::ScalarType>, std::string_view, ScalarList,
                                  std::optional<std::string_view>);
using QConvBinary = at::Tensor(at::Tensor, double, std::int64_t, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                               std::optional<at::Tensor>, IntList, IntList, IntList, std::int64_t, double,
                               std::int64_t, std::optional<c10::ScalarType>, double, std::int64_t, std::string_view,
                               std::optional<at::Scalar>, std::optional<std::string_view>, ScalarList,
                               std::optional<std::string_view>);

// One line when this LibTorch lacks the op or registered it with other types.
template <typename Sig>
c10::TypedOperatorHandle<Sig> typed_op(const char* name, const char* overload) {
  try {
    return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).template typed<Sig>();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    detail::fail_check(detail::concat("int8 conv: this LibTorch's ", name, overload[0] != '\0' ? "." : "", overload,
                                      " does not match the schema hotpath was built for: ",
                                      what.substr(0, what.find('\n'))));
  }
}

const c10::OperatorHandle& prepack_op() {
  static const c10::OperatorHandle op = [] {
    try {
      return c10::Dispatcher::singleton().findSchemaOrThrow("onednn::qconv_prepack", "");
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      detail::fail_check(
          detail::concat("int8 conv: this LibTorch has no onednn::qconv_prepack: ", what.substr(0, what.find('\n'))));
    }
  }();
  return op;
}
const c10::TypedOperatorHandle<QConvPointwise>& pointwise_op() {
  static const auto op = typed_op<QConvPointwise>("onednn::qconv_pointwise", "");
  return op;
}
const c10::TypedOperatorHandle<QConvBinary>& binary_op() {
  static const auto op = typed_op<QConvBinary>("onednn::qconv2d_pointwise", "binary");
  return op;
}

bool is_float_or_bf16(const at::Tensor& t) { return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16; }

std::string describe(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::string s = t.toString();
  s.append(" [");
  for (std::int64_t i = 0; i < t.dim(); ++i) s.append(i == 0 ? "" : ", ").append(std::to_string(t.size(i)));
  return s.append("]");
}

IntList int_list(std::vector<std::int64_t> v) { return IntList(std::move(v)); }

// The activations oneDNN fuses into the convolution itself (attr, scalars).
struct FusedAct {
  bool fused = false;
  std::string_view attr = "none";
  ScalarList scalars;
};
FusedAct fused_act(std::string_view act, bool with_residual) {
  FusedAct f;
  if (act == "none" || act == "relu") {
    f.fused = true;
    f.attr = act;
  } else if (act == "relu6" && !with_residual) {  // hardtanh(0, 6); the binary form fuses relu only
    f.fused = true;
    f.attr = "hardtanh";
    f.scalars.push_back(at::Scalar(0.0));
    f.scalars.push_back(at::Scalar(6.0));
  }
  return f;
}

}  // namespace

Int8InputQuant int8_affine_u8_params(double lo, double hi) {
  HOTPATH_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "int8_affine_u8_params: expected a finite range lo <= hi; got [",
                lo, ", ", hi, "]");
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  Int8InputQuant q;
  q.scale = hi > lo ? (hi - lo) / 255.0 : 1.0;
  q.zero_point = std::clamp<std::int64_t>(std::llround(-lo / q.scale), 0, 255);
  return q;
}

std::pair<at::Tensor, at::Tensor> Int8Conv2d::quantize_weight(const at::Tensor& weight) {
  HOTPATH_CHECK(weight.defined() && weight.dim() == 4 && weight.is_floating_point(),
                "Int8Conv2d::quantize_weight: expected a floating-point weight [O, I/groups, kh, kw]; got ",
                describe(weight));
  const at::Tensor w = weight.detach().to(at::kCPU, at::kFloat).contiguous();
  at::Tensor absmax = w.abs().amax({1, 2, 3});
  const at::Tensor qmax = at::full_like(absmax, 127.0);
  absmax = at::where(absmax == 0, qmax, absmax);
  const at::Tensor scale = absmax / qmax;
  const at::Tensor q = at::round(w * (qmax / absmax).view({-1, 1, 1, 1})).clamp(-127, 127).to(at::kChar);
  return {q.contiguous(), scale.contiguous()};
}

Int8Conv2d Int8Conv2d::prepare(const at::Tensor& weight_int8, const at::Tensor& weight_scale, const at::Tensor& bias,
                               Int8InputQuant input, Int8ConvGeometry geometry, Int8MatmulMode mode) {
  HOTPATH_CHECK(weight_int8.defined() && weight_int8.scalar_type() == at::kChar && weight_int8.dim() == 4,
                "Int8Conv2d: weight must be int8 [O, I/groups, kh, kw]; got ", describe(weight_int8));
  const std::int64_t out_channels = weight_int8.size(0);
  HOTPATH_CHECK(weight_scale.defined() && weight_scale.scalar_type() == at::kFloat && weight_scale.dim() == 1 &&
                    weight_scale.size(0) == out_channels,
                "Int8Conv2d: weight_scale must be float32 [", out_channels, "]; got ", describe(weight_scale));
  HOTPATH_CHECK((weight_scale > 0).all().item<bool>() && weight_scale.isfinite().all().item<bool>(),
                "Int8Conv2d: weight_scale must be finite and > 0");
  HOTPATH_CHECK(!bias.defined() || (bias.is_floating_point() && bias.dim() == 1 && bias.size(0) == out_channels),
                "Int8Conv2d: bias must be floating point [", out_channels, "]; got ", describe(bias));
  HOTPATH_CHECK(input.scale > 0.0 && std::isfinite(input.scale), "Int8Conv2d: input_scale must be finite and > 0; got ",
                input.scale);
  HOTPATH_CHECK(input.zero_point >= 0 && input.zero_point <= 255,
                "Int8Conv2d: input_zero_point must be in [0, 255] (u8 activations); got ", input.zero_point);
  const auto positive = [](const std::vector<std::int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](std::int64_t x) { return x > 0; });
  };
  HOTPATH_CHECK(geometry.stride.size() == 2 && positive(geometry.stride), "Int8Conv2d: stride must be 2 values > 0");
  HOTPATH_CHECK(geometry.dilation.size() == 2 && positive(geometry.dilation),
                "Int8Conv2d: dilation must be 2 values > 0");
  HOTPATH_CHECK(geometry.padding.size() == 4 && std::all_of(geometry.padding.begin(), geometry.padding.end(),
                                                            [](std::int64_t p) { return p >= 0; }),
                "Int8Conv2d: padding must be 4 values >= 0 (top, left, bottom, right)");
  HOTPATH_CHECK(geometry.groups >= 1 && out_channels % geometry.groups == 0, "Int8Conv2d: groups ", geometry.groups,
                " must divide the ", out_channels, " output channels");

  Int8Conv2d op;
  op.weight_int8_ = weight_int8.to(at::kCPU).contiguous();
  op.weight_scale_ = weight_scale.to(at::kCPU).contiguous();
  // Without VNNI oneDNN multiplies u8·s8 pairs into saturating int16 (measured: 8 % output error with 8-bit
  // weights): 7-bit weights keep every pair below 2^15, as in Int8Linear.
  if (mode == Int8MatmulMode::kSevenBitWeights || (mode == Int8MatmulMode::kAuto && !int8_matmul_has_vnni())) {
    op.weight_int8_ = at::round(op.weight_int8_.to(at::kFloat) * (63.0 / 127.0)).clamp(-63, 63).to(at::kChar);
    op.weight_scale_ = op.weight_scale_ * (127.0F / 63.0F);
    op.weight_bits_ = 7;
  }
  op.weight_zero_point_ = at::zeros({out_channels}, at::kLong);
  if (bias.defined()) op.bias_ = bias.detach().to(at::kCPU, at::kFloat).contiguous();
  op.input_ = input;
  op.geometry_ = std::move(geometry);
  const auto& p = op.geometry_.padding;
  op.symmetric_padding_ = p[0] == p[2] && p[1] == p[3];
  const std::vector<std::int64_t> conv_padding =
      op.symmetric_padding_ ? std::vector<std::int64_t>{p[0], p[1]} : std::vector<std::int64_t>{0, 0};
  // qconv_prepack(Tensor weight, Tensor w_scales, float x_scale, int x_zp, int[] stride, int[] padding,
  //               int[] dilation, int groups, int[]? x_shape=None) -> Tensor, boxed: its list types vary by release.
  std::vector<c10::IValue> stack{op.weight_int8_,
                                 op.weight_scale_,
                                 input.scale,
                                 input.zero_point,
                                 c10::IValue(op.geometry_.stride),
                                 c10::IValue(conv_padding),
                                 c10::IValue(op.geometry_.dilation),
                                 op.geometry_.groups,
                                 c10::IValue()};
  prepack_op().callBoxed(stack);
  HOTPATH_CHECK(stack.size() == 1 && stack[0].isTensor(), "int8 conv: onednn::qconv_prepack returned no tensor");
  op.packed_ = stack[0].toTensor();
  op.cache_ = std::make_shared<PackCache>();
  (void)pointwise_op();  // resolve both schemas now: a mismatch fails at load, not mid-run
  (void)binary_op();
  return op;
}

namespace {

void check_input(const at::Tensor& x, const at::Tensor& weight_int8, std::int64_t groups) {
  HOTPATH_CHECK(x.defined() && x.device().is_cpu() && is_float_or_bf16(x) && x.dim() == 4,
                "Int8Conv2d::forward: x must be a CPU float32 or bfloat16 tensor [N, C, H, W]; got ", describe(x));
  HOTPATH_CHECK(x.size(1) == weight_int8.size(1) * groups, "Int8Conv2d::forward: x has ", x.size(1),
                " channels, expected ", weight_int8.size(1) * groups);
}

void check_residual(const at::Tensor& residual, c10::IntArrayRef out_shape) {
  if (!residual.defined()) return;
  HOTPATH_CHECK(residual.device().is_cpu() && is_float_or_bf16(residual) && residual.sizes() == out_shape,
                "Int8Conv2d::forward: residual must be a CPU float32 or bfloat16 tensor ", out_shape, "; got ",
                describe(residual));
}

std::vector<std::int64_t> output_shape(const at::Tensor& x, const at::Tensor& w, const Int8ConvGeometry& g) {
  const auto& p = g.padding;
  const std::int64_t h = x.size(2) + p[0] + p[2];
  const std::int64_t wd = x.size(3) + p[1] + p[3];
  const std::int64_t oh = (h - g.dilation[0] * (w.size(2) - 1) - 1) / g.stride[0] + 1;
  const std::int64_t ow = (wd - g.dilation[1] * (w.size(3) - 1) - 1) / g.stride[1] + 1;
  HOTPATH_CHECK(oh > 0 && ow > 0, "Int8Conv2d::forward: input ", x.sizes(), " is smaller than the kernel ", w.sizes());
  return {x.size(0), w.size(0), oh, ow};
}

}  // namespace

struct Int8Conv2d::PackCache {
  std::mutex mutex;
  std::map<std::vector<std::int64_t>, at::Tensor> by_shape;  // at most kMaxShapes
  static constexpr std::size_t kMaxShapes = 4;
};

const at::Tensor& Int8Conv2d::packed_for(const at::Tensor& q) const {
  if (!cache_) return packed_;
  const std::vector<std::int64_t> shape(q.sizes().begin(), q.sizes().end());
  const std::lock_guard<std::mutex> lock(cache_->mutex);
  auto it = cache_->by_shape.find(shape);
  if (it != cache_->by_shape.end()) return it->second;
  if (cache_->by_shape.size() >= PackCache::kMaxShapes) return packed_;
  const auto& p = geometry_.padding;
  const std::vector<std::int64_t> conv_padding =
      symmetric_padding_ ? std::vector<std::int64_t>{p[0], p[1]} : std::vector<std::int64_t>{0, 0};
  std::vector<c10::IValue> stack{weight_int8_,      weight_scale_,  input_.scale,           input_.zero_point,
                                 c10::IValue(geometry_.stride), c10::IValue(conv_padding),
                                 c10::IValue(geometry_.dilation), geometry_.groups, c10::IValue(shape)};
  prepack_op().callBoxed(stack);
  HOTPATH_CHECK(stack.size() == 1 && stack[0].isTensor(), "int8 conv: onednn::qconv_prepack returned no tensor");
  return cache_->by_shape.emplace(shape, stack[0].toTensor()).first->second;
}

at::Tensor Int8Conv2d::forward(const at::Tensor& x, std::string_view act, const at::Tensor& residual) const {
  return forward_chained(x, act, residual, std::nullopt, x.defined() && x.scalar_type() == at::kByte ? at::kFloat : x.scalar_type());
}

at::Tensor Int8Conv2d::forward_chained(const at::Tensor& x, std::string_view act, const at::Tensor& residual,
                                       const std::optional<Int8InputQuant>& output, at::ScalarType float_dtype) const {
  const bool u8_in = x.defined() && x.scalar_type() == at::kByte;
  if (u8_in) {
    HOTPATH_CHECK(x.device().is_cpu() && x.dim() == 4 && x.size(1) == weight_int8_.size(1) * geometry_.groups,
                  "Int8Conv2d::forward: a u8 x must be a CPU tensor [N, ", weight_int8_.size(1) * geometry_.groups,
                  ", H, W]; got ", describe(x));
  } else {
    check_input(x, weight_int8_, geometry_.groups);
  }
  check_activation(act, "Int8Conv2d::forward");
  const auto shape = output_shape(x, weight_int8_, geometry_);
  check_residual(residual, shape);
  if (output) {
    HOTPATH_CHECK(!residual.defined() && (act == "none" || act == "relu" || act == "relu6"),
                  "Int8Conv2d::forward: a u8 output takes act none, relu or relu6 and no residual; got ", act,
                  residual.defined() ? " with a residual" : "");
    HOTPATH_CHECK(output->scale > 0.0 && std::isfinite(output->scale) && output->zero_point >= 0 &&
                      output->zero_point <= 255,
                  "Int8Conv2d::forward: output quantization scale ", output->scale, " zero point ",
                  output->zero_point, " is not a u8 affine quantization");
  }
  at::Tensor q = u8_in ? x.contiguous(at::MemoryFormat::ChannelsLast)
                       : int8_quantize_u8(x, input_.scale, input_.zero_point);
  const auto& p = geometry_.padding;
  std::vector<std::int64_t> conv_padding{p[0], p[1]};
  if (!symmetric_padding_) {  // pad with the zero point: a real 0, as the float conv pads
    q = at::constant_pad_nd(q, {p[1], p[3], p[0], p[2]}, static_cast<double>(input_.zero_point))
            .contiguous(at::MemoryFormat::ChannelsLast);
    conv_padding = {0, 0};
  }
  const at::ScalarType float_out = u8_in ? float_dtype : x.scalar_type();
  // No output dtype: oneDNN writes u8 requantized with output_scale / output_zero_point.
  std::optional<c10::ScalarType> out_dtype;
  if (!output) out_dtype = float_out;
  const std::optional<at::Tensor> bias = bias_.defined() ? std::optional<at::Tensor>(bias_) : std::nullopt;
  const FusedAct f = fused_act(act, residual.defined());
  at::Tensor y;
  if (!residual.defined()) {
    y = pointwise_op().call(q, input_.scale, input_.zero_point, packed_for(q), weight_scale_, weight_zero_point_, bias,
                            int_list(geometry_.stride), int_list(conv_padding), int_list(geometry_.dilation),
                            geometry_.groups, output ? output->scale : 1.0, output ? output->zero_point : 0,
                            out_dtype, f.fused ? f.attr : "none", f.scalars, std::nullopt);
  } else {
    // The accumulator is written in place: a channels-last copy in the output dtype.
    at::Tensor accum = at::empty(shape, residual.options().dtype(float_out).memory_format(at::MemoryFormat::ChannelsLast));
    accum.copy_(residual);
    y = binary_op().call(q, input_.scale, input_.zero_point, packed_for(q), weight_scale_, weight_zero_point_, accum, bias,
                         int_list(geometry_.stride), int_list(conv_padding), int_list(geometry_.dilation),
                         geometry_.groups, 1.0, 0, out_dtype, 1.0, 0, "sum", at::Scalar(1.0),
                         f.fused ? std::optional<std::string_view>(f.attr) : std::optional<std::string_view>("none"),
                         ScalarList(), std::nullopt);
  }
  if (!f.fused) y = apply_activation_reference(y, act);
  return y;
}

at::Tensor Int8Conv2d::forward_reference(const at::Tensor& x, std::string_view act, const at::Tensor& residual) const {
  check_input(x, weight_int8_, geometry_.groups);
  check_activation(act, "Int8Conv2d::forward_reference");
  const auto shape = output_shape(x, weight_int8_, geometry_);
  check_residual(residual, shape);
  const float inv = 1.0F / static_cast<float>(input_.scale);
  const at::Tensor xq = (at::round(x.to(at::kFloat) * inv) + static_cast<double>(input_.zero_point)).clamp(0, 255);
  const at::Tensor xd = (xq - static_cast<double>(input_.zero_point)) * input_.scale;
  const at::Tensor w = weight_int8_.to(at::kFloat) * weight_scale_.view({-1, 1, 1, 1});
  const auto& p = geometry_.padding;
  at::Tensor y = at::conv2d(at::constant_pad_nd(xd, {p[1], p[3], p[0], p[2]}, 0.0), w, bias_, geometry_.stride,
                            at::IntArrayRef{0, 0}, geometry_.dilation, geometry_.groups);
  if (residual.defined()) y = y + residual.to(at::kFloat);
  return apply_activation_reference(y, act).to(x.scalar_type());
}

}  // namespace hotpath::ops
