// The engine's nodes: each op's set-up and run (engine_impl.h), and the two tables that reach them.
#include "engine_impl.h"

#include <ATen/ExpandUtils.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/add.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/div.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/hardtanh.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/InferenceMode.h>

#include <iterator>
#include <string_view>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/int8_kernels.h"

namespace hotpath::infer {

using detail::Act;
using detail::PostOp;
using detail::Rows;
using detail::Step;
using detail::StepArgs;
using detail::StepIo;
using detail::kMaxPackedLinearRows;
using detail::kMaxPackedLinearShapes;
using detail::kMaxPackedShapes;

namespace {

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

// The activation the direct conv fuses; tanh and tanh-gelu run after it (ops/onednn_conv.h says why).
ops::ConvActivation conv_activation(Act act) {
  switch (act) {
    case Act::kRelu: return ops::ConvActivation::kRelu;
    case Act::kRelu6: return ops::ConvActivation::kRelu6;
    case Act::kGelu: return ops::ConvActivation::kGelu;
    case Act::kSilu: return ops::ConvActivation::kSilu;
    case Act::kSigmoid: return ops::ConvActivation::kSigmoid;
    case Act::kNone:
    case Act::kGeluTanh:
    case Act::kTanh: return ops::ConvActivation::kNone;
  }
  return ops::ConvActivation::kNone;
}

bool fused_by_direct_conv(Act act) { return act == Act::kNone || conv_activation(act) != ops::ConvActivation::kNone; }

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

// Activations the int8 epilogue fuses (erf-gelu as a rational polynomial: hotpath_int8_bench EpilogueGelu);
// the exp-based ones run after it through ATen's vectorised kernels, in place.
const char* fused_int8_act(const std::string& act) {
  for (const char* a : {"none", "relu", "relu6", "gelu"}) {
    if (act == a) return a;
  }
  return "none";
}

// t [..., K] as rows [M, K], narrowed to r (row-split values are planned, hence contiguous).
at::Tensor row_view(const at::Tensor& t, const Rows& r) {
  if (!t.defined()) return t;
  if (r.all) return t.reshape({-1, t.size(-1)});
  return t.view({-1, t.size(-1)}).narrow(0, r.begin, r.size());
}

}  // namespace

bool detail::has_mkl_linear() { return mkl_linear_ops().linear.has_value(); }

const at::Tensor& Engine::Impl::packed_for(const Step& s, const at::Tensor& x) const {
  const std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
  const std::lock_guard<std::mutex> lock(pack_mutex);
  auto it = s.packed_by_shape.find(shape);
  if (it != s.packed_by_shape.end()) return it->second;
  if (s.packed_by_shape.size() >= kMaxPackedShapes) return s.packed_by_shape.begin()->second;
  const at::Tensor w = call(*mkldnn_conv_ops().reorder,
                            {s.weight, s.padding, s.stride, s.dilation, s.groups, c10::IValue(shape)});
  return s.packed_by_shape.emplace(shape, w).first->second;
}

const ops::OneDnnConv* Engine::Impl::direct_for(const Step& s, const at::Tensor& x) const {
  std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
  const std::lock_guard<std::mutex> lock(pack_mutex);
  auto it = s.direct_by_shape.find(shape);
  if (it != s.direct_by_shape.end()) return it->second.get();
  if (s.direct_by_shape.size() >= detail::kMaxDirectShapes) return nullptr;
  ops::ConvGeometry g;
  g.batch = x.size(0);
  g.in_channels = x.size(1);
  g.height = x.size(2);
  g.width = x.size(3);
  g.out_channels = s.weight.size(0);
  g.kernel_h = s.weight.size(2);
  g.kernel_w = s.weight.size(3);
  g.groups = s.groups;
  g.stride = {s.stride[0], s.stride[1]};
  g.dilation = {s.dilation[0], s.dilation[1]};
  g.padding = {s.conv_pad[0], s.conv_pad[1], s.conv_pad[2], s.conv_pad[3]};
  HOTPATH_CHECK(g.in_channels == s.weight.size(1) * s.groups, "engine: conv ", s.node->name, " got ", g.in_channels,
                " input channels, its weight expects ", s.weight.size(1) * s.groups);
  const at::Tensor w = s.weight.contiguous();  // [out, in/groups, kh, kw]
  const at::Tensor b = s.bias.defined() ? s.bias.contiguous() : at::Tensor();
  const ops::OneDnnConv* sibling = nullptr;
  for (const auto& [other_shape, other] : s.direct_by_shape) {
    if (other) sibling = other.get();
  }
  std::shared_ptr<const ops::OneDnnConv> conv;
  try {
    conv = std::make_shared<const ops::OneDnnConv>(
        g, w.data_ptr<float>(), b.defined() ? b.data_ptr<float>() : nullptr,
        ops::ConvOptions{.activation = conv_activation(s.act), .residual = s.in.size() > 1 && s.in[1] >= 0,
                         .same_weights = sibling});
  } catch (const Error&) {
    // No direct kernel for this shape (OneDnnConv skips oneDNN's GEMM-based and reference ones): nullptr, and
    // this shape keeps ATen's path, which also reports what is wrong with an input it cannot take.
  }
  return s.direct_by_shape.emplace(std::move(shape), std::move(conv)).first->second.get();
}

const at::Tensor* Engine::Impl::packed_linear_for(const Step& s, std::int64_t m) const {
  const std::vector<std::int64_t> key = {m};
  const std::lock_guard<std::mutex> lock(pack_mutex);
  auto it = s.packed_by_shape.find(key);
  if (it != s.packed_by_shape.end()) return &it->second;
  if (s.packed_by_shape.size() >= kMaxPackedLinearShapes) return nullptr;
  const at::Tensor w = call(*mkl_linear_ops().reorder, {s.weight, m});
  return &s.packed_by_shape.emplace(key, w).first->second;
}

// ---- set-up: one call per op --------------------------------------------------------------------------------

void Engine::Impl::prepare_step(Step& s, const Node& n) {
  using Prepare = void (Engine::Impl::*)(Step&, const Node&);
  static constexpr Prepare kPrepare[] = {
      &Impl::prepare_conv2d,
      &Impl::prepare_max_pool2d,
      &Impl::prepare_global_avg_pool,
      nullptr /* add: nothing to set up */,
      nullptr /* mul: nothing to set up */,
      &Impl::prepare_linear,
      &Impl::prepare_layer_norm,
      &Impl::prepare_attention,
      &Impl::prepare_vit_embed,
      &Impl::prepare_bert_embed,
      &Impl::prepare_select,
      nullptr /* mean_pool: nothing to set up */,
      nullptr /* l2_normalize: nothing to set up */};
  static_assert(std::size(kPrepare) == kOpCount, "the engine needs one set-up entry per op of graph.h");
  s.act = act_of(n);
  if (const Prepare set_up = kPrepare[op_index(n.op)]) (this->*set_up)(s, n);
}

void Engine::Impl::prepare_conv2d(Step& s, const Node& n) {
  const std::string quant = n.attr_str("quant", "");
  s.stride = n.attr_ints("stride", {});
  s.dilation = n.attr_ints("dilation", {});
  s.groups = n.attr_int("groups", 1);
  const auto pad = n.attr_ints("padding", {});
  HOTPATH_CHECK(s.stride.size() == 2 && s.dilation.size() == 2 && pad.size() == 4, "engine: conv ", n.name,
                " needs stride [2], dilation [2] and padding [4]");
  s.conv_pad = {pad[0], pad[1], pad[2], pad[3]};  // top, left, bottom, right
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
    const std::string direct_missing = ops::OneDnnConv::unavailable();
    if (options.device.is_cuda()) {
      conv_note = "cuDNN";
    } else if (options.channels_last && options.direct_convs && compute == at::kFloat && direct_missing.empty()) {
      // One oneDNN primitive per input shape, created on first use (direct_for); the padding, even
      // TensorFlow's asymmetric "same", goes to oneDNN as it is.
      s.direct = true;
      s.packed = mk.reorder.has_value();  // ATen's prepacked op past kMaxDirectShapes shapes
      s.post = post_op(s.act);
      conv_note = "oneDNN's library called directly: one primitive per input shape, weights reordered once, "
                  "bias/residual/activation fused, asymmetric padding native";
    } else if (options.channels_last && mk.reorder) {
      // Packed per input shape on first use (packed_for): oneDNN picks the weight's blocked layout
      // from the input shape, and a weight packed for another shape is reordered again on every call.
      s.packed = true;
      s.post = post_op(s.act);
      if (options.direct_convs && compute == at::kFloat && !direct_missing.empty()) {
        conv_note = "oneDNN through ATen, weights prepacked, bias/activation/residual fused (" + direct_missing + ")";
      }
    } else {
      conv_note = options.channels_last ? mk.missing : "contiguous layout asked: convs run at::conv2d";
    }
  }
}

