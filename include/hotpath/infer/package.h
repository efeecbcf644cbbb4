// hotpath/infer/package.h — a trained model as a directory, read into one `Package` whichever of its two layouts
// it has: what `predict`, `eval`, `embed`, `serve`, the benchmarks and the Python API load.
//
//   model package (`hotpath export`; the engine runs it):
//     PKG/config.json               {"hotpath_package": 1, kind, architecture, precision, num_classes, source, graph}
//     PKG/model.safetensors         the graph's weights (folded; int8 weights + f32 scales as plain tensors)
//     PKG/preprocess.json           image: the eval transform (infer/preprocess.h); text: max_length, vocab_size,
//                                   type_vocab_size, pad_id, truncation
//     (config.json "postprocess")   {"output": "class_scores", "top_k"} or {"output": "embedding", pooling, normalize}
//     PKG/labels.txt                one class name per line (classifiers)
//     PKG/quantization_report.json  the export's accuracy report (every export writes one)
//     PKG/tokenizer.json, vocab.txt, tokenizer_config.json, ...   text packages: the tokenizer files
//   training run directory (`hotpath train`, image runs; the training model runs it eagerly):
//     RUN/model.json                {"format": "hotpath-model", model, num_classes, class_names, the eval
//                                    transform's keys flat (in_channels, image_size, ...), weights}
//     RUN/model.safetensors         the registry model's state dict
//
//   Package pkg = read_package("pkg/resnet50-int8");                // either layout; one-line errors
//   Predictor p = Predictor::load(pkg);                              // predictor.h: engine or eager, decided there
//
// The fields have one name in both layouts (model.json's "model" is `architecture`, its "class_names" `labels`,
// its flat transform `image`); both files keep their keys, so every run directory and package written before loads.
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
#include "hotpath/models/registry.h"
#include "hotpath/text/tokenizer.h"

namespace hotpath::infer {

// How many classes a classification answer lists when the caller names no k (predict, serve's /v1 classify).
inline constexpr int kDefaultTopK = 5;

enum class PackageKind { kImageClassifier, kTextClassifier, kSentenceEmbedder };
const char* package_kind_name(PackageKind kind);  // "image_classifier" | "text_classifier" | "sentence_embedder"

enum class PackageLayout { kModelPackage, kRunDirectory };

// How a text package turns texts into its inputs (preprocess.json). Packages written before these fields held
// max_length only: read_package leaves the rest unrecorded and Predictor takes them from the weights and the
// tokenizer, so they still load.
struct TextPreprocess {
  std::int64_t max_length = 128;     // tokens per sequence, [CLS] and [SEP] included
  std::int64_t vocab_size = 0;       // word-embedding rows: every input id is below it (0: not recorded)
  std::int64_t type_vocab_size = 0;  // token-type rows (0: not recorded)
  std::optional<std::int64_t> pad_id;  // the id padding holds (the tokenizer's); unset: not recorded
  text::TruncationStrategy truncation = text::TruncationStrategy::kLongestFirst;  // which text of a pair is cut
  bool tokenizer = false;            // tokenizer.json or vocab.txt lies in the package (not a field: the files)
};

// What a caller gets from the raw output (config.json "postprocess"; packages written before: from the kind).
enum class OutputKind { kClassScores, kEmbedding };
struct Postprocess {
  OutputKind output = OutputKind::kClassScores;
  std::int64_t top_k = kDefaultTopK;  // class scores: softmax, then this many labels when the caller names no k
  std::string pooling;                // embeddings: how the graph pools the tokens: "mean" or "none" (no pooling node)
  bool normalize = false;             // embeddings: L2-normalised by the graph's last node
};

struct Package {
  std::string dir;
  PackageLayout layout = PackageLayout::kModelPackage;
  PackageKind kind = PackageKind::kImageClassifier;  // a run directory: an image classifier
  std::string architecture;         // the registry name ("resnet50") or "bert" / "distilbert"
  Precision precision = Precision::kFp32;  // a run directory: fp32 (eval may autocast it)
  std::int64_t num_classes = 0;     // classifiers: the output width
  std::vector<std::string> labels;  // classifiers: one per class (a run directory's may be empty: named by index)
  EvalPreprocess image;             // image classifiers: the eval transform; its channels are the model's input's
  TextPreprocess text;              // text packages
  Postprocess postprocess;          // logits → softmax + top-k, or the embedding as it is
  Graph graph;                      // model packages: structure only; load_package_graph attaches the weights
  std::string weights = "model.safetensors";  // relative to dir
  nlohmann::json source = nlohmann::json::object();  // model packages: what was exported, from where, how
};

// Whether `dir` holds a model package: a config.json that says "hotpath_package" (a Hugging Face model
// directory's config.json does not), or one that cannot be read with no model.json beside it (a broken package).
bool is_package_dir(const std::filesystem::path& dir);
// Reads either layout. A model package: config.json, preprocess.json and labels.txt checked (sizes bounded,
// every field typed; the label count must match the graph's output width when the weights are loaded). A run
// directory: model.json. Errors name the file and the field.
Package read_package(const std::filesystem::path& dir);

// A model package's graph with its weights from model.safetensors: every param present with the dtype and shape
// its node needs (checked before anything large is built), no extra tensors.
Graph load_package_graph(const Package& package);
// A run directory's model: created, its weights loaded (all keys must match), in eval mode; one trained
// channels-last gets its 4-D weights in channels-last memory, like the batches it is given.
models::ModelHandle load_package_model(const Package& package);

// A run directory's model.json (the trainer writes it beside model.safetensors).
std::string run_directory_json(const Package& package);
// Writes a model package PKG (created; refused when it exists and is not empty unless `overwrite`): config.json,
// model.safetensors (graph.params), preprocess.json, labels.txt, quantization_report.json (`report`), and copies
// `extra_files` (tokenizer files) beside them. Every file is written atomically.
void write_package_dir(const std::filesystem::path& dir, const Package& package, const Graph& graph,
                       const nlohmann::json& report, const std::vector<std::filesystem::path>& extra_files,
                       bool overwrite);

}  // namespace hotpath::infer
