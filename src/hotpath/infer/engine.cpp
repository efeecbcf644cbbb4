#include "hotpath/infer/engine.h"

#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/div.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/add.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/hardtanh.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/tanh.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/package.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/int8_kernels.h"
#include "hotpath/ops/int8_linear.h"
#include "cuda/cuda_engine.h"
#include "internal/buffer_plan.h"
#include "internal/int8_nodes.h"

namespace hotpath::infer {

namespace {

enum class Op { kConv, kMaxPool, kAvgPool, kAdd, kMul, kLinear, kLayerNorm, kAttention, kVitEmbed, kBertEmbed,
                kSelect, kMeanPool, kL2Normalize };
enum class Act { kNone, kRelu, kRelu6, kGelu, kGeluTanh, kSilu, kSigmoid, kTanh };

Op op_of(const Node& n) {
  static const std::unordered_map<std::string, Op> kMap = {
      {"conv2d", Op::kConv},       {"max_pool2d", Op::kMaxPool},   {"global_avg_pool", Op::kAvgPool},
      {"add", Op::kAdd},           {"mul", Op::kMul},              {"linear", Op::kLinear},
      {"layer_norm", Op::kLayerNorm}, {"attention", Op::kAttention}, {"vit_embed", Op::kVitEmbed},
      {"bert_embed", Op::kBertEmbed}, {"select", Op::kSelect},     {"mean_pool", Op::kMeanPool},
      {"l2_normalize", Op::kL2Normalize}};
  auto it = kMap.find(n.op);
  HOTPATH_CHECK(it != kMap.end(), "engine: node ", n.name, " has unknown op ", n.op);
  return it->second;
}

Act act_of(const Node& n) {
  const std::string a = n.attr_str("act", "none");
  if (a == "none") return Act::kNone;
  if (a == "relu") return Act::kRelu;
  if (a == "relu6") return Act::kRelu6;
  if (a == "gelu") return Act::kGelu;
  if (a == "gelu_tanh") return Act::kGeluTanh;
  if (a == "silu") return Act::kSilu;
  if (a == "sigmoid") return Act::kSigmoid;
  if (a == "tanh") return Act::kTanh;
  throw Error("engine: node " + n.name + " has unknown activation " + a);
}

void activate_(at::Tensor& x, Act act) {
  switch (act) {
    case Act::kNone: return;
    case Act::kRelu: at::relu_(x); return;
    case Act::kRelu6: at::hardtanh_(x, 0.0, 6.0); return;
    case Act::kGelu: at::gelu_(x); return;
    case Act::kGeluTanh: at::gelu_(x, "tanh"); return;
    case Act::kSilu: at::silu_(x); return;
    case Act::kSigmoid: at::sigmoid_(x); return;
    case Act::kTanh: at::tanh_(x); return;
  }
}

bool native_bf16() { return cpu::max_isa() >= cpu::Isa::kAvx512Bf16; }

// oneDNN's fused convolution (what PyTorch's Inductor freezes convs into): the weight reordered once
// into oneDNN's blocked layout, bias + activation (+ residual add) as post-ops of the conv itself. Eager
// at::conv2d reorders the weight on every call and runs add and activation as separate passes over memory.
// Looked up once through the dispatcher; missing ops (a LibTorch without mkldnn) leave the ATen path.
struct MkldnnConvOps {
  std::optional<c10::OperatorHandle> reorder, unary, binary;
  std::string missing;
};

const MkldnnConvOps& mkldnn_conv_ops() {
  static const MkldnnConvOps ops = [] {
    MkldnnConvOps o;
    auto& d = c10::Dispatcher::singleton();
    o.reorder = d.findSchema({"mkldnn::_reorder_convolution_weight", ""});
    o.unary = d.findSchema({"mkldnn::_convolution_pointwise", ""});
    o.binary = d.findSchema({"mkldnn::_convolution_pointwise", "binary"});
    if (!o.reorder || !o.unary || !o.binary) {
      o.missing = "this LibTorch lacks mkldnn::_convolution_pointwise; convs run at::conv2d";
      o.reorder.reset();
    }
    return o;
  }();
  return ops;
}

// MKL's packed sgemm as LibTorch exposes it (what Inductor freezes fp32 linears into): the weight packed once
// for a row count M; mkl::_mkl_linear falls back to at::linear for any other M.
struct MklLinearOps {
  std::optional<c10::OperatorHandle> reorder, linear;
};

const MklLinearOps& mkl_linear_ops() {
  static const MklLinearOps ops = [] {
    MklLinearOps o;
    auto& d = c10::Dispatcher::singleton();
    o.reorder = d.findSchema({"mkl::_mkl_reorder_linear_weight", ""});
    o.linear = d.findSchema({"mkl::_mkl_linear", ""});
    if (!o.reorder || !o.linear) {
      o.reorder.reset();
      o.linear.reset();
    }
    return o;
  }();
  return ops;
}

// oneDNN's post-op name and arguments for an activation.
struct PostOp {
  std::string attr = "none";
  std::vector<double> scalars;
  std::string algorithm;
};

PostOp post_op(Act act) {
  switch (act) {
    case Act::kNone: return {};
    case Act::kRelu: return {"relu", {}, ""};
    case Act::kRelu6: return {"hardtanh", {0.0, 6.0}, ""};
    case Act::kGelu: return {"gelu", {}, "none"};
    case Act::kGeluTanh: return {"gelu", {}, "tanh"};
    case Act::kSilu: return {"swish", {}, ""};
    case Act::kSigmoid: return {"sigmoid", {}, ""};
    case Act::kTanh: return {"tanh", {}, ""};
  }
  return {};
}

c10::List<std::optional<at::Scalar>> scalar_list(const std::vector<double>& v) {
  c10::List<std::optional<at::Scalar>> out;
  for (double x : v) out.push_back(at::Scalar(x));
  return out;
}

at::Tensor call(const c10::OperatorHandle& op, torch::jit::Stack stack) {
  op.callBoxed(&stack);
  return stack.front().toTensor();
}


// One node, prepared: slots instead of names, weights in the compute dtype and layout.
struct Step {
  const Node* node = nullptr;
  Op op = Op::kAdd;
  Act act = Act::kNone;
  std::vector<int> in;       // value slots; -1 = absent
  int out = -1;
  std::vector<int> release;  // slots read for the last time here
  at::Tensor weight, bias;
  std::vector<std::int64_t> stride, padding, pre_pad, dilation, kernel;
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
  bool mkl = false;  // fp32 linear of an image graph: MKL's packed sgemm at small row counts (packed_linear_for)
  PostOp post;
  // The weight in oneDNN's layout, per input shape (at most kMaxPackedShapes; guarded by Impl::pack_mutex).
  mutable std::map<std::vector<std::int64_t>, at::Tensor> packed_by_shape;
};

// Input shapes (batch sizes, in practice) a conv keeps a packed weight for; past it, the first one serves.
constexpr std::size_t kMaxPackedShapes = 4;
// Row counts an fp32 linear packs its weight for (each a full copy of it), and the largest: MKL copies the
// weight into its panels on every at::addmm call, ~14 % of a ViT-B/16 batch-1 run (M 197); at large M the
// copy is a small share of the multiply and at::addmm runs.
constexpr std::size_t kMaxPackedLinearShapes = 2;
constexpr std::int64_t kMaxPackedLinearRows = 1024;

// Activations the int8 epilogue fuses (erf-gelu as a rational polynomial: hotpath_int8_bench EpilogueGelu);
// the exp-based ones run after it through ATen's vectorised kernels, in place.
const char* fused_int8_act(const std::string& act) {
  for (const char* a : {"none", "relu", "relu6", "gelu"}) {
    if (act == a) return a;
  }
  return "none";
}

// Token rows [begin, end) of a batch-1 run's per-token values (the row split); all = every row.
struct Rows {
  std::int64_t begin = 0, end = 0;
  bool all = true;
  [[nodiscard]] std::int64_t size() const { return end - begin; }
};

// t [..., K] as rows [M, K], narrowed to r (row-split values are planned, hence contiguous).
at::Tensor row_view(const at::Tensor& t, const Rows& r) {
  if (!t.defined()) return t;
  if (r.all) return t.reshape({-1, t.size(-1)});
  return t.view({-1, t.size(-1)}).narrow(0, r.begin, r.size());
}

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

// Blocks until counter >= target: a short spin (the other thread is usually a few µs away), then a futex wait.
void wait_for(const std::atomic<std::int64_t>& counter, std::int64_t target) {
  for (int spin = 0; spin < 2048; ++spin) {
    if (counter.load(std::memory_order_acquire) >= target) return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  for (std::int64_t seen = counter.load(); seen < target; seen = counter.load()) counter.wait(seen);
}

}  // namespace

struct Engine::Impl {
  Graph graph;
  EngineOptions options;
  at::ScalarType compute = at::kFloat;
  std::string precision_note;
  std::vector<Step> steps;
  std::vector<int> input_slots, output_slots;
  int num_slots = 0;
  std::map<std::string, int> int8_counts;
  std::string conv_note;  // why convs do not run oneDNN's prepacked fused kernel ("" when they do)
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

