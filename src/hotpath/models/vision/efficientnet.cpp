#include "hotpath/models/vision/efficientnet.h"

#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/hardtanh.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/models/batch_norm.h"
#include "hotpath/ops/autocast_ops.h"

namespace hotpath::models {
using namespace hotpath::ops;  // conv2d
namespace detail {
namespace {

using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;

at::Tensor activate_(at::Tensor x, Activation activation) {
  return activation == Activation::kReLU6 ? at::hardtanh_(x, 0.0, 6.0) : at::silu_(x);
}

// TensorFlow "SAME" padding for a stride > 1 conv: total k - stride-remainder pixels, the odd one after.
at::Tensor pad_tf_same(const at::Tensor& x, std::int64_t kernel, std::int64_t stride) {
  const auto pad = [&](std::int64_t in) {
    const std::int64_t out = (in + stride - 1) / stride;
    return std::max<std::int64_t>((out - 1) * stride + kernel - in, 0);
  };
  const std::int64_t ph = pad(x.size(2));
  const std::int64_t pw = pad(x.size(3));
  if (ph == 0 && pw == 0) return x;
  return at::constant_pad_nd(x, {pw / 2, pw - pw / 2, ph / 2, ph - ph / 2}, 0.0);
}

}  // namespace

// torchvision's Conv2dNormActivation: "0" conv (no bias), "1" batch norm, then the activation (none
// for the projection). At stride 1 an odd kernel pads (k-1)/2 under both paddings, so only strided
// convs under kTfSame pad explicitly.
class ConvNormAct : public torch::nn::Module {
 public:
  ConvNormAct(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride, std::int64_t groups,
              const EfficientNetConfig& config, std::optional<Activation> activation)
      : kernel_(kernel),
        stride_(stride),
        pad_explicitly_(config.padding == ConvPadding::kTfSame && stride > 1),
        activation_(activation) {
    const std::int64_t padding = pad_explicitly_ ? 0 : (kernel - 1) / 2;
    conv = register_module(
        "0", Conv2d(Conv2dOptions(in, out, kernel).stride(stride).padding(padding).groups(groups).bias(false)));
    bn = register_module(
        "1", batch_norm2d(torch::nn::BatchNormOptions(out).eps(config.bn_eps).momentum(config.bn_momentum)));
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = batch_norm(*bn, conv2d(*conv, pad_explicitly_ ? pad_tf_same(x, kernel_, stride_) : x));
    return activation_ ? activate_(y, *activation_) : y;
  }

  Conv2d conv{nullptr};
  BatchNorm2d bn{nullptr};

 private:
  std::int64_t kernel_;
  std::int64_t stride_;
  bool pad_explicitly_;
  std::optional<Activation> activation_;
};

}  // namespace detail

namespace {

using detail::activate_;
using detail::ConvNormAct;
using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;

// torchvision.ops.SqueezeExcitation: x * sigmoid(fc2(act(fc1(avgpool(x))))), fc1/fc2 1x1 convs with bias.
class SqueezeExcitation : public torch::nn::Module {
 public:
  SqueezeExcitation(std::int64_t channels, std::int64_t squeeze, Activation activation)
      : fc1(register_module("fc1", Conv2d(Conv2dOptions(channels, squeeze, 1)))),
        fc2(register_module("fc2", Conv2d(Conv2dOptions(squeeze, channels, 1)))),
        activation_(activation) {}

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor scale = activate_(conv2d(*fc1, at::adaptive_avg_pool2d(x, {1, 1})), activation_);
    return x * conv2d(*fc2, scale).sigmoid_();
  }

  Conv2d fc1;
  Conv2d fc2;

 private:
  Activation activation_;
};

// torchvision's MBConv: "block" = [expand] depthwise [SE] project; residual with stochastic depth
// when the shape is kept.
class MBConv : public torch::nn::Module {
 public:
  MBConv(std::int64_t in, std::int64_t out, const MBConvStage& stage, std::int64_t stride, double drop_rate,
         const EfficientNetConfig& config)
      : residual_(stride == 1 && in == out), drop_rate_(drop_rate) {
    const std::int64_t expanded = in * stage.expand_ratio;
    block = torch::nn::Sequential();
    if (expanded != in) {
      block->push_back(std::make_shared<ConvNormAct>(in, expanded, 1, 1, 1, config, config.activation));
    }
    block->push_back(
        std::make_shared<ConvNormAct>(expanded, expanded, stage.kernel, stride, expanded, config, config.activation));
    if (config.squeeze_excitation) {
      block->push_back(std::make_shared<SqueezeExcitation>(expanded, std::max<std::int64_t>(1, in / 4),
                                                           config.activation));
    }
    block->push_back(std::make_shared<ConvNormAct>(expanded, out, 1, 1, 1, config, std::nullopt));
    register_module("block", block);
  }

