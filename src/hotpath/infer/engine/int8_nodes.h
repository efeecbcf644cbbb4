// Private to infer/: how the engine runs a quantized graph node (graph.h "Quantized forms"): the convolutions
// (the int8 linears run through the engine's own step code, which writes into planned buffers).
// The kernels live in ops/ (int8_linear.h, int8_conv.h); this adapter prepares a node's weights once
// (packing, scales, geometry) and calls them, so engine.cpp knows nothing about scales or oneDNN.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "hotpath/infer/graph.h"

namespace hotpath::infer::detail {

class Int8Node {
 public:
  virtual ~Int8Node() = default;
  // conv: x [N, C, H, W] unpadded (the node's padding is applied inside).
  // → act(op(x) + bias + residual) in x's dtype.
  [[nodiscard]] virtual at::Tensor run(const at::Tensor& x, const at::Tensor& residual) const = 0;
};

// `compute`: the engine's float dtype, which a conv fed u8 by a chained producer outputs.
std::shared_ptr<const Int8Node> prepare_int8_conv(const Node& node, const Graph& graph, at::ScalarType compute);
// One line for Engine::describe(): which int8 kernels run and why (ISA, VNNI).
std::string int8_kernel_description();

}  // namespace hotpath::infer::detail