  // s.weight packed by oneDNN for an input of x's shape (once per shape).
  const at::Tensor& packed_for(const Step& s, const at::Tensor& x) const {
    const std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
    const std::lock_guard<std::mutex> lock(pack_mutex);
    auto it = s.packed_by_shape.find(shape);
    if (it != s.packed_by_shape.end()) return it->second;
    if (s.packed_by_shape.size() >= kMaxPackedShapes) return s.packed_by_shape.begin()->second;
    const at::Tensor w = call(*mkldnn_conv_ops().reorder,
                              {s.weight, s.padding, s.stride, s.dilation, s.groups, c10::IValue(shape)});
    return s.packed_by_shape.emplace(shape, w).first->second;
  }

  // s.weight packed by MKL for m rows (once per m, at most kMaxPackedLinearShapes); nullptr past that.
  const at::Tensor* packed_linear_for(const Step& s, std::int64_t m) const {
    const std::vector<std::int64_t> key = {m};
    const std::lock_guard<std::mutex> lock(pack_mutex);
    auto it = s.packed_by_shape.find(key);
    if (it != s.packed_by_shape.end()) return &it->second;
    if (s.packed_by_shape.size() >= kMaxPackedLinearShapes) return nullptr;
    const at::Tensor w = call(*mkl_linear_ops().reorder, {s.weight, m});
    return &s.packed_by_shape.emplace(key, w).first->second;
  }

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
  // run_steps on parts of the batch, one per thread (split_batch); the outputs, concatenated.
  std::vector<at::Tensor> run_split(const std::vector<at::Tensor>& v, std::int64_t batch, std::int64_t parts) const;
};

// The type the steps compute in (and why, when it is not what the package asks): CUDA's, fp32, or bf16 where the
// CPU has native bf16 (or emulates it on request).
void Engine::Impl::choose_compute() {
  if (options.device.is_cuda()) {
    compute = prepare_cuda_engine(graph, options);  // cuda/cuda_engine.h
  } else if (options.precision == Precision::kFp32) {
    compute = at::kFloat;
  } else if (options.precision == Precision::kInt8) {
    compute = at::kFloat;
    precision_note = "the nodes left unquantized run fp32, the precision the export measured";
  } else if (native_bf16()) {
    compute = at::kBFloat16;
  } else if (options.emulate_bf16 && cpu::max_isa() >= cpu::Isa::kAvx512) {
    compute = at::kBFloat16;
    precision_note = std::string("emulated: this CPU (or HOTPATH_MAX_ISA cap, now ") + cpu::isa_name(cpu::max_isa()) +
                     ") lacks AVX512_BF16, oneDNN emulates bf16 (slow; for parity checks)";
  } else {
    compute = at::kFloat;
    precision_note = std::string("bf16 activations not used: this CPU (or HOTPATH_MAX_ISA cap, now ") +
                     cpu::isa_name(cpu::max_isa()) + ") lacks AVX512_BF16, so fp32 runs instead";
  }
}

void Engine::Impl::prepare() {
  graph.validate();
  HOTPATH_CHECK(options.threads >= 0 && options.threads <= 4096, "engine: threads is ", options.threads,
                ", expected 0 (keep) to 4096");
  choose_compute();
  std::map<std::string, int> slot;
  const auto slot_of = [&](const std::string& name) {
    auto [it, fresh] = slot.emplace(name, num_slots);
    if (fresh) ++num_slots;
    return it->second;
  };
  for (const ValueSpec& in : graph.inputs) input_slots.push_back(slot_of(in.name));
  std::map<int, std::size_t> last_read;
  for (const Node& n : graph.nodes) {
    Step s;
    s.node = &n;
    s.op = op_of(n);
    s.act = act_of(n);
    for (const std::string& in : n.inputs) s.in.push_back(in.empty() ? -1 : slot.at(in));
    for (int i : s.in) {
      if (i >= 0) last_read[i] = steps.size();
    }
    s.out = slot_of(n.output);
    const std::string quant = n.attr_str("quant", "");
    switch (s.op) {
      case Op::kConv: {
        s.stride = n.attr_ints("stride", {});
        s.dilation = n.attr_ints("dilation", {});
        s.groups = n.attr_int("groups", 1);
        const auto pad = n.attr_ints("padding", {});
        HOTPATH_CHECK(s.stride.size() == 2 && s.dilation.size() == 2 && pad.size() == 4, "engine: conv ", n.name,
                      " needs stride [2], dilation [2] and padding [4]");
        if (pad[0] == pad[2] && pad[1] == pad[3]) {
          s.padding = {pad[0], pad[1]};
        } else {
          s.padding = {0, 0};
          s.pre_pad = {pad[1], pad[3], pad[0], pad[2]};  // constant_pad_nd: last dim first
        }
        if (quant == "static_int8") {
          s.int8 = detail::prepare_int8_conv(n, graph, compute);
          ++int8_counts["conv2d"];
        } else {
          s.weight = cast(param(n, "weight"), true);
          if (n.has_param("bias")) s.bias = cast(param(n, "bias"));
          const MkldnnConvOps& mk = mkldnn_conv_ops();
          if (options.device.is_cuda()) {
            conv_note = "cuDNN";
          } else if (options.channels_last && mk.reorder) {
            // Packed per input shape on first use (packed_for): oneDNN picks the weight's blocked layout
            // from the input shape, and a weight packed for another shape is reordered again on every call.
            s.packed = true;
            s.post = post_op(s.act);
          } else {
            conv_note = options.channels_last ? mk.missing : "contiguous layout asked: convs run at::conv2d";
          }
        }
        break;
      }
      case Op::kMaxPool:
        s.kernel = n.attr_ints("kernel", {});
        s.stride = n.attr_ints("stride", {});
        s.padding = n.attr_ints("padding", {});
        break;
      case Op::kAvgPool: s.keepdims = n.attr_int("keepdims", 0) != 0; break;
      case Op::kLinear:
        if (quant == "dynamic_int8") {
          try {
            const auto p = [&](const char* role) { return n.has_param(role) ? param(n, role) : at::Tensor(); };
            s.qlinear.emplace(ops::Int8Linear::prepare(p("weight"), p("weight_scale"), p("bias")));
          } catch (const Error& e) {
            throw Error("engine: quantized node " + n.name + ": " + e.what());
          }
          s.qact = fused_int8_act(n.attr_str("act", "none"));
          ++int8_counts["linear"];
        } else {
          s.weight = cast(param(n, "weight"));
          if (n.has_param("bias")) s.bias = cast(param(n, "bias"));
        }
        break;
      case Op::kLayerNorm:
        s.weight = cast(param(n, "weight"));
        s.bias = cast(param(n, "bias"));
        s.eps = n.attr_float("eps", 1e-5);
        break;
      case Op::kAttention: s.heads = n.attr_int("heads", 1); break;
      case Op::kVitEmbed:
        s.word = cast(param(n, "class_token"));
        s.position = cast(param(n, "pos_embedding"));
        break;
      case Op::kBertEmbed:
        s.word = cast(param(n, "word"));
        s.position = cast(param(n, "position"));
        if (n.has_param("token_type")) s.token_type = cast(param(n, "token_type"));
        s.ln_weight = cast(param(n, "ln_weight"));
        s.ln_bias = cast(param(n, "ln_bias"));
        s.eps = n.attr_float("eps", 1e-12);
        break;
      case Op::kSelect:
        s.dim = n.attr_int("dim", 1);
        s.index = n.attr_int("index", 0);
        break;
      default: break;
    }
    steps.push_back(std::move(s));
  }
  for (const std::string& out : graph.outputs) output_slots.push_back(slot.at(out));
  const bool image_graph = std::any_of(steps.begin(), steps.end(), [](const Step& s) {
    return s.op == Op::kConv || s.op == Op::kMaxPool || s.op == Op::kAvgPool;
  });
  for (const Step& s : steps) {
    if (s.op == Op::kConv || s.op == Op::kMaxPool || s.op == Op::kAvgPool) {
      split_note = "image graph (convolutions and pools keep their own parallelism)";
    } else if (s.op == Op::kSelect && s.dim == 0) {
      split_note = "node " + s.node->name + " selects along the batch";
    }
    if (!split_note.empty()) break;
  }
  for (const ValueSpec& in : graph.inputs) {
    if (split_note.empty() && in.shape.empty()) split_note = "input " + in.name + " has no batch dimension";
  }
  // fp32 linears of image graphs (the ViT's, classifier heads) through MKL's packed sgemm; text graphs
  // are left out: every sequence length is a new row count, hence a new copy of the weight.
  const bool mkl_ok = image_graph && options.device.is_cpu() && compute == at::kFloat && mkl_linear_ops().linear;
  for (Step& s : steps) s.mkl = mkl_ok && s.op == Op::kLinear && !s.qlinear;
  if (split_note.empty() && !options.split_batch) split_note = "split_batch off";
#ifndef _OPENMP
  if (split_note.empty()) split_note = "engine.cpp built without OpenMP";  // at::parallel_for would be serial
#endif
  for (const auto& [value, step] : last_read) {
    const bool output = std::find(output_slots.begin(), output_slots.end(), value) != output_slots.end();
    if (!output) steps[step].release.push_back(value);
  }
  prepare_fusions();
}

// LayerNorm → int8 linear: the LayerNorm writes the linear's int8 rows and scales in the same pass (extra
// outputs in slots of their own); then the per-slot lifetimes the plans use, and the row split's phases.
void Engine::Impl::prepare_fusions() {
  const bool cpu_f32 = options.device.is_cpu() && compute == at::kFloat;
  for (Step& s : steps) {
    s.fast_ln = cpu_f32 && (s.op == Op::kLayerNorm || s.op == Op::kBertEmbed);
  }
  for (std::size_t t = 0; t < steps.size(); ++t) {
    Step& ln = steps[t];
    if (!ln.fast_ln || ln.op != Op::kLayerNorm) continue;
    std::vector<std::size_t> consumers;
    bool quantized_only = true;
    for (std::size_t u = t + 1; u < steps.size(); ++u) {
      const Step& c = steps[u];
      if (c.in.empty() || c.in[0] != ln.out) continue;
      if (c.op == Op::kLinear && c.qlinear && c.qlinear->in_features() == ln.weight.size(0)) {
        consumers.push_back(u);
      } else {
        quantized_only = false;
      }
    }
    if (consumers.empty() || !quantized_only) continue;
    ln.extra_out = {num_slots, num_slots + 1};
    num_slots += 2;
    for (const std::size_t u : consumers) steps[u].extra_in = ln.extra_out;
  }
  const auto n = static_cast<std::size_t>(num_slots);
  def_step.assign(n, 0);
  last_use.assign(n, 0);
  is_output.assign(n, 0);
  for (int o : output_slots) is_output[static_cast<std::size_t>(o)] = 1;
  for (std::size_t t = 0; t < steps.size(); ++t) {
    Step& s = steps[t];
    std::vector<int> outs = {s.out};
    outs.insert(outs.end(), s.extra_out.begin(), s.extra_out.end());
    for (int o : outs) def_step[static_cast<std::size_t>(o)] = last_use[static_cast<std::size_t>(o)] = t;
    std::vector<int> ins = s.in;
    ins.insert(ins.end(), s.extra_in.begin(), s.extra_in.end());
    for (int i : ins) {
      if (i >= 0) last_use[static_cast<std::size_t>(i)] = t;
    }
  }
  for (const Step& s : steps) {  // the extra slots: released after their last reader
    for (int o : s.extra_out) steps[last_use[static_cast<std::size_t>(o)]].release.push_back(o);
  }
  if (!options.plan_buffers) plan_note = "plan_buffers off";
  if (options.device.is_cuda()) plan_note = "CUDA runs allocate through the caching allocator";
  if (options.planned_shapes == 0) plan_note = "planned_shapes is 0";
  // Row split: per-token steps over values that are per token (the text inputs and what such steps write).
  std::vector<char> rowed(n, 0);
  for (int i : input_slots) rowed[static_cast<std::size_t>(i)] = 1;
  for (Step& s : steps) {
    bool capable = s.op == Op::kLinear || s.op == Op::kAdd || s.op == Op::kAttention ||
                   ((s.op == Op::kLayerNorm || s.op == Op::kBertEmbed) && s.fast_ln);
    for (int i : s.in) capable = capable && (i < 0 || rowed[static_cast<std::size_t>(i)] != 0);
    s.rows = capable;
    rowed[static_cast<std::size_t>(s.out)] = capable ? 1 : 0;
    for (int o : s.extra_out) rowed[static_cast<std::size_t>(o)] = capable ? 1 : 0;
  }
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const Step& s = steps[t];
    if (segments.empty() || segments.back().rows != s.rows || s.op == Op::kAttention) {
      segments.push_back({t, t, s.rows});
    } else {
      segments.back().last = t;
    }
  }
  const bool any_rows = std::any_of(steps.begin(), steps.end(), [](const Step& s) { return s.rows; });
  if (!split_note.empty() && split_note != "split_batch off") {
    rows_note = split_note;
  } else if (!options.split_rows) {
    rows_note = "split_rows off";
  } else if (!plan_note.empty()) {
    rows_note = "needs planned buffers (" + plan_note + ")";
  } else if (!cpu_f32) {
    rows_note = "bf16 compute";
  } else if (!any_rows) {
    rows_note = "no per-token nodes";
  }
#ifndef _OPENMP
  if (rows_note.empty()) rows_note = "engine.cpp built without OpenMP";
#endif
  if (!rows_note.empty()) segments.clear();
}

void Engine::Impl::check_embed_ids(const Step& s, const std::vector<at::Tensor>& v) const {
  const auto in = [&](std::size_t i) {
    return i < s.in.size() && s.in[i] >= 0 ? v[static_cast<std::size_t>(s.in[i])] : at::Tensor();
  };
  const auto check_ids = [&](const at::Tensor& t, const at::Tensor& table, const char* what) {
    const std::int64_t lo = t.min().item<std::int64_t>();
    const std::int64_t hi = t.max().item<std::int64_t>();
    HOTPATH_CHECK(lo >= 0 && hi < table.size(0), "engine: input ", what, " holds ids in [", lo, ", ", hi,
                  "], expected [0, ", table.size(0), ")");
  };
  const at::Tensor ids = in(0);
  check_ids(ids, s.word, "input_ids");
  if (s.token_type.defined() && in(1).defined()) check_ids(in(1), s.token_type, "token_type_ids");
  HOTPATH_CHECK(ids.size(1) <= s.position.size(0), "engine: input_ids has sequence length ", ids.size(1),
                ", the model's position table holds ", s.position.size(0));
}

void Engine::Impl::run_step(const Step& s, std::vector<at::Tensor>& v, const StepIo& io, const Rows& r) const {
  const Node& n = *s.node;
  const auto in = [&](std::size_t i) -> const at::Tensor& {
    static const at::Tensor kNone;
    return i < s.in.size() && s.in[i] >= 0 ? v[static_cast<std::size_t>(s.in[i])] : kNone;
  };
  at::Tensor y;
  std::vector<at::Tensor> extra;  // extra outputs, in the order of s.extra_out
  switch (s.op) {
    case Op::kConv: {
      const at::Tensor& x = in(0);
      HOTPATH_CHECK(x.dim() == 4, "engine: conv ", n.name, " got a ", x.dim(), "-d input ", x.sizes(),
                    ", expected [N, C, H, W]");
      if (s.int8) {  // pads inside, with the input's zero point
        y = s.int8->run(x, in(1));
        break;
      }
      const at::Tensor xp = s.pre_pad.empty() ? x : at::constant_pad_nd(x, s.pre_pad, 0.0);
      if (s.packed) {
        const MkldnnConvOps& mk = mkldnn_conv_ops();
        const c10::IValue bias = s.bias.defined() ? c10::IValue(s.bias) : c10::IValue();
        const c10::IValue algorithm = s.post.algorithm.empty() ? c10::IValue() : c10::IValue(s.post.algorithm);
        // oneDNN wants the activation in the input's memory format; channels-last it is.
        const at::Tensor xc = xp.contiguous(at::MemoryFormat::ChannelsLast);
        const at::Tensor& w = packed_for(s, xc);
        if (in(1).defined()) {
          const at::Tensor res = in(1).contiguous(at::MemoryFormat::ChannelsLast);
          // oneDNN fuses only relu after the add ("Unary Fusion behavior undefined" otherwise): other
          // activations run in place after the fused conv + add.
          const bool fuse = s.act == Act::kRelu;
          y = call(*mk.binary, {xc, res, w, bias, s.padding, s.stride, s.dilation, s.groups, std::string("add"),
                                c10::IValue(), fuse ? c10::IValue(s.post.attr) : c10::IValue(),
                                c10::List<std::optional<at::Scalar>>(), c10::IValue()});
          if (!fuse) activate_(y, s.act);
        } else {
          y = call(*mk.unary, {xc, w, bias, s.padding, s.stride, s.dilation, s.groups, s.post.attr,
                               scalar_list(s.post.scalars), algorithm});
        }
        break;
      }
      y = at::conv2d(xp, s.weight, s.bias, s.stride, s.padding, s.dilation, s.groups);
      if (in(1).defined()) y.add_(in(1));
      activate_(y, s.act);
      break;
    }
    case Op::kMaxPool: y = at::max_pool2d(in(0), s.kernel, s.stride, s.padding); break;
    case Op::kAvgPool: {
      const at::Tensor& x = in(0);
      HOTPATH_CHECK(x.dim() == 4, "engine: global_avg_pool ", n.name, " got ", x.sizes(), ", expected [N, C, H, W]");
      // What at::adaptive_avg_pool2d(x, {1, 1}) runs: the mean over H and W.
      y = io.get(0, {x.size(0), x.size(1), 1, 1}, x.scalar_type(), x.suggest_memory_format());
      at::mean_out(y, x, {-1, -2}, /*keepdim=*/true);
      if (!s.keepdims) y = y.flatten(1);
      break;
    }
    case Op::kAdd: {
      const at::Tensor& a = in(0);
      const at::Tensor& b = in(1);
      y = io.get(0, at::infer_size(a.sizes(), b.sizes()), a.scalar_type(), a.suggest_memory_format());
      if (r.all) {
        at::add_out(y, a, b);
        activate_(y, s.act);
      } else {
        at::Tensor yr = row_view(y, r);
        at::add_out(yr, row_view(a, r), row_view(b, r));
        activate_(yr, s.act);
      }
      break;
    }
    case Op::kMul: {
      const at::Tensor& a = in(0);
      y = io.get(0, at::infer_size(a.sizes(), in(1).sizes()), a.scalar_type(), a.suggest_memory_format());
      at::mul_out(y, a, in(1));
      break;
    }
    case Op::kLinear: {
      const at::Tensor& x = in(0);
      const std::int64_t k = s.qlinear ? s.qlinear->in_features() : s.weight.size(1);
      const std::int64_t out_features = s.qlinear ? s.qlinear->out_features() : s.weight.size(0);
      HOTPATH_CHECK(x.dim() >= 1 && x.size(-1) == k, "engine: linear ", n.name, " got ", x.sizes(),
                    ", expected [..., ", k, "]");
      std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
      shape.back() = out_features;
      const std::int64_t rows = x.numel() / k;
      const at::Tensor* packed = s.mkl && r.all && rows <= kMaxPackedLinearRows ? packed_linear_for(s, rows) : nullptr;
      if (packed != nullptr) {  // a fresh output: MKL's op has no out= form
        const c10::IValue bias = s.bias.defined() ? c10::IValue(s.bias) : c10::IValue();
        at::Tensor y2 = call(*mkl_linear_ops().linear, {x.reshape({rows, k}).contiguous(), *packed, s.weight, bias, rows});
        if (in(1).defined()) y2.add_(in(1).reshape({rows, out_features}));
        activate_(y2, s.act);
        y = y2.view(shape);
        break;
      }
      y = io.get(0, shape, x.scalar_type());
      at::Tensor yr = row_view(y, r);
      const at::Tensor xr = row_view(x, r);
      const at::Tensor res = row_view(in(1), r);
      if (s.qlinear) {
        const std::int64_t m = x.numel() / k;
        const bool pre = !s.extra_in.empty();
        ops::Int8Linear::Buffers buf;
        buf.q = pre ? v[static_cast<std::size_t>(s.extra_in[0])] : io.get(1, {m, k}, at::kChar);
        buf.x_scale = pre ? v[static_cast<std::size_t>(s.extra_in[1])] : io.get(2, {m}, at::kFloat);
        buf.acc = io.get(3, {s.qlinear->acc_rows(m), out_features}, at::kInt);
        if (!r.all) {
          HOTPATH_ASSERT(buf.acc.size(0) == m);  // make_plan splits rows only then
          buf.q = buf.q.view({m, k}).narrow(0, r.begin, r.size());
          buf.x_scale = buf.x_scale.narrow(0, r.begin, r.size());
          buf.acc = buf.acc.narrow(0, r.begin, r.size());
        }
        s.qlinear->forward_out(xr, s.qact, res, yr, buf, pre);
        if (s.qact == std::string_view("none")) activate_(yr, s.act);
        break;
      }
      if (s.bias.defined()) {
        at::addmm_out(yr, s.bias, xr, s.weight.t());
      } else {
        at::mm_out(yr, xr, s.weight.t());
      }
      if (res.defined()) yr.add_(res);
      activate_(yr, s.act);
      break;
    }
    case Op::kLayerNorm: {
      const at::Tensor& x = in(0);
      if (!s.fast_ln) {
        const at::Tensor xs = in(1).defined() ? x + in(1) : x;
        y = at::layer_norm(xs, {xs.size(-1)}, s.weight, s.bias, s.eps);
        break;
      }
      const std::int64_t k = x.size(-1);
      const std::int64_t m = x.numel() / k;
      y = io.get(0, x.sizes(), at::kFloat);
      at::Tensor q, scale;
      if (!s.extra_out.empty()) {
        q = io.get(1, {m, k}, at::kChar);
        scale = io.get(2, {m}, at::kFloat);
        extra = {q, scale};
        if (!r.all) {
          q = q.narrow(0, r.begin, r.size());
          scale = scale.narrow(0, r.begin, r.size());
        }
      }
      ops::layer_norm_rows_out(row_view(x, r).contiguous(), row_view(in(1), r), s.weight, s.bias, s.eps,
                               row_view(y, r), q, scale);
      break;
    }
    case Op::kAttention: {
      const at::Tensor& qkv = in(0);
      // heads >= 1 first: the graph's validation refuses 0, and this check must not divide by it either.
      HOTPATH_CHECK(s.heads >= 1 && qkv.dim() == 3 && qkv.size(2) % (3 * s.heads) == 0, "engine: attention ", n.name, " got ",
                    qkv.sizes(), ", expected [B, L, 3·heads·head_dim] with heads ", s.heads);
      const std::int64_t b = qkv.size(0), l = qkv.size(1), h = qkv.size(2) / 3;
      if (qkv.device().is_cpu() && (qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16)) {
        // Straight from the packed projection: no per-head copies of q, k, v, no copy of the context back.
        y = io.get(0, {b, l, h}, qkv.scalar_type());
        ops::attention_packed_qkv_out(qkv.contiguous(), s.heads, in(1), y, r.all ? 0 : r.begin, r.all ? -1 : r.end);
        break;
      }
      const at::Tensor parts = qkv.view({b, l, 3, s.heads, h / s.heads}).permute({2, 0, 3, 1, 4});
      const at::Tensor ctx = ops::attention(parts[0], parts[1], parts[2], in(1), ops::AttentionKernel::kAuto);
      y = ctx.transpose(1, 2).reshape({b, l, h});
      break;
    }
    case Op::kVitEmbed: {
      const at::Tensor& x = in(0);
      const at::Tensor tokens = x.flatten(2).transpose(1, 2);
      y = at::cat({s.word.expand({x.size(0), -1, -1}), tokens}, 1);
      HOTPATH_CHECK(y.size(1) == s.position.size(1), "engine: ", n.name, " has ", y.size(1),
                    " tokens but pos_embedding holds ", s.position.size(1));
      y.add_(s.position);
      break;
    }
    case Op::kBertEmbed: {
      const at::Tensor& ids = in(0);
      if (r.all) check_embed_ids(s, v);  // the row split checks before its threads start
      const std::int64_t l = ids.size(1);
      if (!s.fast_ln) {
        at::Tensor e = at::embedding(s.word, ids);
        e.add_(s.position.narrow(0, 0, l));
        if (s.token_type.defined()) {
          if (in(1).defined()) {
            e.add_(at::embedding(s.token_type, in(1)));
          } else {
            e.add_(s.token_type[0]);
          }
        }
        y = at::layer_norm(e, {e.size(-1)}, s.ln_weight, s.ln_bias, s.eps);
        break;
      }
      // word + position + token type, then LayerNorm in place: what at::embedding and at::layer_norm give.
      const std::int64_t b = ids.size(0), hidden = s.word.size(1);
      y = io.get(0, {b, l, hidden}, s.word.scalar_type());
      at::Tensor e = row_view(y, r);
      const std::int64_t p0 = r.all ? 0 : r.begin;
      const std::int64_t len = r.all ? l : r.size();  // row split: batch 1, rows are positions
      at::index_select_out(e, s.word, 0, (r.all ? ids : ids.narrow(1, p0, len)).reshape({-1}));
      e.view({-1, len, hidden}).add_(s.position.narrow(0, p0, len));
      if (s.token_type.defined()) {
        if (in(1).defined()) {
          at::Tensor tt = io.get(1, {b * l, hidden}, s.word.scalar_type());
          if (!r.all) tt = tt.narrow(0, r.begin, r.size());
          at::index_select_out(tt, s.token_type, 0, (r.all ? in(1) : in(1).narrow(1, p0, len)).reshape({-1}));
          e.add_(tt);
        } else {
          e.add_(s.token_type[0]);
        }
      }
      ops::layer_norm_rows_out(e, at::Tensor(), s.ln_weight, s.ln_bias, s.eps, e);
      break;
    }
    case Op::kSelect: {
      const at::Tensor sel = in(0).select(s.dim, s.index);
      y = io.get(0, sel.sizes(), sel.scalar_type());
      y.copy_(sel);
      break;
    }
    case Op::kMeanPool: {
      const at::Tensor& x = in(0);
      const at::Tensor m = in(1).unsqueeze(-1).to(x.scalar_type());
      at::Tensor masked = io.get(1, at::infer_size(x.sizes(), m.sizes()), x.scalar_type());
      at::mul_out(masked, x, m);
      y = io.get(0, {x.size(0), x.size(2)}, x.scalar_type());
      at::sum_out(y, masked, {1});
      y.div_(at::clamp_min(m.sum(1), 1e-9));
      break;
    }
    case Op::kL2Normalize: {
      const at::Tensor& x = in(0);
      y = io.get(0, x.sizes(), x.scalar_type());
      at::div_out(y, x, at::clamp_min(x.to(at::kFloat).norm(2, {-1}, true), 1e-12).to(x.scalar_type()));
      break;
    }
  }
  if (!r.all) return;  // the row split put every output in place before its threads started
  v[static_cast<std::size_t>(s.out)] = std::move(y);
  for (std::size_t i = 0; i < extra.size(); ++i) v[static_cast<std::size_t>(s.extra_out[i])] = std::move(extra[i]);
  for (int rel : s.release) v[static_cast<std::size_t>(rel)].reset();
}

void Engine::Impl::run_step_checked(const Step& s, std::vector<at::Tensor>& v, const StepIo& io, const Rows& r) const {
  try {
    run_step(s, v, io, r);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // LibTorch's messages carry a C++ trace: keep the first line
    const std::string what = e.what();
    throw Error("engine: node " + s.node->name + " (" + s.node->op + ") failed: " + what.substr(0, what.find('\n')));
  }
}

StepIo Engine::Impl::io_for(std::size_t t, const ShapePlan* plan, const detail::Arena* arena,
                            std::vector<std::vector<std::optional<detail::TensorSpec>>>* record) const {
  StepIo io;
  io.device = options.device;
  if (plan != nullptr && arena != nullptr) {
    io.views = &arena->views;
    io.specs = &plan->step_specs[t];
  }
  if (record != nullptr) io.record = &(*record)[t];
  return io;
}

void Engine::Impl::run_steps(std::vector<at::Tensor>& v, const NodeObserver& observer, const ShapePlan* plan,
                             const detail::Arena* arena,
                             std::vector<std::vector<std::optional<detail::TensorSpec>>>* record) const {
  std::vector<at::Tensor> seen;
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const Step& s = steps[t];
    if (observer) {
      seen.clear();
      for (int i : s.in) seen.push_back(i >= 0 ? v[static_cast<std::size_t>(i)] : at::Tensor());
    }
    run_step_checked(s, v, io_for(t, plan, arena, record), Rows{});
    if (observer) observer(*s.node, seen, v[static_cast<std::size_t>(s.out)]);
  }
}

