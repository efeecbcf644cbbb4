// hotpath/models/registry.h — build an image model by name (what `--model resnet50` resolves through).
//
//   ModelHandle model = create_model("resnet18_small", {.num_classes = 10, .in_channels = 1});
//   load_safetensors(*model, "run/model.safetensors");        // weights.h
//   at::Tensor logits = model->forward(images);
//
// Names: resnet18, resnet34, resnet50, resnet101, resnet152 (torchvision's architectures and
// state_dict keys) and the same with "_small" (3x3 stride-1 stem, no max pool, for 28×28/32×32 data);
// vit_b_16, vit_tiny (vit.h); efficientnet_b0, efficientnet_lite0 (efficientnet.h; pretrained Lite0
// weights: pretrained.h). Families add their names to the table in registry.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/models/classifier.h"

namespace hotpath::models {

using ModelHandle = std::shared_ptr<ImageClassifier>;

// What every model takes; a family ignores nothing silently: an option it cannot honour is an error.
struct ModelOptions {
  std::int64_t num_classes = 1000;
  std::int64_t in_channels = 3;
  bool zero_init_residual = false;  // ResNet only: each block's last batch norm starts at 0
};

// Throws hotpath::Error naming the known models for an unknown `name`.
ModelHandle create_model(const std::string& name, const ModelOptions& options = {});
// Every name create_model accepts, sorted.
std::vector<std::string> model_names();

}  // namespace hotpath::models
