// hotpath/infer/export.h — what `hotpath export` does: a model (a run directory, a Hugging Face /
// sentence-transformers directory, or a registry model) → a model package (package_dir.h), with an
// accuracy report comparing the package against the model it came from.
//
//   ExportSource src{.model_dir = "runs/fashion_mnist"};
//   ExportReport r = export_package(src, {.out = "pkg/fmnist-int8", .precision = Precision::kInt8,
//                                         .calibration = {"data/val-{000..001}.tar"}});
//   std::cout << r.summary << "\n";   // "top-1 agreement 99.6 % with fp32 on 512 samples ..."
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hotpath/infer/engine.h"
#include "hotpath/infer/graph.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/prune.h"
#include "hotpath/infer/qat.h"

namespace hotpath::infer {

// Exactly one of model_dir, model (a registry name) or bert_config names the model.
struct ExportSource {
  // An image run (model.json), a text run (model/config.json), a Hugging Face BERT/DistilBERT
  // directory or a sentence-transformers directory.
  std::string model_dir;
  std::string model;  // registry name: with `pretrained` (efficientnet_lite0) or `random_init`
  bool pretrained = false;
  bool random_init = false;
  std::int64_t num_classes = 1000;  // registry models with random_init
  std::int64_t channels = 3;
  std::int64_t image_size = 224;
  std::string bert_config;  // a BERT-shape config.json with random_init (benchmark shapes)
  std::string task = "auto";  // text: "classify" | "embed" | "auto" (modules.json → embed)
  std::int64_t max_length = 0;  // text packages: 0 = sentence_bert_config.json's max_seq_length, else min(128, positions)
};

// An int8 sentence-embedding export whose lowest row cosine with fp32 on real data is below this is refused
// (unless allow_accuracy_loss).
inline constexpr double kMinEmbeddingCosine = 0.99;

// Quantization-aware training before an image model's int8 export (qat.h): the package's preprocessing on `data`
// with a random resized crop (scale crop_scale_min..1; 1: no crop, the eval transform) and a horizontal flip,
// epochs repeated until options.steps.
struct ExportQat {
  std::vector<std::string> data;  // image shards; labels are read when options.label_weight > 0
  std::int64_t batch_size = 32;
  double crop_scale_min = 0.25;
  std::uint64_t seed = 0;
  QatOptions options{};
};

// Structured pruning before an image model's export (prune.h): the lowered fp32 graph pruned (and, with data,
// fine-tuned after each cut by distillation from the unpruned model on `data`, the package's preprocessing with a
// random resized crop and flip as ExportQat's), then converted to the package's precision. The package's accuracy
// report compares the precision conversion with the pruned fp32 graph; "prune" in it gives the pruned graph's
// top-1 agreement with the unpruned one on the calibration data.
struct ExportPrune {
  std::vector<std::string> data;  // image shards: fine-tuning and Taylor importance (none: a cut without fine-tuning)
  std::int64_t batch_size = 32;
  double crop_scale_min = 0.25;
  std::uint64_t seed = 0;
  PruneOptions options{};
};

struct ExportOptions {
  std::filesystem::path out;
  Precision precision = Precision::kFp32;
  // Real samples for calibration (int8 convs) and for the accuracy report: image shards (the package's
  // eval transform) or, for text, a file of lines. Empty: the report uses random inputs and says so.
  std::vector<std::string> calibration;
  std::int64_t calibration_samples = 256;
  std::int64_t max_bad_samples = 100;  // corrupt calibration samples skipped and counted, beyond: error
  // int8 on real calibration data: the quantized graph's logits within this relative error of fp32 on it
  // (embeddings: every row's cosine >= min_output_cosine), else the fewest most sensitive layers stay float
  // (quantize.h; reported). The embedding target sits above kMinEmbeddingCosine, so that other
  // texts than the calibration lines keep >= 0.99 too (docs/inference-accuracy.md §0d).
  double max_output_error = 0.010;
  double min_output_cosine = 0.995;
  bool gptq = true;  // int8: conv weights rounded by GPTQ on the calibration data, else to nearest (quantize.h)
  int clip_candidates = 0;  // int8: conv input ranges also tried clipped (quantize.h QuantizeOptions)
  std::vector<std::string> keep_float;  // int8: linear/conv2d node names never quantized
  std::optional<ExportQat> qat;         // int8 image models: QAT first, then the export at its learned ranges
  std::optional<ExportPrune> prune;     // image models: structured pruning before everything above
  // Magnitude (unstructured) pruning: this fraction of each conv/linear weight set to zero (0: none). No speed-up:
  // the report's "sparsity" says so (prune.h magnitude_prune).
  double sparsity = 0.0;
  double min_agreement = 0.97;          // top-1 agreement with fp32 below this refuses the export ...
  bool allow_accuracy_loss = false;     // ... unless this is set (the report still says so)
  bool overwrite = false;  // replace an existing package directory (never a run, nor anything else)
  int threads = 0;
  // Progress lines (one per stage still running 2 s into the export, with an ETA; core/progress.h), e.g.
  // &std::cerr; nullptr: silent. Each stage's seconds go into the report's "timings_s" either way.
  std::ostream* progress = nullptr;
  double progress_after_s = 2.0;  // a stage prints only once the export has run this long (0: every stage)
};

struct ExportReport {
  nlohmann::ordered_json json;  // what quantization_report.json holds
  std::string summary;          // one line for the terminal
  // Non-empty when the package was written but its accuracy on real data is unknown (an int8 package calibrated on
  // random inputs: no --calibration); the CLI prints it as a warning, the report holds it under "warning".
  std::string warning;
};

// Builds, lowers, converts (bf16 / int8), checks against the source model and writes the package: into a
// fresh OUT.tmp-PID beside `out`, renamed into place; with `overwrite` the old package is replaced as a whole
// (no file of it remains). Refused before any work: an `out` that is or holds a training run, is or holds or
// lies inside `model_dir`, or (with `overwrite`) is a non-empty directory other than a package.
// Throws hotpath::Error (one line naming the input) on any bad input or a refused accuracy loss;
// `out` is as it was then, and no temp dir is left.
ExportReport export_package(const ExportSource& source, const ExportOptions& options);

// The model of `source`, lowered to an fp32 graph, with the package metadata (no weights written).
// For `hotpath export --format onnx` and tests.
struct LoweredModel {
  Package package;  // kind, architecture, labels, preprocessing, source
  Graph graph;
  std::vector<std::filesystem::path> tokenizer_files;  // text: to copy beside the package
};
LoweredModel lower_export_source(const ExportSource& source);

// `hotpath export --format onnx`: the fp32 graph of `source` (or of an fp32 model package given as model_dir: a pruned
// one, say) written to `out` as ONNX (opset 17, a dynamic batch
// axis, and a dynamic sequence axis for text inputs). An existing `out` is replaced only with `overwrite`, and only
// when it is an .onnx file (never a run's weights). Returns the lowered model (its graph's nodes and inputs).
LoweredModel export_onnx_file(const ExportSource& source, const std::filesystem::path& out, bool overwrite,
                              const std::string& producer_version);

}  // namespace hotpath::infer
