// Graph → ONNX, node by node. Each graph op is one emit_* function writing opset-17 nodes; intermediate
// values are named "<graph value>/<what>" and ONNX nodes "<graph node>/<OpType>", so every message from
// ONNX's checker names the graph node it came from. Static shapes (-1 = dynamic) are tracked alongside,
// for the few ops whose ONNX form needs a size (attention's head size, linear's rank).
#include "hotpath/infer/onnx_export.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::infer {
namespace {

using formats::OnnxAttribute;
using formats::OnnxDim;
using formats::OnnxDtype;
using formats::OnnxNode;
using formats::OnnxTensor;
using Shape = std::vector<std::int64_t>;  // -1 = not known statically

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

OnnxDtype onnx_dtype(at::ScalarType t, const std::string& what) {
  switch (t) {
    case at::kFloat: return OnnxDtype::kFloat;
    case at::kLong: return OnnxDtype::kInt64;
    case at::kInt: return OnnxDtype::kInt32;
    case at::kChar: return OnnxDtype::kInt8;
    case at::kByte: return OnnxDtype::kUint8;
    case at::kBool: return OnnxDtype::kBool;
    case at::kHalf: return OnnxDtype::kFloat16;
    case at::kBFloat16: return OnnxDtype::kBfloat16;
    case at::kDouble: return OnnxDtype::kDouble;
    default: break;
  }
  throw Error("ONNX export: " + what + " has dtype " + std::string(c10::toString(t)) + ", which ONNX export does not map");
}

OnnxTensor tensor_of(const std::string& name, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  OnnxTensor out{name, onnx_dtype(c.scalar_type(), "param " + name), Shape(c.sizes().begin(), c.sizes().end()), {}};
  out.data.resize(c.nbytes());
  if (!out.data.empty()) std::memcpy(out.data.data(), c.data_ptr(), out.data.size());
  return out;
}

template <typename T>
OnnxTensor constant(const std::string& name, OnnxDtype dtype, Shape dims, const std::vector<T>& values) {
  OnnxTensor out{name, dtype, std::move(dims), {}};
  out.data.resize(values.size() * sizeof(T));
  std::memcpy(out.data.data(), values.data(), out.data.size());
  return out;
}

std::int64_t conv_out(std::int64_t in, std::int64_t pad, std::int64_t kernel, std::int64_t stride,
                      std::int64_t dilation) {
  if (in < 0) return -1;
  return (in + pad - dilation * (kernel - 1) - 1) / stride + 1;
}

class Exporter {
 public:
  Exporter(const Graph& graph, const OnnxExportOptions& options) : graph_(graph) {
    model_.producer_version = options.producer_version;
  }

  formats::OnnxModel run() {
    for (const ValueSpec& in : graph_.inputs) add_input(in);
    for (const Node& node : graph_.nodes) {
      node_ = &node;
      const std::size_t first = model_.nodes.size();
      const std::string result = emit_node(node);
      // The node's last ONNX node writes the graph value itself.
      HOTPATH_ASSERT(model_.nodes.size() > first && model_.nodes.back().outputs.front() == result);
      model_.nodes.back().outputs.front() = node.output;
      shapes_[node.output] = shapes_.at(result);
    }
    for (const std::string& out : graph_.outputs) {
      std::string value = out;
      if (is_graph_input(out)) {  // an ONNX graph output must be written by a node; outputs are float32
        value = out + "/output";
        model_.nodes.push_back({"Cast", out + "/Cast", {out}, {value}, {{"to", static_cast<std::int64_t>(OnnxDtype::kFloat)}}});
      }
      model_.outputs.push_back({value, OnnxDtype::kFloat, std::nullopt});
    }
    return std::move(model_);
  }

 private:
  // ---- bookkeeping ------------------------------------------------------------------------------------
  [[nodiscard]] std::string where() const { return "ONNX export: node " + node_->name + " (" + std::string(op_name(node_->op)) + ")"; }

  bool is_graph_input(const std::string& name) const {
    return std::any_of(graph_.inputs.begin(), graph_.inputs.end(), [&](const ValueSpec& v) { return v.name == name; });
  }

