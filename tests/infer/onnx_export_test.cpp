// ONNX export (infer/onnx_export.h) against hotpath's own engine: graphs built by hand (every op and
// activation, random weights) and real models lowered by lower.h are exported, run in ONNX Runtime (and
// OpenVINO) through tests/oracles/onnx_run.py, and must give the engine's fp32 outputs within 1e-4 (relative to
// the outputs' scale, at least 1) at batch 1 and 7 and two sequence lengths, the dynamic axes named in
// the file. python's onnx 1.23 checker (full_check) validates every file too. Bad graphs get one line
// naming the node.
#include "hotpath/infer/onnx_export.h"
#include "hotpath/infer/prune.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/lower.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "support/test_support.h"

namespace hotpath::infer {
namespace {

using test::TempDir;
using Tensors = std::map<std::string, at::Tensor>;

// ONNX Runtime vs the engine, fp32: issue 12's bar, relative to the outputs' scale (at least 1).
constexpr double kTolerance = 1e-4;

class SingleThread : public ::testing::Environment {
 public:
  // One intra-op thread: on a 2-core machine shared with other jobs, two spin at OpenMP barriers.
  void SetUp() override { at::set_num_threads(1); }
};
::testing::Environment* const kSingleThread = ::testing::AddGlobalTestEnvironment(new SingleThread);

// ---- graphs built by hand ---------------------------------------------------------------------------

class GraphMaker {
 public:
  explicit GraphMaker(std::uint64_t seed) { at::manual_seed(seed); }

