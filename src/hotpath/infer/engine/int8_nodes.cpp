#include "int8_nodes.h"

#include <optional>

#include "hotpath/core/error.h"
#include "hotpath/ops/int8_conv.h"
#include "hotpath/ops/int8_kernels.h"

namespace hotpath::infer::detail {
namespace {

const at::Tensor& param(const Node& node, const Graph& graph, const char* role) {
  static const at::Tensor kNone;
  auto it = node.params.find(role);
  return it == node.params.end() ? kNone : graph.params.at(it->second);
}

class ConvNode final : public Int8Node {
 public:
  ConvNode(const Node& node, const Graph& graph, at::ScalarType compute)
      : act_(node.attr_str("act", "none")),
        compute_(compute),
        op_(ops::Int8Conv2d::prepare(
            param(node, graph, "weight"), param(node, graph, "weight_scale"), param(node, graph, "bias"),
            {.scale = node.attr_float("input_scale", 0.0), .zero_point = node.attr_int("input_zero_point", 0)},
            {.stride = node.attr_ints("stride", {1, 1}), .padding = node.attr_ints("padding", {0, 0, 0, 0}),
             .dilation = node.attr_ints("dilation", {1, 1}), .groups = node.attr_int("groups", 1)})) {
    if (node.attrs.count("output_scale") != 0) {
      output_ = ops::Int8InputQuant{.scale = node.attr_float("output_scale", 0.0),
                                    .zero_point = node.attr_int("output_zero_point", -1)};
    }
  }
  at::Tensor run(const at::Tensor& x, const at::Tensor& residual) const override {
    return op_.forward_chained(x, act_, residual, output_, compute_);
  }

 private:
  std::string act_;
  at::ScalarType compute_;
  ops::Int8Conv2d op_;
  std::optional<ops::Int8InputQuant> output_;  // chained (int8_chain.h): u8 out for the next conv
};

template <typename T, typename... Extra>
std::shared_ptr<const Int8Node> prepare(const Node& node, const Graph& graph, Extra... extra) {
  try {
    return std::make_shared<T>(node, graph, extra...);
  } catch (const Error& e) {
    throw Error("engine: quantized node " + node.name + ": " + e.what());
  }
}

}  // namespace

std::shared_ptr<const Int8Node> prepare_int8_conv(const Node& node, const Graph& graph, at::ScalarType compute) {
  return prepare<ConvNode>(node, graph, compute);
}

std::string int8_kernel_description() {
  return std::string("linear: row-quantized int8 activations × per-channel int8 weights (") +
         ops::int8_linear_matmul_note() + "); conv: onednn::qconv_pointwise (u8 activations, s8 weights)";
}

}  // namespace hotpath::infer::detail