  void add_input(const ValueSpec& in) {
    HOTPATH_CHECK(in.dim_names.empty() || in.dim_names.size() == in.shape.size(), "ONNX export: graph input ",
                  in.name, " has ", in.shape.size(), " dims but ", in.dim_names.size(), " dim_names");
    std::vector<OnnxDim> dims;
    for (std::size_t i = 0; i < in.shape.size(); ++i) {
      if (in.shape[i] >= 0) {
        dims.emplace_back(in.shape[i]);
      } else {
        const std::string name = i < in.dim_names.size() ? in.dim_names[i] : "";
        dims.emplace_back(name.empty() ? in.name + "_dim" + std::to_string(i) : name);
      }
    }
    model_.inputs.push_back({in.name, onnx_dtype(in.dtype, "graph input " + in.name), std::move(dims)});
    shapes_[in.name] = in.shape;
  }

  // A new value name and an ONNX node writing it; returns the value.
  std::string emit(const std::string& op_type, std::vector<std::string> inputs, std::vector<OnnxAttribute> attrs = {},
                   const Shape& shape = {}) {
    const std::string base = node_->name + "/" + op_type;
    const int n = name_counts_[base]++;
    const std::string suffix = n == 0 ? op_type : op_type + "_" + std::to_string(n);
    const std::string value = node_->output + "/" + suffix;
    model_.nodes.push_back({op_type, n == 0 ? base : base + "_" + std::to_string(n), std::move(inputs), {value},
                            std::move(attrs)});
    shapes_[value] = shape;
    return value;
  }

  [[nodiscard]] const Shape& shape_of(const std::string& value) const {
    auto it = shapes_.find(value);
    HOTPATH_CHECK(it != shapes_.end(), where(), ": input ", value, " is not written before it");
    return it->second;
  }

  // The initializer of the node's param `role` (added once per graph param).
  std::string param(const std::string& role) {
    auto it = node_->params.find(role);
    HOTPATH_CHECK(it != node_->params.end(), where(), ": needs param ", role);
    const std::string& key = it->second;
    auto t = graph_.params.find(key);
    HOTPATH_CHECK(t != graph_.params.end(), where(), ": param ", role, " names tensor ", key, ", which the graph lacks");
    if (initialized_.insert(key).second) model_.initializers.push_back(tensor_of(key, t->second));
    return key;
  }
  [[nodiscard]] const at::Tensor& param_tensor(const std::string& role) const {
    return graph_.params.at(node_->params.at(role));
  }

  // Weight [O, I] as an [I, O] initializer for MatMul (transposed once, at export).
  std::string transposed_param(const std::string& role) {
    const std::string key = node_->params.at(role) + "/transposed";
    if (initialized_.insert(key).second) model_.initializers.push_back(tensor_of(key, param_tensor(role).t()));
    return key;
  }

  std::string const_float(float v) {
    const std::string name = "const/float/" + std::to_string(std::bit_cast<std::uint32_t>(v));
    if (initialized_.insert(name).second) model_.initializers.push_back(constant<float>(name, OnnxDtype::kFloat, {}, {v}));
    return name;
  }
  // int64 constants: a scalar (scalar = true, one value) or a 1-d tensor.
  std::string const_ints(const std::vector<std::int64_t>& v, bool scalar = false) {
    std::string name = scalar ? "const/int64/scalar" : "const/int64";
    for (const std::int64_t x : v) name += "/" + std::to_string(x);
    const Shape dims = scalar ? Shape{} : Shape{static_cast<std::int64_t>(v.size())};
    if (initialized_.insert(name).second) model_.initializers.push_back(constant<std::int64_t>(name, OnnxDtype::kInt64, dims, v));
    return name;
  }

