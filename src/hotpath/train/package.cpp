#include "hotpath/train/package.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/weights.h"

namespace hotpath::train {

std::string package_to_json(const ModelPackage& p) {
  nlohmann::ordered_json j;
  j["format"] = "hotpath-model";
  j["model"] = p.model;
  j["num_classes"] = p.num_classes;
  j["in_channels"] = p.in_channels;
  j["image_size"] = p.image_size;
  j["eval_crop"] = p.eval_crop;
  j["resize_shorter"] = p.resize_shorter;
  j["mean"] = p.mean;
  j["std"] = p.std;
  j["class_names"] = p.class_names;
  j["channels_last"] = p.channels_last;
  j["weights"] = p.weights;
  return j.dump(2) + "\n";
}

ModelPackage read_package(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "model.json").string();
  HOTPATH_CHECK(std::filesystem::exists(path), path,
                ": not found; --model-dir must name a run directory written by `hotpath train`");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, path, ": invalid JSON: ", e.what());
  }
  HOTPATH_CHECK(j.is_object(), path, ": expected a JSON object");
  ModelPackage p;
  p.dir = dir;
  const auto get = [&](const char* key, auto& value, bool required) {
    if (!j.contains(key)) {
      HOTPATH_CHECK(!required, path, ": missing field '", key, "'");
      return;
    }
    try {
      j.at(key).get_to(value);
    } catch (const nlohmann::json::exception&) {
      HOTPATH_CHECK(false, path, ": field '", key, "' has the wrong type (", j.at(key).type_name(), ")");
    }
  };
  get("model", p.model, true);
  get("num_classes", p.num_classes, true);
  get("in_channels", p.in_channels, true);
  get("image_size", p.image_size, true);
  get("eval_crop", p.eval_crop, false);
  get("resize_shorter", p.resize_shorter, false);
  get("mean", p.mean, true);
  get("std", p.std, true);
  get("class_names", p.class_names, false);
  get("channels_last", p.channels_last, false);
  get("weights", p.weights, false);
  HOTPATH_CHECK(p.eval_crop == "resize_center_crop" || p.eval_crop == "resize", path,
                ": eval_crop must be resize_center_crop or resize, got '", p.eval_crop, "'");
  HOTPATH_CHECK(p.mean.size() == static_cast<std::size_t>(p.in_channels) && p.std.size() == p.mean.size(), path,
                ": mean and std need ", p.in_channels, " values each");
  HOTPATH_CHECK(p.class_names.empty() || p.class_names.size() == static_cast<std::size_t>(p.num_classes), path,
                ": class_names has ", p.class_names.size(), " names for ", p.num_classes, " classes");
  return p;
}

models::ModelHandle load_package_model(const ModelPackage& p) {
  models::ModelHandle model =
      models::create_model(p.model, {.num_classes = p.num_classes, .in_channels = p.in_channels});
  models::load_safetensors(*model, (std::filesystem::path(p.dir) / p.weights).string());
  model->eval();
  return model;
}

data::LoaderOptions package_loader_options(const ModelPackage& p, const std::vector<std::string>& shards) {
  data::LoaderOptions o;
  o.shards = shards;
  o.size = static_cast<int>(p.image_size);
  o.channels = static_cast<int>(p.in_channels);
  o.crop = p.eval_crop == "resize" ? data::CropMode::kResize : data::CropMode::kResizeCenterCrop;
  o.resize_shorter = static_cast<int>(p.resize_shorter);
  o.flip_probability = 0;
  o.shuffle = false;
  o.drop_last = false;
  o.allow_dct_scaling = false;  // exact torchvision preprocessing for evaluation
  for (std::size_t c = 0; c < p.mean.size() && c < 3; ++c) {
    o.normalization.mean[c] = static_cast<float>(p.mean[c]);
    o.normalization.std[c] = static_cast<float>(p.std[c]);
  }
  o.format.layout = p.channels_last ? data::PixelLayout::kHWC : data::PixelLayout::kCHW;
  return o;
}

}  // namespace hotpath::train
