// hotpath/models/vision/resnet.h — ResNet-18/34/50 whose parameter names are torchvision's state_dict keys.
//
//   auto net = std::make_shared<ResNet>(resnet_config(50, {.num_classes = 10}));
//   load_safetensors(*net, "resnet50.safetensors", {.allow_partial = true});  // weights.h
//   at::Tensor logits = net->forward(images);
//
// Matches torchvision.models.resnet (v1.5: the stride of a Bottleneck sits on its 3x3 conv) module for
// module: conv1, bn1, layer1..layer4 (blocks "layerK.I" with conv1/bn1/conv2/bn2[/conv3/bn3] and an
// optional "downsample.0" conv + "downsample.1" batch norm), fc; the same initialisation (convs
// kaiming_normal fan_out/relu, batch norm weight 1 bias 0, Linear's default) and zero_init_residual.
// `small_input` swaps the stem for 28×28/32×32 data: conv1 3x3 stride 1 padding 1 and no max pool
// (python: m.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False); m.maxpool = nn.Identity()).
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <array>
#include <cstdint>

#include "hotpath/models/classifier.h"

namespace hotpath::models {

enum class ResNetBlock {
  kBasic,       // two 3x3 convs, expansion 1 (ResNet-18/34)
  kBottleneck,  // 1x1, 3x3 (strided), 1x1 ×4 channels, expansion 4 (ResNet-50/101/152)
};

struct ResNetOptions {
  std::int64_t num_classes = 1000;
  std::int64_t in_channels = 3;
  bool small_input = false;         // 3x3 stride-1 stem, no max pool
  bool zero_init_residual = false;  // last BN of each block starts at weight 0 (block = identity)
};

struct ResNetConfig {
  ResNetBlock block = ResNetBlock::kBasic;
  std::array<std::int64_t, 4> blocks = {2, 2, 2, 2};  // blocks per stage, layer1..layer4
  ResNetOptions options;
};

// torchvision's depths: 18, 34, 50, 101, 152; anything else is a hotpath::Error naming the choices.
ResNetConfig resnet_config(int depth, const ResNetOptions& options = {});

class ResNet : public ImageClassifier {
 public:
  explicit ResNet(const ResNetConfig& config);

  at::Tensor forward(const at::Tensor& images) override;
  using ImageClassifier::forward;  // the keyed-dropout overload: this model draws nothing at random
  // Everything up to the head: pooled features [N, feature_dim()].
  at::Tensor features(const at::Tensor& images);

  [[nodiscard]] const ResNetConfig& config() const { return config_; }
  [[nodiscard]] std::int64_t feature_dim() const;

  // Named as in torchvision; registered under these names, so the state_dict keys follow.
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  ResNetConfig config_;
};

}  // namespace hotpath::models
