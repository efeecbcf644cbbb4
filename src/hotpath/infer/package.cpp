#include "hotpath/infer/package.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/weights.h"
#include "internal/preprocess_json.h"

namespace hotpath::infer {
namespace {

// model.json's name for EvalPreprocess::channels (the model's input channels).
constexpr const char* kChannelsKey = "in_channels";

}  // namespace

std::string package_to_json(const ModelPackage& p) {
  const nlohmann::ordered_json pre = internal::eval_preprocess_to_json(p.preprocess, kChannelsKey);
  nlohmann::ordered_json j;
  j["format"] = "hotpath-model";
  j["model"] = p.model;
  j["num_classes"] = p.num_classes;
  for (const char* key : {kChannelsKey, "image_size", "eval_crop", "resize_shorter", "mean", "std"}) j[key] = pre.at(key);
  j["class_names"] = p.class_names;
  j["channels_last"] = pre.at("channels_last");
  j["weights"] = p.weights;
  return j.dump(2) + "\n";
}

ModelPackage read_package(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "model.json").string();
  HOTPATH_CHECK(std::filesystem::exists(path), path,
                ": not found; --model-dir must name a run directory written by `hotpath train`");
  const nlohmann::json j = parse_json(read_file(path, read_limit::kConfig, "model.json"), path);
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
  HOTPATH_CHECK(!j.contains("num_classes") || j.at("num_classes").is_number_integer(), path,
                ": field 'num_classes' has the wrong type (", j.contains("num_classes") ? j.at("num_classes").type_name() : "",
                ")");  // 2.5 would otherwise be read as 2
  HOTPATH_CHECK(!j.contains("num_classes") || !j.at("num_classes").is_number_unsigned() ||
                    j.at("num_classes").get<std::uint64_t>() <= 1'000'000,
                path, ": num_classes is outside [1, 1000000]");
  get("num_classes", p.num_classes, true);
  get("class_names", p.class_names, false);
  get("weights", p.weights, false);
  HOTPATH_CHECK(p.num_classes >= 1 && p.num_classes <= 1'000'000, path, ": num_classes is ", p.num_classes,
                ", expected an integer in [1, 1000000]");
  HOTPATH_CHECK(p.class_names.empty() || p.class_names.size() == static_cast<std::size_t>(p.num_classes), path,
                ": class_names has ", p.class_names.size(), " names for ", p.num_classes, " classes");
  // The preprocessing fields sit flat beside the others; the same checks as any EvalPreprocess.
  p.preprocess = internal::eval_preprocess_from_json(j, path, kChannelsKey);
  return p;
}

models::ModelHandle load_package_model(const ModelPackage& p) {
  models::ModelHandle model =
      models::create_model(p.model, {.num_classes = p.num_classes, .in_channels = p.preprocess.channels});
  models::load_safetensors(*model, (std::filesystem::path(p.dir) / p.weights).string());
  model->eval();
  if (p.preprocess.channels_last) {
    for (auto& param : model->parameters()) {
      if (param.dim() == 4) param.set_data(param.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  return model;
}

}  // namespace hotpath::infer
