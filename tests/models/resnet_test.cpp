// ResNet architecture and registry: torchvision's key names and shapes, parameter counts, strides,
// initialisation, forward shapes, bad input.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/vision/resnet.h"
#include "hotpath/models/weights.h"
#include "models/model_test_support.h"

namespace hotpath::models {
namespace {

using model_test::parameter_count;

using Shapes = std::map<std::string, std::vector<std::int64_t>>;

void expect_keys(const torch::nn::Module& module, const Shapes& expected, std::size_t total_keys) {
  const auto state = named_state(module);
  EXPECT_EQ(state.size(), total_keys);
  for (const auto& [name, shape] : expected) {
    const auto it = state.find(name);
    ASSERT_NE(it, state.end()) << "missing torchvision key " << name;
    EXPECT_EQ(it->second.sizes().vec(), shape) << name;
  }
}

// Keys and shapes copied from torchvision.models.resnet18().state_dict() (torchvision 0.29).
TEST(ResNet, Resnet18KeysAreTorchvisions) {
  const ModelHandle model = create_model("resnet18");
  expect_keys(*model,
              {{"conv1.weight", {64, 3, 7, 7}},
               {"bn1.weight", {64}},
               {"bn1.bias", {64}},
               {"bn1.running_mean", {64}},
               {"bn1.running_var", {64}},
               {"bn1.num_batches_tracked", {}},
               {"layer1.0.conv1.weight", {64, 64, 3, 3}},
               {"layer1.1.bn2.running_var", {64}},
               {"layer2.0.conv1.weight", {128, 64, 3, 3}},
               {"layer2.0.downsample.0.weight", {128, 64, 1, 1}},
               {"layer2.0.downsample.1.weight", {128}},
               {"layer2.0.downsample.1.num_batches_tracked", {}},
               {"layer4.1.conv2.weight", {512, 512, 3, 3}},
               {"fc.weight", {1000, 512}},
               {"fc.bias", {1000}}},
              122);
  const auto state = named_state(*model);
  EXPECT_EQ(state.count("conv1.bias"), 0u) << "convs have no bias in torchvision";
  EXPECT_EQ(state.count("layer1.0.downsample.0.weight"), 0u) << "layer1 of a BasicBlock net keeps its shape";
  EXPECT_EQ(state.at("bn1.num_batches_tracked").scalar_type(), at::kLong);
}

TEST(ResNet, Resnet50KeysAreTorchvisions) {
  const ModelHandle model = create_model("resnet50");
  expect_keys(*model,
              {{"layer1.0.conv1.weight", {64, 64, 1, 1}},
               {"layer1.0.conv3.weight", {256, 64, 1, 1}},
               {"layer1.0.downsample.0.weight", {256, 64, 1, 1}},
               {"layer1.0.downsample.1.running_mean", {256}},
               {"layer3.5.conv2.weight", {256, 256, 3, 3}},
               {"layer4.2.bn3.running_mean", {2048}},
               {"fc.weight", {1000, 2048}}},
              320);
}

TEST(ResNet, ParameterCountsMatchTorchvision) {
  EXPECT_EQ(parameter_count(*create_model("resnet18")), 11'689'512);
  EXPECT_EQ(parameter_count(*create_model("resnet34")), 21'797'672);
  EXPECT_EQ(parameter_count(*create_model("resnet50")), 25'557'032);
  // Small stem conv1 64×1×3×3 instead of 64×3×7×7, head 512×10 + 10 (python: models_ref.py's resnet18_small).
  EXPECT_EQ(parameter_count(*create_model("resnet18_small", {.num_classes = 10, .in_channels = 1})), 11'172'810);
}

TEST(ResNet, BottleneckStridesOnThe3x3Conv) {
  const ModelHandle model = create_model("resnet50");
  std::map<std::string, std::int64_t> stride;
  for (const auto& item : model->named_modules()) {
    if (const auto* conv = item.value()->as<torch::nn::Conv2d>()) stride[item.key()] = (*conv->options.stride())[0];
  }
  EXPECT_EQ(stride.at("layer2.0.conv1"), 1);
  EXPECT_EQ(stride.at("layer2.0.conv2"), 2);
  EXPECT_EQ(stride.at("layer2.0.conv3"), 1);
  EXPECT_EQ(stride.at("layer2.0.downsample.0"), 2);
  EXPECT_EQ(stride.at("layer1.0.conv2"), 1);
  EXPECT_EQ(stride.at("conv1"), 2);
}

TEST(ResNet, InitialisationIsTorchvisions) {
  const ModelHandle model = create_model("resnet50");
  const auto state = named_state(*model);
  // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / (out_channels × kh × kw)).
  const at::Tensor w = state.at("layer4.0.conv2.weight");
  EXPECT_NEAR(w.std().item<double>(), std::sqrt(2.0 / (512 * 9)), 0.02 * std::sqrt(2.0 / (512 * 9)));
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 1e-3);
  EXPECT_TRUE(state.at("layer3.2.bn2.weight").eq(1).all().item<bool>());
  EXPECT_TRUE(state.at("layer3.2.bn2.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(state.at("layer3.2.bn3.weight").eq(1).all().item<bool>()) << "zero_init_residual is off by default";
  // nn.Linear's default: uniform(±1/sqrt(in_features)) for weight and bias.
  EXPECT_LE(state.at("fc.weight").abs().max().item<double>(), 1.0 / std::sqrt(2048.0));
  EXPECT_GT(state.at("fc.weight").abs().max().item<double>(), 0.9 / std::sqrt(2048.0));
}

TEST(ResNet, ZeroInitResidualZeroesTheLastNormOfEachBlock) {
  const auto basic = named_state(*create_model("resnet18", {.zero_init_residual = true}));
  const auto bottleneck = named_state(*create_model("resnet50", {.zero_init_residual = true}));
  for (const char* name : {"layer1.0.bn2.weight", "layer4.1.bn2.weight"}) {
    EXPECT_TRUE(basic.at(name).eq(0).all().item<bool>()) << name;
  }
  EXPECT_TRUE(basic.at("layer1.0.bn1.weight").eq(1).all().item<bool>());
  EXPECT_TRUE(bottleneck.at("layer2.3.bn3.weight").eq(0).all().item<bool>());
  EXPECT_TRUE(bottleneck.at("layer2.3.bn2.weight").eq(1).all().item<bool>());
  EXPECT_TRUE(bottleneck.at("layer2.0.downsample.1.weight").eq(1).all().item<bool>());
}

TEST(ResNet, ForwardShapes) {
  const ModelHandle big = create_model("resnet18", {.num_classes = 7});
  big->eval();
  EXPECT_EQ(big->forward(at::randn({2, 3, 64, 64})).sizes().vec(), (std::vector<std::int64_t>{2, 7}));

  const ModelHandle small = create_model("resnet18_small", {.num_classes = 10, .in_channels = 1});
  small->eval();
  EXPECT_EQ(small->forward(at::randn({3, 1, 28, 28})).sizes().vec(), (std::vector<std::int64_t>{3, 10}));
  EXPECT_EQ(named_state(*small).at("conv1.weight").sizes().vec(), (std::vector<std::int64_t>{64, 1, 3, 3}));

  auto* resnet = dynamic_cast<ResNet*>(small.get());
  ASSERT_NE(resnet, nullptr);
  EXPECT_EQ(resnet->features(at::randn({1, 1, 32, 32})).sizes().vec(), (std::vector<std::int64_t>{1, 512}));
  EXPECT_EQ(resnet->feature_dim(), 512);
}

TEST(ResNet, TrainingStepReachesEveryParameter) {
  const ModelHandle model = create_model("resnet18_small", {.num_classes = 3, .in_channels = 1});
  model->train();
  model->forward(at::randn({2, 1, 16, 16})).sum().backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
  }
  EXPECT_EQ(named_state(*model).at("bn1.num_batches_tracked").item<std::int64_t>(), 1);
}

TEST(ResNet, RejectsImagesWithTheWrongChannels) {
  const ModelHandle model = create_model("resnet18_small", {.num_classes = 10, .in_channels = 1});
  try {
    model->forward(at::randn({1, 3, 28, 28}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected images [N, 1, H, W], got [1, 3, 28, 28]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model->forward(at::randn({1, 28, 28})), Error);
}

TEST(ResNet, RejectsBadConfigs) {
  EXPECT_THROW(resnet_config(20), Error);
  EXPECT_THROW(ResNet(resnet_config(18, {.num_classes = 0})), Error);
  ResNetConfig config = resnet_config(18);
  config.blocks[2] = 0;
  EXPECT_THROW(ResNet{config}, Error);
}

TEST(Registry, KnowsTheResNets) {
  const std::vector<std::string> names = model_names();
  for (const char* name : {"resnet18", "resnet34", "resnet50", "resnet18_small", "resnet50_small"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  const ModelHandle model = create_model("resnet34", {.num_classes = 5});
  ASSERT_NE(dynamic_cast<ResNet*>(model.get()), nullptr);
  EXPECT_EQ(named_state(*model).at("fc.weight").size(0), 5);
}

TEST(Registry, UnknownNameListsTheKnownOnes) {
  try {
    create_model("resnet19");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("unknown model 'resnet19'"), std::string::npos) << message;
    EXPECT_NE(message.find("resnet18, resnet18_small"), std::string::npos) << message;
    EXPECT_NE(message.find("resnet50_small"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace hotpath::models
