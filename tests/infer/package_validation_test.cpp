// Package validation at load (issue 28): every attribute the engine divides by or indexes with is within its
// bounds, the shapes a node's neighbours fix agree, weights are finite, preprocessing is sane and the declared
// precision is the weights' own. Each refusal is one line naming the file, the node and the attribute, and
// comes before any kernel runs (a conv stride of 0 used to end the process with SIGFPE).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/package.h"
#include "hotpath/models/weights.h"
#include "support/test_support.h"

namespace hotpath::infer {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using Json = nlohmann::json;
using Ints = std::vector<std::int64_t>;

// image [N, 1, 4, 4] → conv (2 channels, 3x3, relu) → max pool 2x2 → global average pool → linear (2 classes).
Graph image_graph() {
  at::manual_seed(0);
  Graph g;
  g.inputs = {{"image", at::kFloat, {-1, 1, 4, 4}, {"batch", "channels", "height", "width"}}};
  g.nodes = {
      {OpKind::kConv2d, "conv", {"image"}, "c", {{"weight", "conv.weight"}, {"bias", "conv.bias"}},
       {{"stride", Ints{1, 1}}, {"padding", Ints{1, 1, 1, 1}}, {"dilation", Ints{1, 1}}, {"groups", std::int64_t{1}},
        {"act", std::string("relu")}}},
      {OpKind::kMaxPool2d, "pool", {"c"}, "p", {}, {{"kernel", Ints{2, 2}}, {"stride", Ints{2, 2}}, {"padding", Ints{0, 0}}}},
      {OpKind::kGlobalAvgPool, "gap", {"p"}, "g", {}, {{"keepdims", std::int64_t{0}}}},
      {OpKind::kLinear, "fc", {"g"}, "logits", {{"weight", "fc.weight"}, {"bias", "fc.bias"}}, {}},
  };
  g.outputs = {"logits"};
  g.params = {{"conv.weight", at::randn({2, 1, 3, 3})}, {"conv.bias", at::zeros({2})},
              {"fc.weight", at::randn({2, 2})}, {"fc.bias", at::zeros({2})}};
  return g;
}

// tokens [B, L, 4] → linear q | k | v (12 = 3 x 2 heads x 2) → attention → layer norm → the first token.
Graph text_graph() {
  at::manual_seed(0);
  Graph g;
  g.inputs = {{"tokens", at::kFloat, {-1, -1, 4}, {"batch", "sequence", "hidden"}}};
  g.nodes = {
      {OpKind::kLinear, "qkv", {"tokens"}, "qkv", {{"weight", "qkv.weight"}}, {}},
      {OpKind::kAttention, "attn", {"qkv"}, "ctx", {}, {{"heads", std::int64_t{2}}}},
      {OpKind::kLayerNorm, "ln", {"ctx"}, "h", {{"weight", "ln.weight"}, {"bias", "ln.bias"}}, {{"eps", 1e-5}}},
      {OpKind::kSelect, "cls", {"h"}, "embedding", {}, {{"dim", std::int64_t{1}}, {"index", std::int64_t{0}}}},
  };
  g.outputs = {"embedding"};
  g.params = {{"qkv.weight", at::randn({12, 4})}, {"ln.weight", at::ones({4})}, {"ln.bias", at::zeros({4})}};
  return g;
}

void write_image_package(const fs::path& dir, const Graph& graph, Precision precision = Precision::kFp32) {
  Package p;
  p.kind = PackageKind::kImageClassifier;
  p.architecture = "tiny";
  p.precision = precision;
  p.labels = {"a", "b"};
  p.image.channels = 1;
  p.image.image_size = 4;
  p.image.resize_shorter = 4;
  p.image.crop = EvalCrop::kResize;
  p.image.mean = {0.5};
  p.image.std = {0.25};
  write_package_dir(dir, p, graph, Json::object(), {}, false);
}

void write_text_package(const fs::path& dir) {
  Package p;
  p.kind = PackageKind::kSentenceEmbedder;
  p.architecture = "tiny";
  p.text.max_length = 8;
  write_package_dir(dir, p, text_graph(), Json::object(), {}, false);
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

void edit_json(const fs::path& path, const std::function<void(Json&)>& edit) {
  Json j = read_json(path);
  edit(j);
  test::write_file(path.string(), j.dump());
}

Json& node(Json& config, const std::string& name) {
  for (Json& n : config["graph"]["nodes"]) {
    if (n["name"] == name) return n;
  }
  throw Error("test: no node " + name);
}

// What loading the package says: "" when it loads, else the one error line.
std::string load_error(const fs::path& dir) {
  try {
    const Graph g = load_package_graph(read_package(dir));
    (void)Engine::from_graph(g, {.threads = 1});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The package in `dir` with node `name`'s attribute `key` set to `value`; returns the load error.
std::string with_attr(const fs::path& dir, const std::string& name, const std::string& key, const Json& value) {
  edit_json(dir / "config.json", [&](Json& c) { node(c, name)["attrs"][key] = value; });
  return load_error(dir);
}

void expect_refused(const std::string& message, const std::string& expected) {
  EXPECT_NE(message.find(expected), std::string::npos) << "message: " << message << "\nexpected: " << expected;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(PackageValidation, TheReferencePackagesLoadAndRun) {
  TempDir tmp;
  write_image_package(tmp.path() / "image", image_graph());
  write_text_package(tmp.path() / "text");
  EXPECT_EQ(load_error(tmp.path() / "image"), "");
  EXPECT_EQ(load_error(tmp.path() / "text"), "");
  const Engine engine = Engine::from_graph(load_package_graph(read_package(tmp.path() / "image")), {.threads = 1});
  EXPECT_EQ(engine.run({at::rand({3, 1, 4, 4})}).front().sizes(), (at::IntArrayRef{3, 2}));
}

TEST(PackageValidation, ConvStrideZeroIsOneLineNamingFileNodeAndAttribute) {
  TempDir tmp;
  write_image_package(tmp.path(), image_graph());
  const std::string message = with_attr(tmp.path(), "conv", "stride", Json::array({0, 0}));
  expect_refused(message, "config.json: graph: node conv (conv2d) attribute 'stride' is [0, 0], expected 2 integers, "
                          "each from 1 to 65536");
  // Refused when config.json is read, before the weights are.
  EXPECT_THROW((void)read_package(tmp.path()), Error);
}

TEST(PackageValidation, ConvAttributesOutOfBounds) {
  const struct {
    const char* key;
    Json value;
    const char* expected;
  } cases[] = {
      {"padding", Json::array({-1, 0, 0, 0}), "attribute 'padding' is [-1, 0, 0, 0], expected 4 integers, each from 0"},
      {"dilation", Json::array({1, 0}), "attribute 'dilation' is [1, 0], expected 2 integers, each from 1"},
      {"stride", Json::array({1}), "attribute 'stride' is [1], expected 2 integers"},
      {"stride", Json::array({1, 1u << 20}), "attribute 'stride' is [1, 1048576]"},
      {"stride", "2", "attribute 'stride' is a string, expected a list of integers"},
      {"groups", 0, "attribute 'groups' is 0, expected an integer from 1"},
      {"groups", -3, "attribute 'groups' is -3"},
      // 3 does not divide the weight's 2 output channels; 2 does, but then the weight takes 2 channels, not 1.
      {"groups", 3, "attribute 'groups' is 3, expected a divisor of the weight's 2 output channels"},
      {"groups", 2, "weight [2, 1, 3, 3] with groups 2 takes 2 channels, but its input image has 1"},
      {"input_scale", 0.0, "attribute 'input_scale' is 0, expected a number from 1e-30"},
      {"shift", 1, "attribute 'shift': not an attribute of conv2d"},
  };
  for (const auto& c : cases) {
    TempDir tmp;
    write_image_package(tmp.path(), image_graph());
    SCOPED_TRACE(std::string(c.key) + " = " + c.value.dump());
    const std::string message = with_attr(tmp.path(), "conv", c.key, c.value);
    expect_refused(message, "config.json: graph: node conv ");
    expect_refused(message, c.expected);
  }
}

TEST(PackageValidation, PoolAndSelectAttributesOutOfBounds) {
  const struct {
    const char* node;
    const char* key;
    Json value;
    const char* expected;
  } cases[] = {
      {"pool", "kernel", Json::array({0, 0}), "node pool (max_pool2d) attribute 'kernel' is [0, 0]"},
      {"pool", "stride", Json::array({2, 0}), "node pool (max_pool2d) attribute 'stride' is [2, 0]"},
      {"pool", "padding", Json::array({2, 2}), "attribute 'padding' is [2, 2], expected at most half the kernel [2, 2]"},
      {"gap", "keepdims", 2, "node gap (global_avg_pool) attribute 'keepdims' is 2, expected an integer from 0 to 1"},
      {"conv", "act", "swish", "node conv has unknown activation 'swish'"},
      {"fc", "quant", "static_int8", "node fc (linear) has unknown quantization 'static_int8'"},
  };
  for (const auto& c : cases) {
    TempDir tmp;
    write_image_package(tmp.path(), image_graph());
    SCOPED_TRACE(std::string(c.node) + "." + c.key + " = " + c.value.dump());
    const std::string message = with_attr(tmp.path(), c.node, c.key, c.value);
    expect_refused(message, "config.json: graph: ");
    expect_refused(message, c.expected);
  }
}

TEST(PackageValidation, AttentionHeadsZeroIsRefusedWithoutDividingByIt) {
  const struct {
    const char* node;
    const char* key;
    Json value;
    const char* expected;
  } cases[] = {
      {"attn", "heads", 0, "node attn (attention) attribute 'heads' is 0, expected an integer from 1"},
      {"attn", "heads", -2, "attribute 'heads' is -2"},
      {"attn", "heads", 5, "attribute 'heads' is 5, expected a divisor of the hidden size (its input qkv holds q | k "
                           "| v of width 12, not a multiple of 3 x heads)"},
      {"ln", "eps", 0.0, "node ln (layer_norm) attribute 'eps' is 0, expected a number from 1e-30 to 1"},
      {"ln", "eps", -1e-5, "attribute 'eps' is -1e-05"},
      {"cls", "dim", 9, "node cls (select) attribute 'dim' is 9, expected an integer from -8 to 7"},
      {"cls", "dim", -9, "node cls (select) attribute 'dim' is -9"},
      {"cls", "index", -33554432, "node cls (select) attribute 'index' is -33554432"},
  };
  for (const auto& c : cases) {
    TempDir tmp;
    write_text_package(tmp.path());
    SCOPED_TRACE(std::string(c.node) + "." + c.key + " = " + c.value.dump());
    const std::string message = with_attr(tmp.path(), c.node, c.key, c.value);
    expect_refused(message, "config.json: graph: ");
    expect_refused(message, c.expected);
  }
  // A graph built in memory goes through the same check in Engine::from_graph.
  Graph g = text_graph();
  g.nodes[1].attrs["heads"] = std::int64_t{0};
  try {
    (void)Engine::from_graph(g, {.threads = 1});
    ADD_FAILURE() << "heads 0 was accepted";
  } catch (const Error& e) {
    expect_refused(e.what(), "graph: node attn (attention) attribute 'heads' is 0");
  }
}

TEST(PackageValidation, WeightsAgreeWithTheFeaturesTheirInputsHold) {
  {  // The classifier reads the pool's 2 channels; a weight for 3 would fail inside the matmul.
    TempDir tmp;
    Graph g = image_graph();
    g.params["fc.weight"] = at::randn({2, 3});
    write_image_package(tmp.path(), image_graph());
    models::write_tensors((tmp.path() / "model.safetensors").string(), g.params, {{"format", "hotpath"}});
    expect_refused(load_error(tmp.path()),
                   "config.json: graph: node fc (linear) weight [2, 3] takes 3 features, but its input g has 2");
  }
  {  // A layer norm over 5 features after an attention that writes 4.
    TempDir tmp;
    write_text_package(tmp.path());
    Graph g = text_graph();
    g.params["ln.weight"] = at::ones({5});
    g.params["ln.bias"] = at::zeros({5});
    models::write_tensors((tmp.path() / "model.safetensors").string(), g.params, {{"format", "hotpath"}});
    expect_refused(load_error(tmp.path()), "node ln (layer_norm) weight takes 5 features, but its input ctx has 4");
  }
  {  // The same through Engine::from_graph, for a graph built in memory: a conv with 3 outputs before fc's 2 inputs.
    Graph g = image_graph();
    g.params["conv.weight"] = at::randn({3, 1, 3, 3});
    g.params["conv.bias"] = at::zeros({3});
    try {
      (void)Engine::from_graph(g, {.threads = 1});
      ADD_FAILURE() << "a linear over 3 features reading 2 was accepted";
    } catch (const Error& e) {
      expect_refused(e.what(), "graph: node fc (linear) weight [2, 2] takes 2 features, but its input g has 3");
    }
  }
}

TEST(PackageValidation, NonFiniteWeightsAreRefusedNamingTheTensor) {
  const struct {
    float value;
    const char* expected;
  } cases[] = {
      {std::numeric_limits<float>::quiet_NaN(), "holds nan at element 4"},
      {std::numeric_limits<float>::infinity(), "holds inf at element 4"},
      {-1e30f, "holds -1e+30 at element 4"},
  };
  for (const auto& c : cases) {
    TempDir tmp;
    Graph g = image_graph();
    write_image_package(tmp.path(), g);
    g.params.at("conv.weight").view({-1})[4] = c.value;
    models::write_tensors((tmp.path() / "model.safetensors").string(), g.params, {{"format", "hotpath"}});
    SCOPED_TRACE(c.expected);
    const std::string message = load_error(tmp.path());
    expect_refused(message, "model.safetensors: tensor conv.weight (node conv weight) ");
    expect_refused(message, c.expected);
    expect_refused(message, "expected finite values of magnitude <= 1e+20");
  }
}

TEST(PackageValidation, PreprocessingStdAndMeanWithinSaneMagnitudes) {
  const struct {
    const char* key;
    double value;
    const char* expected;
  } cases[] = {
      {"std", 1e-40, "preprocess.json: field 'std' value 0 is 1e-40, expected a finite value from 1e-06 to 1e+06"},
      {"std", 1e7, "preprocess.json: field 'std' value 0 is 1e+07"},
      {"mean", -1e9, "preprocess.json: field 'mean' value 0 is -1e+09, expected a finite value from -1e+06 to 1e+06"},
  };
  for (const auto& c : cases) {
    TempDir tmp;
    write_image_package(tmp.path(), image_graph());
    edit_json(tmp.path() / "preprocess.json", [&](Json& j) { j[c.key] = Json::array({c.value}); });
    SCOPED_TRACE(c.key);
    expect_refused(load_error(tmp.path()), c.expected);
  }
}

TEST(PackageValidation, DeclaredPrecisionMustMatchTheWeights) {
  {  // int8 claimed, every weight float: it would be served as int8 and run fp32.
    TempDir tmp;
    write_image_package(tmp.path(), image_graph());
    edit_json(tmp.path() / "config.json", [](Json& c) { c["precision"] = "int8"; });
    expect_refused(load_error(tmp.path()), "config.json: precision is int8 but 0 nodes are quantized (I8 weights), "
                                           "expected at least one");
  }
  {  // fp32 claimed over a quantized linear.
    TempDir tmp;
    Graph g = image_graph();
    g.params["fc.weight"] = at::ones({2, 2}, at::kChar);
    g.params["fc.weight_scale"] = at::full({2}, 0.01);
    g.nodes[3].params["weight_scale"] = "fc.weight_scale";
    g.nodes[3].attrs["quant"] = std::string("dynamic_int8");
    write_image_package(tmp.path(), g, Precision::kFp32);
    expect_refused(load_error(tmp.path()), "config.json: precision is fp32 but 1 nodes are quantized (I8 weights), "
                                           "expected none");
    // The same weights declared int8 load.
    edit_json(tmp.path() / "config.json", [](Json& c) { c["precision"] = "int8"; });
    EXPECT_EQ(load_error(tmp.path()), "");
  }
}

TEST(PackageValidation, BrokenConfigJsonIsNamedNotModelJson) {
  TempDir tmp;
  write_image_package(tmp.path(), image_graph());
  test::write_file((tmp.path() / "config.json").string(), std::string_view("{\"hotpath_package\": 1, \"kind\": "));
  // Still read as a package (there is no run directory's model.json here), so the error names config.json.
  EXPECT_TRUE(is_package_dir(tmp.path()));
  const std::string message = load_error(tmp.path());
  expect_refused(message, "config.json");
  EXPECT_EQ(message.find("model.json"), std::string::npos) << message;
  // A Hugging Face directory's config.json (valid JSON, no hotpath_package) is still not a package.
  test::write_file((tmp.path() / "config.json").string(), std::string_view("{\"model_type\": \"bert\"}"));
  EXPECT_FALSE(is_package_dir(tmp.path()));
}

}  // namespace
}  // namespace hotpath::infer
