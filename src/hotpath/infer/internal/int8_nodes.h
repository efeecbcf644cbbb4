// Private to infer/: how the engine runs a quantized graph node (graph.h "Quantized forms").
// The kernels live in ops/ (int8 linear / conv); this adapter prepares a node's weights once and
// calls them, so engine.cpp knows nothing about scales, packing or the oneDNN ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/infer/graph.h"

namespace hotpath::infer::detail {

class Int8Node {
 public:
  virtual ~Int8Node() = default;
  // x [..., I] → act(x·Wᵀ + bias + residual) in x's dtype.
  [[nodiscard]] virtual at::Tensor linear(const at::Tensor& x, const at::Tensor& residual,
                                          const std::string& act) const;
  // x [N, C, H, W] (already padded when the graph's padding is asymmetric) → act(conv + bias + residual).
  [[nodiscard]] virtual at::Tensor conv(const at::Tensor& x, const std::vector<std::int64_t>& stride,
                                        const std::vector<std::int64_t>& padding,
                                        const std::vector<std::int64_t>& dilation, std::int64_t groups,
                                        const at::Tensor& residual, const std::string& act) const;
};

// `compute`: the dtype the rest of the engine runs in (its activations arrive and leave in it).
std::shared_ptr<const Int8Node> prepare_int8_linear(const Node& node, const Graph& graph, at::ScalarType compute);
std::shared_ptr<const Int8Node> prepare_int8_conv(const Node& node, const Graph& graph, at::ScalarType compute);
// One line for Engine::describe(): which int8 kernels run and why (ISA, VNNI).
std::string int8_kernel_description();

}  // namespace hotpath::infer::detail
