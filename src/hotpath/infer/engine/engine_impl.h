// Private to infer/engine/: the engine's prepared form of a graph, shared by its two files.
//   engine.cpp  the runtime: value slots, fusions, per-shape buffer plans, the batch-1 row split, the batch split,
//               the public Engine calls;
//   steps.cpp   the nodes: each op's set-up and run, one member of Engine::Impl per op, reached through one
//               table per op in OpKind's order (graph.h), whose size the compiler checks against kOpCount.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "buffer_plan.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/graph.h"
#include "hotpath/ops/int8_linear.h"
#include "hotpath/ops/onednn_conv.h"
#include "int8_nodes.h"

namespace hotpath::infer {
namespace detail {

enum class Act { kNone, kRelu, kRelu6, kGelu, kGeluTanh, kSilu, kSigmoid, kTanh };

// oneDNN's post-op name and arguments for an activation.
struct PostOp {
  std::string attr = "none";
  std::vector<double> scalars;
  std::string algorithm;
};

// One node, prepared: slots instead of names, weights in the compute dtype and layout.
struct Step {
  const Node* node = nullptr;
  OpKind op = OpKind::kAdd;
  Act act = Act::kNone;
  std::vector<int> in;       // value slots; -1 = absent
  int out = -1;
  std::vector<int> release;  // slots read for the last time here
  at::Tensor weight, bias;
  std::vector<std::int64_t> stride, padding, pre_pad, dilation, kernel;
  std::vector<std::int64_t> conv_pad;  // conv: the node's padding, top, left, bottom, right
  std::int64_t groups = 1, heads = 1, dim = 0, index = 0;
  bool keepdims = false;
  double eps = 1e-5;
  at::Tensor word, position, token_type, ln_weight, ln_bias;  // bert_embed; vit_embed uses word/position
  std::shared_ptr<const detail::Int8Node> int8;                 // quantized conv
  std::optional<ops::Int8Linear> qlinear;                       // quantized linear
  std::string qact = "none";  // the activation qlinear's epilogue fuses; others run after it in place
  std::vector<int> extra_out;  // layer_norm: slots of its output's int8 rows and row scales (next linear's input)
  std::vector<int> extra_in;   // linear: those slots, when its input's producer quantized it
  bool fast_ln = false;        // layer_norm / bert_embed: hotpath's f32 LayerNorm kernel (out=, + quantize)
  bool rows = false;           // runs on a range of token rows in the batch-1 row split
  bool packed = false;                                          // run mkldnn_conv_ops with packed weights
  bool direct = false;  // fp32 conv through ops::OneDnnConv (oneDNN's library called directly), per input shape
  bool mkl = false;  // fp32 linear of an image graph: MKL's packed sgemm at small row counts (packed_linear_for)
  PostOp post;
  // The weight in oneDNN's layout, per input shape (at most kMaxPackedShapes; guarded by Impl::pack_mutex).
  mutable std::map<std::vector<std::int64_t>, at::Tensor> packed_by_shape;
  // The direct conv per input shape (at most kMaxDirectShapes; guarded by Impl::pack_mutex).
  mutable std::map<std::vector<std::int64_t>, std::shared_ptr<const ops::OneDnnConv>> direct_by_shape;
};

// Input shapes (batch sizes, in practice) a conv keeps a packed weight for; past it, the first one serves.
constexpr std::size_t kMaxPackedShapes = 4;
// Input shapes a direct conv keeps a oneDNN primitive for (the reordered weight is shared between them where
// oneDNN wants one layout, as it does for every batch size of the models here); past it, ATen's prepacked op.
constexpr std::size_t kMaxDirectShapes = 16;
// Row counts an fp32 linear packs its weight for (each a full copy of it), and the largest: MKL copies the
// weight into its panels on every at::addmm call, ~14 % of a ViT-B/16 batch-1 run (M 197); at large M the
// copy is a small share of the multiply and at::addmm runs.
constexpr std::size_t kMaxPackedLinearShapes = 2;
constexpr std::int64_t kMaxPackedLinearRows = 1024;

// Token rows [begin, end) of a batch-1 run's per-token values (the row split); all = every row.
struct Rows {
  std::int64_t begin = 0, end = 0;
  bool all = true;
  [[nodiscard]] std::int64_t size() const { return end - begin; }
};

// Where a step's tensors come from — index 0 its output, 1.. its extra outputs, then its scratch: the plan's
// arena views, or fresh memory on the engine's device, recorded when this run is making a plan.
struct StepIo {
  at::Device device = at::Device(at::kCPU);
  const std::vector<at::Tensor>* views = nullptr;  // the arena's views (every spec of the plan)
  const std::vector<int>* specs = nullptr;         // this step's spec per index, -1 = none
  std::vector<std::optional<detail::TensorSpec>>* record = nullptr;