  std::string act(const std::string& x) {
    const std::string a = node_->attr_str("act", "none");
    const Shape& s = shape_of(x);
    if (a == "none") return x;
    if (a == "relu") return emit("Relu", {x}, {}, s);
    if (a == "relu6") return emit("Clip", {x, const_float(0.0f), const_float(6.0f)}, {}, s);
    if (a == "sigmoid") return emit("Sigmoid", {x}, {}, s);
    if (a == "tanh") return emit("Tanh", {x}, {}, s);
    if (a == "silu") return emit("Mul", {x, emit("Sigmoid", {x}, {}, s)}, {}, s);
    if (a == "gelu") {  // x·½(1 + erf(x/√2)): the pattern ORT's GeluFusion matches
      const std::string e = emit("Erf", {emit("Div", {x, const_float(static_cast<float>(std::sqrt(2.0)))}, {}, s)}, {}, s);
      return emit("Mul", {emit("Mul", {x, emit("Add", {e, const_float(1.0f)}, {}, s)}, {}, s), const_float(0.5f)}, {}, s);
    }
    if (a == "gelu_tanh") {  // (½x)(1 + tanh(√(2/π)(x + 0.044715x³))): HF gelu_new's order, which ORT fuses
      const std::string half = emit("Mul", {x, const_float(0.5f)}, {}, s);
      const std::string cube = emit("Pow", {x, const_float(3.0f)}, {}, s);
      const std::string inner = emit("Add", {x, emit("Mul", {cube, const_float(0.044715f)}, {}, s)}, {}, s);
      const auto k = static_cast<float>(std::sqrt(2.0 / 3.14159265358979323846));
      const std::string t = emit("Tanh", {emit("Mul", {inner, const_float(k)}, {}, s)}, {}, s);
      return emit("Mul", {half, emit("Add", {t, const_float(1.0f)}, {}, s)}, {}, s);
    }
    throw Error(where() + ": activation '" + a + "' has no ONNX mapping");
  }

  // ---- ops --------------------------------------------------------------------------------------------
  std::string emit_node(const Node& n) {
    const bool has_act = n.op == OpKind::kConv2d || n.op == OpKind::kLinear || n.op == OpKind::kAdd;
    HOTPATH_CHECK(has_act || n.attr_str("act", "none") == "none", where(), ": attribute act is not supported by ", n.op);
    // One emitter per op, in OpKind's order; the count is checked at compile time against graph.h's op table.
    using Emit = std::string (Exporter::*)();
    static constexpr Emit kEmitters[] = {&Exporter::conv2d,     &Exporter::max_pool2d, &Exporter::global_avg_pool,
                                         &Exporter::add,        &Exporter::mul,        &Exporter::linear,
                                         &Exporter::layer_norm, &Exporter::attention,  &Exporter::vit_embed,
                                         &Exporter::bert_embed, &Exporter::select,     &Exporter::mean_pool,
                                         &Exporter::l2_normalize};
    static_assert(std::size(kEmitters) == kOpCount, "the ONNX exporter needs one emitter per op of graph.h");
    return (this->*kEmitters[op_index(n.op)])();
  }

  // add: same shapes; mul: b broadcast to a (graph.h) — so both have a's shape.
  std::string add() {
    const Node& n = *node_;
    return act(emit("Add", {n.input(0), n.input(1)}, {}, shape_of(n.input(0))));
  }
  std::string mul() {
    const Node& n = *node_;
    return emit("Mul", {n.input(0), n.input(1)}, {}, shape_of(n.input(0)));
  }

  // y = act(conv(x) + residual); padding is (top, left, bottom, right) = ONNX's (x1_begin, x2_begin, x1_end, x2_end).
  std::string conv2d() {
    const Node& n = *node_;
    const at::Tensor& w = param_tensor("weight");
    HOTPATH_CHECK(w.dim() == 4, where(), ": weight is ", w.dim(), "-d, expected [O, I/groups, kh, kw]");
    const Shape stride = n.attr_ints("stride", {1, 1}), pad = n.attr_ints("padding", {0, 0, 0, 0}),
                dilation = n.attr_ints("dilation", {1, 1});
    HOTPATH_CHECK(stride.size() == 2 && pad.size() == 4 && dilation.size() == 2, where(),
                  ": needs stride [2], padding [4], dilation [2]");
    std::vector<std::string> in = {n.input(0), param("weight")};
    if (n.has_param("bias")) in.push_back(param("bias"));
    const Shape& xs = shape_of(n.input(0));
    HOTPATH_CHECK(xs.size() == 4, where(), ": input ", n.input(0), " has rank ", xs.size(), ", expected 4");
    const Shape ys = {xs[0], w.size(0), conv_out(xs[2], pad[0] + pad[2], w.size(2), stride[0], dilation[0]),
                      conv_out(xs[3], pad[1] + pad[3], w.size(3), stride[1], dilation[1])};
    std::string y = emit("Conv", in,
                         {{"kernel_shape", Shape{w.size(2), w.size(3)}},
                          {"strides", stride},
                          {"pads", pad},
                          {"dilations", dilation},
                          {"group", n.attr_int("groups", 1)}},
                         ys);
    if (!n.input(1).empty()) y = emit("Add", {y, n.input(1)}, {}, ys);
    return act(y);
  }