void Engine::Impl::prepare_max_pool2d(Step& s, const Node& n) {
  s.kernel = n.attr_ints("kernel", {});
  s.stride = n.attr_ints("stride", {});
  s.padding = n.attr_ints("padding", {});
}

void Engine::Impl::prepare_global_avg_pool(Step& s, const Node& n) {
  s.keepdims = n.attr_int("keepdims", 0) != 0;
}

void Engine::Impl::prepare_linear(Step& s, const Node& n) {
  const std::string quant = n.attr_str("quant", "");
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
}

void Engine::Impl::prepare_layer_norm(Step& s, const Node& n) {
  s.weight = cast(param(n, "weight"));
  s.bias = cast(param(n, "bias"));
  s.eps = n.attr_float("eps", 1e-5);
}

void Engine::Impl::prepare_attention(Step& s, const Node& n) {
  s.heads = n.attr_int("heads", 1);
}

void Engine::Impl::prepare_vit_embed(Step& s, const Node& n) {
  s.word = cast(param(n, "class_token"));
  s.position = cast(param(n, "pos_embedding"));
}

void Engine::Impl::prepare_bert_embed(Step& s, const Node& n) {
  s.word = cast(param(n, "word"));
  s.position = cast(param(n, "position"));
  if (n.has_param("token_type")) s.token_type = cast(param(n, "token_type"));
  s.ln_weight = cast(param(n, "ln_weight"));
  s.ln_bias = cast(param(n, "ln_bias"));
  s.eps = n.attr_float("eps", 1e-12);
}