  [[nodiscard]] at::Tensor get(std::size_t i, at::IntArrayRef sizes, at::ScalarType dtype,
                               at::MemoryFormat format = at::MemoryFormat::Contiguous) const {
    if (views != nullptr && specs != nullptr && i < specs->size() && (*specs)[i] >= 0) {
      const at::Tensor& t = (*views)[static_cast<std::size_t>((*specs)[i])];
      if (t.defined() && t.sizes() == sizes && t.scalar_type() == dtype) return t;
    }
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype).device(device).memory_format(format));
    if (record != nullptr) {
      if (record->size() <= i) record->resize(i + 1);
      (*record)[i] = detail::TensorSpec::of(t);
    }
    return t;
  }
};

// What one op's run reads and writes: the values by slot, where its tensors come from, its rows; the extra
// outputs it leaves in `extra`, in the order of Step::extra_out.
// Whether this LibTorch has MKL's packed sgemm ops (mkl::_mkl_linear): fp32 image-graph linears then run through it.
bool has_mkl_linear();

struct StepArgs {
  const Step& step;
  std::vector<at::Tensor>& v;
  const StepIo& io;
  const Rows& r;
  std::vector<at::Tensor> extra;
  // Input i of the step, or an undefined tensor when absent.
  [[nodiscard]] const at::Tensor& in(std::size_t i) const {
    static const at::Tensor kNone;
    return i < step.in.size() && step.in[i] >= 0 ? v[static_cast<std::size_t>(step.in[i])] : kNone;
  }
};

// One input shape's plan: every recorded tensor's place in the arena, per step the spec of each index.
struct ShapePlan {
  std::vector<std::int64_t> key;  // rank and sizes of every input, concatenated
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::vector<int>> step_specs;
  std::unique_ptr<detail::ArenaPool> pool;
  int buffers = 0, planned = 0, unplanned = 0;
  std::int64_t planned_bytes = 0;
  bool rows = false;  // batch-1 runs split along the tokens
};

}  // namespace detail

struct Engine::Impl {
  using Act = detail::Act;
  using Rows = detail::Rows;
  using ShapePlan = detail::ShapePlan;
  using Step = detail::Step;
  using StepArgs = detail::StepArgs;
  using StepIo = detail::StepIo;

  Graph graph;
  EngineOptions options;
  at::ScalarType compute = at::kFloat;
  std::string precision_note;
  std::vector<Step> steps;
  std::vector<int> input_slots, output_slots;
  int num_slots = 0;
  std::map<std::string, int> int8_counts;
  std::string conv_note;  // what fp32 convs run when not ATen's prepacked fused oneDNN op ("" when they do)
  mutable std::mutex pack_mutex;
  // Every node works per sample (text graphs: no convs or pools, no select along the batch): run() may cut
  // a batch into parts that threads run independently (EngineOptions::split_batch). "" or why not.
  std::string split_note;
  // Batch-1 row split (EngineOptions::split_rows): the phases (steps [first, last], on token rows or on one
  // thread), a barrier after each; "" or why batch-1 runs keep per-node parallelism.
  struct Segment {
    std::size_t first = 0, last = 0;
    bool rows = false;
  };
  std::vector<Segment> segments;
  std::string rows_note;
  std::vector<std::size_t> def_step, last_use;  // per slot
  std::vector<char> is_output;                  // per slot
  std::string plan_note;                        // why runs are not planned, "" when they are
  mutable std::mutex plans_mutex;
  mutable std::list<std::shared_ptr<ShapePlan>> plans;  // most recently used first

  // s.weight packed by oneDNN for an input of x's shape (once per shape, at most kMaxPackedShapes).
  const at::Tensor& packed_for(const Step& s, const at::Tensor& x) const;
  // s's direct conv for an input of x's shape (created once per shape); nullptr past kMaxDirectShapes shapes
  // or where oneDNN has no direct kernel for the shape: the caller then runs ATen's path.
  const ops::OneDnnConv* direct_for(const Step& s, const at::Tensor& x) const;
  // s.weight packed by MKL for m rows (once per m, at most kMaxPackedLinearShapes); nullptr past that.
  const at::Tensor* packed_linear_for(const Step& s, std::int64_t m) const;