  std::string max_pool2d() {
    const Node& n = *node_;
    const Shape kernel = n.attr_ints("kernel", {});
    Shape stride = n.attr_ints("stride", {});
    const Shape pad = n.attr_ints("padding", {0, 0});
    if (stride.empty()) stride = kernel;  // at::max_pool2d's default
    HOTPATH_CHECK(kernel.size() == 2 && stride.size() == 2 && pad.size() == 2, where(),
                  ": needs kernel [2], stride [2], padding [2]");
    const Shape& xs = shape_of(n.input(0));
    HOTPATH_CHECK(xs.size() == 4, where(), ": input has rank ", xs.size(), ", expected 4");
    return emit("MaxPool", {n.input(0)},
                {{"kernel_shape", kernel}, {"strides", stride}, {"pads", Shape{pad[0], pad[1], pad[0], pad[1]}}},
                {xs[0], xs[1], conv_out(xs[2], 2 * pad[0], kernel[0], stride[0], 1),
                 conv_out(xs[3], 2 * pad[1], kernel[1], stride[1], 1)});
  }

  std::string global_avg_pool() {
    const Shape& xs = shape_of(node_->input(0));
    HOTPATH_CHECK(xs.size() == 4, where(), ": input has rank ", xs.size(), ", expected 4");
    const std::string y = emit("GlobalAveragePool", {node_->input(0)}, {}, {xs[0], xs[1], 1, 1});
    if (node_->attr_int("keepdims", 0) != 0) return y;
    return emit("Flatten", {y}, {{"axis", std::int64_t{1}}}, {xs[0], xs[1]});
  }

  // act(x Wᵀ + b + residual): Gemm for a 2-d x, MatMul with the pre-transposed weight (+ Add) otherwise.
  std::string linear() {
    const Node& n = *node_;
    const at::Tensor& w = param_tensor("weight");
    HOTPATH_CHECK(w.dim() == 2, where(), ": weight is ", w.dim(), "-d, expected [O, I]");
    Shape ys = shape_of(n.input(0));
    HOTPATH_CHECK(!ys.empty(), where(), ": input ", n.input(0), " is a scalar");
    ys.back() = w.size(0);
    std::string y;
    if (ys.size() == 2) {
      std::vector<std::string> in = {n.input(0), param("weight")};
      if (n.has_param("bias")) in.push_back(param("bias"));
      y = emit("Gemm", in, {{"transB", std::int64_t{1}}}, ys);
    } else {
      y = emit("MatMul", {n.input(0), transposed_param("weight")}, {}, ys);
      if (n.has_param("bias")) y = emit("Add", {y, param("bias")}, {}, ys);
    }
    if (!n.input(1).empty()) y = emit("Add", {y, n.input(1)}, {}, ys);
    return act(y);
  }

  std::string layer_norm() {
    const Node& n = *node_;
    std::string x = n.input(0);
    const Shape s = shape_of(x);
    if (!n.input(1).empty()) x = emit("Add", {x, n.input(1)}, {}, s);
    return emit("LayerNormalization", {x, param("weight"), param("bias")},
                {{"axis", std::int64_t{-1}}, {"epsilon", static_cast<float>(n.attr_float("eps", 1e-5))}}, s);
  }

  // The additive attention bias of a [B, L] mask (nonzero = attend), as [B, 1, 1, L]; one per mask value.
  std::string mask_bias(const std::string& mask) {
    auto it = mask_bias_.find(mask);
    if (it != mask_bias_.end()) return it->second;
    const Shape& ms = shape_of(mask);
    HOTPATH_CHECK(ms.size() == 2, where(), ": mask ", mask, " has rank ", ms.size(), ", expected [B, L]");
    const std::string keep = emit("Cast", {mask}, {{"to", static_cast<std::int64_t>(OnnxDtype::kBool)}}, ms);
    const std::string bias =
        emit("Where", {keep, const_float(0.0f), const_float(std::numeric_limits<float>::lowest())}, {}, ms);
    const std::string out = emit("Unsqueeze", {bias, const_ints({1, 2})}, {}, {ms[0], 1, 1, ms[1]});
    mask_bias_.emplace(mask, out);
    return out;
  }

