#include "hotpath/models/vision/resnet.h"

#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/max_pool2d.h>
#include <torch/nn/init.h>

#include <memory>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/models/batch_norm.h"  // BN (+ ReLU): fused on CPU fp32, or synchronised across ranks
#include "hotpath/ops/autocast_ops.h"  // convs and fc under bf16 autocast on CPUs without bf16 math

namespace hotpath::models {
using namespace hotpath::ops;  // conv2d, linear
namespace {

using torch::nn::BatchNorm2d;  // built by batch_norm2d (models/batch_norm.h)
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;

Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return Conv2d(Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

Conv2d conv1x1(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return Conv2d(Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

// torchvision: Sequential(conv1x1(in, out, stride), BatchNorm2d(out)) when the shortcut changes shape.
torch::nn::Sequential make_downsample(std::int64_t in, std::int64_t out, std::int64_t stride) {
  if (stride == 1 && in == out) return torch::nn::Sequential(nullptr);
  return torch::nn::Sequential(conv1x1(in, out, stride), batch_norm2d(out));
}

at::Tensor shortcut(torch::nn::Sequential& downsample, const at::Tensor& x) {
  if (!downsample) return x;
  // downsample[0] is the conv, [1] its batch norm (torchvision's names: downsample.0, downsample.1).
  at::Tensor y = conv2d(*downsample[0]->as<torch::nn::Conv2dImpl>(), x);
  return batch_norm(*downsample[1]->as<torch::nn::BatchNorm2dImpl>(), y);
}

class BasicBlock : public torch::nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 1;

  BasicBlock(std::int64_t in, std::int64_t planes, std::int64_t stride)
      : conv1(register_module("conv1", conv3x3(in, planes, stride))),
        bn1(register_module("bn1", batch_norm2d(planes))),
        conv2(register_module("conv2", conv3x3(planes, planes, 1))),
        bn2(register_module("bn2", batch_norm2d(planes))),
        downsample(make_downsample(in, planes * kExpansion, stride)) {
    if (downsample) register_module("downsample", downsample);
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = batch_norm_relu(*bn1, conv2d(*conv1, x));
    out = batch_norm(*bn2, conv2d(*conv2, out));
    out += shortcut(downsample, x);
    return out.relu_();
  }

  Conv2d conv1;
  BatchNorm2d bn1;
  Conv2d conv2;
  BatchNorm2d bn2;
  torch::nn::Sequential downsample;
};

// ResNet v1.5: the stride sits on the 3x3 conv (conv2), not on the first 1x1 as in the paper.
class Bottleneck : public torch::nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 4;

  Bottleneck(std::int64_t in, std::int64_t planes, std::int64_t stride)
      : conv1(register_module("conv1", conv1x1(in, planes, 1))),
        bn1(register_module("bn1", batch_norm2d(planes))),
        conv2(register_module("conv2", conv3x3(planes, planes, stride))),
        bn2(register_module("bn2", batch_norm2d(planes))),
        conv3(register_module("conv3", conv1x1(planes, planes * kExpansion, 1))),
        bn3(register_module("bn3", batch_norm2d(planes * kExpansion))),
        downsample(make_downsample(in, planes * kExpansion, stride)) {
    if (downsample) register_module("downsample", downsample);
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = batch_norm_relu(*bn1, conv2d(*conv1, x));
    out = batch_norm_relu(*bn2, conv2d(*conv2, out));
    out = batch_norm(*bn3, conv2d(*conv3, out));
    out += shortcut(downsample, x);
    return out.relu_();
  }

  Conv2d conv1;
  BatchNorm2d bn1;
  Conv2d conv2;
  BatchNorm2d bn2;
  Conv2d conv3;
  BatchNorm2d bn3;
  torch::nn::Sequential downsample;
};

std::int64_t expansion(ResNetBlock block) {
  return block == ResNetBlock::kBasic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
}

// One stage: the first block changes stride/width (and gets the downsample), the rest keep it.
torch::nn::Sequential make_layer(ResNetBlock block, std::int64_t& in, std::int64_t planes, std::int64_t blocks,
                                 std::int64_t stride) {
  torch::nn::Sequential layer;
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::int64_t s = i == 0 ? stride : 1;
    if (block == ResNetBlock::kBasic) {
      layer->push_back(std::make_shared<BasicBlock>(in, planes, s));
    } else {
      layer->push_back(std::make_shared<Bottleneck>(in, planes, s));
    }
    in = planes * expansion(block);
  }
  return layer;
}

}  // namespace

ResNetConfig resnet_config(int depth, const ResNetOptions& options) {
  ResNetConfig config;
  config.options = options;
  switch (depth) {
    case 18: config.blocks = {2, 2, 2, 2}; break;
    case 34: config.blocks = {3, 4, 6, 3}; break;
    case 50: config.blocks = {3, 4, 6, 3}; break;
    case 101: config.blocks = {3, 4, 23, 3}; break;
    case 152: config.blocks = {3, 8, 36, 3}; break;
    default: HOTPATH_CHECK(false, "ResNet depth ", depth, " is not one of 18, 34, 50, 101, 152");
  }
  config.block = depth >= 50 ? ResNetBlock::kBottleneck : ResNetBlock::kBasic;
  return config;
}

ResNet::ResNet(const ResNetConfig& config) : ImageClassifier("ResNet"), config_(config) {
  const ResNetOptions& opt = config.options;
  HOTPATH_CHECK(opt.num_classes >= 1, "ResNet: num_classes is ", opt.num_classes, ", expected at least 1");
  HOTPATH_CHECK(opt.in_channels >= 1, "ResNet: in_channels is ", opt.in_channels, ", expected at least 1");
  for (std::size_t i = 0; i < config.blocks.size(); ++i) {
    HOTPATH_CHECK(config.blocks[i] >= 1, "ResNet: blocks[", i, "] (layer", i + 1, ") is ", config.blocks[i],
                  ", expected at least 1");
  }

  constexpr std::int64_t kStemWidth = 64;
  conv1 = register_module(
      "conv1", opt.small_input ? conv3x3(opt.in_channels, kStemWidth, 1)
                               : Conv2d(Conv2dOptions(opt.in_channels, kStemWidth, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", batch_norm2d(kStemWidth));
  std::int64_t in = kStemWidth;
  layer1 = register_module("layer1", make_layer(config.block, in, 64, config.blocks[0], 1));
  layer2 = register_module("layer2", make_layer(config.block, in, 128, config.blocks[1], 2));
  layer3 = register_module("layer3", make_layer(config.block, in, 256, config.blocks[2], 2));
  layer4 = register_module("layer4", make_layer(config.block, in, 512, config.blocks[3], 2));
  fc = register_module("fc", torch::nn::Linear(in, opt.num_classes));

  // torchvision's initialisation; Linear keeps its default (kaiming_uniform a=sqrt(5)), as there.
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    }
  }
  // Each residual branch starts at zero so every block is the identity (Goyal et al., 2017).
  if (opt.zero_init_residual) {
    for (const auto& module : modules(/*include_self=*/false)) {
      if (auto* basic = dynamic_cast<BasicBlock*>(module.get())) torch::nn::init::zeros_(basic->bn2->weight);
      if (auto* bottleneck = dynamic_cast<Bottleneck*>(module.get())) torch::nn::init::zeros_(bottleneck->bn3->weight);
    }
  }
}

std::int64_t ResNet::feature_dim() const { return 512 * expansion(config_.block); }

at::Tensor ResNet::features(const at::Tensor& images) {
  HOTPATH_CHECK(images.dim() == 4 && images.size(1) == config_.options.in_channels, "ResNet: expected images [N, ",
                config_.options.in_channels, ", H, W], got ", images.sizes());
  at::Tensor x = batch_norm_relu(*bn1, conv2d(*conv1, images));
  if (!config_.options.small_input) x = at::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  x = layer1->forward(x);
  x = layer2->forward(x);
  x = layer3->forward(x);
  x = layer4->forward(x);
  return at::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
}

at::Tensor ResNet::forward(const at::Tensor& images) { return linear(*fc, features(images)); }

}  // namespace hotpath::models