void Engine::Impl::prepare_select(Step& s, const Node& n) {
  s.dim = n.attr_int("dim", 1);
  s.index = n.attr_int("index", 0);
}

// ---- runs: one call per op ----------------------------------------------------------------------------------

void Engine::Impl::run_step(const Step& s, std::vector<at::Tensor>& v, const StepIo& io, const Rows& r) const {
  using Run = at::Tensor (Engine::Impl::*)(const Step&, StepArgs&) const;
  static constexpr Run kRun[] = {
      &Impl::run_conv2d,
      &Impl::run_max_pool2d,
      &Impl::run_global_avg_pool,
      &Impl::run_add,
      &Impl::run_mul,
      &Impl::run_linear,
      &Impl::run_layer_norm,
      &Impl::run_attention,
      &Impl::run_vit_embed,
      &Impl::run_bert_embed,
      &Impl::run_select,
      &Impl::run_mean_pool,
      &Impl::run_l2_normalize};
  static_assert(std::size(kRun) == kOpCount, "the engine needs one run entry per op of graph.h");
  StepArgs args{s, v, io, r, {}};
  at::Tensor y = (this->*kRun[op_index(s.op)])(s, args);
  if (!r.all) return;  // the row split put every output in place before its threads started
  v[static_cast<std::size_t>(s.out)] = std::move(y);
  for (std::size_t i = 0; i < args.extra.size(); ++i) {
    v[static_cast<std::size_t>(s.extra_out[i])] = std::move(args.extra[i]);
  }
  for (int rel : s.release) v[static_cast<std::size_t>(rel)].reset();
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

at::Tensor Engine::Impl::run_conv2d(const Step& s, StepArgs& args) const {
  const Node& n = *s.node;
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  at::Tensor y;
  const at::Tensor& x = in(0);
  HOTPATH_CHECK(x.dim() == 4, "engine: conv ", n.name, " got a ", x.dim(), "-d input ", x.sizes(),
                ", expected [N, C, H, W]");
  if (s.int8) {  // pads inside, with the input's zero point
    y = s.int8->run(x, in(1));
    return y;
  }
  if (s.direct && x.scalar_type() == at::kFloat && x.device().is_cpu()) {
    const at::Tensor xc = x.contiguous(at::MemoryFormat::ChannelsLast);
    if (const ops::OneDnnConv* conv = direct_for(s, xc)) {
      const ops::ConvGeometry& g = conv->geometry();
      y = args.io.get(0, {g.batch, g.out_channels, g.out_height(), g.out_width()}, at::kFloat,
                      at::MemoryFormat::ChannelsLast);
      if (!y.is_contiguous(at::MemoryFormat::ChannelsLast)) {
        y = at::empty(y.sizes(), y.options().memory_format(at::MemoryFormat::ChannelsLast));
      }
      at::Tensor res;
      if (in(1).defined()) {
        res = in(1).contiguous(at::MemoryFormat::ChannelsLast);
        HOTPATH_CHECK(res.sizes() == y.sizes() && res.scalar_type() == at::kFloat, "engine: conv ", n.name,
                      " adds a residual of ", res.sizes(), " to an output of ", y.sizes());
      }
      conv->run(xc.data_ptr<float>(), y.data_ptr<float>(), res.defined() ? res.data_ptr<float>() : nullptr);
      if (!fused_by_direct_conv(s.act)) activate_(y, s.act);
      return y;
    }
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
    return y;
  }
  y = at::conv2d(xp, s.weight, s.bias, s.stride, s.padding, s.dilation, s.groups);
  if (in(1).defined()) y.add_(in(1));
  activate_(y, s.act);
  return y;
}

at::Tensor Engine::Impl::run_max_pool2d(const Step& s, StepArgs& args) const {
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  return at::max_pool2d(in(0), s.kernel, s.stride, s.padding);
}

at::Tensor Engine::Impl::run_global_avg_pool(const Step& s, StepArgs& args) const {
  const Node& n = *s.node;
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  at::Tensor y;
  const at::Tensor& x = in(0);
  HOTPATH_CHECK(x.dim() == 4, "engine: global_avg_pool ", n.name, " got ", x.sizes(), ", expected [N, C, H, W]");
  // What at::adaptive_avg_pool2d(x, {1, 1}) runs: the mean over H and W.
  y = io.get(0, {x.size(0), x.size(1), 1, 1}, x.scalar_type(), x.suggest_memory_format());
  at::mean_out(y, x, {-1, -2}, /*keepdim=*/true);
  if (!s.keepdims) y = y.flatten(1);
  return y;
}

at::Tensor Engine::Impl::run_add(const Step& s, StepArgs& args) const {
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  const Rows& r = args.r;
  at::Tensor y;
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
  return y;
}

at::Tensor Engine::Impl::run_mul(const Step& /*s*/, StepArgs& args) const {
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  at::Tensor y;
  const at::Tensor& a = in(0);
  y = io.get(0, at::infer_size(a.sizes(), in(1).sizes()), a.scalar_type(), a.suggest_memory_format());
  at::mul_out(y, a, in(1));
  return y;
}

at::Tensor Engine::Impl::run_linear(const Step& s, StepArgs& args) const {
  const Node& n = *s.node;
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  const Rows& r = args.r;
  std::vector<at::Tensor>& v = args.v;
  at::Tensor y;
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
    return y;
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
    return y;
  }
  if (s.bias.defined()) {
    at::addmm_out(yr, s.bias, xr, s.weight.t());
  } else {
    at::mm_out(yr, xr, s.weight.t());
  }
  if (res.defined()) yr.add_(res);
  activate_(yr, s.act);
  return y;
}