  // softmax(q kᵀ/√d + mask) v over qkv [B, L, 3H] packed q | k | v, heads of size d = H/heads.
  std::string attention() {
    const Node& n = *node_;
    const std::int64_t heads = n.attr_int("heads", 1);
    const Shape& qs = shape_of(n.input(0));
    HOTPATH_CHECK(qs.size() == 3, where(), ": qkv has rank ", qs.size(), ", expected [B, L, 3H]");
    HOTPATH_CHECK(heads >= 1 && qs[2] > 0 && qs[2] % (3 * heads) == 0, where(), ": qkv's last dim ", qs[2],
                  " is not known or not a multiple of 3 x heads (", heads, ")");
    const std::int64_t hidden = qs[2] / 3, d = hidden / heads, b = qs[0], l = qs[1];
    const std::string split =
        emit("Reshape", {n.input(0), const_ints({0, 0, 3, heads, d})}, {}, {b, l, 3, heads, d});
    const std::string parts = emit("Transpose", {split}, {{"perm", Shape{2, 0, 3, 1, 4}}}, {3, b, heads, l, d});
    const auto part = [&](std::int64_t i) {
      return emit("Gather", {parts, const_ints({i}, true)}, {{"axis", std::int64_t{0}}}, {b, heads, l, d});
    };
    const std::string q = part(0), k = part(1), v = part(2);
    const std::string kt = emit("Transpose", {k}, {{"perm", Shape{0, 1, 3, 2}}}, {b, heads, d, l});
    std::string scores = emit("MatMul", {q, kt}, {}, {b, heads, l, l});
    scores = emit("Div", {scores, const_float(static_cast<float>(std::sqrt(static_cast<double>(d))))}, {},
                  {b, heads, l, l});
    if (!n.input(1).empty()) scores = emit("Add", {scores, mask_bias(n.input(1))}, {}, {b, heads, l, l});
    const std::string probs = emit("Softmax", {scores}, {{"axis", std::int64_t{-1}}}, {b, heads, l, l});
    const std::string ctx = emit("MatMul", {probs, v}, {}, {b, heads, l, d});
    const std::string merged = emit("Transpose", {ctx}, {{"perm", Shape{0, 2, 1, 3}}}, {b, l, heads, d});
    return emit("Reshape", {merged, const_ints({0, 0, hidden})}, {}, {b, l, hidden});
  }

  // cat(class_token expanded to the batch, x [N, D, h, w] as [N, h·w, D]) + pos_embedding.
  std::string vit_embed() {
    const std::string x = node_->input(0);
    const Shape& xs = shape_of(x);
    HOTPATH_CHECK(xs.size() == 4, where(), ": input has rank ", xs.size(), ", expected [N, D, h, w]");
    const std::int64_t p = xs[2] < 0 || xs[3] < 0 ? -1 : xs[2] * xs[3];
    const std::string flat = emit("Reshape", {x, const_ints({0, 0, -1})}, {}, {xs[0], xs[1], p});
    const std::string tokens = emit("Transpose", {flat}, {{"perm", Shape{0, 2, 1}}}, {xs[0], p, xs[1]});
    const std::string batch = emit("Shape", {x}, {{"start", std::int64_t{0}}, {"end", std::int64_t{1}}}, {1});
    const std::string target = emit("Concat", {batch, const_ints({1, 1})}, {{"axis", std::int64_t{0}}}, {3});
    const std::string cls = emit("Expand", {param("class_token"), target}, {}, {xs[0], 1, xs[1]});
    const Shape ys = {xs[0], p < 0 ? -1 : p + 1, xs[1]};
    const std::string cat = emit("Concat", {cls, tokens}, {{"axis", std::int64_t{1}}}, ys);
    return emit("Add", {cat, param("pos_embedding")}, {}, ys);
  }