std::shared_ptr<ShapePlan> Engine::Impl::make_plan(
    std::vector<std::int64_t> key, std::vector<std::vector<std::int64_t>> shapes,
    const std::vector<std::vector<std::optional<detail::TensorSpec>>>& rec) const {
  auto plan = std::make_shared<ShapePlan>();
  plan->key = std::move(key);
  plan->shapes = std::move(shapes);
  std::vector<detail::TensorSpec> specs;
  std::vector<detail::Lifetime> lifetimes;
  plan->step_specs.resize(steps.size());
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const Step& s = steps[t];
    std::vector<int>& ids = plan->step_specs[t];
    ids.assign(rec[t].size(), -1);
    if (rec[t].empty() || !rec[t][0]) ++plan->unplanned;  // an op without an out= path
    for (std::size_t i = 0; i < rec[t].size(); ++i) {
      if (!rec[t][i]) continue;
      int slot = -1;
      if (i == 0) slot = s.out;
      if (i >= 1 && i <= s.extra_out.size()) slot = s.extra_out[i - 1];
      if (slot >= 0 && is_output[static_cast<std::size_t>(slot)] != 0) {
        ++plan->unplanned;  // returned to the caller: fresh memory every run
        continue;
      }
      const std::int64_t bytes = rec[t][i]->bytes();
      if (bytes == 0) continue;
      const std::size_t last = slot >= 0 ? std::max(t, last_use[static_cast<std::size_t>(slot)]) : t;
      ids[i] = static_cast<int>(specs.size());
      specs.push_back(*rec[t][i]);
      lifetimes.push_back({bytes, t, last});
      plan->planned_bytes += bytes;
    }
  }
  // The row split needs every per-token step's outputs in the arena (threads write their rows in place)
  // and each int8 linear's int32 sums for all rows at once (each thread its own rows of them).
  bool rows = !segments.empty() && !plan->shapes.empty() && !plan->shapes[0].empty() && plan->shapes[0][0] == 1 &&
              plan->shapes[0].size() == 2;
  for (std::size_t t = 0; rows && t < steps.size(); ++t) {
    const Step& s = steps[t];
    if (!s.rows) continue;
    const std::vector<int>& ids = plan->step_specs[t];
    for (std::size_t i = 0; i <= s.extra_out.size(); ++i) rows = rows && i < ids.size() && ids[i] >= 0;
    if (rows && s.qlinear) {
      const detail::TensorSpec& out = specs[static_cast<std::size_t>(ids[0])];
      rows = ids.size() > 3 && ids[3] >= 0 &&
             specs[static_cast<std::size_t>(ids[3])].sizes[0] * out.sizes.back() == c10::multiply_integers(out.sizes);
    }
  }
  if (rows) {
    // Threads move through a phase's steps at their own pace: a tensor is live from the start of its first
    // phase to the end of its last, so nothing another thread may still read or write shares its bytes.
    std::vector<std::size_t> phase_of(steps.size(), 0);
    for (std::size_t g = 0; g < segments.size(); ++g) {
      for (std::size_t t = segments[g].first; t <= segments[g].last; ++t) phase_of[t] = g;
    }
    for (detail::Lifetime& l : lifetimes) {
      l.first = segments[phase_of[l.first]].first;
      l.last = segments[phase_of[l.last]].last;
    }
  }
  const detail::BufferAssignment a = detail::assign_buffers(lifetimes);
  plan->buffers = a.buffers;
  plan->planned = static_cast<int>(specs.size());
  plan->rows = rows;
  plan->pool = std::make_unique<detail::ArenaPool>(std::move(specs), a.offsets, a.arena_bytes);
  return plan;
}