  std::string param(const std::string& key, std::vector<std::int64_t> shape, double scale = 0.3) {
    graph.params[key] = at::randn(shape) * scale;
    return key;
  }
  std::string node(OpKind op, std::string name, std::vector<std::string> inputs,
                   std::map<std::string, std::string> params = {}, std::map<std::string, AttrValue> attrs = {}) {
    std::string out = name + ".out";
    graph.nodes.push_back({op, std::move(name), std::move(inputs), out, std::move(params), std::move(attrs)});
    return out;
  }
  Graph graph;
};

using Ints = std::vector<std::int64_t>;

// Every image op and every activation: grouped, dilated, depthwise convs with asymmetric padding and a
// residual, max pool, squeeze-excitation (pool, sigmoid conv, mul), add, both pool forms, Gemm linears.
Graph image_ops_graph() {
  GraphMaker m(11);
  m.graph.inputs = {{"images", at::kFloat, {-1, 4, 9, 9}, {"batch", "channels", "height", "width"}}};
  const auto conv = [&](const std::string& name, std::vector<std::string> in, Ints w, bool bias, Ints stride, Ints pad,
                        Ints dilation, std::int64_t groups, const std::string& act) {
    std::map<std::string, std::string> params = {{"weight", m.param(name + ".weight", w)}};
    if (bias) params["bias"] = m.param(name + ".bias", {w[0]});
    return m.node(OpKind::kConv2d, name, std::move(in), params,
                  {{"stride", stride}, {"padding", pad}, {"dilation", dilation}, {"groups", groups}, {"act", act}});
  };
  const std::string c1 = conv("c1", {"images"}, {6, 2, 3, 3}, true, {2, 1}, {1, 0, 2, 1}, {1, 1}, 2, "relu6");
  const std::string c2 = conv("c2", {c1, c1}, {6, 6, 3, 3}, false, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, "gelu");
  const std::string c3 = conv("c3", {c2}, {6, 1, 3, 3}, true, {1, 1}, {2, 2, 2, 2}, {2, 2}, 6, "silu");
  const std::string mp = m.node(OpKind::kMaxPool2d, "pool", {c3}, {}, {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}});
  const std::string sq = m.node(OpKind::kGlobalAvgPool, "se.squeeze", {mp}, {}, {{"keepdims", std::int64_t{1}}});
  const std::string se = conv("se.excite", {sq}, {6, 6, 1, 1}, true, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, "sigmoid");
  const std::string scaled = m.node(OpKind::kMul, "se.scale", {mp, se});
  const std::string c5 = conv("c5", {scaled}, {8, 6, 1, 1}, true, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, "tanh");
  const std::string c6 = conv("c6", {scaled}, {8, 6, 1, 1}, false, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, "none");
  const std::string sum = m.node(OpKind::kAdd, "sum", {c5, c6}, {}, {{"act", std::string("gelu_tanh")}});
  const std::string pooled = m.node(OpKind::kGlobalAvgPool, "head.pool", {sum}, {}, {{"keepdims", std::int64_t{0}}});
  const std::string fc1 = m.node(OpKind::kLinear, "head.fc1", {pooled},
                                 {{"weight", m.param("fc1.weight", {5, 8})}, {"bias", m.param("fc1.bias", {5})}},
                                 {{"act", std::string("relu")}});
  const std::string fc2 = m.node(OpKind::kLinear, "head.fc2", {fc1, fc1}, {{"weight", m.param("fc2.weight", {5, 5})}},
                                 {{"act", std::string("sigmoid")}});
  const std::string logits = m.node(OpKind::kLinear, "head.fc3", {fc2},
                                    {{"weight", m.param("fc3.weight", {3, 5}, 2.0)}, {"bias", m.param("fc3.bias", {3})}},
                                    {{"act", std::string("none")}});
  const std::string normalized = m.node(OpKind::kL2Normalize, "normalize", {logits});
  m.graph.outputs = {logits, normalized};
  return m.graph;
}

// A BERT-like encoder layer with both heads: embeddings (with token types), packed qkv, masked attention,
// residual layer norms, gelu / gelu_tanh feed-forward, masked mean pool + L2, [CLS] select + pooler.
Graph text_ops_graph() {
  GraphMaker m(12);
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    m.graph.inputs.push_back({name, at::kLong, {-1, -1}, {"batch", "sequence"}});
  }
  const std::string emb = m.node(OpKind::kBertEmbed, "embeddings", {"input_ids", "token_type_ids"},
                                 {{"word", m.param("word", {30, 8}, 1.0)},
                                  {"position", m.param("position", {16, 8}, 1.0)},
                                  {"token_type", m.param("token_type", {2, 8}, 1.0)},
                                  {"ln_weight", m.param("emb.ln.weight", {8})},
                                  {"ln_bias", m.param("emb.ln.bias", {8})}},
                                 {{"eps", 1e-12}});
  const auto linear = [&](const std::string& name, std::vector<std::string> in, std::int64_t out, std::int64_t in_dim,
                          const std::string& act) {
    return m.node(OpKind::kLinear, name, std::move(in),
                  {{"weight", m.param(name + ".weight", {out, in_dim}, 0.5)}, {"bias", m.param(name + ".bias", {out})}},
                  {{"act", act}});
  };
  const auto layer_norm = [&](const std::string& name, std::vector<std::string> in) {
    return m.node(OpKind::kLayerNorm, name, std::move(in),
                  {{"weight", m.param(name + ".weight", {8})}, {"bias", m.param(name + ".bias", {8})}}, {{"eps", 1e-5}});
  };
  const std::string qkv = linear("layer.qkv", {emb}, 24, 8, "none");
  const std::string att = m.node(OpKind::kAttention, "layer.attention", {qkv, "attention_mask"}, {}, {{"heads", std::int64_t{2}}});
  const std::string proj = linear("layer.proj", {att}, 8, 8, "none");
  const std::string ln1 = layer_norm("layer.ln1", {proj, emb});
  const std::string ff1 = linear("layer.ff1", {ln1}, 16, 8, "gelu");
  const std::string ff2 = linear("layer.ff2", {ff1, ln1}, 8, 16, "gelu_tanh");
  const std::string ln2 = layer_norm("layer.ln2", {ff2});
  const std::string mean = m.node(OpKind::kMeanPool, "pooling", {ln2, "attention_mask"});
  const std::string embeddings = m.node(OpKind::kL2Normalize, "normalize", {mean});
  const std::string cls = m.node(OpKind::kSelect, "cls", {ln2}, {}, {{"dim", std::int64_t{1}}, {"index", std::int64_t{0}}});
  const std::string pooled = linear("pooler", {cls}, 8, 8, "tanh");
  const std::string logits = linear("classifier", {pooled}, 3, 8, "none");
  m.graph.outputs = {logits, embeddings};
  return m.graph;
}

