// The model-package layout of package.h: config.json + model.safetensors + preprocess.json + labels.txt.
#include "hotpath/infer/package.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/formats/safetensors.h"
#include "hotpath/models/weights.h"
#include "internal/package_layouts.h"

namespace fs = std::filesystem;

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

constexpr std::int64_t kMaxLabels = 1 << 20;
constexpr std::int64_t kMaxLength = 1 << 16;

nlohmann::json read_json(const fs::path& path) {
  HOTPATH_CHECK(fs::exists(path), path.string(), ": missing (a model package needs it)");
  // Regular file, size-limited, depth-bounded, duplicate keys refused (core/json.h).
  return parse_json(read_file(path.string(), read_limit::kConfig, "config"), path.string(), DuplicateKeys::kReject);
}

PackageKind kind_from_name(const std::string& s, const std::string& where) {
  if (s == "image_classifier") return PackageKind::kImageClassifier;
  if (s == "text_classifier") return PackageKind::kTextClassifier;
  if (s == "sentence_embedder") return PackageKind::kSentenceEmbedder;
  throw Error(where + ": kind '" + s + "' is not one of image_classifier, text_classifier, sentence_embedder");
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  HOTPATH_CHECK(it != j.end() && it->is_string(), where, ": field '", key, "' missing or not a string");
  return it->get<std::string>();
}

// What a node's param must look like: rank, dtype, and sizes tied to other params of the node.
void check_param_shapes(const Node& n, const std::map<std::string, const formats::TensorView*>& views,
                        const std::string& file) {
  const auto view = [&](const char* role) -> const formats::TensorView* {
    auto it = n.params.find(role);
    return it == n.params.end() ? nullptr : views.at(it->second);
  };
  const auto fail = [&](const char* role, const std::string& expected) {
    const formats::TensorView* v = view(role);
    std::ostringstream os;
    os << file << ": tensor " << n.params.at(role) << " (node " << n.name << " " << role << ") is "
       << formats::dtype_name(v->dtype) << " " << c10::IntArrayRef(v->shape) << ", expected " << expected;
    throw Error(os.str());
  };
  const bool quantized = !n.attr_str("quant", "").empty();
  const auto float_dtype = [](formats::Dtype d) {
    return d == formats::Dtype::F32 || d == formats::Dtype::F16 || d == formats::Dtype::BF16;
  };
  for (const auto& [role, key] : n.params) {
    const formats::TensorView* v = views.at(key);
    const bool int8_weight = quantized && role == "weight";
    if (int8_weight && v->dtype != formats::Dtype::I8) fail(role.c_str(), "I8 (a quantized node's weight)");
    if (!int8_weight && !float_dtype(v->dtype)) fail(role.c_str(), "a floating dtype (F32, F16, BF16)");
  }
  // A role the op requires: present (the graph's own validation names it otherwise, but it runs after this).
  const auto need = [&](const char* role) -> const formats::TensorView& {
    const formats::TensorView* v = view(role);
    HOTPATH_CHECK(v != nullptr, file, ": node ", n.name, " (", n.op, ") lacks param '", role, "'");
    return *v;
  };
  const auto dims = [&](const char* role) { return static_cast<std::int64_t>(need(role).shape.size()); };
  const auto size = [&](const char* role, std::size_t d) -> std::int64_t {
    const formats::TensorView& v = need(role);
    HOTPATH_CHECK(d < v.shape.size(), file, ": tensor ", n.params.at(role), " (node ", n.name, " ", role, ") has ",
                  v.shape.size(), " dims, expected more than ", d);
    return v.shape[d];
  };
  const auto vec_of = [&](const char* role, std::int64_t n_out) {
    if (view(role) != nullptr && (dims(role) != 1 || size(role, 0) != n_out)) fail(role, "[" + std::to_string(n_out) + "]");
  };
  if (n.op == OpKind::kConv2d) {
    if (dims("weight") != 4) fail("weight", "4 dims [out, in/groups, kh, kw]");
    vec_of("bias", size("weight", 0));
    vec_of("weight_scale", size("weight", 0));
  } else if (n.op == OpKind::kLinear) {
    if (dims("weight") != 2) fail("weight", "2 dims [out, in]");
    vec_of("bias", size("weight", 0));
    vec_of("weight_scale", size("weight", 0));
  } else if (n.op == OpKind::kLayerNorm) {
    if (dims("weight") != 1) fail("weight", "1 dim");
    vec_of("bias", size("weight", 0));
  } else if (n.op == OpKind::kBertEmbed) {
    if (dims("word") != 2) fail("word", "2 dims [vocab, hidden]");
    const std::int64_t h = size("word", 1);
    for (const char* r : {"position", "token_type"}) {
      if (view(r) != nullptr && (dims(r) != 2 || size(r, 1) != h)) fail(r, "[n, " + std::to_string(h) + "]");
    }
    vec_of("ln_weight", h);
    vec_of("ln_bias", h);
  } else if (n.op == OpKind::kVitEmbed) {
    if (dims("class_token") != 3) fail("class_token", "[1, 1, D]");
    const std::int64_t d = size("class_token", 2);
    if (dims("pos_embedding") != 3 || size("pos_embedding", 2) != d) fail("pos_embedding", "[1, P, D]");
  }
}

constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;
constexpr std::int64_t kMaxTopK = 1 << 20;

// preprocess.json of a text package. Only max_length is required: the other fields came later (TextPreprocess).
TextPreprocess text_preprocess_from_json(const nlohmann::json& j, const std::string& where) {
  HOTPATH_CHECK(j.is_object(), where, ": expected a JSON object");
  const JsonFields f{j, where};
  TextPreprocess t;
  t.max_length = f.integer("max_length", std::nullopt, 2, kMaxLength);
  t.vocab_size = f.integer("vocab_size", 0, 1, kMaxVocab);
  t.type_vocab_size = f.integer("type_vocab_size", 0, 1, kMaxVocab);
  if (f.has("pad_id")) t.pad_id = f.integer("pad_id", std::nullopt, 0, kMaxVocab - 1);
  HOTPATH_CHECK(!t.pad_id || t.vocab_size == 0 || *t.pad_id < t.vocab_size, where, ": pad_id ", t.pad_id.value_or(0),
                " is not below vocab_size ", t.vocab_size);
  t.truncation = text::parse_truncation_strategy(f.text("truncation", "longest_first"), where);
  return t;
}

nlohmann::ordered_json text_preprocess_to_json(const TextPreprocess& t) {
  nlohmann::ordered_json j;
  j["max_length"] = t.max_length;
  if (t.vocab_size > 0) j["vocab_size"] = t.vocab_size;
  if (t.type_vocab_size > 0) j["type_vocab_size"] = t.type_vocab_size;
  if (t.pad_id) j["pad_id"] = *t.pad_id;
  j["truncation"] = text::truncation_strategy_name(t.truncation);
  return j;
}

const char* output_kind_name(OutputKind kind) { return kind == OutputKind::kEmbedding ? "embedding" : "class_scores"; }

// What the graph says of its output: an embedder's pooling and normalisation are its own nodes.
Postprocess derived_postprocess(PackageKind kind, const Graph& graph) {
  Postprocess p;
  if (kind != PackageKind::kSentenceEmbedder) return p;
  p.output = OutputKind::kEmbedding;
  p.pooling = "none";  // a graph without a pooling node returns what its last node computes
  for (const Node& n : graph.nodes) {
    if (n.op == OpKind::kMeanPool) p.pooling = "mean";
    if (n.output == graph.outputs.front()) p.normalize = n.op == OpKind::kL2Normalize;
  }
  return p;
}

