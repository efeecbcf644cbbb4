// The helpers every task shares (task.h): shard patterns and class names from a recipe, freezing and
// the trainable-parameter list.
#include "hotpath/train/task.h"

#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "tasks.h"

namespace hotpath::train {
namespace fs = std::filesystem;

std::vector<std::string> class_names_for(const Recipe& recipe) {
  if (!recipe.data.class_names.empty()) return recipe.data.class_names;
  if (recipe.data.train.empty()) return {};
  const auto shards = data::resolve_shards({recipe.data.train.front()});
  if (shards.empty()) return {};
  // `hotpath data pack -o DIR/train` writes DIR/train-000000.tar ... and DIR/train.json.
  const fs::path first(shards.front());
  std::string stem = first.stem().string();
  if (const auto dash = stem.rfind('-'); dash != std::string::npos) stem.resize(dash);
  const fs::path report = first.parent_path() / (stem + ".json");
  if (!fs::exists(report)) return {};
  try {
    const auto j = parse_json(read_file(report.string(), read_limit::kConfig, "pack report"), report.string());
    if (j.contains("classes") && j["classes"].is_array()) return j["classes"].get<std::vector<std::string>>();
  } catch (const std::exception&) {
    // A report we cannot read only costs the class names.
  }
  return {};
}

std::vector<std::string> resolve_recipe_shards(const std::vector<std::string>& patterns, const char* key,
                                               const Recipe& recipe) {
  HOTPATH_CHECK(!patterns.empty(), recipe.source, ": ", key, ": no shards given (a list of .tar paths or patterns)");
  std::vector<std::string> shards;
  try {
    shards = data::resolve_shards(patterns);
  } catch (const Error& e) {
    HOTPATH_CHECK(false, recipe.source, ": ", key, ": ", e.what(), " (pack data with `hotpath data pack`)");
  }
  HOTPATH_CHECK(!shards.empty(), recipe.source, ": ", key, ": no shard matches ", patterns.front());
  return shards;
}

void freeze_prefixes(torch::nn::Module& module, const Recipe& recipe) {
  for (const std::string& prefix : recipe.model.freeze) {
    std::int64_t frozen = 0;
    for (auto& item : module.named_parameters()) {
      if (item.key().rfind(prefix, 0) == 0) {
        item.value().requires_grad_(false);
        ++frozen;
      }
    }
    HOTPATH_CHECK(frozen > 0, recipe.source, ": model.freeze: no parameter name starts with '", prefix, "'");
  }
}

NamedParameters trainable_parameters(const torch::nn::Module& module, const Recipe& recipe) {
  NamedParameters trainable;
  for (const auto& item : module.named_parameters()) {
    if (item.value().requires_grad()) trainable.emplace_back(item.key(), item.value());
  }
  HOTPATH_CHECK(!trainable.empty(), recipe.source, ": model.freeze leaves no parameter to train");
  return trainable;
}

void configure_loader_device(data::LoaderOptions& o, const Recipe& recipe, const at::Device& device) {
  const auto& d = recipe.data;
  const bool nvjpeg = d.decode == "nvjpeg";
  if (!nvjpeg && d.augment != "device") return;
  HOTPATH_CHECK(device.is_cuda(), recipe.source, ": data.", nvjpeg ? "decode: nvjpeg" : "augment: device",
                " needs train.device: cuda (this run is on ", device.str(), ")");
  o.device = device;
  o.decode = nvjpeg ? data::DecodeBackend::kNvjpeg : data::DecodeBackend::kCpu;
}

std::unique_ptr<Task> make_task(const Recipe& recipe, const TaskOptions& options) {
  check_task_keys(recipe);
  if (recipe.data.kind == "text") return make_text_task(recipe, options);
  HOTPATH_CHECK(recipe.data.kind == "image", recipe.source, ": data.kind: expected image or text, got '",
                recipe.data.kind, "'");
  return make_image_task(recipe, options);
}

}  // namespace hotpath::train