// bert_embed without a token-type input adds token_type[0] (as BERT does for absent token_type_ids); a
// graph input that is also a graph output comes out as float32, like every engine output.
Graph text_without_types_graph() {
  GraphMaker m(13);
  m.graph.inputs = {{"input_ids", at::kLong, {-1, -1}, {"batch", "sequence"}}};
  const std::string emb = m.node(OpKind::kBertEmbed, "embeddings", {"input_ids", ""},
                                 {{"word", m.param("word", {30, 8}, 1.0)},
                                  {"position", m.param("position", {16, 8}, 1.0)},
                                  {"token_type", m.param("token_type", {2, 8}, 1.0)},
                                  {"ln_weight", m.param("ln.weight", {8})},
                                  {"ln_bias", m.param("ln.bias", {8})}},
                                 {{"eps", 1e-12}});
  m.graph.outputs = {m.node(OpKind::kSelect, "last", {emb}, {}, {{"dim", std::int64_t{-2}}, {"index", std::int64_t{-1}}}),
                     "input_ids"};
  return m.graph;
}

// ViT: patch conv, class token + positions, unmasked attention over 4 heads, [CLS] head.
Graph vit_ops_graph() {
  GraphMaker m(14);
  m.graph.inputs = {{"images", at::kFloat, {-1, 3, 8, 8}, {"batch", "channels", "height", "width"}}};
  const std::string patches = m.node(OpKind::kConv2d, "patchify", {"images"},
                                     {{"weight", m.param("patch.weight", {8, 3, 4, 4})}, {"bias", m.param("patch.bias", {8})}},
                                     {{"stride", Ints{4, 4}}, {"padding", Ints{0, 0, 0, 0}}, {"dilation", Ints{1, 1}},
                                      {"groups", std::int64_t{1}}, {"act", std::string("none")}});
  const std::string tokens = m.node(OpKind::kVitEmbed, "embed", {patches},
                                    {{"class_token", m.param("class_token", {1, 1, 8}, 1.0)},
                                     {"pos_embedding", m.param("pos_embedding", {1, 5, 8}, 1.0)}});
  const std::string ln = m.node(OpKind::kLayerNorm, "ln", {tokens},
                                {{"weight", m.param("ln.weight", {8})}, {"bias", m.param("ln.bias", {8})}}, {{"eps", 1e-6}});
  const std::string qkv = m.node(OpKind::kLinear, "qkv", {ln}, {{"weight", m.param("qkv.weight", {24, 8}, 0.5)}},
                                 {{"act", std::string("none")}});
  const std::string att = m.node(OpKind::kAttention, "attention", {qkv}, {}, {{"heads", std::int64_t{4}}});
  const std::string cls = m.node(OpKind::kSelect, "cls", {att}, {}, {{"dim", std::int64_t{1}}, {"index", std::int64_t{0}}});
  m.graph.outputs = {m.node(OpKind::kLinear, "head", {cls}, {{"weight", m.param("head.weight", {3, 8})}},
                            {{"act", std::string("none")}})};
  return m.graph;
}

// ---- inputs -----------------------------------------------------------------------------------------

Tensors image_inputs(std::int64_t batch, std::int64_t channels, std::int64_t size) {
  return {{"images", at::randn({batch, channels, size, size})}};
}

// Token ids below `vocab`, types in {0, 1}, a mask with 1..L real tokens per row (one row fully padded
// when the batch has more than 2 rows: attention then averages V, the mean pool gives 0).
Tensors text_inputs(std::int64_t batch, std::int64_t length, std::int64_t vocab, bool with_mask_and_types = true) {
  Tensors t;
  t["input_ids"] = at::randint(0, vocab, {batch, length}, at::kLong);
  if (!with_mask_and_types) return t;
  at::Tensor mask = at::zeros({batch, length}, at::kLong);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t real = b == 2 ? 0 : 1 + (b * 3) % length;
    mask[b].narrow(0, 0, real).fill_(1);
  }
  t["attention_mask"] = mask;
  t["token_type_ids"] = at::randint(0, 2, {batch, length}, at::kLong);
  return t;
}