void Engine::Impl::run_planned(std::vector<at::Tensor>& v) const {
  std::vector<std::int64_t> key;
  std::vector<std::vector<std::int64_t>> shapes;
  for (int slot : input_slots) {
    const at::Tensor& x = v[static_cast<std::size_t>(slot)];
    key.push_back(x.dim());
    key.insert(key.end(), x.sizes().begin(), x.sizes().end());
    shapes.emplace_back(x.sizes().begin(), x.sizes().end());
  }
  std::shared_ptr<ShapePlan> plan;
  {
    const std::lock_guard<std::mutex> lock(plans_mutex);
    for (auto it = plans.begin(); it != plans.end(); ++it) {
      if ((*it)->key != key) continue;
      plan = *it;
      plans.splice(plans.begin(), plans, it);  // most recently used first
      break;
    }
  }
  if (!plan) {  // first run of this shape: allocate as it goes and record what each step asked for
    std::vector<std::vector<std::optional<detail::TensorSpec>>> rec(steps.size());
    run_steps(v, nullptr, nullptr, nullptr, &rec);
    std::shared_ptr<ShapePlan> made = make_plan(key, std::move(shapes), rec);
    const std::lock_guard<std::mutex> lock(plans_mutex);
    const bool known = std::any_of(plans.begin(), plans.end(), [&](const auto& p) { return p->key == key; });
    if (!known) {
      plans.push_front(std::move(made));
      while (plans.size() > options.planned_shapes) plans.pop_back();  // in-flight runs keep theirs alive
    }
    return;
  }
  const detail::ArenaLease lease(*plan->pool);
  const std::int64_t threads = options.threads > 0 ? options.threads : at::get_num_threads();
  if (plan->rows && threads >= 2 && !at::in_parallel_region()) {
    run_rows(v, *plan, lease.arena(), threads);
    return;
  }
  run_steps(v, nullptr, plan.get(), &lease.arena(), nullptr);
}

