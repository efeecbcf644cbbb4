// libFuzzer target: a model package's configuration as `predict`, `eval`, `embed` and `serve` load it:
// config.json (kind, precision, the graph: inputs, nodes, attributes) and preprocess.json, read by
// read_package's model-package reader and then load_package_graph against a fixed model.safetensors and labels.txt.
// Input: config.json's bytes, then optionally "\n--preprocess--\n" and preprocess.json's bytes (without it, the
// seed's preprocess.json is used).
// Bad input must end in hotpath::Error (never a crash, a hang, or another exception). A package that loads must
// keep what the engine relies on: every node's attributes within their bounds (validate_attrs, run again), every
// param present with a finite weight, the graph valid (validate, run again).
//
// Seeds: with $HOTPATH_FUZZ_SEEDS set, the target writes its seed inputs there (an image classifier and a text
// classifier package, made by the exporter's own writer) and exits; scripts/fuzz does this before fuzzing.
#include <ATen/ops/randn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <unistd.h>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/infer/graph.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/preprocess.h"
#include "hotpath/models/weights.h"
#include "internal/package_layouts.h"

namespace fs = std::filesystem;
using hotpath::infer::Graph;
using hotpath::infer::Node;
using hotpath::infer::OpKind;
using hotpath::infer::Package;
using hotpath::infer::PackageKind;

namespace {

constexpr std::string_view kSeparator = "\n--preprocess--\n";

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_package_config: %s\n", what.c_str());
  std::abort();
}

Node node(hotpath::infer::OpKind op, std::string name, std::vector<std::string> inputs, std::string output,
          std::map<std::string, std::string> params, std::map<std::string, hotpath::infer::AttrValue> attrs) {
  Node n;
  n.op = op;
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  n.output = std::move(output);
  n.params = std::move(params);
  n.attrs = std::move(attrs);
  return n;
}

// conv (3×3, relu) → max pool → conv (depthwise, residual) → global average pool → linear: 2 classes.
Graph image_graph() {
  Graph g;
  g.inputs = {{"image", at::kFloat, {-1, 3, 8, 8}, {"batch", "", "", ""}}};
  g.nodes = {
      node(OpKind::kConv2d, "conv1", {"image"}, "c1", {{"weight", "conv1.weight"}, {"bias", "conv1.bias"}},
           {{"stride", std::vector<std::int64_t>{1, 1}}, {"padding", std::vector<std::int64_t>{1, 1, 1, 1}},
            {"dilation", std::vector<std::int64_t>{1, 1}}, {"groups", std::int64_t{1}}, {"act", std::string("relu")}}),
      node(OpKind::kMaxPool2d, "pool1", {"c1"}, "p1", {},
           {{"kernel", std::vector<std::int64_t>{2, 2}}, {"stride", std::vector<std::int64_t>{2, 2}},
            {"padding", std::vector<std::int64_t>{0, 0}}}),
      node(OpKind::kConv2d, "conv2", {"p1", "p1"}, "c2", {{"weight", "conv2.weight"}},
           {{"stride", std::vector<std::int64_t>{1, 1}}, {"padding", std::vector<std::int64_t>{1, 1, 1, 1}},
            {"dilation", std::vector<std::int64_t>{1, 1}}, {"groups", std::int64_t{4}}, {"act", std::string("relu6")}}),
      node(OpKind::kGlobalAvgPool, "gap", {"c2"}, "g", {}, {{"keepdims", std::int64_t{0}}}),
      node(OpKind::kLinear, "fc", {"g"}, "logits", {{"weight", "fc.weight"}, {"bias", "fc.bias"}}, {}),
  };
  g.outputs = {"logits"};
  g.params = {{"conv1.weight", at::randn({4, 3, 3, 3})}, {"conv1.bias", at::randn({4})},
              {"conv2.weight", at::randn({4, 1, 3, 3})}, {"fc.weight", at::randn({2, 4})}, {"fc.bias", at::randn({2})}};
  return g;
}

// bert_embed → qkv linear → attention (2 heads, mask) → layer norm (residual) → [CLS] → linear: 2 classes.
Graph text_graph() {
  Graph g;
  g.inputs = {{"input_ids", at::kLong, {-1, -1}, {"batch", "sequence"}},
              {"attention_mask", at::kLong, {-1, -1}, {"batch", "sequence"}}};
  g.nodes = {
      node(OpKind::kBertEmbed, "emb", {"input_ids"}, "h0",
           {{"word", "emb.word"}, {"position", "emb.position"}, {"ln_weight", "emb.ln.weight"}, {"ln_bias", "emb.ln.bias"}},
           {{"eps", 1e-12}}),
      node(OpKind::kLinear, "qkv", {"h0"}, "qkv", {{"weight", "qkv.weight"}, {"bias", "qkv.bias"}}, {}),
      node(OpKind::kAttention, "attn", {"qkv", "attention_mask"}, "a", {}, {{"heads", std::int64_t{2}}}),
      node(OpKind::kLayerNorm, "ln", {"a", "h0"}, "h1", {{"weight", "ln.weight"}, {"bias", "ln.bias"}}, {{"eps", 1e-12}}),
      node(OpKind::kSelect, "cls", {"h1"}, "c", {}, {{"dim", std::int64_t{1}}, {"index", std::int64_t{0}}}),
      node(OpKind::kLinear, "fc", {"c"}, "logits", {{"weight", "fc.weight"}}, {{"act", std::string("none")}}),
  };
  g.outputs = {"logits"};
  g.params = {{"emb.word", at::randn({16, 8})},   {"emb.position", at::randn({12, 8})},
              {"emb.ln.weight", at::randn({8})},  {"emb.ln.bias", at::randn({8})},
              {"qkv.weight", at::randn({24, 8})}, {"qkv.bias", at::randn({24})},
              {"ln.weight", at::randn({8})},      {"ln.bias", at::randn({8})},
              {"fc.weight", at::randn({2, 8})}};
  return g;
}

