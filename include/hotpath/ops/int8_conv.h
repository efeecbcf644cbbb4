// hotpath/ops/int8_conv.h — static INT8 convolution for inference: u8 activations with a calibrated
// scale and zero point, s8 per-output-channel symmetric weights, bias + residual add + activation fused.
//
//   const Int8InputQuant in = int8_affine_u8_params(calib_min, calib_max);        // from calibration
//   auto [w8, w_scale] = Int8Conv2d::quantize_weight(conv_weight);               // [O, I/g, kh, kw]
//   at::Tensor y = Int8Conv2d::prepare(w8, w_scale, bias, in, {.stride = {2, 2}}).forward(x, "relu", skip);
//
// forward(x) = act(conv(dequant(quant_u8(x)), w_q·w_scale) + bias (+ residual)): x (f32 or bf16, any memory
// format) is quantized by hotpath's u8 kernel (ops/int8_kernels.h) straight into channels-last, then
// onednn::qconv_pointwise runs the convolution (VNNI where present) with the bias and relu fused, or
// onednn::qconv2d_pointwise.binary when there is a residual (sum, then relu). Other activations run after
// it (ATen). Output: float32 channels-last, bf16 when x is bf16. Padding is graph.h's 4 values (top, left,
// bottom, right); asymmetric padding pads the u8 input with the zero point first (a real 0).
// The oneDNN schemas are looked up once (function-local statics): a LibTorch whose schemas changed fails
// at the first prepare with one line naming the op. forward_reference() is the twin in float ATen ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "hotpath/ops/int8_kernels.h"

namespace hotpath::ops {

// Affine u8 quantization of a conv input: real = (q − zero_point)·scale.
struct Int8InputQuant {
  double scale = 1.0;
  std::int64_t zero_point = 0;
};

// The u8 parameters covering [min(lo, 0), max(hi, 0)] (0 exactly representable); hi == lo == 0 gives scale 1.
Int8InputQuant int8_affine_u8_params(double lo, double hi);

struct Int8ConvGeometry {
  std::vector<std::int64_t> stride{1, 1};
  std::vector<std::int64_t> padding{0, 0, 0, 0};  // top, left, bottom, right
  std::vector<std::int64_t> dilation{1, 1};
  std::int64_t groups = 1;
};

class Int8Conv2d {
 public:
  // Per-output-channel symmetric quantization of a float weight [O, I/g, kh, kw]: (int8, f32 scale [O]).
  static std::pair<at::Tensor, at::Tensor> quantize_weight(const at::Tensor& weight);

  // Prepacks the weight for oneDNN once; without VNNI (kAuto) the weight is requantized to 7 bits first, as
  // Int8Linear does. Throws hotpath::Error naming the argument and what was expected.
  static Int8Conv2d prepare(const at::Tensor& weight_int8, const at::Tensor& weight_scale, const at::Tensor& bias,
                            Int8InputQuant input, Int8ConvGeometry geometry,
                            Int8MatmulMode mode = Int8MatmulMode::kAuto);

  // x [N, C, H, W] f32/bf16 → [N, O, H', W'] channels-last in x's dtype; act one of infer::kActivations,
  // residual (optional, the output's shape) added before it.
  [[nodiscard]] at::Tensor forward(const at::Tensor& x, std::string_view act = "none",
                                   const at::Tensor& residual = at::Tensor()) const;
  // Chained int8 convs: x may be u8 already (quantized with this conv's input params, channels-last: the
  // output of a producer chained to it), and with `output` the result is u8 quantized with those params
  // (the next conv's input params) instead of float: no float write and no re-quantization pass between
  // two convs. A u8 output takes act none/relu/relu6 and no residual; a float output from a u8 x has
  // dtype `float_dtype`.
  [[nodiscard]] at::Tensor forward_chained(const at::Tensor& x, std::string_view act, const at::Tensor& residual,
                                           const std::optional<Int8InputQuant>& output,
                                           at::ScalarType float_dtype) const;
  // The same quantization, then float ATen ops (dequantize, pad, conv2d, add, activation): the twin.
  [[nodiscard]] at::Tensor forward_reference(const at::Tensor& x, std::string_view act = "none",
                                             const at::Tensor& residual = at::Tensor()) const;

  [[nodiscard]] const Int8InputQuant& input_quant() const { return input_; }
  [[nodiscard]] const Int8ConvGeometry& geometry() const { return geometry_; }
  [[nodiscard]] int weight_bits() const { return weight_bits_; }

 private:
  Int8Conv2d() = default;
  at::Tensor weight_int8_;   // [O, I/g, kh, kw], for the twin
  at::Tensor weight_scale_;  // f32 [O]
  at::Tensor weight_zero_point_;  // int64 zeros [O] (symmetric)
  at::Tensor packed_;        // oneDNN's blocked weight, packed without an input shape (load-time check)
  // Packed per u8 input shape on first use: oneDNN picks the blocked layout from the shape, and a weight
  // packed for another shape is reordered again on every call (measured on ResNet-50 at batch 2).
  struct PackCache;
  std::shared_ptr<PackCache> cache_;
  [[nodiscard]] const at::Tensor& packed_for(const at::Tensor& q) const;
  at::Tensor bias_;          // f32 [O] or undefined
  Int8InputQuant input_;
  Int8ConvGeometry geometry_;
  bool symmetric_padding_ = true;
  int weight_bits_ = 8;
};

}  // namespace hotpath::ops
