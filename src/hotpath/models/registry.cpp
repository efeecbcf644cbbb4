#include "hotpath/models/registry.h"

#include <functional>
#include <map>

#include "hotpath/core/error.h"
#include "hotpath/models/vision/cnn.h"
#include "hotpath/models/vision/efficientnet.h"
#include "hotpath/models/vision/resnet.h"
#include "hotpath/models/vision/vit.h"

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

// ViTs at torchvision's 224×224 input (encoder.pos_embedding is sized for it); other sizes: ViT(vit_config(...)).
Factory vit(const std::string& name) {
  return [name](const ModelOptions& o) -> ModelHandle {
    HOTPATH_CHECK(!o.zero_init_residual, name, ": zero_init_residual is a ResNet option; a ViT has no residual norm");
    return std::make_shared<ViT>(vit_config(name, {.num_classes = o.num_classes, .in_channels = o.in_channels}));
  };
}

Factory efficientnet(const std::string& name) {
  return [name](const ModelOptions& o) -> ModelHandle {
    HOTPATH_CHECK(!o.zero_init_residual, name,
                  ": zero_init_residual is a ResNet option; an EfficientNet has no residual norm to zero");
    return std::make_shared<EfficientNet>(
        efficientnet_config(name, {.num_classes = o.num_classes, .in_channels = o.in_channels}));
  };
}

Factory cnn(std::int64_t width) {
  return [width](const ModelOptions& o) -> ModelHandle {
    HOTPATH_CHECK(!o.zero_init_residual, "cnn: zero_init_residual is a ResNet option; this CNN has no residual");
    return std::make_shared<SmallCnn>(SmallCnnConfig{.width = width, .num_classes = o.num_classes,
                                                     .in_channels = o.in_channels});
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
    for (const char* name : {"vit_b_16", "vit_tiny"}) t.emplace(name, vit(name));
    for (const char* name : {"efficientnet_b0", "efficientnet_lite0"}) t.emplace(name, efficientnet(name));
    t.emplace("cnn_small", cnn(32));
    t.emplace("cnn_medium", cnn(64));
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
