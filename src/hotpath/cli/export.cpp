// `hotpath export`: a trained model (run directory, Hugging Face / sentence-transformers directory, or a
// registry model) → a model package for the engine, `predict`, `eval`, `embed`, `serve` — or an ONNX file.
//   hotpath export --model-dir runs/fmnist --out pkg/fmnist-int8 --precision int8 --calibration 'val-*.tar'
//   hotpath export --model efficientnet_lite0 --pretrained --out pkg/lite0
//   hotpath export --model resnet50 --num-classes 1000 --random-init --out pkg/r50 --precision bf16
//   hotpath export --config bert-base.json --random-init --out pkg/bert-base --precision int8
//   hotpath export --model-dir runs/fmnist --format onnx --out fmnist.onnx
//   hotpath export --model-dir runs/fmnist --out pkg/fmnist-half --prune-macs 0.5 --prune-data 'train-*.tar'
//   hotpath export --model-dir pkg/fmnist-half --format onnx --out fmnist-half.onnx
#include <CLI/CLI.hpp>

#include <ATen/Parallel.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flags_file.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/export.h"

namespace hotpath::cli {
namespace {

struct ExportArgs {
  infer::ExportSource source;
  std::string out;
  // The library's defaults (infer/export.h), one source for both; the names are the flags' spellings of them.
  std::string precision = infer::precision_name(infer::ExportOptions{}.precision);
  std::string format = "package";
  std::vector<std::string> calibration;
  std::int64_t calibration_samples = infer::ExportOptions{}.calibration_samples;
  std::int64_t max_bad_samples = infer::ExportOptions{}.max_bad_samples;
  double max_output_error = infer::ExportOptions{}.max_output_error;
  double min_output_cosine = infer::ExportOptions{}.min_output_cosine;
  std::string weight_rounding = infer::ExportOptions{}.gptq ? "gptq" : "nearest";
  int clip_candidates = infer::ExportOptions{}.clip_candidates;
  std::vector<std::string> keep_float;
  double min_agreement = infer::ExportOptions{}.min_agreement;
  bool allow_accuracy_loss = infer::ExportOptions{}.allow_accuracy_loss;
  bool overwrite = infer::ExportOptions{}.overwrite;
  int threads = infer::ExportOptions{}.threads;
  infer::ExportQat qat{};  // used when qat.data is set (--qat-data)
  std::string recipe;      // --recipe: more of these flags from a YAML file
  bool qat_biases_only = !infer::QatOptions{}.train_weights;
  infer::ExportPrune prune{};  // used when --prune-ratio or --prune-macs is set
  std::string prune_importance = infer::importance_name(infer::PruneOptions{}.importance);
  double sparsity = infer::ExportOptions{}.sparsity;
};

void run(const ExportArgs& a) {
  if (a.threads > 0) at::set_num_threads(a.threads);
  if (a.format == "onnx") {
    HOTPATH_CHECK(a.precision == "fp32", "export: --format onnx writes the fp32 graph; drop --precision ",
                  a.precision, " (quantize in ONNX Runtime, or export a hotpath package for int8)");
    const infer::LoweredModel m = infer::export_onnx_file(a.source, a.out, a.overwrite, HOTPATH_VERSION);
    std::cout << "wrote " << a.out << " (opset 17, " << m.graph.nodes.size() << " graph nodes, dynamic axes: ";
    for (std::size_t i = 0; i < m.graph.inputs.size(); ++i) {
      std::cout << (i ? "; " : "") << m.graph.inputs[i].name << " batch"
                << (m.graph.inputs[i].shape.size() == 2 ? " sequence" : "");
    }
    std::cout << ")\n";
    return;
  }
  infer::ExportQat qat = a.qat;
  qat.options.train_weights = !a.qat_biases_only;
  infer::ExportPrune prune = a.prune;
  prune.options.importance = infer::importance_from_name(a.prune_importance);
  const bool pruning = prune.options.ratio != 0.0 || prune.options.target_macs != 0.0;
  HOTPATH_CHECK(pruning || (prune.data.empty() && prune.options.ignore.empty()),
                "export: --prune-data/--prune-ignore prune a model: add --prune-macs FRACTION or --prune-ratio R");
  const infer::ExportReport r = infer::export_package(
      a.source, {.out = a.out,
                 .precision = infer::parse_precision(a.precision, "export: --precision"),
                 .calibration = a.calibration,
                 .calibration_samples = a.calibration_samples,
                 .max_bad_samples = a.max_bad_samples,
                 .max_output_error = a.max_output_error,
                 .min_output_cosine = a.min_output_cosine,
                 .gptq = a.weight_rounding == "gptq",
                 .clip_candidates = a.clip_candidates,
                 .keep_float = a.keep_float,
                 .qat = a.qat.data.empty() ? std::nullopt : std::optional<infer::ExportQat>(qat),
                 .prune = pruning ? std::optional<infer::ExportPrune>(prune) : std::nullopt,
                 .sparsity = a.sparsity,
                 .min_agreement = a.min_agreement,
                 .allow_accuracy_loss = a.allow_accuracy_loss,
                 .overwrite = a.overwrite,
                 .threads = a.threads,
                 .progress = &std::cerr});
  std::cout << "wrote " << a.out << ": " << r.summary << "\n";
  if (!r.warning.empty()) std::cerr << "warning: " << r.warning << "\n";
}

}  // namespace

void add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "Write a model package (or ONNX file) for inference and serving");
  cmd->add_option("--model-dir", a->source.model_dir,
                  "Image run (model.json), text run, Hugging Face or sentence-transformers directory");
  cmd->add_option("--model", a->source.model, "A registry model name (with --pretrained or --random-init)");
  cmd->add_option("--config", a->source.bert_config, "A BERT-shape config.json (with --random-init)");
  cmd->add_flag("--pretrained", a->source.pretrained, "The registry model's real pretrained weights");
  cmd->add_flag("--random-init", a->source.random_init, "Random weights (seed 0): benchmark shapes");
  cmd->add_option("--num-classes", a->source.num_classes, "Classes of a --random-init image model")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--channels", a->source.channels, "Input channels of a --random-init image model")
      ->check(CLI::Range(1, 4));
  cmd->add_option("--image-size", a->source.image_size, "Input size of a --random-init image model")
      ->check(CLI::Range(8, 4096));
  cmd->add_option("--task", a->source.task, "Text models: classify, embed or auto (modules.json → embed)")
      ->check(CLI::IsMember({"auto", "classify", "embed"}));
  cmd->add_option("--max-length", a->source.max_length, "Text packages: tokens per sequence (0 = min(128, positions))")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--out", a->out, "Package directory (or .onnx file) to write")->required();
  cmd->add_option("--precision", a->precision, "fp32, bf16 or int8")->check(CLI::IsMember({"fp32", "bf16", "int8"}));
  cmd->add_option("--format", a->format, "package (default) or onnx")->check(CLI::IsMember({"package", "onnx"}));
  cmd->add_option("--calibration", a->calibration,
                  "Real data for int8 calibration and the accuracy report: image shards, or a text file of lines");
  cmd->add_option("--calibration-samples", a->calibration_samples)->check(CLI::Range(1, 1000000));
  cmd->add_option("--max-bad-samples", a->max_bad_samples, "Corrupt calibration samples skipped before failing")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--max-output-error", a->max_output_error,
                  "int8: keep layers float until the logits are within this relative error of fp32 on the "
                  "calibration data (0: no target)")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--min-output-cosine", a->min_output_cosine,
                  "int8 sentence embeddings: keep layers float until every calibration row's cosine with fp32 "
                  "reaches this (the export refuses below 0.99)")
      ->check(CLI::Range(-1.0, 1.0));
  cmd->add_option("--weight-rounding", a->weight_rounding,
                  "int8: conv weights rounded by GPTQ (smallest output error on the calibration data) or to nearest")
      ->check(CLI::IsMember({"gptq", "nearest"}));
  cmd->add_option("--clip-candidates", a->clip_candidates,
                  "int8: also try each conv input range clipped to min/max x 0.85^i, i = 1..N, and keep the one "
                  "with the least output error (0: min/max and the percentile only)")
      ->check(CLI::Range(0, 32));
  cmd->add_option("--keep-float", a->keep_float, "int8: node names (linear/conv2d) never quantized");
  cmd->add_option("--qat-data", a->qat.data,
                  "int8 image models: quantization-aware training on these image shards before the export "
                  "(distillation from the fp32 model; labels with --qat-label-weight)");
  cmd->add_option("--qat-steps", a->qat.options.steps, "QAT optimizer steps")->check(CLI::Range(1, 10000000));
  cmd->add_option("--qat-lr", a->qat.options.lr, "QAT learning rate (AdamW)")->check(CLI::Range(1e-12, 1.0));
  cmd->add_option("--qat-batch-size", a->qat.batch_size, "QAT images per step")->check(CLI::Range(1, 4096));
  cmd->add_option("--qat-observer-steps", a->qat.options.observer_steps,
                  "QAT steps whose batches move the conv input ranges before they freeze (-1: half the steps)")
      ->check(CLI::Range(-1, 10000000));
  cmd->add_option("--qat-temperature", a->qat.options.temperature, "QAT distillation temperature")
      ->check(CLI::Range(1e-3, 100.0));
  cmd->add_option("--qat-label-weight", a->qat.options.label_weight,
                  "QAT: + this x cross-entropy with the shards' labels (0: distillation only)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--qat-crop-scale", a->qat.crop_scale_min,
                  "QAT: the random resized crop's smallest area fraction (1: no crop, the eval transform)")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--qat-seed", a->qat.seed, "QAT: the data order and augmentation seed");
  cmd->add_flag("--qat-biases-only", a->qat_biases_only,
                "QAT: train the biases and ranges only, the weights stay fp32-rounded (little data)");
  cmd->add_option("--prune-macs", a->prune.options.target_macs,
                  "Image models: structured pruning to this fraction of the multiply-adds (0.5: half), channels "
                  "removed from every prunable group at one searched ratio")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--prune-ratio", a->prune.options.ratio,
                  "Image models: structured pruning removing this fraction of each prunable group's channels")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--prune-importance", a->prune_importance, "Channel importance: l1, l2 or taylor (needs --prune-data)")
      ->check(CLI::IsMember({"l1", "l2", "taylor"}));
  cmd->add_option("--prune-round-to", a->prune.options.round_to, "Kept widths a multiple of this (8 suits SIMD)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--prune-iterations", a->prune.options.iterations,
                  "Prune in this many steps, fine-tuning after each (with --prune-data)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--prune-ignore", a->prune.options.ignore, "conv2d/linear node names whose output channels stay");
  cmd->add_option("--prune-data", a->prune.data,
                  "Image shards to fine-tune on after each cut (distillation from the unpruned model) and for taylor");
  cmd->add_option("--prune-finetune-steps", a->prune.options.finetune_steps, "Fine-tuning steps after each cut")
      ->check(CLI::Range(0, 10000000));
  cmd->add_option("--prune-lr", a->prune.options.finetune.lr, "Fine-tuning learning rate (AdamW)")
      ->check(CLI::Range(1e-12, 1.0));
  cmd->add_option("--prune-batch-size", a->prune.batch_size, "Fine-tuning images per step")->check(CLI::Range(1, 4096));
  cmd->add_option("--prune-temperature", a->prune.options.finetune.temperature, "Fine-tuning distillation temperature")
      ->check(CLI::Range(1e-3, 100.0));
  cmd->add_option("--prune-label-weight", a->prune.options.finetune.label_weight,
                  "Fine-tuning: + this x cross-entropy with the shards' labels (0: distillation only)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--prune-crop-scale", a->prune.crop_scale_min,
                  "Fine-tuning: the random resized crop's smallest area fraction (1: the eval transform)")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--prune-seed", a->prune.seed, "Fine-tuning: the data order and augmentation seed");
  cmd->add_option("--sparsity", a->sparsity,
                  "Magnitude (unstructured) pruning: zero this fraction of each weight. No speed-up: the tensors stay "
                  "dense (use --prune-macs for a faster model)")
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--min-agreement", a->min_agreement, "Refuse below this top-1 agreement with fp32 (real data)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--allow-accuracy-loss", a->allow_accuracy_loss, "Write the package even below --min-agreement");
  cmd->add_flag("--overwrite", a->overwrite,
                "Replace an existing package as a whole (or .onnx file); never a training run or --model-dir");
  cmd->add_option("--threads", a->threads, "LibTorch intra-op threads (0 = default)")->check(CLI::Range(0, 1024));
  cmd->add_option("--recipe", a->recipe,
                  "A YAML map of these flags without their dashes (configs/qat_efficientnet_lite0.yaml); flags given "
                  "here win")
      ->configurable(false);
  cmd->callback([a, cmd] {
    apply_flags_file(*cmd, a->recipe);
    run(*a);
  });
}

}  // namespace hotpath::cli