// One parallel region per run: each worker claims a phase's chunks of token rows (or its one whole-run chunk)
// and runs the phase's steps on them; a phase starts when every chunk of the one before is done. Chunks are
// claimed, not assigned, so fewer threads than asked (a busy OpenMP pool) still finish.
void Engine::Impl::run_rows(std::vector<at::Tensor>& v, const ShapePlan& plan, const detail::Arena& arena,
                            std::int64_t threads) const {
  for (const Step& s : steps) {
    if (s.op == Op::kBertEmbed) check_embed_ids(s, v);
  }
  for (std::size_t t = 0; t < steps.size(); ++t) {  // every per-token output in place before the threads start
    const Step& s = steps[t];
    if (!s.rows) continue;
    const std::vector<int>& ids = plan.step_specs[t];
    v[static_cast<std::size_t>(s.out)] = arena.views[static_cast<std::size_t>(ids[0])];
    for (std::size_t i = 0; i < s.extra_out.size(); ++i) {
      v[static_cast<std::size_t>(s.extra_out[i])] = arena.views[static_cast<std::size_t>(ids[i + 1])];
    }
  }
  const std::int64_t len = v[static_cast<std::size_t>(input_slots.front())].size(1);
  const std::int64_t chunks = std::max<std::int64_t>(1, std::min(threads, len));
  const std::size_t phases = segments.size();
  std::vector<std::atomic<std::int64_t>> next(phases), done(phases);
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  at::parallel_for(0, threads, 1, [&](std::int64_t, std::int64_t) {
    const c10::InferenceMode inference;  // thread-local: the pool's threads need their own
    for (std::size_t g = 0; g < phases; ++g) {
      const Segment& seg = segments[g];
      const std::int64_t parts = seg.rows ? chunks : 1;
      for (std::int64_t c = next[g].fetch_add(1); c < parts; c = next[g].fetch_add(1)) {
        if (!failed.load()) {
          try {
            const Rows r = seg.rows ? Rows{len * c / parts, len * (c + 1) / parts, false} : Rows{};
            for (std::size_t t = seg.first; t <= seg.last; ++t) {
              run_step_checked(steps[t], v, io_for(t, &plan, &arena, nullptr), r);
            }
          } catch (...) {
            const std::lock_guard<std::mutex> lock(error_mutex);
            if (!error) error = std::current_exception();
            failed.store(true);
          }
        }
        done[g].fetch_add(1);
        done[g].notify_all();
      }
      wait_for(done[g], parts);
    }
  });
  if (error) std::rethrow_exception(error);
}

