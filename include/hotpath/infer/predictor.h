// hotpath/infer/predictor.h — one trained model ready to answer, whatever its package holds: the one place that
// decides "engine or eager" (a model package runs in the engine at its exported precision, a training run
// directory runs its model eagerly), and the one owner of the package's pre- and post-processing (the image
// transform, or the tokenizer with its max length, pad id, truncation and vocabulary bounds; softmax + top-k
// with the labels, or the embedding as the graph pooled it). `hotpath predict`, `eval`, `embed`, `serve`,
// `bench serve` and the Python API's classifiers all run a Predictor.
//
//   Predictor p = Predictor::open("pkg/minilm-reuters-int8");           // or a run directory, or read_package()
//   text::TextBatchTensors t = p.text_inputs(texts);                  // tokenized, truncated, padded as exported
//   at::Tensor logits = p.run({t.input_ids, t.attention_mask, t.token_type_ids}).front();
//   for (const TopK& k : p.top_k(logits).front()) std::cout << k.label << " " << k.prob << "\n";
//
// run() is one caller at a time (the engine's buffers): the server's batcher serialises its calls.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/infer/engine.h"
#include "hotpath/infer/package.h"
#include "hotpath/text/text_batch_tensor.h"
#include "hotpath/text/tokenizer.h"

namespace hotpath::infer {

struct TopK {
  std::int64_t index = 0;
  std::string label;  // the class name, or the index as text when the package has no names
  double prob = 0;    // softmax probability
};

// Softmax over logits [N, C] → for each row the min(k, C) most probable classes, most probable first, named by
// `labels` (the index as text past its end). The one post-processing of every classifier.
std::vector<std::vector<TopK>> top_k(const at::Tensor& logits, std::int64_t k, const std::vector<std::string>& labels);

struct PredictorOptions {
  int threads = 0;               // the engine's intra-op threads (0: LibTorch's setting)
  at::Device device = at::kCPU;  // model packages: the engine's device (CUDA: engine.h)
  // Run directories: bf16 / fp16 autocast of the training model; refused for a model package.
  std::optional<at::ScalarType> autocast = std::nullopt;
  std::int64_t max_length = 0;   // text: tokens per sequence; 0: the package's
};

class Predictor {
 public:
  // A model package in the engine, or a run directory's training model (eval mode, `autocast` if given). Text
  // packages written before preprocess.json recorded vocab_size / pad_id get them from the weights and the
  // tokenizer; recorded ones must agree with them. Errors name the file and the field.
  static Predictor load(const Package& package, const PredictorOptions& options = {});
  // load(read_package(dir)).
  static Predictor open(const std::filesystem::path& dir, const PredictorOptions& options = {});
  // An image model held in memory (a registry model with pretrained weights), eagerly.
  static Predictor from_model(models::ModelHandle model, EvalPreprocess image, std::vector<std::string> labels);

  [[nodiscard]] const Package& package() const { return *package_; }
  [[nodiscard]] PackageKind kind() const { return package_->kind; }
  [[nodiscard]] const std::vector<std::string>& labels() const { return package_->labels; }
  [[nodiscard]] const EvalPreprocess& image() const { return package_->image; }
  // Text packages: max_length (PredictorOptions applied), vocab_size, type_vocab_size and pad_id all set.
  [[nodiscard]] const TextPreprocess& text() const { return package_->text; }
  [[nodiscard]] const Postprocess& postprocess() const { return package_->postprocess; }
  // The engine of a model package; nullptr for a run directory (eager).
  [[nodiscard]] const Engine* engine() const { return engine_.get(); }
  // The training model of a run directory; nullptr for a model package.
  [[nodiscard]] const models::ModelHandle& model() const { return model_; }
  // A text package's tokenizer; nullptr where the package has no tokenizer files (token ids only).
  [[nodiscard]] const text::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The first output's width: the classes, or the embedding's dimension (0: a model in memory without labels).
  [[nodiscard]] std::int64_t output_width() const { return output_width_; }
  // Names of run()'s inputs and outputs, in order.
  [[nodiscard]] std::vector<ValueSpec> input_specs() const;
  [[nodiscard]] std::vector<std::string> output_names() const;

  // Pre-processing. An encoded JPEG/PNG → [C, H, W] through the package's eval transform.
  [[nodiscard]] at::Tensor image_input(std::span<const std::byte> encoded) const;
  // Texts (and a second text each, or none) → encodings, truncated to max_length with the package's
  // truncation, unpadded. Throws for a package without a tokenizer, naming what to send instead.
  [[nodiscard]] std::vector<text::Encoding> encode(std::span<const std::string_view> texts,
                                                   std::span<const std::string_view> pairs = {},
                                                   unsigned threads = 1) const;
  // encode() padded to the longest with the package's pad id: [N, L] int64 ids, mask, type ids.
  [[nodiscard]] text::TextBatchTensors text_inputs(std::span<const std::string_view> texts,
                                                   std::span<const std::string_view> pairs = {}) const;

  // The model on inputs in input_specs() order → float32 outputs, without autograd. One caller at a time.
  [[nodiscard]] std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  // Post-processing of class scores: top_k over the labels (no k: the package's postprocess.top_k).
  [[nodiscard]] std::vector<std::vector<TopK>> top_k(const at::Tensor& logits,
                                                     std::optional<std::int64_t> k = std::nullopt) const;

 private:
  Predictor() = default;

  std::shared_ptr<const Package> package_;
  std::shared_ptr<const Engine> engine_;
  models::ModelHandle model_;
  std::optional<at::ScalarType> autocast_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::int64_t output_width_ = 0;
};

}  // namespace hotpath::infer