// ---- running ----------------------------------------------------------------------------------------

struct Case {
  std::string name;
  Graph graph;
  std::vector<Tensors> runs;
  OnnxExportOptions options = {};
};

struct Report {
  std::map<std::string, nlohmann::json> models;  // case name → onnx_run.py's line
  double max_relative_diff = 0;
};

// Each expected output against the runtime's one of the same name; the largest relative diff goes to `report`.
void compare_outputs(const std::vector<at::Tensor>& expected, const std::vector<std::string>& names, const Tensors& got,
                     const std::string& runtime, double tolerance, Report& report) {
  ASSERT_EQ(got.size(), names.size());
  for (std::size_t o = 0; o < expected.size(); ++o) {
    const std::string& name = names[o];
    ASSERT_TRUE(got.count(name)) << "no output " << name;
    const at::Tensor& y = got.at(name);
    ASSERT_EQ(y.sizes(), expected[o].sizes()) << name;
    const double diff = (y.to(at::kFloat) - expected[o]).abs().max().item<double>();
    const double scale = std::max(1.0, expected[o].abs().max().item<double>());
    EXPECT_LE(diff, tolerance * scale) << name << ": max |" << runtime << " - engine| over outputs up to " << scale;
    report.max_relative_diff = std::max(report.max_relative_diff, diff / scale);
    // The comparison means something only if the outputs are not all alike.
    if (expected[o].numel() > 1) {
      EXPECT_GT(expected[o].std().item<double>(), 1e-3) << name;
    }
  }
}

// Exports every case, runs them all in one python start-up (`runtime`), and compares each output with
// the engine's fp32 output within `tolerance` × max(1, |expected|).
Report expect_runtime_matches_engine(const std::vector<Case>& cases, const std::string& runtime, double tolerance) {
  TempDir dir;
  nlohmann::json manifest = {{"runtime", runtime},
                             {"check", true},
                             {"report_optimized", runtime == "onnxruntime"},
                             {"cases", nlohmann::json::array()}};
  for (const Case& c : cases) {
    const std::string model = dir.file(c.name + ".onnx");
    export_onnx(c.graph, model, c.options);
    nlohmann::json runs = nlohmann::json::array();
    for (std::size_t r = 0; r < c.runs.size(); ++r) {
      const std::string stem = dir.file(c.name + "_" + std::to_string(r));
      models::write_tensors(stem + "_in.safetensors", c.runs[r]);
      runs.push_back({{"inputs", stem + "_in.safetensors"}, {"outputs", stem + "_out.safetensors"}});
    }
    manifest["cases"].push_back({{"model", model}, {"runs", runs}});
  }
  test::write_file(dir.file("manifest.json"), manifest.dump());
  const std::string stdout_text = test::run_python(test::source_path("tests/oracles/onnx_run.py"), {dir.file("manifest.json")});

  Report report;
  std::istringstream lines(stdout_text);
  std::string line;
  std::size_t index = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line.front() != '{') continue;
    if (index < cases.size()) report.models[cases[index++].name] = nlohmann::json::parse(line);
  }
  EXPECT_EQ(index, cases.size()) << stdout_text;

  for (const Case& c : cases) {
    SCOPED_TRACE(runtime + " " + c.name);
    const Engine engine = Engine::from_graph(c.graph, {.threads = 1, .precision = Precision::kFp32});
    for (std::size_t r = 0; r < c.runs.size(); ++r) {
      std::vector<at::Tensor> inputs;
      for (const ValueSpec& spec : c.graph.inputs) inputs.push_back(c.runs[r].at(spec.name));
      SCOPED_TRACE("run " + std::to_string(r) + ", " + c.graph.inputs.front().name + " " +
                   c10::str(inputs.front().sizes()));
      // A graph output that is a graph input is written as NAME/output (onnx_export.h).
      std::vector<std::string> names;
      for (const std::string& out : c.graph.outputs) {
        const bool is_input = std::any_of(c.graph.inputs.begin(), c.graph.inputs.end(),
                                          [&](const ValueSpec& v) { return v.name == out; });
        names.push_back(is_input ? out + "/output" : out);
      }
      compare_outputs(engine.run(inputs), names,
                      models::read_tensors(dir.file(c.name + "_" + std::to_string(r) + "_out.safetensors")), runtime,
                      tolerance, report);
    }
  }
  return report;
}

