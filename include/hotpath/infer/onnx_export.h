// hotpath/infer/onnx_export.h — an inference graph (graph.h) as an ONNX file (opset 17), for ONNX
// Runtime, OpenVINO and TensorRT: each graph op writes its own ONNX nodes, dynamic axes come from the
// graph inputs' dim_names.
//
//   Graph g = lower_image_model(*model, {.image_size = 224});           // lower.h
//   export_onnx(g, "resnet50.onnx");                                     // checked, then written atomically
//   // python: onnxruntime.InferenceSession("resnet50.onnx").run(None, {"images": x})  ≈ Engine's logits
//
// Mapping (opset 17): conv2d → Conv (+Add residual, + activation), max_pool2d → MaxPool,
// global_avg_pool → GlobalAveragePool (+Flatten), linear → Gemm (2-d input) or MatMul + Add,
// layer_norm → (Add) + LayerNormalization, attention → Reshape/Transpose/Gather, MatMul, Div, Softmax with
// the mask as an additive bias (0 where mask ≠ 0, float lowest elsewhere), vit_embed → Expand + Concat +
// Add, bert_embed → Gather ×3 (positions from Range over Shape: the sequence axis stays dynamic) +
// LayerNormalization, select → Gather, mean_pool → masked ReduceSum / Max(ReduceSum(mask), 1e-9),
// l2_normalize → ReduceL2 + Max(·, 1e-12) + Div. Activations: Relu, Clip(0, 6), Sigmoid, Tanh,
// x·Sigmoid(x) for silu, gelu as its Erf form and gelu_tanh as its tanh form (ONNX Runtime fuses all three
// back: QuickGelu, Gelu/BiasGelu, FastGelu). Graph inputs and outputs keep their names, except a graph
// output that is also a graph input: ONNX needs a node to write it, so it is NAME/output (a float32 Cast).
//
// Quantized graphs (attr "quant") are refused naming the node: hotpath's int8 is per-row dynamic
// symmetric, which opset 17's DynamicQuantizeLinear (per-tensor, uint8) cannot express; export the
// fp32 package and quantize in the target runtime. Every error is one hotpath::Error line naming the node.
#pragma once

#include <cstdint>
#include <string>

#include "hotpath/formats/onnx_model.h"
#include "hotpath/infer/graph.h"

namespace hotpath::infer {

struct OnnxExportOptions {
  std::string producer_version;  // written as the model's producer_version ("hotpath" is the producer)
  // Past this many bytes of weights, they go to PATH.data (ONNX external data): protobuf's 2 GiB limit.
  std::uint64_t external_data_threshold = formats::OnnxWriteOptions{}.external_data_threshold;
};

// The ONNX model of `graph` (validated first); no file is touched.
formats::OnnxModel graph_to_onnx(const Graph& graph, const OnnxExportOptions& options = {});

// graph_to_onnx, then formats::write_onnx: ONNX's checker and shape inference run before PATH is written.
void export_onnx(const Graph& graph, const std::string& path, const OnnxExportOptions& options = {});

}  // namespace hotpath::infer