Postprocess postprocess_from_json(const nlohmann::json& j, PackageKind kind, const std::string& where) {
  const std::string at = where + ".postprocess";
  HOTPATH_CHECK(j.is_object(), at, ": expected a JSON object");
  const JsonFields f{j, at};
  Postprocess p;
  const std::string output = f.text("output", "");
  const OutputKind expected = kind == PackageKind::kSentenceEmbedder ? OutputKind::kEmbedding : OutputKind::kClassScores;
  HOTPATH_CHECK(output == output_kind_name(expected), at, ".output: '", output, "', expected '",
                output_kind_name(expected), "' for a ", package_kind_name(kind), " package");
  p.output = expected;
  if (p.output == OutputKind::kClassScores) {
    p.top_k = f.integer("top_k", kDefaultTopK, 1, kMaxTopK);
  } else {
    p.pooling = f.text("pooling", "mean");
    HOTPATH_CHECK(p.pooling == "mean" || p.pooling == "none", at, ".pooling: '", p.pooling,
                  "', expected 'mean' or 'none'");
    p.normalize = f.boolean("normalize", false);
  }
  return p;
}

nlohmann::ordered_json postprocess_to_json(const Postprocess& p) {
  nlohmann::ordered_json j;
  j["output"] = output_kind_name(p.output);
  if (p.output == OutputKind::kClassScores) {
    j["top_k"] = p.top_k;
  } else {
    j["pooling"] = p.pooling;
    j["normalize"] = p.normalize;
  }
  return j;
}

}  // namespace

const char* package_kind_name(PackageKind kind) {
  switch (kind) {
    case PackageKind::kImageClassifier: return "image_classifier";
    case PackageKind::kTextClassifier: return "text_classifier";
    case PackageKind::kSentenceEmbedder: return "sentence_embedder";
  }
  return "image_classifier";
}

bool is_package_dir(const fs::path& dir) {
  const fs::path config = dir / "config.json";
  std::error_code ec;
  if (!fs::exists(config, ec)) return false;
  // A config.json that cannot be read or parsed, with no model.json (a run directory's file) beside it, is a
  // broken package: read_package then names config.json and its problem, not "model.json: not found".
  const bool run_dir = fs::exists(dir / "model.json", ec);
  try {
    const nlohmann::json j = parse_json(read_file(config.string(), read_limit::kConfig, "config"), config.string());
    return j.is_object() && j.contains("hotpath_package");
  } catch (const std::exception&) {
    return !run_dir;
  }
}

namespace internal {

Package read_model_package(const fs::path& dir) {
  Package p;
  p.dir = dir.string();
  p.layout = PackageLayout::kModelPackage;
  const fs::path config_path = dir / "config.json";
  const nlohmann::json config = read_json(config_path);
  const std::string where = config_path.string();
  HOTPATH_CHECK(config.is_object(), where, ": expected a JSON object");
  auto version = config.find("hotpath_package");
  HOTPATH_CHECK(version != config.end(), where, ": no 'hotpath_package' field — not a hotpath model package");
  HOTPATH_CHECK(version->is_number_integer() && version->get<std::int64_t>() == 1, where,
                ": hotpath_package is ", version->dump(), ", expected 1 (this build reads version 1)");
  p.kind = kind_from_name(string_field(config, "kind", where), where + ".kind");
  p.architecture = string_field(config, "architecture", where);
  p.precision = parse_precision(string_field(config, "precision", where), where + ".precision");
  HOTPATH_CHECK(config.contains("graph"), where, ": field 'graph' missing");
  p.graph = graph_from_json(config["graph"], where + ".graph");
  try {
    p.graph.validate_attrs();  // before anything reads an attribute (the weights' shape checks read groups)
  } catch (const Error& e) {
    throw e.with_context(where);
  }
  if (config.contains("source")) p.source = config["source"];

  const fs::path pre_path = dir / "preprocess.json";
  const nlohmann::json pre = read_json(pre_path);
  if (p.kind == PackageKind::kImageClassifier) {
    p.image = eval_preprocess_from_json(pre, pre_path.string());
    HOTPATH_CHECK(p.graph.inputs.size() == 1 && p.graph.inputs[0].shape.size() == 4, where,
                  ".graph: an image package takes one [N, C, H, W] input");
    const auto& shape = p.graph.inputs[0].shape;
    HOTPATH_CHECK(shape[1] == p.image.channels && shape[2] == p.image.image_size && shape[3] == p.image.image_size,
                  pre_path.string(), ": channels ", p.image.channels, " and image_size ", p.image.image_size,
                  " contradict the graph input ", c10::IntArrayRef(shape));
  } else {
    p.text = text_preprocess_from_json(pre, pre_path.string());
    p.text.tokenizer = fs::is_regular_file(dir / "tokenizer.json") || fs::is_regular_file(dir / "vocab.txt");
  }
  p.postprocess = config.contains("postprocess") ? postprocess_from_json(config["postprocess"], p.kind, where)
                                                 : derived_postprocess(p.kind, p.graph);

  if (p.kind != PackageKind::kSentenceEmbedder) {
    const fs::path labels_path = dir / "labels.txt";
    HOTPATH_CHECK(fs::is_regular_file(labels_path), labels_path.string(), ": missing (a classifier package needs it)");
    std::istringstream in(read_file(labels_path.string(), read_limit::kConfig, "labels"));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      p.labels.push_back(line);
      HOTPATH_CHECK(static_cast<std::int64_t>(p.labels.size()) <= kMaxLabels, labels_path.string(), ": more than ",
                    kMaxLabels, " labels");
    }
    HOTPATH_CHECK(!p.labels.empty(), labels_path.string(), ": no labels");
    p.num_classes = static_cast<std::int64_t>(p.labels.size());
  }
  return p;
}

}  // namespace internal