std::vector<Case> hand_built_cases() {
  std::vector<Case> cases;
  cases.push_back({"image_ops", image_ops_graph(), {image_inputs(1, 4, 9), image_inputs(7, 4, 9)}});
  cases.push_back({"text_ops", text_ops_graph(),
                   {text_inputs(1, 5, 30), text_inputs(7, 9, 30), text_inputs(7, 5, 30), text_inputs(1, 9, 30)}});
  cases.push_back({"text_without_types", text_without_types_graph(),
                   {text_inputs(1, 6, 30, false), text_inputs(7, 11, 30, false)}});
  cases.push_back({"vit_ops", vit_ops_graph(), {image_inputs(1, 3, 8), image_inputs(7, 3, 8)}});
  return cases;
}

TEST(OnnxExport, EveryOpAndActivationMatchesTheEngineInOnnxRuntime) {
  const std::vector<Case> cases = hand_built_cases();
  const Report report = expect_runtime_matches_engine(cases, "onnxruntime", kTolerance);
  std::cout << "hand-built graphs: max |onnxruntime - engine| / scale = " << report.max_relative_diff << '\n';
  // The dynamic axes are named in the file; the file is opset 17, IR 8, from hotpath.
  const nlohmann::json& text = report.models.at("text_ops");
  std::cout << "text_ops: " << text["ops"].dump() << "\nafter ONNX Runtime's fusions: " << text["optimized_ops"].dump() << '\n';
  const nlohmann::json& image = report.models.at("image_ops");
  std::cout << "image_ops after ONNX Runtime's fusions: " << image["optimized_ops"].dump() << '\n';
  // gelu (Erf form), gelu_tanh and silu are written in the forms ONNX Runtime fuses back into one op.
  for (const nlohmann::json* m : {&text, &image}) {
    const nlohmann::json& ops = (*m)["optimized_ops"];
    EXPECT_FALSE(ops.contains("Erf")) << ops.dump();
    EXPECT_FALSE(ops.contains("Pow")) << ops.dump();
    EXPECT_TRUE(ops.contains("FastGelu")) << ops.dump();
  }
  EXPECT_TRUE(text["optimized_ops"].contains("BiasGelu")) << text["optimized_ops"].dump();
  EXPECT_TRUE(image["optimized_ops"].contains("Gelu")) << image["optimized_ops"].dump();
  EXPECT_TRUE(image["optimized_ops"].contains("QuickGelu")) << image["optimized_ops"].dump();
  EXPECT_EQ(text["opset"], nlohmann::json::array({17}));
  EXPECT_EQ(text["ir_version"], 8);
  EXPECT_EQ(text["producer"], "hotpath");
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    EXPECT_EQ(text["inputs"][name], nlohmann::json::array({"batch", "sequence"})) << name;
  }
  EXPECT_EQ(text["outputs"]["classifier.out"], nlohmann::json::parse(R"(["batch", 3])"));
  EXPECT_EQ(report.models.at("image_ops")["inputs"]["images"], nlohmann::json::parse(R"(["batch", 4, 9, 9])"));
  EXPECT_EQ(report.models.at("image_ops")["outputs"]["normalize.out"], nlohmann::json::parse(R"(["batch", 3])"));
}

