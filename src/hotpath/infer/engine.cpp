#include "hotpath/infer/engine.h"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/embedding.h>
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

#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/package_dir.h"
#include "hotpath/ops/attention.h"
#include "cuda/cuda_engine.h"
#include "internal/int8_nodes.h"

namespace hotpath::infer {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kInt8: return "int8";
  }
  return "fp32";
}

Precision parse_precision(const std::string& name, const std::string& where) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "int8") return Precision::kInt8;
  throw Error(where + ": precision '" + name + "' is not one of fp32, bf16, int8");
}

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
  std::shared_ptr<const detail::Int8Node> int8;                 // quantized linear / conv
  bool packed = false;                                          // run mkldnn_conv_ops with packed weights
  PostOp post;
  // The weight in oneDNN's layout, per input shape (at most kMaxPackedShapes; guarded by Impl::pack_mutex).
  mutable std::map<std::vector<std::int64_t>, at::Tensor> packed_by_shape;
};

// Input shapes (batch sizes, in practice) a conv keeps a packed weight for; past it, the first one serves.
constexpr std::size_t kMaxPackedShapes = 4;

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

  void prepare();
  at::Tensor cast(const at::Tensor& t, bool conv_weight = false) const {
    at::Tensor c = t.to(options.device, compute);
    if (conv_weight && options.channels_last) return c.contiguous(at::MemoryFormat::ChannelsLast);
    return c.contiguous();
  }
  [[nodiscard]] at::Tensor param(const Node& n, const char* role) const {
    auto it = n.params.find(role);
    return it == n.params.end() ? at::Tensor() : graph.params.at(it->second);
  }
  void run_step(const Step& s, std::vector<at::Tensor>& v) const;
  // Every step in order over the values v (inputs already in their slots).
  void run_steps(std::vector<at::Tensor>& v, const NodeObserver& observer) const;
  // run_steps on parts of the batch, one per thread (split_batch); the outputs, concatenated.
  std::vector<at::Tensor> run_split(const std::vector<at::Tensor>& v, std::int64_t batch, std::int64_t parts) const;
};

