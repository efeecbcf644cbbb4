#include "internal/int8_nodes.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/hardtanh.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/round.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/tanh.h>

#include "hotpath/core/error.h"

namespace hotpath::infer::detail {
namespace {

at::Tensor activate(at::Tensor y, const std::string& act) {
  if (act == "relu") return at::relu_(y);
  if (act == "relu6") return at::hardtanh_(y, 0.0, 6.0);
  if (act == "gelu") return at::gelu_(y);
  if (act == "gelu_tanh") return at::gelu_(y, "tanh");
  if (act == "silu") return at::silu_(y);
  if (act == "sigmoid") return at::sigmoid_(y);
  if (act == "tanh") return at::tanh_(y);
  return y;
}

// Reference semantics of the quantized forms, computed in float: weights dequantized once
// (w_int8 · scale per output channel); dynamic linear quantizes each activation row symmetrically to
// int8 (scale = absmax/127), static conv quantizes its input with the calibrated scale and zero point.
class ReferenceInt8 final : public Int8Node {
 public:
  ReferenceInt8(const Node& node, const Graph& graph, bool conv) : node_(node.name) {
    const at::Tensor w = graph.params.at(node.params.at("weight"));
    const at::Tensor scale = graph.params.at(node.params.at("weight_scale"));
    HOTPATH_CHECK(w.scalar_type() == at::kChar, "engine: quantized node ", node.name, " weight is ", w.scalar_type(),
                  ", expected int8");
    HOTPATH_CHECK(scale.dim() == 1 && scale.size(0) == w.size(0), "engine: quantized node ", node.name,
                  " weight_scale is ", scale.sizes(), ", expected [", w.size(0), "]");
    std::vector<std::int64_t> shape(static_cast<std::size_t>(w.dim()), 1);
    shape[0] = -1;
    weight_ = w.to(at::kFloat) * scale.to(at::kFloat).view(shape);
    if (node.has_param("bias")) bias_ = graph.params.at(node.params.at("bias")).to(at::kFloat);
    if (conv) {
      input_scale_ = node.attr_float("input_scale", 0.0);
      input_zero_point_ = node.attr_int("input_zero_point", 0);
      HOTPATH_CHECK(input_scale_ > 0.0, "engine: static int8 conv ", node.name, " has input_scale ", input_scale_,
                    ", expected > 0");
    }
  }

  at::Tensor linear(const at::Tensor& x, const at::Tensor& residual, const std::string& act) const override {
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor scale = at::clamp_min(at::amax(at::abs(xf), {-1}, true), 1e-12) / 127.0;
    const at::Tensor xq = at::clamp(at::round(xf / scale), -127, 127) * scale;
    at::Tensor y = at::linear(xq, weight_, bias_);
    if (residual.defined()) y.add_(residual.to(at::kFloat));
    return activate(y, act).to(x.scalar_type());
  }

  at::Tensor conv(const at::Tensor& x, const std::vector<std::int64_t>& stride, const std::vector<std::int64_t>& padding,
                  const std::vector<std::int64_t>& dilation, std::int64_t groups, const at::Tensor& residual,
                  const std::string& act) const override {
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor q = at::clamp(at::round(xf / input_scale_) + static_cast<double>(input_zero_point_), 0, 255);
    const at::Tensor xq = (q - static_cast<double>(input_zero_point_)) * input_scale_;
    at::Tensor y = at::conv2d(xq, weight_, bias_, stride, padding, dilation, groups);
    if (residual.defined()) y.add_(residual.to(at::kFloat));
    return activate(y, act).to(x.scalar_type());
  }

 private:
  std::string node_;
  at::Tensor weight_, bias_;
  double input_scale_ = 0.0;
  std::int64_t input_zero_point_ = 0;
};

}  // namespace

at::Tensor Int8Node::linear(const at::Tensor&, const at::Tensor&, const std::string&) const {
  throw Error("engine: this int8 node is not a linear");
}

at::Tensor Int8Node::conv(const at::Tensor&, const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                          const std::vector<std::int64_t>&, std::int64_t, const at::Tensor&, const std::string&) const {
  throw Error("engine: this int8 node is not a conv");
}

std::shared_ptr<const Int8Node> prepare_int8_linear(const Node& node, const Graph& graph, at::ScalarType) {
  return std::make_shared<ReferenceInt8>(node, graph, false);
}

std::shared_ptr<const Int8Node> prepare_int8_conv(const Node& node, const Graph& graph, at::ScalarType) {
  return std::make_shared<ReferenceInt8>(node, graph, true);
}

std::string int8_kernel_description() { return "reference (dequantized float)"; }

}  // namespace hotpath::infer::detail
