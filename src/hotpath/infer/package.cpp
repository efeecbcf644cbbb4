// package.h: read_package's choice of layout, and the training-run-directory layout (model.json).
#include "hotpath/infer/package.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/weights.h"
#include "internal/package_layouts.h"
#include "internal/preprocess_json.h"

namespace hotpath::infer {
namespace {

// model.json's name for EvalPreprocess::channels (the model's input channels).
constexpr const char* kChannelsKey = "in_channels";

}  // namespace

namespace internal {

Package read_run_directory(const std::filesystem::path& dir) {
  const std::string path = (dir / "model.json").string();
  // A Hugging Face model directory: a config.json of its own, which is not a package's.
  HOTPATH_CHECK(std::filesystem::exists(path) || !std::filesystem::exists(dir / "config.json"), (dir / "config.json").string(),
                ": no 'hotpath_package' field — not a hotpath model package (export the directory first with hotpath "
                "export --model-dir), and there is no model.json of a training run beside it");
  HOTPATH_CHECK(std::filesystem::exists(path), dir.string(),
                ": neither a model package (config.json with \"hotpath_package\", from hotpath export) nor a training "
                "run directory (model.json, from hotpath train)");
  const nlohmann::json j = parse_json(read_file(path, read_limit::kConfig, "model.json"), path);
  HOTPATH_CHECK(j.is_object(), path, ": expected a JSON object");
  Package p;
  p.dir = dir.string();
  p.layout = PackageLayout::kRunDirectory;
  p.kind = PackageKind::kImageClassifier;
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
  get("model", p.architecture, true);
  HOTPATH_CHECK(!j.contains("num_classes") || j.at("num_classes").is_number_integer(), path,
                ": field 'num_classes' has the wrong type (", j.contains("num_classes") ? j.at("num_classes").type_name() : "",
                ")");  // 2.5 would otherwise be read as 2
  HOTPATH_CHECK(!j.contains("num_classes") || !j.at("num_classes").is_number_unsigned() ||
                    j.at("num_classes").get<std::uint64_t>() <= 1'000'000,
                path, ": num_classes is outside [1, 1000000]");
  get("num_classes", p.num_classes, true);
  get("class_names", p.labels, false);
  get("weights", p.weights, false);
  HOTPATH_CHECK(p.num_classes >= 1 && p.num_classes <= 1'000'000, path, ": num_classes is ", p.num_classes,
                ", expected an integer in [1, 1000000]");
  HOTPATH_CHECK(p.labels.empty() || p.labels.size() == static_cast<std::size_t>(p.num_classes), path,
                ": class_names has ", p.labels.size(), " names for ", p.num_classes, " classes");
  // The preprocessing fields sit flat beside the others; the same checks as any EvalPreprocess.
  p.image = eval_preprocess_from_json(j, path, kChannelsKey);
  return p;
}

}  // namespace internal

Package read_package(const std::filesystem::path& dir) {
  HOTPATH_CHECK(std::filesystem::is_directory(dir), dir.string(),
                ": not a directory (expected a model package from hotpath export or a run directory from hotpath train)");
  return is_package_dir(dir) ? internal::read_model_package(dir) : internal::read_run_directory(dir);
}

std::string run_directory_json(const Package& p) {
  const nlohmann::ordered_json pre = internal::eval_preprocess_to_json(p.image, kChannelsKey);
  nlohmann::ordered_json j;
  j["format"] = "hotpath-model";
  j["model"] = p.architecture;
  j["num_classes"] = p.num_classes;
  for (const char* key : {kChannelsKey, "image_size", "eval_crop", "resize_shorter", "mean", "std"}) j[key] = pre.at(key);
  j["class_names"] = p.labels;
  j["channels_last"] = pre.at("channels_last");
  j["weights"] = p.weights;
  return j.dump(2) + "\n";
}

models::ModelHandle load_package_model(const Package& p) {
  HOTPATH_CHECK(p.layout == PackageLayout::kRunDirectory, p.dir,
                ": a model package runs in the engine (load_package_graph), not as a training model");
  models::ModelHandle model =
      models::create_model(p.architecture, {.num_classes = p.num_classes, .in_channels = p.image.channels});
  models::load_safetensors(*model, (std::filesystem::path(p.dir) / p.weights).string());
  model->eval();
  if (p.image.channels_last) {
    for (auto& param : model->parameters()) {
      if (param.dim() == 4) param.set_data(param.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  return model;
}

}  // namespace hotpath::infer
