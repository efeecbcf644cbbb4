// hotpath/infer/quantize.h — post-training INT8 quantization of an inference graph (graph.h), with a
// per-layer error analysis: every linear becomes dynamic int8, every conv2d static int8 with calibrated
// input ranges, and any node whose own output error is too large stays float (reported).
//
//   std::vector<std::vector<at::Tensor>> batches = ...;            // calibration inputs, graph().inputs order
//   QuantizeResult q = quantize_graph(fp32_graph, batches, {.max_node_error = 0.05});
//   write_text("quantization_report.json", q.report.dump(2));      // per node: scheme, error, kept/why
//
// How: the fp32 graph runs (through `runner`, by default the Engine) on every calibration batch with each
// candidate node's inputs and output added to the graph's outputs — no engine hook needed. Pass 1 observes
// each conv input's range (min/max, and a percentile clip averaged over batches) and the Gram matrix of its
// input patches, from which each conv weight is rounded by GPTQ (options.gptq); pass 2 runs each candidate
// node alone quantized (ops::Int8Linear / ops::Int8Conv2d, the kernels the engine runs) on its recorded fp32
// inputs and measures ‖y_q − y‖/‖y‖ over all batches; a conv takes the input range with the lowest error
// (min/max, the percentile clip, or min/max scaled down: options.clip_candidates), and its bias is corrected
// by the mean per-channel shift quantization gives its pre-activation output. Finally the
// quantized graph and fp32 run side by side on the same batches: every candidate's cumulative error (all of
// its upstream quantized too) and the outputs' error (relative; top-1 agreement for class logits, cosine for
// sentence embeddings). While an output misses its target, the nodes the outputs are most sensitive to (the
// outputs' error with only that node quantized, one calibration run per node) stay float — the fewest of
// them that meet the target, found by bisection over that ranking — and the comparison runs again. Rewritten
// nodes follow graph.h's "Quantized forms".
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hotpath/infer/graph.h"

namespace hotpath::infer {

struct QuantizeOptions {
  bool linear = true;             // dynamic int8 for linear nodes
  bool conv = true;               // static int8 for conv2d nodes
  double max_node_error = 0.05;   // ‖y_q − y‖/‖y‖ of a node alone quantized, past which it stays float
  // The whole quantized graph's target on the calibration data, per output: logits and other tensors
  // ‖y_int8 − y_fp32‖/‖y_fp32‖ ≤ max_output_error (0: no target), sentence embeddings cosine ≥
  // min_output_cosine. While missed, the nodes the outputs are most sensitive to stay float (fallback passes).
  double max_output_error = 0.0;
  double min_output_cosine = 0.99;
  int max_fallback_passes = 8;
  // The fallback's sensitivity ranking (one run per quantized node) uses the first batches holding this many
  // samples; whether the outputs meet their target is always judged on every batch.
  std::int64_t ranking_samples = 32;
  // Conv biases corrected by the mean shift quantization gives each output channel on the calibration data.
  bool bias_correction = true;
  // Conv weights rounded by GPTQ instead of to nearest: same per-channel scales, but each weight's rounding
  // error is compensated by the weights not yet rounded so that the conv's output error on the calibration
  // inputs is smallest (the Gram matrix of its input patches, its diagonal damped by gptq_damping × its mean).
  bool gptq = true;
  double gptq_damping = 0.1;
  double percentile = 99.99;      // the percentile observer's clip (both tails), in (50, 100)
  // Conv input ranges also tried clipped: min/max × 0.85^i, i = 1..clip_candidates (0: min/max and the
  // percentile only); each conv takes the range that gives its own output the least error. Off by default:
  // on EfficientNet-Lite0 it lowers the calibration error but not the held-out photos' (inference-accuracy.md).
  int clip_candidates = 0;
  std::vector<std::string> keep_float{};  // node names never quantized (each must name a linear or conv2d)
  // Conv input ranges fixed beforehand (quantization-aware training learned them, qat.h), by node name: such a
  // conv takes [lo, hi] as its only candidate (observer "qat") instead of the observed ones.
  std::map<std::string, std::pair<double, double>> input_ranges{};
  // Called as the work advances (the export's progress line): the stage ("observing ranges", "ranking node
  // sensitivity", ...), units done in it (1-based) and its units in all. Empty: nothing is reported.
  std::function<void(std::string_view stage, std::size_t done, std::size_t total)> progress{};
};

// Runs one prepared graph on a batch: outputs in graph.outputs order, float32.
using BatchRunner = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;
// Prepares a graph once for many batches.
using GraphRunner = std::function<BatchRunner(const Graph& graph)>;
// Engine::from_graph(graph, {.threads = threads}), then Engine::run per batch.
GraphRunner engine_runner(int threads = 0);

struct NodeQuantization {
  std::string name;
  OpKind op = OpKind::kLinear;  // kLinear | kConv2d
  std::string scheme;      // "dynamic_int8" | "static_int8"
  bool quantized = false;
  std::string reason;      // why it stays float ("" when quantized)
  double error = 0.0;      // the chosen scheme's relative output error, the node alone quantized
  // In the final quantized graph (everything upstream quantized as decided): the relative error of the
  // node's output, and how much of it the node adds over its inputs' error.
  double cumulative_error = 0.0;
  double added_error = 0.0;
  // The outputs' largest relative error with only this node quantized, everything else float (-1: not
  // measured, no fallback ran). The fallback keeps the most sensitive nodes float.
  double sensitivity = -1.0;
  // conv2d only: the chosen observer ("minmax" | "percentile" | "clip" | "qat"), each observer's error (clip: the
  // best clip candidate's, at clip_fraction of min/max; -1 without candidates), the range and params.
  std::string observer;
  double error_minmax = 0.0;
  double error_percentile = 0.0;
  double error_clip = -1.0;
  double clip_fraction = 1.0;
  double range_min = 0.0, range_max = 0.0;
  double input_scale = 0.0;
  std::int64_t input_zero_point = 0;
  double bias_correction = 0.0;  // the largest per-channel shift subtracted from the bias (0: none)
  std::string weight_rounding;   // conv2d: "gptq" | "nearest"; linear: "nearest"
};

struct QuantizeResult {
  Graph graph;                          // the rewritten graph (validated)
  std::vector<NodeQuantization> nodes;  // every candidate node, in graph order
  std::vector<double> output_error;     // per graph output: ‖y_int8 − y_fp32‖/‖y_fp32‖ over the batches
  std::vector<double> top1_agreement;   // per graph output: argmax agreement for class logits, else -1
  std::vector<double> min_cosine;       // per graph output: lowest row cosine for sentence embeddings, else -1
  nlohmann::ordered_json report;        // quantization_report.json's content (see quantize.cpp)
};

// Throws hotpath::Error for: no calibration batches, a batch that does not fit the graph's inputs (naming
// the batch), a keep_float name that is no linear/conv2d node, a graph that is already quantized.
QuantizeResult quantize_graph(const Graph& fp32, const std::vector<std::vector<at::Tensor>>& calibration,
                              const QuantizeOptions& options = {}, const GraphRunner& runner = {});

}  // namespace hotpath::infer