  // A keyed `dropout` draws this block's stochastic depth at `site`; not keyed: the default generator.
  at::Tensor forward(const at::Tensor& x, const ops::DropoutSource& dropout, std::uint64_t site) {
    at::Tensor y = block->forward(x);
    if (!residual_) return y;
    if (dropout.keyed()) return stochastic_depth(y, dropout.draw(is_training() ? drop_rate_ : 0.0, site)) + x;
    return stochastic_depth(y, drop_rate_, is_training()) + x;
  }

  torch::nn::Sequential block{nullptr};

 private:
  bool residual_;
  double drop_rate_;
};

void check_config(const EfficientNetConfig& c) {
  const EfficientNetOptions& o = c.options;
  HOTPATH_CHECK(o.num_classes >= 1, "EfficientNet: num_classes is ", o.num_classes, ", expected at least 1");
  HOTPATH_CHECK(o.in_channels >= 1, "EfficientNet: in_channels is ", o.in_channels, ", expected at least 1");
  HOTPATH_CHECK(!c.stages.empty(), "EfficientNet: no stages");
  HOTPATH_CHECK(c.head_channels >= 1, "EfficientNet: head_channels is ", c.head_channels, ", expected at least 1");
  HOTPATH_CHECK(c.dropout >= 0 && c.dropout <= 1, "EfficientNet: dropout is ", c.dropout, ", expected [0, 1]");
  HOTPATH_CHECK(c.stochastic_depth >= 0 && c.stochastic_depth <= 1, "EfficientNet: stochastic_depth is ",
                c.stochastic_depth, ", expected [0, 1]");
  for (std::size_t i = 0; i < c.stages.size(); ++i) {
    const MBConvStage& s = c.stages[i];
    HOTPATH_CHECK(s.expand_ratio >= 1 && s.in_channels >= 1 && s.out_channels >= 1 && s.repeats >= 1,
                  "EfficientNet: stages[", i, "] needs expand_ratio, in_channels, out_channels and repeats >= 1");
    HOTPATH_CHECK(s.kernel >= 1 && s.kernel % 2 == 1, "EfficientNet: stages[", i, "].kernel is ", s.kernel,
                  ", expected an odd size");
    HOTPATH_CHECK(s.stride == 1 || s.stride == 2, "EfficientNet: stages[", i, "].stride is ", s.stride,
                  ", expected 1 or 2");
    if (i > 0) {
      HOTPATH_CHECK(s.in_channels == c.stages[i - 1].out_channels, "EfficientNet: stages[", i, "].in_channels is ",
                    s.in_channels, " but stages[", i - 1, "] outputs ", c.stages[i - 1].out_channels);
    }
  }
}

}  // namespace

EfficientNetConfig efficientnet_config(const std::string& name, const EfficientNetOptions& options) {
  EfficientNetConfig config;
  config.options = options;
  // (expand, kernel, stride, in, out, repeats): EfficientNet-B0's stages, shared by Lite0 (whose
  // builder fixes stem and head, which at width 1.0 changes nothing).
  config.stages = {{1, 3, 1, 32, 16, 1},   {6, 3, 2, 16, 24, 2},   {6, 5, 2, 24, 40, 2},  {6, 3, 2, 40, 80, 3},
                   {6, 5, 1, 80, 112, 3},  {6, 5, 2, 112, 192, 4}, {6, 3, 1, 192, 320, 1}};
  config.head_channels = 1280;
  if (name == "efficientnet_b0") return config;  // SE, SiLU, symmetric padding, BN eps 1e-5 (torchvision)
  if (name == "efficientnet_lite0") {
    config.squeeze_excitation = false;
    config.activation = Activation::kReLU6;
    config.padding = ConvPadding::kTfSame;
    config.bn_eps = 1e-3;
    config.bn_momentum = 0.01;
    return config;
  }
  HOTPATH_CHECK(false, "unknown EfficientNet '", name, "' (known: efficientnet_b0, efficientnet_lite0)");
  return config;
}

at::Tensor stochastic_depth(const at::Tensor& x, double p, bool training) {
  HOTPATH_CHECK(p >= 0 && p <= 1, "stochastic_depth: p is ", p, ", expected [0, 1]");
  if (!training || p == 0.0) return x;
  const double survival = 1.0 - p;
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[0] = x.size(0);
  at::Tensor keep = at::empty(shape, x.options()).bernoulli_(survival);
  if (survival > 0.0) keep.div_(survival);
  return x * keep;
}