// Inside at::parallel_for every nested ATen parallel_for and oneDNN call runs on the calling thread, so
// each part runs the graph serially: no barrier between nodes, which on 2 cores cost more than the
// intra-op parallelism gained (BERT-base int8: ~20 parallel regions per layer; an idle thread spins or
// waits at each). Every node works per sample, so each part's rows are the unsplit run's.
std::vector<at::Tensor> Engine::Impl::run_split(const std::vector<at::Tensor>& v, std::int64_t batch,
                                                std::int64_t parts) const {
  std::vector<std::vector<at::Tensor>> outs(static_cast<std::size_t>(parts));
  at::parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    const c10::InferenceMode inference;  // thread-local: the pool's threads need their own
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t b0 = batch * p / parts;
      const std::int64_t b1 = batch * (p + 1) / parts;
      std::vector<at::Tensor> part(v.size());
      for (int slot : input_slots) {
        const auto i = static_cast<std::size_t>(slot);
        part[i] = v[i].narrow(0, b0, b1 - b0);
      }
      if (plan_note.empty()) {
        run_planned(part);
      } else {
        run_steps(part, nullptr);
      }
      for (int slot : output_slots) {
        const at::Tensor& y = part[static_cast<std::size_t>(slot)];
        HOTPATH_ASSERT(y.dim() >= 1 && y.size(0) == b1 - b0);
        outs[static_cast<std::size_t>(p)].push_back(y);
      }
    }
  });
  std::vector<at::Tensor> out;
  out.reserve(output_slots.size());
  for (std::size_t o = 0; o < output_slots.size(); ++o) {
    std::vector<at::Tensor> pieces;
    pieces.reserve(outs.size());
    for (const auto& part : outs) pieces.push_back(part[o].to(at::kFloat));
    out.push_back(at::cat(pieces, 0).contiguous());
  }
  return out;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine Engine::from_graph(Graph graph, EngineOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->graph = std::move(graph);
  impl->options = options;
  try {
    impl->prepare();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a LibTorch error while preparing weights: one line, no trace
    const std::string what = e.what();
    throw Error("engine: preparing the graph failed: " + what.substr(0, what.find('\n')));
  }
  return Engine(std::move(impl));
}