Package package(PackageKind kind) {
  Package p;
  p.kind = kind;
  p.architecture = kind == PackageKind::kImageClassifier ? "fuzz_cnn" : "fuzz_bert";
  p.labels = {"a", "b"};
  p.image.channels = 3;
  p.image.image_size = 8;
  p.image.resize_shorter = 8;
  p.image.mean = {0.5, 0.5, 0.5};
  p.image.std = {0.25, 0.25, 0.25};
  p.text.max_length = 12;
  return p;
}

std::string file_text(const fs::path& path) { return hotpath::read_file(path.string()); }

// Both seed packages, written by the exporter's writer: a seed is config.json, the separator, preprocess.json.
void write_seeds(const fs::path& out) {
  fs::create_directories(out);
  const fs::path tmp = out / ".package";
  const std::pair<PackageKind, Graph> seeds[] = {{PackageKind::kImageClassifier, image_graph()},
                                                 {PackageKind::kTextClassifier, text_graph()}};
  int i = 0;
  for (const auto& [kind, graph] : seeds) {
    hotpath::infer::write_package_dir(tmp, package(kind), graph, nlohmann::json::object(), {}, true);
    hotpath::write_file_atomic((out / ("seed" + std::to_string(i++))).string(),
                               file_text(tmp / "config.json") + std::string(kSeparator) + file_text(tmp / "preprocess.json"));
    fs::remove(tmp / "config.json");
  }
  for (const auto& e : fs::directory_iterator(tmp)) fs::remove(e.path());
  fs::remove(tmp);
}

// One package directory per process: model.safetensors holds both seeds' tensors (fc.* with the image graph's
// shapes: the text graph's fc then disagrees with its input, one more refusal to reach), labels.txt two classes.
// Each input rewrites config.json and preprocess.json.
struct Fixture {
  fs::path dir;
  std::string image_preprocess, text_preprocess;

  Fixture() : dir(fs::temp_directory_path() / ("hotpath-fuzz-package-" + std::to_string(::getpid()))) {
    fs::create_directories(dir);
    std::map<std::string, at::Tensor> tensors = image_graph().params;
    for (const auto& [key, t] : text_graph().params) tensors.try_emplace(key, t);
    hotpath::models::write_tensors((dir / "model.safetensors").string(), tensors, {{"format", "hotpath"}});
    hotpath::write_file_atomic((dir / "labels.txt").string(), "a\nb\n");
    image_preprocess = hotpath::infer::to_json(package(PackageKind::kImageClassifier).image).dump();
    text_preprocess = nlohmann::json{{"max_length", 12}}.dump();
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;
  ~Fixture() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) fs::remove(e.path(), ec);
    fs::remove(dir, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (const char* seeds = std::getenv("HOTPATH_FUZZ_SEEDS")) {
    try {
      write_seeds(seeds);
    } catch (const std::exception& e) {
      fail(std::string("writing seeds: ") + e.what());
    }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Fixture fixture;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t cut = input.find(kSeparator);
  const std::string config(input.substr(0, cut));
  std::string pre;
  if (cut != std::string_view::npos) {
    pre = std::string(input.substr(cut + kSeparator.size()));
  } else {
    pre = config.find("input_ids") != std::string::npos ? fixture.text_preprocess : fixture.image_preprocess;
  }
  hotpath::write_file_atomic((fixture.dir / "config.json").string(), config);
  hotpath::write_file_atomic((fixture.dir / "preprocess.json").string(), pre);
  try {
    const Package p = hotpath::infer::internal::read_model_package(fixture.dir);
    const Graph g = hotpath::infer::load_package_graph(p);
    // Loaded: what the engine relies on holds. A second validation must not find anything the first missed.
    g.validate_attrs();
    g.validate();
    for (const Node& n : g.nodes) {
      for (const auto& [role, key] : n.params) {
        const auto it = g.params.find(key);
        if (it == g.params.end() || !it->second.defined()) fail("node " + n.name + " param " + role + " missing after load");
      }
    }
  } catch (const hotpath::Error&) {
    // refused with a message: fine
  } catch (const std::exception& e) {
    fail(std::string("an exception other than hotpath::Error: ") + e.what());
  }
  return 0;
}