at::Tensor Engine::Impl::run_layer_norm(const Step& s, StepArgs& args) const {
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  const Rows& r = args.r;
  at::Tensor y;
  const at::Tensor& x = in(0);
  if (!s.fast_ln) {
    const at::Tensor xs = in(1).defined() ? x + in(1) : x;
    y = at::layer_norm(xs, {xs.size(-1)}, s.weight, s.bias, s.eps);
    return y;
  }
  const std::int64_t k = x.size(-1);
  const std::int64_t m = x.numel() / k;
  y = io.get(0, x.sizes(), at::kFloat);
  at::Tensor q, scale;
  if (!s.extra_out.empty()) {
    q = io.get(1, {m, k}, at::kChar);
    scale = io.get(2, {m}, at::kFloat);
    args.extra = {q, scale};
    if (!r.all) {
      q = q.narrow(0, r.begin, r.size());
      scale = scale.narrow(0, r.begin, r.size());
    }
  }
  ops::layer_norm_rows_out(row_view(x, r).contiguous(), row_view(in(1), r), s.weight, s.bias, s.eps,
                           row_view(y, r), q, scale);
  return y;
}

at::Tensor Engine::Impl::run_attention(const Step& s, StepArgs& args) const {
  const Node& n = *s.node;
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  const Rows& r = args.r;
  at::Tensor y;
  const at::Tensor& qkv = in(0);
  // heads >= 1 first: the graph's validation refuses 0, and this check must not divide by it either.
  HOTPATH_CHECK(s.heads >= 1 && qkv.dim() == 3 && qkv.size(2) % (3 * s.heads) == 0, "engine: attention ", n.name, " got ",
                qkv.sizes(), ", expected [B, L, 3·heads·head_dim] with heads ", s.heads);
  const std::int64_t b = qkv.size(0), l = qkv.size(1), h = qkv.size(2) / 3;
  if (qkv.device().is_cpu() && (qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16)) {
    // Straight from the packed projection: no per-head copies of q, k, v, no copy of the context back.
    y = io.get(0, {b, l, h}, qkv.scalar_type());
    ops::attention_packed_qkv_out(qkv.contiguous(), s.heads, in(1), y, r.all ? 0 : r.begin, r.all ? -1 : r.end);
    return y;
  }
  const at::Tensor parts = qkv.view({b, l, 3, s.heads, h / s.heads}).permute({2, 0, 3, 1, 4});
  const at::Tensor ctx = ops::attention(parts[0], parts[1], parts[2], in(1), ops::AttentionKernel::kAuto);
  y = ctx.transpose(1, 2).reshape({b, l, h});
  return y;
}

