// hotpath/infer/package.h — a trained model as a directory: model.safetensors + model.json.
//
//   ModelPackage pkg = read_package("runs/fashion_mnist");             // what `--model-dir` names
//   models::ModelHandle model = load_package_model(pkg);               // built, weights loaded, eval mode
//   data::Loader eval(pkg.preprocess.loader_options(shards));          // or pkg.preprocess.load_image(path)
//
// model.json records what inference needs besides the weights: the registry name, classes, the eval
// preprocessing (infer/preprocess.h) and the class names. Its keys are flat and unchanged since the
// first version ("in_channels", "image_size", "eval_crop", ...), so old run directories still load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/infer/preprocess.h"
#include "hotpath/models/registry.h"

namespace hotpath::infer {

struct ModelPackage {
  std::string dir;
  std::string model;                 // registry name
  std::int64_t num_classes = 0;
  EvalPreprocess preprocess;         // its channels are the model's input channels
  std::vector<std::string> class_names;  // may be empty
  std::string weights = "model.safetensors";  // relative to dir
};

std::string package_to_json(const ModelPackage& package);
// Reads DIR/model.json; throws naming the file and the missing, mistyped or out-of-range field.
ModelPackage read_package(const std::string& dir);
// Creates the model, loads DIR/<weights> (all keys must match) and puts it in eval mode; a package
// trained channels-last gets its 4-D weights in channels-last memory, like the batches it is given.
models::ModelHandle load_package_model(const ModelPackage& package);

}  // namespace hotpath::infer