Engine Engine::load(const std::string& package_dir, EngineOptions options) {
  Package pkg = read_package(package_dir);
  options.precision = pkg.precision;
  return from_graph(load_package_graph(pkg), options);
}

std::vector<at::Tensor> Engine::run(const std::vector<at::Tensor>& inputs) const { return run(inputs, nullptr); }

std::vector<at::Tensor> Engine::run(const std::vector<at::Tensor>& inputs, const NodeObserver& observer) const {
  const Impl& m = *impl_;
  const auto& specs = m.graph.inputs;
  HOTPATH_CHECK(inputs.size() <= specs.size(), "engine: got ", inputs.size(), " inputs, the model takes ",
                specs.size());
  const c10::InferenceMode inference;
  if (m.options.threads > 0 && at::get_num_threads() != m.options.threads) at::set_num_threads(m.options.threads);
  std::vector<at::Tensor> v(static_cast<std::size_t>(m.num_slots));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ValueSpec& spec = specs[i];
    const at::Tensor x = i < inputs.size() ? inputs[i] : at::Tensor();
    if (!x.defined()) {
      // Optional text inputs: a missing mask means "attend everywhere", missing types mean zeros.
      HOTPATH_CHECK(i > 0 && spec.dtype == at::kLong, "engine: input ", spec.name, " is required");
      HOTPATH_CHECK(inputs[0].dim() == 2, "engine: input ", specs[0].name, " must be [batch, sequence]");
      v[static_cast<std::size_t>(m.input_slots[i])] = stage_input(
          spec.name == "attention_mask" ? at::ones_like(inputs[0]) : at::zeros_like(inputs[0]), m.options.device);
      continue;
    }
    HOTPATH_CHECK(x.device().is_cpu(), "engine: input ", spec.name, " is on ", x.device(), ", expected the CPU");
    const auto stage = [&](const at::Tensor& t) { return m.options.device.is_cuda() ? stage_input(t, m.options.device) : t; };
    HOTPATH_CHECK(x.dim() == static_cast<std::int64_t>(spec.shape.size()), "engine: input ", spec.name, " is ",
                  x.sizes(), ", expected ", spec.shape.size(), " dims ", c10::IntArrayRef(spec.shape));
    for (std::size_t d = 0; d < spec.shape.size(); ++d) {
      HOTPATH_CHECK(spec.shape[d] == -1 || x.size(static_cast<std::int64_t>(d)) == spec.shape[d], "engine: input ",
                    spec.name, " is ", x.sizes(), ", expected ", c10::IntArrayRef(spec.shape),
                    " (-1 = any size)");
      HOTPATH_CHECK(x.size(static_cast<std::int64_t>(d)) >= 1, "engine: input ", spec.name, " is empty (",
                    x.sizes(), ")");
    }
    at::Tensor t;
    if (spec.dtype == at::kLong) {
      HOTPATH_CHECK(!at::isFloatingType(x.scalar_type()) && x.scalar_type() != at::kBool, "engine: input ",
                    spec.name, " is ", x.scalar_type(), ", expected integer token ids");
      t = stage(x.to(at::kLong));
      if (i > 0 && inputs[0].defined()) {
        HOTPATH_CHECK(x.sizes() == inputs[0].sizes(), "engine: input ", spec.name, " is ", x.sizes(), ", ",
                      specs[0].name, " is ", inputs[0].sizes(), "; they must match");
      }
    } else {
      HOTPATH_CHECK(at::isFloatingType(x.scalar_type()), "engine: input ", spec.name, " is ", x.scalar_type(),
                    ", expected floating point");
      t = stage(x).to(m.compute);
      if (t.dim() == 4 && m.options.channels_last) t = t.contiguous(at::MemoryFormat::ChannelsLast);
    }
    v[static_cast<std::size_t>(m.input_slots[i])] = std::move(t);
  }
  // Offline batches of text graphs: one part of the batch per thread, each running every node serially.
  const std::int64_t threads = m.options.threads > 0 ? m.options.threads : at::get_num_threads();
  const at::Tensor& first = v[static_cast<std::size_t>(m.input_slots.front())];
  const std::int64_t batch = first.size(0);
  if (!observer && m.split_note.empty() && first.device().is_cpu() && threads >= 2 && batch >= 2 &&
      !at::in_parallel_region()) {
    return m.run_split(v, batch, std::min(threads, batch));
  }
  if (observer || !m.plan_note.empty()) {
    m.run_steps(v, observer);
  } else {
    m.run_planned(v);
  }
  std::vector<at::Tensor> out;
  out.reserve(m.output_slots.size());
  for (int slot : m.output_slots) out.push_back(v[static_cast<std::size_t>(slot)].to(at::kCPU, at::kFloat).contiguous());
  return out;
}

