#include "hotpath/infer/graph.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <set>
#include <unordered_set>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::infer {
namespace {

template <std::size_t N>
bool contains(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

// An attribute's type and bounds: integers and each entry of an integer list within [lo, hi], numbers
// within [lo, hi] and finite. The string attributes (act, quant) have their own lists.
enum class AttrKind { kInt, kFloat, kInts };
struct AttrRule {
  std::string_view name;
  AttrKind kind;
  bool required;
  double lo = 0;
  double hi = 0;
  std::size_t count = 0;  // kInts: the list's length
};

// Bounds far beyond any real model and small enough that no size arithmetic on them overflows.
constexpr double kMaxSpatial = 1 << 16;   // kernel, stride, padding, dilation
constexpr double kMaxChannels = 1 << 24;  // groups, heads
constexpr double kMaxIndex = 1 << 24;     // select's index

AttrRule ints(std::string_view name, std::size_t count, double lo, double hi) {
  return {name, AttrKind::kInts, true, lo, hi, count};
}
AttrRule integer(std::string_view name, double lo, double hi, bool required = true) {
  return {name, AttrKind::kInt, required, lo, hi};
}
AttrRule number(std::string_view name, double lo, double hi, bool required = true) {
  return {name, AttrKind::kFloat, required, lo, hi};
}

// Per op: required params, optional params, attributes (with their bounds), how many inputs (min, max).
// "act" and "quant" are strings every op may carry; validate_attrs checks them against their lists.
struct OpRule {
  OpKind op;
  std::vector<std::string_view> required_params;
  std::vector<std::string_view> optional_params;
  std::vector<AttrRule> attrs;
  std::size_t min_inputs;
  std::size_t max_inputs;
};

const std::vector<OpRule>& op_rules() {
  // Static int8 convs carry their input quantization (and, once chained, their output's): scales positive
  // and finite, uint8 zero points.
  static const std::vector<OpRule> rules = {
      {OpKind::kConv2d, {"weight"}, {"bias", "weight_scale"},
       {ints("stride", 2, 1, kMaxSpatial), ints("padding", 4, 0, kMaxSpatial), ints("dilation", 2, 1, kMaxSpatial),
        integer("groups", 1, kMaxChannels), number("input_scale", 1e-30, 1e30, false),
        integer("input_zero_point", 0, 255, false), number("output_scale", 1e-30, 1e30, false),
        integer("output_zero_point", 0, 255, false)},
       1, 2},
      {OpKind::kMaxPool2d, {}, {},
       {ints("kernel", 2, 1, kMaxSpatial), ints("stride", 2, 1, kMaxSpatial), ints("padding", 2, 0, kMaxSpatial)}, 1, 1},
      {OpKind::kGlobalAvgPool, {}, {}, {integer("keepdims", 0, 1, false)}, 1, 1},
      {OpKind::kAdd, {}, {}, {}, 2, 2},
      {OpKind::kMul, {}, {}, {}, 2, 2},
      {OpKind::kLinear, {"weight"}, {"bias", "weight_scale"}, {}, 1, 2},
      {OpKind::kLayerNorm, {"weight", "bias"}, {}, {number("eps", 1e-30, 1)}, 1, 2},
      {OpKind::kAttention, {}, {}, {integer("heads", 1, kMaxChannels)}, 1, 2},
      {OpKind::kVitEmbed, {"class_token", "pos_embedding"}, {}, {}, 1, 1},
      {OpKind::kBertEmbed, {"word", "position", "ln_weight", "ln_bias"}, {"token_type"}, {number("eps", 1e-30, 1)}, 1, 2},
      {OpKind::kSelect, {}, {}, {integer("dim", -8, 7), integer("index", -kMaxIndex, kMaxIndex)}, 1, 1},  // negative: from the end
      {OpKind::kMeanPool, {}, {}, {}, 2, 2},
      {OpKind::kL2Normalize, {}, {}, {}, 1, 1},
  };
  return rules;
}

// One row per op, in OpKind's order (checked once, and by GraphOps.EveryTableHasOneRowPerOp).
const OpRule& rule_for(OpKind op) {
  static const bool in_order = [] {
    const auto& rules = op_rules();
    HOTPATH_ASSERT(rules.size() == kOpCount);
    for (std::size_t i = 0; i < rules.size(); ++i) HOTPATH_ASSERT(op_index(rules[i].op) == i);
    return true;
  }();
  (void)in_order;
  HOTPATH_CHECK(op_index(op) < kOpCount, "graph: op number ", op_index(op), " is not in the op table");
  return op_rules()[op_index(op)];
}

std::string type_name(const AttrValue& v) {
  switch (v.index()) {
    case 0: return "an integer";
    case 1: return "a number";
    case 2: return "a string";
    default: return "a list of integers";
  }
}

template <typename T>
const T* typed_attr(const Node& node, const std::string& key, const char* expected) {
  auto it = node.attrs.find(key);
  if (it == node.attrs.end()) return nullptr;
  const T* v = std::get_if<T>(&it->second);
  HOTPATH_CHECK(v != nullptr, "graph: node ", node.name, " attribute '", key, "' is ", type_name(it->second),
                ", expected ", expected);
  return v;
}

std::string bounds(const AttrRule& r) {
  std::ostringstream os;
  if (r.kind == AttrKind::kFloat) {
    os << r.lo << " to " << r.hi;
  } else {
    os << static_cast<std::int64_t>(r.lo) << " to " << static_cast<std::int64_t>(r.hi);
  }
  return os.str();
}

// One line naming the node, the attribute, its value and what the op expects of it.
void check_attrs(const Node& node, const OpRule& rule) {
  const auto where = [&](const std::string& key) { return "graph: node " + node.name + " (" + std::string(op_name(node.op)) + ") attribute '" + key + "'"; };
  for (const auto& entry : node.attrs) {
    const std::string& key = entry.first;
    if (key == "act" || key == "quant") continue;
    const bool declared = std::any_of(rule.attrs.begin(), rule.attrs.end(), [&](const AttrRule& r) { return r.name == key; });
    HOTPATH_CHECK(declared, where(key), ": not an attribute of ", node.op);
  }
  for (const AttrRule& r : rule.attrs) {
    const std::string key(r.name);
    if (node.attrs.count(key) == 0) {
      HOTPATH_CHECK(!r.required, "graph: node ", node.name, " (", node.op, ") lacks attribute '", key, "'");
      continue;
    }
    switch (r.kind) {
      case AttrKind::kInt: {
        const std::int64_t v = node.attr_int(key, 0);
        HOTPATH_CHECK(v >= r.lo && v <= r.hi, where(key), " is ", v, ", expected an integer from ", bounds(r));
        break;
      }
      case AttrKind::kFloat: {
        const double v = node.attr_float(key, 0);
        HOTPATH_CHECK(std::isfinite(v) && v >= r.lo && v <= r.hi, where(key), " is ", v, ", expected a number from ",
                      bounds(r));
        break;
      }
      case AttrKind::kInts: {
        const std::vector<std::int64_t> v = node.attr_ints(key, {});
        const bool ok = v.size() == r.count &&
                        std::all_of(v.begin(), v.end(), [&](std::int64_t x) { return x >= r.lo && x <= r.hi; });
        HOTPATH_CHECK(ok, where(key), " is ", c10::IntArrayRef(v), ", expected ", r.count, " integers, each from ",
                      bounds(r));
        break;
      }
    }
  }
  const std::string act = node.attr_str("act", "none");
  HOTPATH_CHECK(contains(kActivations, act), "graph: node ", node.name, " has unknown activation '", act, "'");
  const std::string quant = node.attr_str("quant", "");
  if (!quant.empty()) {
    HOTPATH_CHECK((node.op == OpKind::kLinear && quant == "dynamic_int8") || (node.op == OpKind::kConv2d && quant == "static_int8"),
                  "graph: node ", node.name, " (", node.op, ") has unknown quantization '", quant, "'");
  }
  if (quant == "static_int8") {
    for (const char* key : {"input_scale", "input_zero_point"}) {
      HOTPATH_CHECK(node.attrs.count(key) != 0, "graph: quantized node ", node.name, " lacks attribute '", key, "'");
    }
  }
  HOTPATH_CHECK(node.attrs.count("output_scale") == node.attrs.count("output_zero_point"), "graph: node ", node.name,
                " has one of output_scale and output_zero_point, expected both or neither");
  if (node.op == OpKind::kMaxPool2d) {
    // at::max_pool2d's own rule, said here instead of from inside the kernel.
    const auto kernel = node.attr_ints("kernel", {}), padding = node.attr_ints("padding", {});
    for (std::size_t i = 0; i < 2; ++i) {
      HOTPATH_CHECK(2 * padding[i] <= kernel[i], where("padding"), " is ", c10::IntArrayRef(padding),
                    ", expected at most half the kernel ", c10::IntArrayRef(kernel));
    }
  }
}

// The feature size of a value where the graph fixes it: the channels of an image value [N, C, H, W], the last
// dimension of any other. -1: not known here (ids, a dynamic input dimension).
struct Features {
  bool image = false;
  std::int64_t size = -1;
};

// The shapes a node's attributes and weights fix for its neighbours, checked before the engine's kernels see
// them (they would otherwise divide by zero, or fail inside oneDNN or MKL with a message naming neither the
// node nor the package): each node's weights against the feature size of what it reads, forward through the
// graph from its inputs.
void check_neighbour_shapes(const Graph& g) {
  std::map<std::string, Features> features;
  for (const ValueSpec& in : g.inputs) {
    if (in.shape.size() == 4) features[in.name] = {true, in.shape[1]};
    if (in.shape.size() == 3 && at::isFloatingType(in.dtype)) features[in.name] = {false, in.shape[2]};
  }
  const auto weight = [&](const Node& n, const char* role = "weight") -> const at::Tensor& {
    return g.params.at(n.params.at(role));
  };
  const auto of = [&](const std::string& value) {
    auto it = features.find(value);
    return it == features.end() ? Features{} : it->second;
  };
  // `value`, read by node n, must have `size` features (of the kind given) when the graph says how many it has.
  const auto expect = [&](const Node& n, const std::string& value, bool image, std::int64_t size, const auto& what) {
    const Features f = of(value);
    if (value.empty() || f.size < 1 || f.image != image) return;
    HOTPATH_CHECK(f.size == size, "graph: node ", n.name, " (", n.op, ") ", what, " takes ", size,
                  image ? " channels" : " features", ", but its input ", value, " has ", f.size);
  };
  for (const Node& n : g.nodes) {
    Features out;
    if (n.op == OpKind::kConv2d) {
      const at::Tensor& w = weight(n);
      const std::int64_t groups = n.attr_int("groups", 1);
      HOTPATH_CHECK(w.dim() == 4, "graph: node ", n.name, " (conv2d) weight is ", w.sizes(),
                    ", expected [out, in/groups, kh, kw]");
      for (std::int64_t d = 0; d < 4; ++d) {
        HOTPATH_CHECK(w.size(d) >= 1, "graph: node ", n.name, " (conv2d) weight is ", w.sizes(),
                      ", expected every size >= 1");
      }
      HOTPATH_CHECK(w.size(0) % groups == 0, "graph: node ", n.name, " (conv2d) attribute 'groups' is ", groups,
                    ", expected a divisor of the weight's ", w.size(0), " output channels");
      std::ostringstream what;
      what << "weight " << w.sizes() << " with groups " << groups;
      expect(n, n.input(0), true, w.size(1) * groups, what.str());
      out = {true, w.size(0)};
      expect(n, n.input(1), true, out.size, "residual");
    } else if (n.op == OpKind::kMaxPool2d) {
      out = of(n.input(0));
    } else if (n.op == OpKind::kGlobalAvgPool) {
      const Features in = of(n.input(0));
      out = {in.image && n.attr_int("keepdims", 0) != 0, in.image ? in.size : -1};
    } else if (n.op == OpKind::kLinear) {
      const at::Tensor& w = weight(n);
      HOTPATH_CHECK(w.dim() == 2 && w.size(0) >= 1 && w.size(1) >= 1, "graph: node ", n.name, " (linear) weight is ",
                    w.sizes(), ", expected [out >= 1, in >= 1]");
      std::ostringstream what;
      what << "weight " << w.sizes();
      expect(n, n.input(0), false, w.size(1), what.str());
      out = {false, w.size(0)};
      expect(n, n.input(1), false, out.size, "residual");
    } else if (n.op == OpKind::kLayerNorm) {
      out = {false, weight(n).size(0)};
      expect(n, n.input(0), false, out.size, "weight");
      expect(n, n.input(1), false, out.size, "residual");
    } else if (n.op == OpKind::kAttention) {
      // heads >= 1 is validate_attrs' business: 3 * heads is never 0 here.
      const std::int64_t heads = n.attr_int("heads", 1);
      const Features in = of(n.input(0));
      if (!in.image && in.size >= 1) {
        HOTPATH_CHECK(in.size % (3 * heads) == 0, "graph: node ", n.name, " (attention) attribute 'heads' is ", heads,
                      ", expected a divisor of the hidden size (its input ", n.input(0), " holds q | k | v of width ",
                      in.size, ", not a multiple of 3 x heads)");
        out = {false, in.size / 3};
      }
    } else if (n.op == OpKind::kVitEmbed) {
      const std::int64_t d = weight(n, "class_token").size(-1);
      expect(n, n.input(0), true, d, "class_token");
      out = {false, d};
    } else if (n.op == OpKind::kBertEmbed) {
      out = {false, weight(n, "word").size(-1)};
    } else if (n.op == OpKind::kAdd || n.op == OpKind::kMul) {
      const Features a = of(n.input(0)), b = of(n.input(1));
      out = a.size >= 1 ? a : b;
      if (a.size >= 1 && b.size >= 1 && a.image == b.image && a.size != 1 && b.size != 1) {  // 1 broadcasts
        HOTPATH_CHECK(a.size == b.size, "graph: node ", n.name, " (", n.op, ") adds or multiplies ", n.input(0), " (",
                      a.size, " features) and ", n.input(1), " (", b.size, ")");
      }
    } else if (n.op == OpKind::kSelect) {
      const Features in = of(n.input(0));
      const std::int64_t dim = n.attr_int("dim", 1);
      if (!in.image && (dim >= 0 ? dim <= 1 : dim <= -2)) out = in;  // [B, L, H] along B or L: H stays last
    } else if (n.op == OpKind::kMeanPool || n.op == OpKind::kL2Normalize) {
      const Features in = of(n.input(0));
      if (!in.image) out = in;
    }
    features[n.output] = out;
  }
}

// "conv2d, max_pool2d, ...": what an unknown op's message lists.
std::string op_list() {
  std::string out;
  for (std::string_view name : kOpNames) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace

std::optional<OpKind> op_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kOpCount; ++i) {
    if (kOpNames[i] == name) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& os, OpKind op) { return os << op_name(op); }

std::int64_t Node::attr_int(const std::string& key, std::int64_t fallback) const {
  const auto* v = typed_attr<std::int64_t>(*this, key, "an integer");
  return v != nullptr ? *v : fallback;
}

double Node::attr_float(const std::string& key, double fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*i);
  const auto* v = typed_attr<double>(*this, key, "a number");
  return *v;
}

std::string Node::attr_str(const std::string& key, const std::string& fallback) const {
  const auto* v = typed_attr<std::string>(*this, key, "a string");
  return v != nullptr ? *v : fallback;
}

std::vector<std::int64_t> Node::attr_ints(const std::string& key, std::vector<std::int64_t> fallback) const {
  const auto* v = typed_attr<std::vector<std::int64_t>>(*this, key, "a list of integers");
  return v != nullptr ? *v : std::move(fallback);
}

const std::string& Node::input(std::size_t i) const {
  static const std::string kEmpty;
  return i < inputs.size() ? inputs[i] : kEmpty;
}

const Node* Graph::find_node(const std::string& name) const {
  for (const Node& n : nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

void Graph::validate() const {
  HOTPATH_CHECK(!inputs.empty(), "graph: no inputs");
  HOTPATH_CHECK(!outputs.empty(), "graph: no outputs");
  std::unordered_set<std::string> defined;
  for (const ValueSpec& in : inputs) {
    HOTPATH_CHECK(!in.name.empty(), "graph: an input has no name");
    HOTPATH_CHECK(defined.insert(in.name).second, "graph: input ", in.name, " is declared twice");
    HOTPATH_CHECK(in.dim_names.empty() || in.dim_names.size() == in.shape.size(), "graph: input ", in.name, " has ",
                  in.shape.size(), " dims but ", in.dim_names.size(), " dim names");
    for (std::int64_t d : in.shape) {
      HOTPATH_CHECK(d == -1 || d >= 1, "graph: input ", in.name, " has dimension ", d, ", expected -1 or >= 1");
    }
  }
  std::set<std::string> used_params;
  std::unordered_set<std::string> node_names;
  for (const Node& node : nodes) {
    HOTPATH_CHECK(!node.name.empty(), "graph: a ", node.op, " node has no name");
    HOTPATH_CHECK(node_names.insert(node.name).second, "graph: node name ", node.name, " is used twice");
    const OpRule& rule = rule_for(node.op);
    HOTPATH_CHECK(node.inputs.size() >= rule.min_inputs && node.inputs.size() <= rule.max_inputs, "graph: node ",
                  node.name, " (", node.op, ") has ", node.inputs.size(), " inputs, expected ", rule.min_inputs,
                  rule.min_inputs == rule.max_inputs ? "" : " to " + std::to_string(rule.max_inputs));
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& in = node.inputs[i];
      if (in.empty()) {
        HOTPATH_CHECK(i >= rule.min_inputs, "graph: node ", node.name, " input ", i, " is required");
        continue;
      }
      HOTPATH_CHECK(defined.count(in) != 0, "graph: node ", node.name, " reads ", in,
                    ", which no earlier node or graph input writes");
    }
    for (std::string_view p : rule.required_params) {
      HOTPATH_CHECK(node.params.count(std::string(p)) != 0, "graph: node ", node.name, " (", node.op,
                    ") lacks param '", p, "'");
    }
    for (const auto& [role, key] : node.params) {
      const bool known = std::find(rule.required_params.begin(), rule.required_params.end(), role) !=
                             rule.required_params.end() ||
                         std::find(rule.optional_params.begin(), rule.optional_params.end(), role) !=
                             rule.optional_params.end();
      HOTPATH_CHECK(known, "graph: node ", node.name, " (", node.op, ") has unknown param role '", role, "'");
      auto it = params.find(key);
      HOTPATH_CHECK(it != params.end() && it->second.defined(), "graph: node ", node.name, " param '", role,
                    "' names tensor ", key, ", which the weights do not hold");
      used_params.insert(key);
    }
    check_attrs(node, rule);
    const std::string quant = node.attr_str("quant", "");
    if (!quant.empty()) {
      HOTPATH_CHECK(node.has_param("weight_scale"), "graph: quantized node ", node.name, " lacks param 'weight_scale'");
    } else {
      HOTPATH_CHECK(!node.has_param("weight_scale"), "graph: node ", node.name,
                    " has a weight_scale but no 'quant' attribute");
    }
    HOTPATH_CHECK(!node.output.empty(), "graph: node ", node.name, " has no output name");
    HOTPATH_CHECK(defined.insert(node.output).second, "graph: node ", node.name, " writes ", node.output,
                  ", which is already written");
  }
  for (const std::string& out : outputs) {
    HOTPATH_CHECK(defined.count(out) != 0, "graph: output ", out, " is never written");
  }
  for (const auto& [key, tensor] : params) {
    HOTPATH_CHECK(used_params.count(key) != 0, "graph: weight ", key, " is used by no node");
  }
  check_neighbour_shapes(*this);
}

void Graph::validate_attrs() const {
  for (const Node& node : nodes) check_attrs(node, rule_for(node.op));
}

// ---- JSON ----------------------------------------------------------------------------------------

namespace {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    default: throw Error(std::string("graph: unsupported input dtype ") + c10::toString(t));
  }
}

at::ScalarType dtype_from_name(const std::string& s, const std::string& where) {
  if (s == "float32") return at::kFloat;
  if (s == "int64") return at::kLong;
  if (s == "int32") return at::kInt;
  if (s == "bfloat16") return at::kBFloat16;
  if (s == "uint8") return at::kByte;
  throw Error(where + ": dtype '" + s + "' is not one of float32, int64, int32, bfloat16, uint8");
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  HOTPATH_CHECK(j.is_object(), where, ": expected an object");
  auto it = j.find(key);
  HOTPATH_CHECK(it != j.end(), where, ": missing field '", key, "'");
  return *it;
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = field(j, key, where);
  HOTPATH_CHECK(v.is_string(), where, ".", key, ": expected a string");
  return v.get<std::string>();
}

std::vector<std::string> string_list(const nlohmann::json& v, const std::string& where) {
  HOTPATH_CHECK(v.is_array(), where, ": expected a list of strings");
  std::vector<std::string> out;
  out.reserve(v.size());
  for (const auto& s : v) {
    HOTPATH_CHECK(s.is_string(), where, ": expected a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::vector<std::int64_t> int_list(const nlohmann::json& v, const std::string& where) {
  HOTPATH_CHECK(v.is_array(), where, ": expected a list of integers");
  std::vector<std::int64_t> out;
  out.reserve(v.size());
  for (const auto& s : v) {
    HOTPATH_CHECK(s.is_number_integer(), where, ": expected a list of integers");
    out.push_back(s.get<std::int64_t>());
  }
  return out;
}

}  // namespace

nlohmann::ordered_json graph_to_json(const Graph& graph) {
  nlohmann::ordered_json j;
  auto& inputs = j["inputs"] = nlohmann::ordered_json::array();
  for (const ValueSpec& in : graph.inputs) {
    inputs.push_back({{"name", in.name}, {"dtype", dtype_name(in.dtype)}, {"shape", in.shape},
                      {"dim_names", in.dim_names}});
  }
  j["outputs"] = graph.outputs;
  auto& nodes = j["nodes"] = nlohmann::ordered_json::array();
  for (const Node& n : graph.nodes) {
    nlohmann::ordered_json node = {{"op", op_name(n.op)}, {"name", n.name}, {"inputs", n.inputs}, {"output", n.output}};
    if (!n.params.empty()) node["params"] = n.params;
    if (!n.attrs.empty()) {
      nlohmann::ordered_json attrs = nlohmann::ordered_json::object();
      for (const auto& [key, value] : n.attrs) {
        auto& slot = attrs[key];
        std::visit([&slot](const auto& v) { slot = v; }, value);
      }
      node["attrs"] = std::move(attrs);
    }
    nodes.push_back(std::move(node));
  }
  return j;
}

Graph graph_from_json(const nlohmann::json& j, const std::string& where) {
  Graph g;
  const nlohmann::json& inputs = field(j, "inputs", where);
  HOTPATH_CHECK(inputs.is_array(), where, ".inputs: expected a list");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string at = where + ".inputs[" + std::to_string(i) + "]";
    ValueSpec spec;
    spec.name = string_field(inputs[i], "name", at);
    spec.dtype = dtype_from_name(string_field(inputs[i], "dtype", at), at + ".dtype");
    spec.shape = int_list(field(inputs[i], "shape", at), at + ".shape");
    HOTPATH_CHECK(spec.shape.size() <= 8, at, ".shape: ", spec.shape.size(), " dims, expected at most 8");
    if (inputs[i].contains("dim_names")) spec.dim_names = string_list(inputs[i]["dim_names"], at + ".dim_names");
    g.inputs.push_back(std::move(spec));
  }
  g.outputs = string_list(field(j, "outputs", where), where + ".outputs");
  const nlohmann::json& nodes = field(j, "nodes", where);
  HOTPATH_CHECK(nodes.is_array(), where, ".nodes: expected a list");
  g.nodes.reserve(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::string at = where + ".nodes[" + std::to_string(i) + "]";
    const nlohmann::json& n = nodes[i];
    Node node;
    const std::string op = string_field(n, "op", at);
    const std::optional<OpKind> kind = op_from_name(op);
    HOTPATH_CHECK(kind.has_value(), at, ".op: unknown op '", op, "', expected one of ", op_list());
    node.op = *kind;
    node.name = string_field(n, "name", at);
    node.inputs = string_list(field(n, "inputs", at), at + ".inputs");
    node.output = string_field(n, "output", at);
    if (n.contains("params")) {
      const auto& params = n["params"];
      HOTPATH_CHECK(params.is_object(), at, ".params: expected an object of strings");
      for (const auto& [role, key] : params.items()) {
        HOTPATH_CHECK(key.is_string(), at, ".params.", role, ": expected a string");
        node.params[role] = key.get<std::string>();
      }
    }
    if (n.contains("attrs")) {
      const auto& attrs = n["attrs"];
      HOTPATH_CHECK(attrs.is_object(), at, ".attrs: expected an object");
      for (const auto& [key, v] : attrs.items()) {
        if (v.is_number_integer()) {
          node.attrs[key] = v.get<std::int64_t>();
        } else if (v.is_number_float()) {
          node.attrs[key] = v.get<double>();
        } else if (v.is_string()) {
          node.attrs[key] = v.get<std::string>();
        } else if (v.is_array()) {
          node.attrs[key] = int_list(v, at + ".attrs." + key);
        } else {
          throw Error(at + ".attrs." + key + ": expected an integer, number, string or list of integers");
        }
      }
    }
    g.nodes.push_back(std::move(node));
  }
  return g;
}

std::optional<TextEmbedding> text_embedding(const Graph& graph) {
  for (const Node& n : graph.nodes) {
    if (n.op != OpKind::kBertEmbed) continue;
    const auto param = [&](const char* role) -> const at::Tensor* {
      const auto it = n.params.find(role);
      if (it == n.params.end()) return nullptr;
      const auto t = graph.params.find(it->second);
      return t == graph.params.end() ? nullptr : &t->second;
    };
    const at::Tensor* word = param("word");
    const at::Tensor* position = param("position");
    if (word == nullptr || position == nullptr || word->dim() != 2 || position->dim() != 2) return std::nullopt;
    const at::Tensor* types = param("token_type");
    return TextEmbedding{.vocab = word->size(0),
                         .type_vocab = types != nullptr && types->dim() == 2 ? types->size(0) : 1,
                         .positions = position->size(0),
                         .hidden = word->size(1)};
  }
  return std::nullopt;
}

}  // namespace hotpath::infer
