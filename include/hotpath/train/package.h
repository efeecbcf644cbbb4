// hotpath/train/package.h — a trained model as a directory: model.safetensors + model.json.
//
//   ModelPackage pkg = read_package("runs/fashion_mnist");        // what `--model-dir` names
//   models::ModelHandle model = load_package_model(pkg);          // built, weights loaded, eval mode
//   data::LoaderOptions eval = package_loader_options(pkg, shards);
//
// model.json records what inference needs besides the weights: the registry name, classes,
// input channels and size, the eval preprocessing (resize/crop, mean/std) and the class names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/data/loader.h"
#include "hotpath/models/registry.h"

namespace hotpath::train {

struct ModelPackage {
  std::string dir;
  std::string model;                 // registry name
  std::int64_t num_classes = 0;
  std::int64_t in_channels = 3;
  std::int64_t image_size = 224;
  std::string eval_crop = "resize_center_crop";  // resize_center_crop | resize
  std::int64_t resize_shorter = 256;
  std::vector<double> mean;
  std::vector<double> std;
  std::vector<std::string> class_names;  // may be empty
  bool channels_last = false;
  std::string weights = "model.safetensors";  // relative to dir
};

std::string package_to_json(const ModelPackage& package);
// Reads DIR/model.json; throws naming the file and the missing or mistyped field.
ModelPackage read_package(const std::string& dir);
// Creates the model, loads DIR/<weights> (all keys must match) and puts it in eval mode.
models::ModelHandle load_package_model(const ModelPackage& package);
// Loader settings for evaluating the package on shards (no augmentation, no shuffle, keep the tail).
data::LoaderOptions package_loader_options(const ModelPackage& package, const std::vector<std::string>& shards);

}  // namespace hotpath::train