TEST(OnnxExport, ExternalDataModelRunsInOnnxRuntime) {
  {
    TempDir dir;
    export_onnx(image_ops_graph(), dir.file("m.onnx"), {.producer_version = "test", .external_data_threshold = 0});
    // c2's 6x6x3x3 weight (1296 bytes) is over the 1 KiB inline limit: it lives in m.onnx.data.
    ASSERT_TRUE(std::filesystem::exists(dir.file("m.onnx.data")));
    EXPECT_GE(std::filesystem::file_size(dir.file("m.onnx.data")), 1296u);
  }
  Case c{"image_ops_external", image_ops_graph(), {image_inputs(7, 4, 9)}, {.producer_version = "test", .external_data_threshold = 0}};
  std::vector<Case> cases;
  cases.push_back(std::move(c));
  expect_runtime_matches_engine(cases, "onnxruntime", kTolerance);
}

TEST(OnnxExport, OpenVinoLoadsAndRunsTheFile) {
  const std::vector<Case> cases = hand_built_cases();
  const Report report = expect_runtime_matches_engine(cases, "openvino", kTolerance);
  std::cout << "hand-built graphs: max |openvino - engine| / scale = " << report.max_relative_diff << '\n';
  EXPECT_NE(report.models.at("text_ops")["runtime"].get<std::string>().find("openvino"), std::string::npos);
}

// ---- bad graphs -------------------------------------------------------------------------------------

std::string error_of(const Graph& graph, const std::string& path) {
  try {
    export_onnx(graph, path);
  } catch (const Error& e) {
    std::cout << "error: " << e.what() << '\n';
    return e.what();
  }
  ADD_FAILURE() << "no hotpath::Error";
  return {};
}