void Engine::Impl::prepare() {
  graph.validate();
  HOTPATH_CHECK(options.threads >= 0 && options.threads <= 4096, "engine: threads is ", options.threads,
                ", expected 0 (keep) to 4096");
  if (options.device.is_cuda()) {
    compute = prepare_cuda_engine(graph, options);  // cuda/cuda_engine.h
  } else if (options.precision == Precision::kFp32) {
    compute = at::kFloat;
  } else if (native_bf16()) {
    compute = at::kBFloat16;
  } else {
    compute = at::kFloat;
    precision_note = std::string("bf16 activations not used: this CPU (or HOTPATH_MAX_ISA cap, now ") +
                     cpu::isa_name(cpu::max_isa()) + ") lacks AVX512_BF16, so fp32 runs instead";
  }
  std::map<std::string, int> slot;
  const auto slot_of = [&](const std::string& name) {
    auto [it, fresh] = slot.emplace(name, num_slots);
    if (fresh) ++num_slots;
    return it->second;
  };
  for (const ValueSpec& in : graph.inputs) input_slots.push_back(slot_of(in.name));
  std::map<int, std::size_t> last_use;
  for (const Node& n : graph.nodes) {
    Step s;
    s.node = &n;
    s.op = op_of(n);
    s.act = act_of(n);
    for (const std::string& in : n.inputs) s.in.push_back(in.empty() ? -1 : slot.at(in));
    for (int i : s.in) {
      if (i >= 0) last_use[i] = steps.size();
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
          s.int8 = detail::prepare_int8_linear(n, graph);
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
  if (split_note.empty() && !options.split_batch) split_note = "split_batch off";
#ifndef _OPENMP
  if (split_note.empty()) split_note = "engine.cpp built without OpenMP";  // at::parallel_for would be serial
#endif
  for (const auto& [value, step] : last_use) {
    const bool is_output = std::find(output_slots.begin(), output_slots.end(), value) != output_slots.end();
    if (!is_output) steps[step].release.push_back(value);
  }
}

void Engine::Impl::run_step(const Step& s, std::vector<at::Tensor>& v) const {
  const Node& n = *s.node;
  const auto in = [&](std::size_t i) -> const at::Tensor& {
    static const at::Tensor kNone;
    return i < s.in.size() && s.in[i] >= 0 ? v[static_cast<std::size_t>(s.in[i])] : kNone;
  };
  at::Tensor y;
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
    case Op::kAvgPool:
      y = at::adaptive_avg_pool2d(in(0), {1, 1});
      if (!s.keepdims) y = y.flatten(1);
      break;
    case Op::kAdd:
      y = in(0) + in(1);
      activate_(y, s.act);
      break;
    case Op::kMul: y = in(0) * in(1); break;
    case Op::kLinear:
      if (s.int8) {
        y = s.int8->run(in(0), in(1));
        break;
      }
      y = at::linear(in(0), s.weight, s.bias);
      if (in(1).defined()) y.add_(in(1));
      activate_(y, s.act);
      break;
    case Op::kLayerNorm: {
      const at::Tensor x = in(1).defined() ? in(0) + in(1) : in(0);
      y = at::layer_norm(x, {x.size(-1)}, s.weight, s.bias, s.eps);
      break;
    }
    case Op::kAttention: {
      const at::Tensor& qkv = in(0);
      HOTPATH_CHECK(qkv.dim() == 3 && qkv.size(2) % (3 * s.heads) == 0, "engine: attention ", n.name, " got ",
                    qkv.sizes(), ", expected [B, L, 3·heads·head_dim] with heads ", s.heads);
      const std::int64_t b = qkv.size(0), l = qkv.size(1), h = qkv.size(2) / 3;
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
      const std::int64_t l = ids.size(1);
      const auto check_ids = [&](const at::Tensor& t, const at::Tensor& table, const char* what) {
        const std::int64_t lo = t.min().item<std::int64_t>();
        const std::int64_t hi = t.max().item<std::int64_t>();
        HOTPATH_CHECK(lo >= 0 && hi < table.size(0), "engine: input ", what, " holds ids in [", lo, ", ", hi,
                      "], expected [0, ", table.size(0), ")");
      };
      check_ids(ids, s.word, "input_ids");
      if (s.token_type.defined() && in(1).defined()) check_ids(in(1), s.token_type, "token_type_ids");
      HOTPATH_CHECK(l <= s.position.size(0), "engine: input_ids has sequence length ", l,
                    ", the model's position table holds ", s.position.size(0));
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
    case Op::kSelect: y = in(0).select(s.dim, s.index); break;
    case Op::kMeanPool: {
      const at::Tensor m = in(1).unsqueeze(-1).to(in(0).scalar_type());
      y = (in(0) * m).sum(1) / at::clamp_min(m.sum(1), 1e-9);
      break;
    }
    case Op::kL2Normalize: {
      const at::Tensor x = in(0);
      y = x / at::clamp_min(x.to(at::kFloat).norm(2, {-1}, true), 1e-12).to(x.scalar_type());
      break;
    }
  }
  v[static_cast<std::size_t>(s.out)] = std::move(y);
  for (int r : s.release) v[static_cast<std::size_t>(r)].reset();
}

void Engine::Impl::run_steps(std::vector<at::Tensor>& v, const NodeObserver& observer) const {
  std::vector<at::Tensor> seen;
  for (const Step& s : steps) {
    try {
      if (observer) {
        seen.clear();
        for (int i : s.in) seen.push_back(i >= 0 ? v[static_cast<std::size_t>(i)] : at::Tensor());
      }
      run_step(s, v);
      if (observer) observer(*s.node, seen, v[static_cast<std::size_t>(s.out)]);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // LibTorch's messages carry a C++ trace: keep the first line
      const std::string what = e.what();
      throw Error("engine: node " + s.node->name + " (" + s.node->op + ") failed: " + what.substr(0, what.find('\n')));
    }
  }
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
      run_steps(part, nullptr);
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
  PackageDir pkg = read_package_dir(package_dir);
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
  m.run_steps(v, observer);
  std::vector<at::Tensor> out;
  out.reserve(m.output_slots.size());
  for (int slot : m.output_slots) out.push_back(v[static_cast<std::size_t>(slot)].to(at::kCPU, at::kFloat).contiguous());
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
  os << "attention: " << ops::attention_kernel_name() << "\n";
  os << "batch: " << (m.split_note.empty() ? "batches of >= 2 split across the threads, one part each"
                                           : "every node parallel on its own (" + m.split_note + ")") << "\n";
  if (m.options.device.is_cuda()) os << cuda_engine_description(m.options) << "\n";
  const std::string int8 = detail::int8_kernel_description();
  if (!m.int8_counts.empty() && !int8.empty()) os << "int8: " << int8 << "\n";
  return os.str();
}

}  // namespace hotpath::infer