at::Tensor Engine::Impl::run_vit_embed(const Step& s, StepArgs& args) const {
  const Node& n = *s.node;
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  at::Tensor y;
  const at::Tensor& x = in(0);
  const at::Tensor tokens = x.flatten(2).transpose(1, 2);
  y = at::cat({s.word.expand({x.size(0), -1, -1}), tokens}, 1);
  HOTPATH_CHECK(y.size(1) == s.position.size(1), "engine: ", n.name, " has ", y.size(1),
                " tokens but pos_embedding holds ", s.position.size(1));
  y.add_(s.position);
  return y;
}

at::Tensor Engine::Impl::run_bert_embed(const Step& s, StepArgs& args) const {
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  const Rows& r = args.r;
  std::vector<at::Tensor>& v = args.v;
  at::Tensor y;
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
    return y;
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
  return y;
}

at::Tensor Engine::Impl::run_select(const Step& s, StepArgs& args) const {
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  at::Tensor y;
  const at::Tensor sel = in(0).select(s.dim, s.index);
  y = io.get(0, sel.sizes(), sel.scalar_type());
  y.copy_(sel);
  return y;
}

at::Tensor Engine::Impl::run_mean_pool(const Step& /*s*/, StepArgs& args) const {
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  at::Tensor y;
  const at::Tensor& x = in(0);
  const at::Tensor m = in(1).unsqueeze(-1).to(x.scalar_type());
  at::Tensor masked = io.get(1, at::infer_size(x.sizes(), m.sizes()), x.scalar_type());
  at::mul_out(masked, x, m);
  y = io.get(0, {x.size(0), x.size(2)}, x.scalar_type());
  at::sum_out(y, masked, {1});
  y.div_(at::clamp_min(m.sum(1), 1e-9));
  return y;
}

at::Tensor Engine::Impl::run_l2_normalize(const Step& /*s*/, StepArgs& args) const {
  const auto in = [&](std::size_t i) -> const at::Tensor& { return args.in(i); };
  const StepIo& io = args.io;
  at::Tensor y;
  const at::Tensor& x = in(0);
  y = io.get(0, x.sizes(), x.scalar_type());
  at::div_out(y, x, at::clamp_min(x.to(at::kFloat).norm(2, {-1}, true), 1e-12).to(x.scalar_type()));
  return y;
}

}  // namespace hotpath::infer