at::Tensor stochastic_depth(const at::Tensor& x, const ops::DropoutDraw& draw) {
  HOTPATH_CHECK(draw.p >= 0 && draw.p <= 1, "stochastic_depth: p is ", draw.p, ", expected [0, 1]");
  HOTPATH_CHECK(x.dim() >= 1, "stochastic_depth: expected a tensor with a batch dimension, got ", x.sizes());
  if (draw.p == 0.0) return x;
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[0] = x.size(0);
  if (draw.p == 1.0) return x * at::zeros(shape, x.options());  // torchvision: survival 0 keeps nothing
  // One draw per row: the first element of a [N] mask, keyed like a dropout mask (row b by sample_index[b]).
  const at::Tensor keep = ops::dropout_mask(draw, {x.size(0)}).to(x.options()).div_(1.0 - draw.p);
  return x * keep.view(shape);
}

EfficientNet::EfficientNet(const EfficientNetConfig& config) : ImageClassifier("EfficientNet"), config_(config) {
  check_config(config);
  const Activation act = config.activation;
  feature_layers = torch::nn::ModuleList();
  stem_ = std::make_shared<ConvNormAct>(config.options.in_channels, config.stages.front().in_channels, 3, 2, 1, config,
                                        act);
  feature_layers->push_back(stem_);
  const std::vector<double> rates = block_drop_rates();
  std::size_t block_id = 0;
  for (const MBConvStage& s : config.stages) {
    torch::nn::Sequential stage;
    for (std::int64_t i = 0; i < s.repeats; ++i) {
      stage->push_back(std::make_shared<MBConv>(i == 0 ? s.in_channels : s.out_channels, s.out_channels, s,
                                                i == 0 ? s.stride : 1, rates[block_id++], config));
    }
    feature_layers->push_back(stage);
    stages_.push_back(stage);
  }
  head_ = std::make_shared<ConvNormAct>(config.stages.back().out_channels, config.head_channels, 1, 1, 1, config, act);
  feature_layers->push_back(head_);
  register_module("features", feature_layers);
  classifier = register_module(
      "classifier", torch::nn::Sequential(torch::nn::Dropout(config.dropout),
                                          torch::nn::Linear(config.head_channels, config.options.num_classes)));

  // torchvision's initialisation: convs kaiming_normal fan_out (gain sqrt 2), zero biases; batch norm
  // 1/0; Linear uniform(±1/sqrt(out_features)) with a zero bias.
  const torch::NoGradGuard no_grad;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      if (conv->bias.defined()) torch::nn::init::zeros_(conv->bias);
    } else if (auto* bn = module->as<BatchNorm2d>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    } else if (auto* linear = module->as<torch::nn::Linear>()) {
      const double range = 1.0 / std::sqrt(static_cast<double>(linear->options.out_features()));
      torch::nn::init::uniform_(linear->weight, -range, range);
      torch::nn::init::zeros_(linear->bias);
    }
  }
}

std::vector<double> EfficientNet::block_drop_rates() const {
  std::int64_t total = 0;
  for (const MBConvStage& s : config_.stages) total += s.repeats;
  std::vector<double> rates;
  for (std::int64_t b = 0; b < total; ++b) {
    rates.push_back(config_.stochastic_depth * static_cast<double>(b) / static_cast<double>(total));
  }
  return rates;
}

at::Tensor EfficientNet::features(const at::Tensor& images, const ops::DropoutSource& dropout) {
  HOTPATH_CHECK(images.dim() == 4 && images.size(1) == config_.options.in_channels,
                "EfficientNet: expected images [N, ", config_.options.in_channels, ", H, W], got ", images.sizes());
  at::Tensor x = stem_->forward(images);
  std::uint64_t block_id = 0;
  for (auto& stage : stages_) {
    for (std::size_t i = 0; i < stage->size(); ++i) {
      x = stage->ptr<MBConv>(i)->forward(x, dropout, kEfficientNetFirstBlockSite + block_id++);
    }
  }
  return at::adaptive_avg_pool2d(head_->forward(x), {1, 1}).flatten(1);
}

at::Tensor EfficientNet::forward(const at::Tensor& images) { return forward(images, {}); }

at::Tensor EfficientNet::forward(const at::Tensor& images, const ops::DropoutSource& dropout) {
  const at::Tensor pooled = features(images, dropout);
  if (!dropout.keyed()) return classifier->forward(pooled);
  const double p = is_training() ? config_.dropout : 0.0;
  return classifier->ptr<torch::nn::LinearImpl>(1)->forward(
      ops::fused_dropout(pooled, dropout.draw(p, kEfficientNetClassifierSite)));
}

}  // namespace hotpath::models