namespace {

// Weights the engine can compute with: finite, and far below float's overflow so that one product or sum of
// them stays finite. NaN weights would otherwise load and answer "prob": null.
constexpr double kMaxWeightMagnitude = 1e20;

void check_finite(const at::Tensor& t, const std::string& file, const std::string& key, const std::string& user) {
  if (t.scalar_type() != at::kFloat) return;  // int8 weights are finite by construction
  const at::Tensor c = t.contiguous();
  const float* data = c.const_data_ptr<float>();
  const std::int64_t n = c.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isfinite(data[i]) && std::abs(data[i]) <= kMaxWeightMagnitude) continue;
    HOTPATH_CHECK(false, file, ": tensor ", key, " (", user, ") holds ", data[i], " at element ", i,
                  ", expected finite values of magnitude <= ", kMaxWeightMagnitude);
  }
}

}  // namespace

Graph load_package_graph(const Package& package) {
  HOTPATH_CHECK(package.layout == PackageLayout::kModelPackage, package.dir,
                ": a training run directory (model.json), not a model package; export it first with hotpath export");
  const std::string config_path = (fs::path(package.dir) / "config.json").string();
  try {
    package.graph.validate_attrs();  // a Package built in memory has not been through read_package
  } catch (const Error& e) {
    throw e.with_context(config_path);
  }
  const fs::path path = fs::path(package.dir) / "model.safetensors";
  HOTPATH_CHECK(fs::is_regular_file(path), path.string(), ": missing (a model package needs it)");
  const formats::SafetensorsFile file = formats::SafetensorsFile(path.string());
  std::map<std::string, const formats::TensorView*> views;
  for (const formats::TensorView& v : file.tensors()) views[v.name] = &v;
  Graph g = package.graph;
  std::set<std::string> wanted;
  std::map<std::string, std::string> user;  // tensor → "node NAME ROLE", for the errors below
  std::int64_t quantized = 0;
  for (const Node& n : g.nodes) {
    for (const auto& [role, key] : n.params) {
      HOTPATH_CHECK(views.count(key) != 0, path.string(), ": tensor ", key, " (node ", n.name, " ", role,
                    ") is missing");
      wanted.insert(key);
      user.emplace(key, "node " + n.name + " " + role);
    }
    check_param_shapes(n, views, path.string());
    if (!n.attr_str("quant", "").empty()) ++quantized;
  }
  for (const auto& [key, view] : views) {
    HOTPATH_CHECK(wanted.count(key) != 0, path.string(), ": tensor ", key, " is used by no node of config.json's graph");
  }
  // The declared precision is what the engine runs and what serve reports: it must be the weights' own.
  HOTPATH_CHECK((package.precision == Precision::kInt8) == (quantized > 0), config_path, ": precision is ",
                precision_name(package.precision), " but ", quantized, " nodes are quantized (I8 weights), expected ",
                package.precision == Precision::kInt8 ? "at least one (an int8 package from hotpath export --precision int8)"
                                                      : "none (only an int8 package holds I8 weights)");
  for (const std::string& key : wanted) {
    at::Tensor t = models::to_tensor(*views.at(key));
    if (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) t = t.to(at::kFloat);
    check_finite(t, path.string(), key, user.at(key));
    g.params[key] = std::move(t);
  }
  try {
    g.validate();
  } catch (const Error& e) {
    throw e.with_context(config_path);
  }
  if (package.kind != PackageKind::kSentenceEmbedder) {
    const Node* last = nullptr;
    for (const Node& n : g.nodes) {
      if (n.output == g.outputs.front()) last = &n;
    }
    if (last != nullptr && last->op == OpKind::kLinear) {
      const std::int64_t classes = g.params.at(last->params.at("weight")).size(0);
      HOTPATH_CHECK(classes == static_cast<std::int64_t>(package.labels.size()), package.dir, "/labels.txt: ",
                    package.labels.size(), " labels, but the model's output layer ", last->name, " has ", classes,
                    " classes");
    }
  }
  return g;
}

