// hotpath/infer/classifier.h — an image classifier ready to answer: model + eval preprocessing + labels.
//
//   Classifier c = Classifier::from_dir("runs/fashion_mnist");        // a run directory or a model package
//   at::Tensor x = c.preprocess().load_image("shoe.png").unsqueeze(0);   // [1, C, H, W]
//   for (const TopK& t : c.classify(x, 5).front()) std::cout << t.label << " " << t.prob << "\n";
//
// A view of one Predictor (predictor.h), which decides how the model runs and owns the package's preprocessing
// and softmax + top-k: what `hotpath predict`, `hotpath eval` and hotpath.infer.ImageClassifier run.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/infer/evaluate.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/predictor.h"
#include "hotpath/infer/preprocess.h"
#include "hotpath/models/registry.h"

namespace hotpath::infer {

class Classifier {
 public:
  // An image model held in memory, in eval mode; class_names may be empty (classes named by index).
  Classifier(models::ModelHandle model, EvalPreprocess preprocess, std::vector<std::string> class_names);
  // An image_classifier Predictor; anything else is an error naming the package.
  explicit Classifier(Predictor predictor);
  // An image classifier package: Predictor::load with `threads` (0: all cores) and, for a run directory,
  // `autocast` (bf16 or fp16; refused for a model package, which runs at its exported precision).
  static Classifier from_package(const Package& package, int threads = 0,
                                 std::optional<at::ScalarType> autocast = std::nullopt);
  // A registry model with its pretrained weights (models/vision/pretrained.h): its ImageNet
  // preprocessing and class names. Throws for a model without pretrained weights.
  static Classifier from_pretrained(const std::string& model);
  // from_package(read_package(dir)).
  static Classifier from_dir(const std::string& dir, int threads = 0);

  [[nodiscard]] const EvalPreprocess& preprocess() const { return predictor_.image(); }
  [[nodiscard]] const Predictor& predictor() const { return predictor_; }
  // The training model (nullptr for a package, which the engine runs).
  [[nodiscard]] const models::ModelHandle& model() const { return predictor_.model(); }
  // Logits [N, classes] float32 of a preprocessed batch, without autograd.
  [[nodiscard]] at::Tensor logits(const at::Tensor& batch) const;

  // batch [N, C, H, W] made by preprocess() → for each image the min(k, classes) most probable
  // classes, most probable first. Runs without autograd.
  [[nodiscard]] std::vector<std::vector<TopK>> classify(const at::Tensor& batch, std::int64_t k) const;

 private:
  Predictor predictor_;
};

struct DirEvalOptions {
  std::int64_t batch_size = 256;
  std::int64_t workers = 2;   // decode (image) or tokenizer (text) threads
  int threads = 0;            // a package's engine threads (0: all cores)
  std::string precision;      // run directories: "" / fp32, bf16 or fp16 autocast; a package runs at its own
};
struct DirEvalResult {
  std::string model;  // "cnn_small" or "cnn_small (int8 package)"
  EvalResult eval;
};
// `hotpath eval` and hotpath.infer.evaluate: top-1/top-5/loss over shards, through the model's Predictor. An image
// run directory (eager, with `precision`) or image package (its engine) over image shards with its eval
// preprocessing: a label outside the model's classes is a bad sample (skipped and counted by the loader). A
// text_classifier package over text shards (KEY.txt [+ KEY.pair.txt] with its tokenizer and max length, or KEY.ids),
// in order: a label or id outside the package's is an error naming it. Throws naming what is wrong.
DirEvalResult evaluate_dir(const std::string& dir, const std::vector<std::string>& shard_patterns,
                           const DirEvalOptions& options = {});

}  // namespace hotpath::infer
