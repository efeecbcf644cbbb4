// hotpath/models/classifier.h — the interface every image model in hotpath implements.
//
//   std::shared_ptr<ImageClassifier> model = create_model("resnet18", {.num_classes = 10});
//   model->eval();
//   at::Tensor logits = model->forward(images);  // [N, C, H, W] float → [N, num_classes]
//
// A torch::nn::Module, so parameters(), named_parameters(), train()/eval(), to(device) and the
// optimizers work as usual; the virtual forward lets the trainer, eval and export code hold any
// model (ResNet now; ViT, EfficientNet-Lite later) through one pointer type.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>

#include "hotpath/ops/dropout.h"

namespace hotpath::models {

class ImageClassifier : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;
  // Images [N, in_channels, H, W] (float, NCHW or channels-last) → logits [N, num_classes].
  virtual at::Tensor forward(const at::Tensor& images) = 0;
  // The same, with every random draw of training (dropout, stochastic depth) keyed by `dropout` when it is
  // keyed (one global sample index per row of images: data-parallel ranks draw what one process would);
  // not keyed: forward(images). Models without random draws keep this default.
  virtual at::Tensor forward(const at::Tensor& images, const ops::DropoutSource& dropout) {
    (void)dropout;
    return forward(images);
  }
};

}  // namespace hotpath::models
