// hotpath/infer/package_dir.h — a deployable model package: what `hotpath export` writes and the
// engine, `predict`, `eval`, `embed` and `serve` load. Plain, conventional files:
//
//   PKG/config.json               {"hotpath_package": 1, kind, architecture, precision, labels count, graph}
//   PKG/model.safetensors         the graph's weights (folded; int8 weights + f32 scales as plain tensors)
//   PKG/preprocess.json           image: the eval transform (infer/preprocess.h); text: max_length + tokenizer
//   PKG/labels.txt                one class name per line (classifiers)
//   PKG/quantization_report.json  the export's accuracy report (every export writes one)
//   PKG/tokenizer.json, vocab.txt, tokenizer_config.json, ...   text packages: the tokenizer files
//
//   PackageDir pkg = read_package_dir("pkg/resnet50-int8");     // every file checked, one-line errors
//   Engine engine = Engine::from_graph(load_package_graph(pkg), {.precision = pkg.precision});
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hotpath/infer/engine.h"
#include "hotpath/infer/graph.h"
#include "hotpath/infer/preprocess.h"

namespace hotpath::infer {

enum class PackageKind { kImageClassifier, kTextClassifier, kSentenceEmbedder };
const char* package_kind_name(PackageKind kind);  // "image_classifier" | "text_classifier" | "sentence_embedder"

struct TextPreprocess {
  std::int64_t max_length = 128;  // tokens per sequence, [CLS] and [SEP] included
};

struct PackageDir {
  std::string dir;
  PackageKind kind = PackageKind::kImageClassifier;
  std::string architecture;  // the registry name ("resnet50") or "bert" / "distilbert"
  Precision precision = Precision::kFp32;
  std::vector<std::string> labels;  // classifiers: one per class
  EvalPreprocess image;             // image packages
  TextPreprocess text;              // text packages
  Graph graph;                      // structure only; load_package_graph attaches the weights
  nlohmann::json source = nlohmann::json::object();  // provenance: what was exported, from where, how
};

// config.json in `dir` that says "hotpath_package" (an HF model dir's config.json does not).
bool is_package_dir(const std::filesystem::path& dir);
// Reads and checks config.json, preprocess.json and labels.txt (sizes bounded, every field typed; the
// label count must match the graph's output width when the weights are loaded). Errors name file and field.
PackageDir read_package_dir(const std::filesystem::path& dir);
// The graph with its weights from model.safetensors: every param present with the dtype and shape its
// node needs (checked before anything large is built), no extra tensors.
Graph load_package_graph(const PackageDir& package);

// Writes PKG (created; refused when it exists and is not empty unless `overwrite`): config.json,
// model.safetensors (graph.params), preprocess.json, labels.txt, quantization_report.json (`report`),
// and copies `extra_files` (tokenizer files) beside them. Every file is written atomically.
void write_package_dir(const std::filesystem::path& dir, const PackageDir& package, const Graph& graph,
                       const nlohmann::json& report, const std::vector<std::filesystem::path>& extra_files,
                       bool overwrite);

}  // namespace hotpath::infer
