// hotpath/infer/prune.h — structured (channel) pruning of an image graph: whole channels removed from the dense
// weights, so that the engine and ONNX run a smaller model (fewer multiply-adds, not zeros in the same ones).
//
//   std::vector<ChannelGroup> groups = channel_groups(graph);          // what must be pruned together
//   PruneResult r = prune_graph(graph, next_batch, {.target_macs = 0.5, .iterations = 4, .finetune_steps = 100});
//   Engine small = Engine::from_graph(r.graph, {});                   // r.report: MACs, params, per-group widths
//
// Dependency groups (torch-pruning's DepGraph idea, Fang et al. 2023, on the graph's values): channels that are the
// same channels must go together. A group is the union of every value's channel axis tied by
//   add / mul / a conv's residual input  (both sides: a residual stream, the squeeze-excitation's rescale)
//   max_pool2d, global_avg_pool, depthwise conv2d (groups == in == out channels)   (output = input channels)
// and lists its producers (conv2d/linear whose output channels they are: rows of the weight and the bias), its
// consumers (conv2d/linear reading them: columns of the weight) and its depthwise convs (rows, bias and groups).
// A group is fixed (never pruned) when it touches a graph input or output, a grouped conv that is not depthwise, or
// an op pruning does not follow (layer_norm, attention, ...): ViT and text graphs have no prunable group.
//
// Importance (per channel of a group, torch-pruning's GroupMagnitudeImportance / GroupTaylorImportance): for each
// member the channel's slice — a producer's row, a consumer's column, a depthwise conv's row — scored as
//   l1 / l2   Σ|w|^p over the slice
//   taylor    Σ|w·∂L/∂w| over the slice (∂L: cross-entropy on a few batches, with their labels, else with the
//             model's own top-1 class)
// averaged over the members and divided by its mean. Batch norms are folded into the convolutions by lowering, so
// magnitudes are those of the weights the engine runs. Each group keeps int(C · (1 − ratio)) of its C channels (at
// least one, two where it has a depthwise conv; a multiple of round_to where C allows), those of highest
// importance, in their order.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hotpath/infer/graph.h"
#include "hotpath/infer/qat.h"

namespace hotpath::infer {

struct ChannelGroup {
  std::int64_t channels = 0;
  std::vector<std::string> producers;  // conv2d (groups 1) / linear nodes whose output channels these are
  std::vector<std::string> consumers;  // conv2d (groups 1) / linear nodes reading them as input channels
  std::vector<std::string> depthwise;  // depthwise conv2d nodes running on them (input = output channels)
  std::vector<std::string> values;     // the graph values whose channel axis this is
  bool prunable = true;
  std::string fixed_by;                // why not, when not: "graph input images", "graph output logits", ...
  // A name for messages and reports: the first producer (or depthwise conv) in graph order.
  [[nodiscard]] std::string name() const;
};

// The groups of an fp32 image graph (ops conv2d, max_pool2d, global_avg_pool, add, mul, linear; any other op fixes
// the channels it touches), in the order their first producer runs. Throws hotpath::Error for a quantized graph or
// one whose tied values disagree on their channel count (naming both).
std::vector<ChannelGroup> channel_groups(const Graph& graph);

// Multiply-adds and parameters of one sample at the graph's input size (its H and W must be fixed).
struct GraphCost {
  double macs = 0.0;
  std::int64_t params = 0;
};
GraphCost graph_cost(const Graph& graph);

enum class Importance { kL1, kL2, kTaylor };
const char* importance_name(Importance importance);  // "l1" | "l2" | "taylor"
Importance importance_from_name(const std::string& name);  // throws naming the accepted names

// The importance of each of the group's channels ([channels] float). `gradients` (param key → ∂L/∂param, as
// graph_gradients returns) is needed for kTaylor only.
at::Tensor channel_importance(const Graph& graph, const ChannelGroup& group, Importance importance,
                              const std::map<std::string, at::Tensor>& gradients = {});

// The graph with only the `kept` channels (ascending indices, by group index into `groups`; a group not in the map
// keeps all) of each group: weights and biases sliced, depthwise groups set. Validated before it is returned.
Graph prune_channels(const Graph& graph, const std::vector<ChannelGroup>& groups,
                     const std::map<std::size_t, std::vector<std::int64_t>>& kept);

// How many of C channels a group keeps at `ratio` (torch-pruning's local rule): int(C · (1 − ratio)), rounded down
// to a multiple of round_to when that leaves at least round_to, at least 1.
std::int64_t kept_channels(std::int64_t channels, double ratio, std::int64_t round_to);

struct PruneOptions {
  static QatOptions finetune_defaults() {
    QatOptions o;
    o.lr = 1e-4;
    o.temperature = 1.0;
    return o;
  }
  // How much: exactly one of ratio (the fraction of each prunable group's channels removed, in [0, 1)) or target_macs
  // (the fraction of the graph's multiply-adds to keep, in (0, 1): the uniform ratio that reaches it is searched).
  double ratio = 0.0;
  double target_macs = 0.0;
  Importance importance = Importance::kL1;
  std::int64_t round_to = 1;        // kept widths a multiple of this (8 or 16 suit the engine's SIMD blocking)
  std::int64_t iterations = 1;      // prune to ratio·i/iterations at i = 1..iterations, fine-tuning after each
  std::vector<std::string> ignore{};  // nodes whose output channels stay (their groups are fixed)
  std::int64_t taylor_batches = 4;  // batches of `data` the Taylor gradients average over
  // Fine-tuning after each cut: the pruned graph distilled from the unpruned one (qat_train with fake_quantize off;
  // steps, lr, temperature, label_weight, weight_decay, threads and progress are read). steps = 0: no fine-tuning.
  std::int64_t finetune_steps = 0;
  QatOptions finetune = finetune_defaults();
  // Called at each iteration's cut (its importance pass done): iteration (1-based), iterations.
  std::function<void(std::int64_t iteration, std::int64_t iterations)> progress{};
};

struct PruneResult {
  Graph graph;
  nlohmann::ordered_json report;  // options, MACs and params before/after, each group's width, fine-tune losses
};

// The options' own bounds (what prune_graph checks before it looks at a graph): for callers that check early.
void check_prune_options(const PruneOptions& options);

// Iterative structured pruning of an fp32 image graph. `data` is needed for Taylor importance and fine-tuning (it
// may be empty otherwise). Throws hotpath::Error for: ratio outside [0, 1) or target_macs outside (0, 1) (a ratio
// of 1 would remove every channel), both or neither given, round_to < 1, iterations < 1, an `ignore` name that is
// no conv2d/linear node, a graph with no prunable group, a target_macs no uniform ratio reaches (naming the least
// reachable), and what channel_groups and qat_train refuse.
PruneResult prune_graph(const Graph& graph, const QatData& data, const PruneOptions& options);

// Magnitude (unstructured) pruning: in every conv2d and linear weight, the `sparsity` fraction of smallest |w| set to
// zero (per node). The tensors stay dense, so the engine and every dense kernel run exactly as many multiply-adds:
// it makes a model no faster, only more compressible. The report says so and gives each node's sparsity.
nlohmann::ordered_json magnitude_prune(Graph& graph, double sparsity);

}  // namespace hotpath::infer