TEST(OnnxExport, QuantizedGraphIsRefusedNamingTheNode) {
  TempDir dir;
  Graph g = image_ops_graph();
  Node& fc = g.nodes[11];
  ASSERT_EQ(fc.name, "head.fc1");
  fc.attrs["quant"] = std::string("dynamic_int8");
  g.params[fc.params.at("weight")] = g.params[fc.params.at("weight")].to(at::kChar);
  fc.params["weight_scale"] = "fc1.weight_scale";
  g.params["fc1.weight_scale"] = at::ones({5});
  const std::string msg = error_of(g, dir.file("m.onnx"));
  EXPECT_NE(msg.find("node head.fc1 (linear) is quantized (dynamic_int8); ONNX export of quantized graphs: export the "
                     "fp32 package"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.onnx")));
}

// A weight whose input size disagrees with its input passes the graph's checks (it has no shapes) but
// not ONNX's: the message names the file and the node, on one line, and nothing is written.
// The graph's own validation runs before any ONNX node is built, so a weight that disagrees with its input
// is named in the graph's terms; what reaches ONNX's checker and shape inference is named by the ONNX
// node ("<graph node>/<OpType>", OnnxModel.CheckerFailureNamesTheNodeInOneLineAndWritesNothing).
TEST(OnnxExport, WeightDisagreeingWithItsInputIsRefusedNamingTheNodeAndWritesNothing) {
  TempDir dir;
  Graph g = text_ops_graph();
  g.params["layer.ff1.weight"] = at::randn({16, 7});  // its input is [B, L, 8]
  const std::string path = dir.file("bad.onnx");
  const std::string msg = error_of(g, path);
  EXPECT_NE(msg.find("node layer.ff1 (linear) weight [16, 7] takes 7 features, but its input layer.ln1.out has 8"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("layer.ff2"), std::string::npos) << "only the cause is named: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(path));
}

// ---- real models, lowered ---------------------------------------------------------------------------

// Batch norms with running statistics and affine parameters far from the identity, so folding counts;
// zero-initialised weights (ViT's head) random, so the logits differ between images.
void randomize_batch_norms(torch::nn::Module& model) {
  const at::NoGradGuard no_grad;
  for (auto& [name, tensor] : models::named_state(model)) {
    if (name.ends_with("weight") && tensor.numel() > 1 && tensor.abs().max().item<double>() == 0) tensor.normal_(0.0, 0.05);
    if (name.ends_with("running_var")) tensor.uniform_(0.5, 2.0);
    if (name.ends_with("running_mean")) tensor.normal_(0.0, 0.2);
    if (name.find("bn") != std::string::npos && name.ends_with("weight")) tensor.uniform_(0.5, 1.5);
  }
}

Case image_model_case(const std::string& name, std::int64_t channels, std::int64_t size) {
  at::manual_seed(21);
  const models::ModelHandle model = models::create_model(name, {.num_classes = 10, .in_channels = channels});
  randomize_batch_norms(*model);
  model->eval();
  return {name, lower_image_model(*model, {.channels = channels, .image_size = size}),
          {image_inputs(1, channels, size), image_inputs(7, channels, size)}};
}

formats::BertConfig tiny_bert_config(formats::BertArch arch) {
  formats::BertConfig c;
  c.arch = arch;
  c.vocab_size = 64;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 32;
  c.max_position_embeddings = 32;
  c.type_vocab_size = arch == formats::BertArch::kBert ? 2 : 0;
  c.num_labels = 3;
  c.initializer_range = 0.5;  // larger than BERT's 0.02: outputs that differ between tokens
  return c;
}

std::vector<Tensors> text_runs(std::int64_t vocab) {
  return {text_inputs(1, 6, vocab), text_inputs(7, 13, vocab), text_inputs(7, 6, vocab), text_inputs(1, 13, vocab)};
}

// cnn, ResNet-18, EfficientNet-Lite0, ViT-Tiny (random weights, batch norms with real statistics), tiny
// BERT and DistilBERT classifiers and a tiny sentence embedder, lowered by lower.h.
std::vector<Case> lowered_cases() {
  std::vector<Case> cases;
  cases.push_back(image_model_case("cnn_small", 1, 28));
  cases.push_back(image_model_case("resnet18", 3, 64));
  cases.push_back(image_model_case("efficientnet_lite0", 3, 64));
  cases.push_back(image_model_case("vit_tiny", 3, 224));
  // Structurally pruned (prune.h): narrower convs, depthwise convs with fewer groups, narrower SE and classifier input.
  for (const char* arch : {"resnet18", "efficientnet_lite0"}) {
    Case c = image_model_case(arch, 3, 64);
    c.name = std::string(arch) + "_pruned";
    c.graph = prune_graph(c.graph, {}, {.ratio = 0.4}).graph;
    cases.push_back(std::move(c));
  }
  at::manual_seed(22);
  for (const auto arch : {formats::BertArch::kBert, formats::BertArch::kDistilBert}) {
    auto classifier = std::make_shared<models::BertForSequenceClassification>(tiny_bert_config(arch));
    classifier->eval();
    cases.push_back({arch == formats::BertArch::kBert ? "bert_classifier" : "distilbert_classifier",
                     lower_text_classifier(*classifier), text_runs(64)});
  }
  auto encoder = std::make_shared<models::BertModel>(tiny_bert_config(formats::BertArch::kBert));
  encoder->eval();
  const models::SentenceEmbedder embedder(encoder, {.normalize = true});
  cases.push_back({"sentence_embedder", lower_sentence_embedder(embedder), text_runs(64)});
  return cases;
}

TEST(OnnxExport, LoweredRealModelsMatchTheEngineInOnnxRuntime) {
  const std::vector<Case> cases = lowered_cases();
  const Report report = expect_runtime_matches_engine(cases, "onnxruntime", kTolerance);
  std::cout << "lowered models: max |onnxruntime - engine| / scale = " << report.max_relative_diff << '\n';
  EXPECT_EQ(report.models.at("resnet18")["inputs"]["images"], nlohmann::json::parse(R"(["batch", 3, 64, 64])"));
  EXPECT_EQ(report.models.at("bert_classifier")["inputs"]["input_ids"], nlohmann::json::parse(R"(["batch", "sequence"])"));
  const std::string embedding = cases.back().graph.outputs.front();
  EXPECT_EQ(report.models.at("sentence_embedder")["outputs"][embedding], nlohmann::json::parse(R"(["batch", 16])"));
}

TEST(OnnxExport, LoweredRealModelsMatchTheEngineInOpenVino) {
  const Report report = expect_runtime_matches_engine(lowered_cases(), "openvino", kTolerance);
  std::cout << "lowered models: max |openvino - engine| / scale = " << report.max_relative_diff << '\n';
}

}  // namespace
}  // namespace hotpath::infer