  void prepare();
  void choose_compute();
  at::Tensor cast(const at::Tensor& t, bool conv_weight = false) const {
    at::Tensor c = t.to(options.device, compute);
    if (conv_weight && options.channels_last) return c.contiguous(at::MemoryFormat::ChannelsLast);
    return c.contiguous();
  }
  [[nodiscard]] at::Tensor param(const Node& n, const char* role) const {
    auto it = n.params.find(role);
    return it == n.params.end() ? at::Tensor() : graph.params.at(it->second);
  }
  // One node; reads and writes v (writes only when r.all: row-split outputs are in place before).
  void run_step(const Step& s, std::vector<at::Tensor>& v, const StepIo& io, const Rows& r) const;
  void run_step_checked(const Step& s, std::vector<at::Tensor>& v, const StepIo& io, const Rows& r) const;
  void check_embed_ids(const Step& s, const std::vector<at::Tensor>& v) const;
  // Every step in order over the values v (inputs already in their slots); planned (arena views) or
  // recording (specs per step) or neither.
  void run_steps(std::vector<at::Tensor>& v, const NodeObserver& observer, const ShapePlan* plan = nullptr,
                 const detail::Arena* arena = nullptr,
                 std::vector<std::vector<std::optional<detail::TensorSpec>>>* record = nullptr) const;
  [[nodiscard]] StepIo io_for(std::size_t t, const ShapePlan* plan, const detail::Arena* arena,
                              std::vector<std::vector<std::optional<detail::TensorSpec>>>* record) const;
  // run_steps through the plan of v's input shapes (made by this run when there is none yet).
  void run_planned(std::vector<at::Tensor>& v) const;
  void run_rows(std::vector<at::Tensor>& v, const ShapePlan& plan, const detail::Arena& arena,
                std::int64_t threads) const;
  [[nodiscard]] std::shared_ptr<ShapePlan> make_plan(
      std::vector<std::int64_t> key, std::vector<std::vector<std::int64_t>> shapes,
      const std::vector<std::vector<std::optional<detail::TensorSpec>>>& rec) const;
  void prepare_fusions();
  // Each op's set-up (attributes, weights in the compute dtype and layout) and run, one member each
  // (steps.cpp); prepare_step and run_step call them through one table per op, in OpKind's order.
  void prepare_step(Step& s, const Node& n);
  void prepare_conv2d(Step& s, const Node& n);
  void prepare_max_pool2d(Step& s, const Node& n);
  void prepare_global_avg_pool(Step& s, const Node& n);
  void prepare_linear(Step& s, const Node& n);
  void prepare_layer_norm(Step& s, const Node& n);
  void prepare_attention(Step& s, const Node& n);
  void prepare_vit_embed(Step& s, const Node& n);
  void prepare_bert_embed(Step& s, const Node& n);
  void prepare_select(Step& s, const Node& n);
  // Each returns the op's output (index 0 of StepIo) and sets args.extra for extra outputs.
  at::Tensor run_conv2d(const Step& s, StepArgs& args) const;
  at::Tensor run_max_pool2d(const Step& s, StepArgs& args) const;
  at::Tensor run_global_avg_pool(const Step& s, StepArgs& args) const;
  at::Tensor run_add(const Step& s, StepArgs& args) const;
  at::Tensor run_mul(const Step& s, StepArgs& args) const;
  at::Tensor run_linear(const Step& s, StepArgs& args) const;
  at::Tensor run_layer_norm(const Step& s, StepArgs& args) const;
  at::Tensor run_attention(const Step& s, StepArgs& args) const;
  at::Tensor run_vit_embed(const Step& s, StepArgs& args) const;
  at::Tensor run_bert_embed(const Step& s, StepArgs& args) const;
  at::Tensor run_select(const Step& s, StepArgs& args) const;
  at::Tensor run_mean_pool(const Step& s, StepArgs& args) const;
  at::Tensor run_l2_normalize(const Step& s, StepArgs& args) const;
  // run_steps on parts of the batch, one per thread (split_batch); the outputs, concatenated.
  std::vector<at::Tensor> run_split(const std::vector<at::Tensor>& v, std::int64_t batch, std::int64_t parts) const;
};

}  // namespace hotpath::infer
