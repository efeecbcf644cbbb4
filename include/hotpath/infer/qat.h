// hotpath/infer/qat.h — quantization-aware training (QAT) of an image graph: the graph the int8 engine will run
// (batch norms already folded into the convolutions by lowering), trained with every conv2d and linear
// fake-quantized as the engine quantizes them, so that its int8 export (quantize.h with the learned ranges) loses
// less than post-training quantization.
//
//   QatResult r = qat_train(fp32_graph, [&] { return next_batch(); }, {.steps = 300, .lr = 1e-5});
//   QuantizeOptions qo = qat_quantize_options(r);            // the frozen ranges, nearest rounding, nothing float
//   QuantizeResult q = quantize_graph(r.graph, calibration, qo);
//
// What is simulated is what the engine runs (int8_conv.h, int8_linear.h):
//   conv2d  input: per-tensor affine u8 over [min(lo, 0), max(hi, 0)] (int8_affine_u8_params), the range an
//           exponential moving average of each batch's min/max for the first observer_steps, then frozen;
//           weight: per output channel symmetric, max|w|/qmax with qmax 127 (63 where the engine keeps 7-bit
//           weights: a CPU without VNNI).
//   linear  input: per row symmetric, max|x_row|/127 (dynamic: no range to learn); weight as the conv's.
// Rounding is straight-through (the gradient passes unchanged inside the range, zero where a value clips).
// The loss is distillation from the fp32 graph's logits (KL at `temperature`, × temperature²), plus
// label_weight × cross-entropy when batches carry labels: QAT needs no labels, only images like the ones the
// model will see. Parameters are updated by ATen's fused AdamW (at::_fused_adamw_, no weight decay by default).
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/infer/graph.h"
#include "hotpath/infer/quantize.h"

namespace hotpath::infer {

struct QatOptions {
  std::int64_t steps = 300;            // optimizer steps, one batch each
  double lr = 1e-5;                    // AdamW, constant after a linear warm-up over the first 5 % of steps
  double weight_decay = 0.0;
  // Conv input ranges to start from, by node name (the export: what the post-training quantizer calibrates on the
  // calibration data); a conv without one starts at its first batch's min/max.
  std::map<std::string, std::pair<double, double>> initial_ranges{};
  std::int64_t observer_steps = -1;    // the ranges follow the batches for this many steps, then freeze
                                       // (-1: none with initial_ranges, else half of steps)
  double observer_momentum = 0.1;      // the moving average's weight of each new batch's min/max
  // Once the ranges freeze (step observer_steps + 1, at the earliest step 2), each conv's u8 input scale and zero
  // point are trained with the weights (LSQ, Esser et al. 2020: at::_fake_quantize_learnable_per_tensor_affine,
  // the gradient scaled by 1/√(values per sample · 255)); false: the frozen ranges stay as they are.
  bool learn_ranges = true;
  // false: only the biases (and the ranges) train, the weights keep their fp32 values — fewer parameters, for
  // little data (the weights' rounding is then the post-training one).
  bool train_weights = true;
  double temperature = 2.0;            // distillation temperature
  double label_weight = 0.0;           // + this × cross-entropy with the batch's labels (0: distillation only)
  int weight_bits = 0;                 // 8 or 7; 0: what this CPU's engine keeps (7 without VNNI)
  bool linear = true;                  // fake-quantize linears too (the export's dynamic int8)
  // false: no fake quantization at all (no ranges, nothing learned but the float parameters): plain fine-tuning of
  // the start graph by distillation from the teacher, which may then differ from it in its widths (what pruning
  // runs after each cut, prune.h).
  bool fake_quantize = true;
  std::vector<std::string> keep_float{};  // conv2d/linear node names left float (as QuantizeOptions::keep_float)
  int threads = 0;                     // the fp32 teacher's engine threads (0: default)
  // Called after each step: the step (1-based), the steps in all and the step's loss.
  std::function<void(std::int64_t step, std::int64_t steps, double loss)> progress{};
};

// One training batch: images as the graph's input ([N, C, H, W] float), labels int64 [N] or undefined.
struct QatBatch {
  at::Tensor images;
  at::Tensor labels;
};
using QatData = std::function<QatBatch()>;

struct QatResult {
  Graph graph;  // the fp32 graph with its trained float parameters (same nodes and names as the input)
  // Each fake-quantized conv2d's frozen input range, by node name: what the int8 export takes.
  std::map<std::string, std::pair<double, double>> input_ranges;
  int weight_bits = 8;
  std::vector<std::string> keep_float;
  nlohmann::ordered_json report;  // options, loss at the start and end, ranges (the export's "qat" section)
};

// Throws hotpath::Error for: a graph with ops other than the image ones (conv2d, max_pool2d, global_avg_pool,
// add, mul, linear) or other than one float image input, a keep_float name that is no conv2d/linear, options out
// of range, a batch whose images or labels do not fit (naming the step), a non-finite loss (naming the step).
// `start`: the student's starting parameters, a graph of the same nodes (qat_start_graph); null: fp32's. The teacher
// is always `fp32`. Without fake_quantize the student is `start` itself: any image graph with fp32's input and
// output (a pruned copy), trained as it is.
QatResult qat_train(const Graph& fp32, const QatData& data, const QatOptions& options = {},
                    const Graph* start = nullptr);

// The graph's outputs as QAT computes them (fake quantization at `input_ranges`, no gradient): what the int8
// engine approximates after export. Nodes without a range and the ones in keep_float run float; weight_bits as
// QatOptions (0: the engine's).
std::vector<at::Tensor> qat_forward(const Graph& graph,
                                    const std::map<std::string, std::pair<double, double>>& input_ranges,
                                    const at::Tensor& images, int weight_bits = 0, bool linear = true,
                                    const std::vector<std::string>& keep_float = {});

// ∂L/∂param of every float param of an image graph (by param key), L the cross-entropy of its logits with each
// batch's labels (the graph's own top-1 class where a batch has none), averaged over `batches`: what Taylor
// importance (prune.h) weighs the weights by. Throws hotpath::Error for no batches or one that does not fit.
std::map<std::string, at::Tensor> graph_gradients(const Graph& graph, const std::vector<QatBatch>& batches);

// Where QAT starts from a post-training quantization of `fp32` (quantize_graph's result): the fp32 graph with each
// node the quantizer made int8 holding its dequantized weight (w_int8 × scale: GPTQ's rounding kept) and its
// corrected bias. Nodes it kept float keep their fp32 parameters.
Graph qat_start_graph(const Graph& fp32, const QuantizeResult& post_training);

// quantize_graph's options for a QAT result: the learned input ranges, weights rounded to nearest (what
// training simulated; GPTQ would move them), no bias correction, no output target and no per-node error bound
// (QAT's point is that every node is int8), keep_float as trained.
QuantizeOptions qat_quantize_options(const QatResult& result);

}  // namespace hotpath::infer
