// hotpath/infer/graph.h — a model for inference as a flat list of ops over named values.
//
//   Graph g = lower_image_model(*model, "resnet50", {.image_size = 224});   // lower.h
//   g.validate();                                                          // names, params, attrs
//   Engine engine = Engine::from_graph(std::move(g), {.threads = 2});      // engine.h
//
// One graph is what the engine runs, what the quantizer rewrites (linear/conv2d get int8 params),
// what a model package stores (graph_to_json in config.json, params in model.safetensors) and what
// the ONNX exporter translates node by node. Lowering (lower.h) has already folded batch norms into
// convolutions, fused bias + activation + residual add into the producing op and packed q/k/v into one
// linear, so the engine never sees a BatchNorm.
//
// Ops (Node::op) and their contracts. Image values are [N, C, H, W] (memory format is the engine's
// business); token values are [B, L, H]. "act" is one of kActivations; residual inputs are optional
// ("" or absent) and are added before the activation / normalisation.
//   conv2d          in [x, residual?]  params weight [O, I/groups, kh, kw], bias? [O]
//                   attrs stride [2], padding [4] (top, left, bottom, right), dilation [2], groups, act
//   max_pool2d      in [x]             attrs kernel [2], stride [2], padding [2]
//   global_avg_pool in [x]             attrs keepdims (0 → [N, C], 1 → [N, C, 1, 1])
//   add             in [a, b]          attrs act                      (same shape)
//   mul             in [a, b]          b broadcast to a (SE: [N, C, H, W] * [N, C, 1, 1])
//   linear          in [x, residual?]  params weight [O, I], bias? [O]; attrs act; x [..., I]
//   layer_norm      in [x, residual?]  params weight [H], bias [H]; attrs eps; LN(x + residual)
//   attention       in [qkv, mask?]    attrs heads; qkv [B, L, 3H] (q | k | v), mask [B, L] (1 = attend)
//                                      → softmax(q kᵀ/√d + mask) v as [B, L, H]
//   vit_embed       in [x]             params class_token [1, 1, D], pos_embedding [1, 1 + P, D];
//                                      x [N, D, h, w] → cat(class_token, patches) + pos_embedding
//   bert_embed      in [ids, types?]   params word [V, H], position [P, H], token_type? [T, H],
//                                      ln_weight [H], ln_bias [H]; attrs eps → LN(word + pos + type)
//   select          in [x]             attrs dim, index  (x.select(dim, index): the [CLS] token)
//   mean_pool       in [x, mask]       masked mean over dim 1: [B, L, H] → [B, H]
//   l2_normalize    in [x]             x / max(‖x‖₂, 1e-12) along the last dim
//
// Quantized forms (written by the quantizer, quantize.h) keep the op name and add params/attrs:
//   linear  + attrs quant = "dynamic_int8"; params weight int8 [O, I], weight_scale f32 [O]
//   conv2d  + attrs quant = "static_int8", input_scale, input_zero_point; params weight int8,
//             weight_scale f32 [O]; optionally output_scale, output_zero_point: the output is u8 for the
//             next static_int8 convs (int8_chain.h)
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hotpath::infer {

// Activation names an op's "act" attribute takes; gelu is the exact (erf) one, gelu_tanh the approximation.
inline constexpr std::string_view kActivations[] = {"none", "relu", "relu6", "gelu", "gelu_tanh",
                                                    "silu", "sigmoid", "tanh"};
// The op set, declared once (as ggml's GGML_OP_* and GGML_OP_NAME): every op a graph may hold, and the name
// it has in config.json, in error messages and in reports. The graph's validation rules (graph.cpp), the
// engine's step table (engine/) and the ONNX exporter each hold one row per op, checked against kOpCount
// at compile time: an op added here and forgotten there does not build.
enum class OpKind : std::uint8_t {
  kConv2d,
  kMaxPool2d,
  kGlobalAvgPool,
  kAdd,
  kMul,
  kLinear,
  kLayerNorm,
  kAttention,
  kVitEmbed,
  kBertEmbed,
  kSelect,
  kMeanPool,
  kL2Normalize,
};
inline constexpr std::string_view kOpNames[] = {"conv2d", "max_pool2d", "global_avg_pool", "add",        "mul",
                                                "linear", "layer_norm", "attention",       "vit_embed",  "bert_embed",
                                                "select", "mean_pool",  "l2_normalize"};
inline constexpr std::size_t kOpCount = std::size(kOpNames);
static_assert(static_cast<std::size_t>(OpKind::kL2Normalize) + 1 == kOpCount, "kOpNames: one name per OpKind");

constexpr std::string_view op_name(OpKind op) { return kOpNames[static_cast<std::size_t>(op)]; }
constexpr std::size_t op_index(OpKind op) { return static_cast<std::size_t>(op); }
// The op named `name`, or nullopt.
std::optional<OpKind> op_from_name(std::string_view name);
std::ostream& operator<<(std::ostream& os, OpKind op);  // its name

using AttrValue = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>>;

struct Node {
  OpKind op = OpKind::kAdd;
  std::string name;                           // the module's dotted path ("layer1.0.conv1"): errors, reports
  std::vector<std::string> inputs;            // value names; "" marks an absent optional input
  std::string output;                         // a new value name (SSA: each value is written once)
  std::map<std::string, std::string> params;  // role ("weight", "bias", ...) → key of Graph::params
  std::map<std::string, AttrValue> attrs;

  // Typed attribute access; a missing key returns the fallback, a wrong type throws naming node and key.
  [[nodiscard]] std::int64_t attr_int(const std::string& key, std::int64_t fallback) const;
  [[nodiscard]] double attr_float(const std::string& key, double fallback) const;
  [[nodiscard]] std::string attr_str(const std::string& key, const std::string& fallback) const;
  [[nodiscard]] std::vector<std::int64_t> attr_ints(const std::string& key, std::vector<std::int64_t> fallback) const;
  // The input at `i`, or "" when absent.
  [[nodiscard]] const std::string& input(std::size_t i) const;
  [[nodiscard]] bool has_param(const std::string& role) const { return params.count(role) != 0; }
};

// A graph input: dtype and shape, -1 for a dynamic dimension, each dimension named ("batch", "sequence",
// "channels", ...) so the ONNX exporter can write dynamic axes.
struct ValueSpec {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<std::int64_t> shape;
  std::vector<std::string> dim_names;
};

struct Graph {
  std::vector<ValueSpec> inputs;
  std::vector<std::string> outputs;
  std::vector<Node> nodes;                     // in execution order
  std::map<std::string, at::Tensor> params;    // CPU tensors

  // Throws hotpath::Error naming the node for: an unknown op or activation, an input used before it is
  // written (or never), an output written twice, a param role that names no tensor, a missing required
  // param or attribute, a graph output that is never written, params no node uses, and everything
  // validate_attrs() refuses; then the shapes its neighbours fix: a conv's weight against its groups and a
  // graph input's channels, an attention's packed q | k | v width against its heads.
  void validate() const;
  // The attributes alone (no params needed): every attribute the op declares, of its type, within its
  // bounds (stride >= 1, padding >= 0, heads >= 1, ...), none the op does not declare. Run before any
  // kernel sees them: a stride of 0 or heads of 0 would otherwise divide by zero inside the engine.
  void validate_attrs() const;
  [[nodiscard]] const Node* find_node(const std::string& name) const;
};

// The structure (inputs, outputs, nodes; not the params) as JSON, and back. from_json checks every field's
// type naming `where` and the field, then validate()s once params are attached by the caller.
nlohmann::ordered_json graph_to_json(const Graph& graph);
Graph graph_from_json(const nlohmann::json& j, const std::string& where);

// The token embedding of a BERT-family graph, read from its bert_embed node's weights: vocabulary, token-type
// vocabulary (1 without a token_type table), positions and hidden width. nullopt for a graph without such a node
// or whose weights are not attached yet. The one place that knows where a text graph keeps these.
struct TextEmbedding {
  std::int64_t vocab = 0;
  std::int64_t type_vocab = 1;
  std::int64_t positions = 0;
  std::int64_t hidden = 0;
};
std::optional<TextEmbedding> text_embedding(const Graph& graph);

}  // namespace hotpath::infer
