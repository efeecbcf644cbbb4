// hotpath/infer/classifier.h — an image classifier ready to answer: model + eval preprocessing + labels.
//
//   Classifier c = Classifier::from_dir("runs/fashion_mnist");        // a run directory or a model package
//   at::Tensor x = c.preprocess().load_image("shoe.png").unsqueeze(0);   // [1, C, H, W]
//   for (const TopK& t : c.classify(x, 5).front()) std::cout << t.label << " " << t.prob << "\n";
//
// What `hotpath predict` prints and the server will answer come from here, so both see the same
// preprocessing (the package's) and the same softmax + top-k.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/infer/engine.h"
#include "hotpath/infer/evaluate.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/preprocess.h"
#include "hotpath/models/registry.h"

namespace hotpath::infer {

struct TopK {
  std::int64_t index = 0;
  std::string label;  // the class name, or the index as text when the package has no names
  double prob = 0;    // softmax probability
};

// Softmax over logits [N, C] → for each row the min(k, C) most probable classes, most probable first, named by
// `labels` (the index as text past its end). The one post-processing of every classifier.
std::vector<std::vector<TopK>> top_k(const at::Tensor& logits, std::int64_t k, const std::vector<std::string>& labels);

class Classifier {
 public:
  // `model` in eval mode; class_names may be empty.
  Classifier(models::ModelHandle model, EvalPreprocess preprocess, std::vector<std::string> class_names);
  // An image classifier package (package.h), in the one place that decides how it runs: a model package in the
  // engine at its precision (`threads`: 0 = all cores), a run directory's training model eagerly, under `autocast`
  // (bf16 or fp16; refused for a model package, which runs at its exported precision).
  static Classifier from_package(const Package& package, int threads = 0,
                                 std::optional<at::ScalarType> autocast = std::nullopt);
  // A registry model with its pretrained weights (models/vision/pretrained.h): its ImageNet
  // preprocessing and class names. Throws for a model without pretrained weights.
  static Classifier from_pretrained(const std::string& model);
  // from_package(read_package(dir)).
  static Classifier from_dir(const std::string& dir, int threads = 0);

  [[nodiscard]] const EvalPreprocess& preprocess() const { return preprocess_; }
  // The training model (nullptr for a package, which the engine runs).
  [[nodiscard]] const models::ModelHandle& model() const { return model_; }
  // Logits [N, classes] float32 of a preprocessed batch, without autograd.
  [[nodiscard]] at::Tensor logits(const at::Tensor& batch) const;

  // batch [N, C, H, W] made by preprocess() → for each image the min(k, classes) most probable
  // classes, most probable first. Runs without autograd.
  [[nodiscard]] std::vector<std::vector<TopK>> classify(const at::Tensor& batch, std::int64_t k) const;

 private:
  Classifier(std::shared_ptr<const Engine> engine, EvalPreprocess preprocess, std::vector<std::string> class_names);

  models::ModelHandle model_;
  std::optional<at::ScalarType> autocast_;  // the eager model's
  std::shared_ptr<const Engine> engine_;
  EvalPreprocess preprocess_;
  std::vector<std::string> class_names_;
};

struct DirEvalOptions {
  std::int64_t batch_size = 256;
  std::int64_t workers = 2;   // decode threads
  int threads = 0;            // a package's engine threads (0: all cores)
  std::string precision;      // run directories: "" / fp32, bf16 or fp16 autocast; a package runs at its own
};
struct DirEvalResult {
  std::string model;  // "cnn_small" or "cnn_small (int8 package)"
  EvalResult eval;
};
// `hotpath eval` and hotpath.infer.evaluate: top-1/top-5/loss of a run directory (eager, with `precision`) or a
// model package (its engine) — whichever Classifier::from_package runs — over image shards, through the model's own eval preprocessing. A label outside the
// model's classes is a bad sample (skipped and counted by the loader). Throws naming what is wrong.
DirEvalResult evaluate_dir(const std::string& dir, const std::vector<std::string>& shard_patterns,
                           const DirEvalOptions& options = {});

}  // namespace hotpath::infer
