// hotpath/infer/classifier.h — an image classifier ready to answer: model + eval preprocessing + labels.
//
//   Classifier c = Classifier::from_package(read_package("runs/fashion_mnist"));
//   at::Tensor x = c.preprocess().load_image("shoe.png").unsqueeze(0);   // [1, C, H, W]
//   for (const TopK& t : c.classify(x, 5).front()) std::cout << t.label << " " << t.prob << "\n";
//
// What `hotpath predict` prints and the server will answer come from here, so both see the same
// preprocessing (the package's) and the same softmax + top-k.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/infer/package.h"
#include "hotpath/infer/preprocess.h"
#include "hotpath/models/registry.h"

namespace hotpath::infer {

struct TopK {
  std::int64_t index = 0;
  std::string label;  // the class name, or the index as text when the package has no names
  double prob = 0;    // softmax probability
};

class Classifier {
 public:
  // `model` in eval mode; class_names may be empty.
  Classifier(models::ModelHandle model, EvalPreprocess preprocess, std::vector<std::string> class_names);
  // The package's model (load_package_model), preprocessing and class names.
  static Classifier from_package(const ModelPackage& package);
  // A registry model with its pretrained weights (models/vision/pretrained.h): its ImageNet
  // preprocessing and class names. Throws for a model without pretrained weights.
  static Classifier from_pretrained(const std::string& model);

  [[nodiscard]] const EvalPreprocess& preprocess() const { return preprocess_; }
  [[nodiscard]] const models::ModelHandle& model() const { return model_; }

  // batch [N, C, H, W] made by preprocess() → for each image the min(k, classes) most probable
  // classes, most probable first. Runs without autograd.
  [[nodiscard]] std::vector<std::vector<TopK>> classify(const at::Tensor& batch, std::int64_t k) const;

 private:
  models::ModelHandle model_;
  EvalPreprocess preprocess_;
  std::vector<std::string> class_names_;
};

}  // namespace hotpath::infer
