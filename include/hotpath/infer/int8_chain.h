// hotpath/infer/int8_chain.h — let static-int8 convolutions hand each other u8 tensors.
//
//   QuantizeResult q = quantize_graph(fp32, calibration);
//   const std::int64_t chained = chain_int8_convs(q.graph);   // then Engine::from_graph(q.graph, ...)
//
// A static_int8 conv2d whose output feeds only static_int8 convs (as their main input, all with the same
// input scale and zero point) and is not a graph output writes that output as u8 with those parameters
// (attrs output_scale, output_zero_point): the consumer skips its quantization pass and the float tensor
// between the two is never written. The consumer would have quantized the float output with exactly those
// parameters, so only oneDNN's requantization rounding differs. Producers with a residual input or an
// activation oneDNN cannot fuse before requantizing (anything but none, relu, relu6) stay float.
// In ResNet's bottleneck conv1 → conv2 → conv3 chain two of three convs chain; in EfficientNet-Lite0's
// MBConv (relu6) the expand and depthwise convs do.
#pragma once

#include <cstdint>

#include "hotpath/infer/graph.h"

namespace hotpath::infer {

// Marks the chainable convs of `graph` (in place); returns how many now write u8.
std::int64_t chain_int8_convs(Graph& graph);

}  // namespace hotpath::infer