void write_package_dir(const fs::path& dir, const Package& package, const Graph& graph, const nlohmann::json& report,
                       const std::vector<fs::path>& extra_files, bool overwrite) {
  graph.validate();
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    HOTPATH_CHECK(fs::is_directory(dir), dir.string(), ": exists and is not a directory");
    HOTPATH_CHECK(overwrite || fs::is_empty(dir), dir.string(),
                  ": exists and is not empty (pass --overwrite to replace the package)");
  }
  fs::create_directories(dir);
  nlohmann::ordered_json config;
  config["hotpath_package"] = 1;
  config["kind"] = package_kind_name(package.kind);
  config["architecture"] = package.architecture;
  config["precision"] = precision_name(package.precision);
  if (!package.labels.empty()) config["num_classes"] = package.labels.size();
  config["source"] = package.source;
  // The graph's own pooling and normalisation; the caller's top_k.
  Postprocess post = derived_postprocess(package.kind, graph);
  post.top_k = package.postprocess.top_k;
  config["postprocess"] = postprocess_to_json(post);
  config["graph"] = graph_to_json(graph);
  write_file_atomic((dir / "config.json").string(), config.dump(2) + "\n");

  nlohmann::ordered_json pre;
  if (package.kind == PackageKind::kImageClassifier) {
    pre = to_json(package.image);
  } else {
    TextPreprocess t = package.text;
    if (const std::optional<TextEmbedding> e = text_embedding(graph)) {  // the embedding tables' rows, as written
      t.vocab_size = e->vocab;
      t.type_vocab_size = e->type_vocab;
    }
    pre = text_preprocess_to_json(t);
  }
  write_file_atomic((dir / "preprocess.json").string(), pre.dump(2) + "\n");
  if (!package.labels.empty()) {
    std::string text;
    for (const std::string& l : package.labels) {
      HOTPATH_CHECK(l.find('\n') == std::string::npos && l.find('\r') == std::string::npos,
                    "export: class name '", l, "' contains a line break, which labels.txt cannot hold");
      text += l + "\n";
    }
    write_file_atomic((dir / "labels.txt").string(), text);
  }
  write_file_atomic((dir / "quantization_report.json").string(), report.dump(2) + "\n");
  for (const fs::path& f : extra_files) {
    write_file_atomic((dir / f.filename()).string(), read_file(f.string()));
  }
  models::write_tensors((dir / "model.safetensors").string(), graph.params, {{"format", "hotpath"}});
}

}  // namespace hotpath::infer
