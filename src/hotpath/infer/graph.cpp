#include "hotpath/infer/graph.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
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

// Per op: required params, optional params, required attrs, how many inputs (min, max).
struct OpRule {
  std::string_view op;
  std::vector<std::string_view> required_params;
  std::vector<std::string_view> optional_params;
  std::vector<std::string_view> required_attrs;
  std::size_t min_inputs;
  std::size_t max_inputs;
};

const std::vector<OpRule>& op_rules() {
  static const std::vector<OpRule> rules = {
      {"conv2d", {"weight"}, {"bias", "weight_scale"}, {"stride", "padding", "dilation", "groups"}, 1, 2},
      {"max_pool2d", {}, {}, {"kernel", "stride", "padding"}, 1, 1},
      {"global_avg_pool", {}, {}, {}, 1, 1},
      {"add", {}, {}, {}, 2, 2},
      {"mul", {}, {}, {}, 2, 2},
      {"linear", {"weight"}, {"bias", "weight_scale"}, {}, 1, 2},
      {"layer_norm", {"weight", "bias"}, {}, {"eps"}, 1, 2},
      {"attention", {}, {}, {"heads"}, 1, 2},
      {"vit_embed", {"class_token", "pos_embedding"}, {}, {}, 1, 1},
      {"bert_embed", {"word", "position", "ln_weight", "ln_bias"}, {"token_type"}, {"eps"}, 1, 2},
      {"select", {}, {}, {"dim", "index"}, 1, 1},
      {"mean_pool", {}, {}, {}, 2, 2},
      {"l2_normalize", {}, {}, {}, 1, 1},
  };
  return rules;
}

const OpRule& rule_for(const Node& node) {
  for (const OpRule& r : op_rules()) {
    if (r.op == node.op) return r;
  }
  throw Error("graph: node " + node.name + " has unknown op '" + node.op + "'");
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

}  // namespace

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
    const OpRule& rule = rule_for(node);
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
    for (std::string_view a : rule.required_attrs) {
      HOTPATH_CHECK(node.attrs.count(std::string(a)) != 0, "graph: node ", node.name, " (", node.op,
                    ") lacks attribute '", a, "'");
    }
    const std::string act = node.attr_str("act", "none");
    HOTPATH_CHECK(contains(kActivations, act), "graph: node ", node.name, " has unknown activation '", act, "'");
    const std::string quant = node.attr_str("quant", "");
    if (!quant.empty()) {
      HOTPATH_CHECK((node.op == "linear" && quant == "dynamic_int8") || (node.op == "conv2d" && quant == "static_int8"),
                    "graph: node ", node.name, " (", node.op, ") has unknown quantization '", quant, "'");
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
    nlohmann::ordered_json node = {{"op", n.op}, {"name", n.name}, {"inputs", n.inputs}, {"output", n.output}};
    if (!n.params.empty()) node["params"] = n.params;
    if (!n.attrs.empty()) {
      nlohmann::ordered_json attrs = nlohmann::ordered_json::object();
      for (const auto& [key, value] : n.attrs) {
        std::visit([&](const auto& v) { attrs[key] = v; }, value);
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
    node.op = string_field(n, "op", at);
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

}  // namespace hotpath::infer
