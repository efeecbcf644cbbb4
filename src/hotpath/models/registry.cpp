#include "hotpath/models/registry.h"

#include <functional>
#include <map>

#include "hotpath/core/error.h"
#include "hotpath/models/resnet.h"

namespace hotpath::models {
namespace {

using Factory = std::function<ModelHandle(const ModelOptions&)>;

Factory resnet(int depth, bool small_input) {
  return [depth, small_input](const ModelOptions& o) -> ModelHandle {
    return std::make_shared<ResNet>(resnet_config(depth, {.num_classes = o.num_classes,
                                                          .in_channels = o.in_channels,
                                                          .small_input = small_input,
                                                          .zero_init_residual = o.zero_init_residual}));
  };
}

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table = [] {
    std::map<std::string, Factory> t;
    for (int depth : {18, 34, 50, 101, 152}) {
      const std::string name = "resnet" + std::to_string(depth);
      t.emplace(name, resnet(depth, false));
      t.emplace(name + "_small", resnet(depth, true));
    }
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : factories()) names.push_back(entry.first);
  return names;
}

ModelHandle create_model(const std::string& name, const ModelOptions& options) {
  const auto& table = factories();
  const auto it = table.find(name);
  if (it == table.end()) {
    std::string known;
    for (const auto& entry : table) known.append(known.empty() ? "" : ", ").append(entry.first);
    HOTPATH_CHECK(false, "unknown model '", name, "' (known: ", known, ")");
  }
  return it->second(options);
}

}  // namespace hotpath::models