std::vector<Engine::BufferPlanInfo> Engine::buffer_plans() const {
  const Impl& m = *impl_;
  std::vector<BufferPlanInfo> out;
  const std::lock_guard<std::mutex> lock(m.plans_mutex);
  for (const auto& p : m.plans) {
    BufferPlanInfo info;
    info.input_shapes = p->shapes;
    info.arena_bytes = p->pool->arena_bytes();
    info.buffers = p->buffers;
    info.planned = p->planned;
    info.unplanned = p->unplanned;
    info.planned_bytes = p->planned_bytes;
    info.arenas = p->pool->arenas_made();
    info.split_rows = p->rows;
    out.push_back(std::move(info));
  }
  return out;
}

const Graph& Engine::graph() const { return impl_->graph; }
const EngineOptions& Engine::options() const { return impl_->options; }

std::string Engine::describe() const {
  const Impl& m = *impl_;
  std::ostringstream os;
  os << "precision: " << precision_name(m.options.precision) << " asked, compute dtype "
     << (m.compute == at::kBFloat16 ? "bf16" : "fp32");
  if (!m.precision_note.empty()) os << " (" << m.precision_note << ")";
  os << "\n";
  os << "layout: " << (m.options.channels_last ? "channels-last" : "contiguous") << " image activations\n";
  os << "conv: " << (m.conv_note.empty() ? "oneDNN, weights prepacked, bias/activation/residual fused"
                                         : m.conv_note) << "\n";
  os << "nodes: " << m.steps.size();
  for (const auto& [op, count] : m.int8_counts) os << ", int8 " << op << " " << count;
  os << "\n";
  if (std::any_of(m.steps.begin(), m.steps.end(), [](const Step& s) { return s.mkl; })) {
    os << "linear: fp32 through MKL's packed sgemm, the weight packed per row count (<= " << kMaxPackedLinearRows
       << " rows, " << kMaxPackedLinearShapes << " counts), else at::addmm\n";
  }
  os << "attention: " << ops::attention_kernel_name() << "\n";
  os << "batch: " << (m.split_note.empty() ? "batches of >= 2 split across the threads, one part each"
                                           : "every node parallel on its own (" + m.split_note + ")") << "\n";
  os << "batch 1: "
     << (m.rows_note.empty() ? "split along the tokens across >= 2 threads once the shape is planned, one wait per attention"
                             : "every node parallel on its own (" + m.rows_note + ")")
     << "\n";
  if (!m.plan_note.empty()) {
    os << "buffers: allocated per run (" << m.plan_note << ")\n";
  } else {
    const auto plans = buffer_plans();
    os << "buffers: planned per input shape (at most " << m.options.planned_shapes << "), " << plans.size()
       << " planned now\n";
    for (const BufferPlanInfo& p : plans) {
      os << "  shape";
      for (const auto& shape : p.input_shapes) os << " " << c10::IntArrayRef(shape);
      os << ": arena " << p.arena_bytes << " bytes in " << p.buffers << " buffers for " << p.planned
         << " tensors of " << p.planned_bytes << " bytes; " << p.unplanned << " outputs allocate; " << p.arenas
         << (p.arenas == 1 ? " arena" : " arenas") << (p.split_rows ? "; split along the tokens" : "") << "\n";
    }
  }
  if (m.options.device.is_cuda()) os << cuda_engine_description(m.options) << "\n";
  const std::string int8 = detail::int8_kernel_description();
  if (!m.int8_counts.empty() && !int8.empty()) os << "int8: " << int8 << "\n";
  return os.str();
}

}  // namespace hotpath::infer