  // LN(word[ids] + position[0..L) + token_type[types]) — token_type[0] when the types input is absent.
  std::string bert_embed() {
    const Node& n = *node_;
    const std::string ids = n.input(0);
    const Shape& is = shape_of(ids);
    HOTPATH_CHECK(is.size() == 2, where(), ": input_ids has rank ", is.size(), ", expected [B, L]");
    const std::int64_t h = param_tensor("word").size(1);
    const Shape ys = {is[0], is[1], h};
    std::string e = emit("Gather", {param("word"), ids}, {{"axis", std::int64_t{0}}}, ys);
    const std::string shape = emit("Shape", {ids}, {}, {2});
    const std::string len = emit("Gather", {shape, const_ints({1}, true)}, {{"axis", std::int64_t{0}}}, {});
    const std::string positions = emit("Range", {const_ints({0}, true), len, const_ints({1}, true)}, {}, {is[1]});
    e = emit("Add", {e, emit("Gather", {param("position"), positions}, {{"axis", std::int64_t{0}}}, {is[1], h})}, {}, ys);
    if (n.has_param("token_type")) {
      const bool types = !n.input(1).empty();
      const std::string idx = types ? n.input(1) : const_ints({0}, true);
      const std::string t = emit("Gather", {param("token_type"), idx}, {{"axis", std::int64_t{0}}},
                                 types ? ys : Shape{h});
      e = emit("Add", {e, t}, {}, ys);
    }
    return emit("LayerNormalization", {e, param("ln_weight"), param("ln_bias")},
                {{"axis", std::int64_t{-1}}, {"epsilon", static_cast<float>(n.attr_float("eps", 1e-12))}}, ys);
  }

  std::string select() {
    const Node& n = *node_;
    Shape s = shape_of(n.input(0));
    std::int64_t dim = n.attr_int("dim", 1);
    const auto rank = static_cast<std::int64_t>(s.size());
    HOTPATH_CHECK(dim >= -rank && dim < rank, where(), ": dim ", dim, " is out of range for rank ", rank);
    if (dim < 0) dim += rank;
    s.erase(s.begin() + dim);
    return emit("Gather", {n.input(0), const_ints({n.attr_int("index", 0)}, true)}, {{"axis", dim}}, s);
  }

  // sum(x·m, 1) / max(sum(m, 1), 1e-9) over x [B, L, H], mask m [B, L].
  std::string mean_pool() {
    const Node& n = *node_;
    const Shape& xs = shape_of(n.input(0));
    const Shape& ms = shape_of(n.input(1));
    HOTPATH_CHECK(xs.size() == 3 && ms.size() == 2, where(), ": expects x [B, L, H] and mask [B, L]");
    const std::string m = emit("Cast", {n.input(1)}, {{"to", static_cast<std::int64_t>(OnnxDtype::kFloat)}}, ms);
    const std::string m3 = emit("Unsqueeze", {m, const_ints({-1})}, {}, {ms[0], ms[1], 1});
    const std::string masked = emit("Mul", {n.input(0), m3}, {}, xs);
    const std::string sum = emit("ReduceSum", {masked, const_ints({1})}, {{"keepdims", std::int64_t{0}}}, {xs[0], xs[2]});
    const std::string count = emit("ReduceSum", {m3, const_ints({1})}, {{"keepdims", std::int64_t{0}}}, {xs[0], 1});
    const std::string clamped = emit("Max", {count, const_float(1e-9f)}, {}, {xs[0], 1});
    return emit("Div", {sum, clamped}, {}, {xs[0], xs[2]});
  }

  std::string l2_normalize() {
    const std::string x = node_->input(0);
    const Shape& s = shape_of(x);
    Shape ns = s;
    if (!ns.empty()) ns.back() = 1;
    const std::string norm = emit("ReduceL2", {x}, {{"axes", Shape{-1}}, {"keepdims", std::int64_t{1}}}, ns);
    return emit("Div", {x, emit("Max", {norm, const_float(1e-12f)}, {}, ns)}, {}, s);
  }

  const Graph& graph_;
  formats::OnnxModel model_;
  const Node* node_ = nullptr;
  std::map<std::string, Shape> shapes_;
  std::map<std::string, int> name_counts_;
  std::map<std::string, std::string> mask_bias_;
  std::set<std::string> initialized_;
};

void check_exportable(const Graph& graph) {
  for (const Node& n : graph.nodes) {
    const std::string quant = n.attr_str("quant", "");
    HOTPATH_CHECK(quant.empty(), "ONNX export: node ", n.name, " (", n.op, ") is quantized (", quant,
                  "); ONNX export of quantized graphs: export the fp32 package");
  }
}

}  // namespace

formats::OnnxModel graph_to_onnx(const Graph& graph, const OnnxExportOptions& options) {
  check_exportable(graph);
  graph.validate();
  return Exporter(graph, options).run();
}

void export_onnx(const Graph& graph, const std::string& path, const OnnxExportOptions& options) {
  formats::write_onnx(graph_to_onnx(graph, options), path, {.external_data_threshold = options.external_data_threshold});
}

}  // namespace hotpath::infer
