#include "hotpath/models/vision/vit.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>

#include <cmath>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/ops/attention.h"

namespace hotpath::models {
namespace {

constexpr double kLayerNormEps = 1e-6;  // torchvision's partial(nn.LayerNorm, eps=1e-6)

torch::nn::LayerNorm layer_norm(std::int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kLayerNormEps));
}

// torchvision's MLPBlock init: xavier_uniform_ weights, normal(std=1e-6) biases.
torch::nn::Linear mlp_linear(std::int64_t in, std::int64_t out) {
  torch::nn::Linear linear(in, out);
  const at::NoGradGuard no_grad;
  torch::nn::init::xavier_uniform_(linear->weight);
  linear->bias.normal_(0.0, 1e-6);
  return linear;
}

}  // namespace

std::int64_t ViTConfig::num_patches() const {
  const std::int64_t side = options.image_size / patch_size;
  return side * side;
}

ViTConfig vit_config(const std::string& name, const ViTOptions& options) {
  ViTConfig config;
  config.options = options;
  if (name == "vit_b_16") {
    config.patch_size = 16, config.num_layers = 12, config.num_heads = 12, config.hidden_dim = 768,
    config.mlp_dim = 3072;
  } else if (name == "vit_tiny") {
    config.patch_size = 16, config.num_layers = 12, config.num_heads = 3, config.hidden_dim = 192,
    config.mlp_dim = 768;
  } else {
    HOTPATH_CHECK(false, "ViT config '", name, "' is not one of vit_b_16, vit_tiny");
  }
  return config;
}

ViTEncoderBlock::ViTEncoderBlock(std::int64_t hidden_dim, std::int64_t num_heads, std::int64_t mlp_dim,
                                 double dropout, double attention_dropout)
    : torch::nn::Module("ViTEncoderBlock"),
      num_heads_(num_heads),
      dropout_(dropout),
      attention_dropout_(attention_dropout) {
  ln_1 = register_module("ln_1", layer_norm(hidden_dim));

  // nn.MultiheadAttention(hidden_dim, num_heads, batch_first=True) with one packed q/k/v projection:
  // its state_dict keys are in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias.
  self_attention = register_module("self_attention", std::make_shared<torch::nn::Module>("MultiheadAttention"));
  in_proj_weight = self_attention->register_parameter("in_proj_weight", at::empty({3 * hidden_dim, hidden_dim}));
  in_proj_bias = self_attention->register_parameter("in_proj_bias", at::zeros({3 * hidden_dim}));
  out_proj = self_attention->register_module("out_proj", torch::nn::Linear(hidden_dim, hidden_dim));
  {
    // MultiheadAttention._reset_parameters: xavier over the whole packed [3D, D] matrix, zero biases;
    // out_proj.weight keeps nn.Linear's default.
    const at::NoGradGuard no_grad;
    torch::nn::init::xavier_uniform_(in_proj_weight);
    out_proj->bias.zero_();
  }

  ln_2 = register_module("ln_2", layer_norm(hidden_dim));
  // torchvision's MLP(in, [mlp_dim, in], activation_layer=nn.GELU): Linear, GELU, Dropout, Linear, Dropout,
  // so the linears are "mlp.0" and "mlp.3".
  mlp = register_module("mlp", torch::nn::Sequential(mlp_linear(hidden_dim, mlp_dim), torch::nn::GELU(),
                                                     torch::nn::Dropout(dropout), mlp_linear(mlp_dim, hidden_dim),
                                                     torch::nn::Dropout(dropout)));
}

at::Tensor ViTEncoderBlock::attention(const at::Tensor& x, const ops::DropoutSource& dropout, std::uint64_t first_site) {
  const std::int64_t n = x.size(0);
  const std::int64_t length = x.size(1);
  const std::int64_t dim = x.size(2);
  // [N, L, 3D] → [3, N, heads, L, head_dim]: q, k, v per head, as MultiheadAttention splits in_proj.
  const at::Tensor qkv =
      at::linear(x, in_proj_weight, in_proj_bias).view({n, length, 3, num_heads_, dim / num_heads_}).permute(
          {2, 0, 3, 1, 4});
  const double p = is_training() ? attention_dropout_ : 0.0;
  // Keyed with dropout on: the attention kernel whose probabilities' mask is keyed by (seed, site, sample, head,
  // i, j); otherwise ATen's SDPA as torchvision runs it.
  const at::Tensor out =
      dropout.keyed() && p > 0.0
          ? ops::attention(qkv[0], qkv[1], qkv[2], /*key_padding_mask=*/{}, ops::AttentionKernel::kAuto,
                           {p, dropout.seed, first_site + kViTAttentionSite, dropout.sample_index})
          : at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], /*attn_mask=*/{}, p);
  return out_proj->forward(out.transpose(1, 2).reshape({n, length, dim}));
}

at::Tensor ViTEncoderBlock::forward(const at::Tensor& x, const ops::DropoutSource& dropout, std::uint64_t first_site) {
  if (!dropout.keyed()) {
    at::Tensor y = at::dropout(attention(ln_1->forward(x)), dropout_, is_training()) + x;
    return y + mlp->forward(ln_2->forward(y));
  }
  const double p = is_training() ? dropout_ : 0.0;
  at::Tensor y = ops::dropout_add(attention(ln_1->forward(x), dropout, first_site), x,
                                  dropout.draw(p, first_site + kViTAttentionOutputSite));
  // mlp: 0 Linear, 1 GELU, 2 Dropout, 3 Linear, 4 Dropout, with the two dropouts keyed.
  at::Tensor h = mlp->ptr<torch::nn::GELUImpl>(1)->forward(mlp->ptr<torch::nn::LinearImpl>(0)->forward(ln_2->forward(y)));
  h = ops::fused_dropout(h, dropout.draw(p, first_site + kViTMlpHiddenSite));
  h = mlp->ptr<torch::nn::LinearImpl>(3)->forward(h);
  return ops::dropout_add(h, y, dropout.draw(p, first_site + kViTMlpOutputSite));
}

ViT::ViT(const ViTConfig& config) : ImageClassifier("VisionTransformer"), config_(config) {
  const ViTOptions& opt = config.options;
  HOTPATH_CHECK(opt.num_classes >= 1, "ViT: num_classes is ", opt.num_classes, ", expected at least 1");
  HOTPATH_CHECK(opt.in_channels >= 1, "ViT: in_channels is ", opt.in_channels, ", expected at least 1");
  HOTPATH_CHECK(config.patch_size >= 1, "ViT: patch_size is ", config.patch_size, ", expected at least 1");
  HOTPATH_CHECK(opt.image_size >= config.patch_size && opt.image_size % config.patch_size == 0,
                "ViT: image_size ", opt.image_size, " is not a positive multiple of patch_size ", config.patch_size);
  HOTPATH_CHECK(config.num_layers >= 1, "ViT: num_layers is ", config.num_layers, ", expected at least 1");
  HOTPATH_CHECK(config.num_heads >= 1 && config.hidden_dim >= 1 && config.hidden_dim % config.num_heads == 0,
                "ViT: hidden_dim ", config.hidden_dim, " is not a positive multiple of num_heads ", config.num_heads);
  HOTPATH_CHECK(config.mlp_dim >= 1, "ViT: mlp_dim is ", config.mlp_dim, ", expected at least 1");
  HOTPATH_CHECK(opt.dropout >= 0.0 && opt.dropout < 1.0 && opt.attention_dropout >= 0.0 &&
                    opt.attention_dropout < 1.0,
                "ViT: dropout ", opt.dropout, " and attention_dropout ", opt.attention_dropout,
                " must lie in [0, 1)");

  const std::int64_t dim = config.hidden_dim;
  const std::int64_t patch = config.patch_size;
  conv_proj = register_module(
      "conv_proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(opt.in_channels, dim, patch).stride(patch)));
  class_token = register_parameter("class_token", at::zeros({1, 1, dim}));

  auto encoder = register_module("encoder", std::make_shared<torch::nn::Module>("Encoder"));
  pos_embedding = encoder->register_parameter("pos_embedding", at::empty({1, config.num_patches() + 1, dim}));
  auto stack = encoder->register_module("layers", std::make_shared<torch::nn::Module>("Sequential"));
  for (std::int64_t i = 0; i < config.num_layers; ++i) {
    layers.push_back(stack->register_module(
        "encoder_layer_" + std::to_string(i),
        std::make_shared<ViTEncoderBlock>(dim, config.num_heads, config.mlp_dim, opt.dropout, opt.attention_dropout)));
  }
  ln = encoder->register_module("ln", layer_norm(dim));

  auto heads = register_module("heads", std::make_shared<torch::nn::Module>("Sequential"));
  head = heads->register_module("head", torch::nn::Linear(dim, opt.num_classes));

  // torchvision's initialisation. conv_proj: trunc_normal_(std=sqrt(1/fan_in)) with its default absolute
  // bounds ±2, which at these stds (≤ 1 for any fan_in ≥ 1) is a normal clamped at ±2.
  const at::NoGradGuard no_grad;
  conv_proj->weight.normal_(0.0, std::sqrt(1.0 / static_cast<double>(opt.in_channels * patch * patch))).clamp_(-2.0,
                                                                                                              2.0);
  conv_proj->bias.zero_();
  pos_embedding.normal_(0.0, 0.02);  // "from BERT"
  // A zero head: the net predicts uniformly until trained (torchvision does the same).
  head->weight.zero_();
  head->bias.zero_();
}

at::Tensor ViT::features(const at::Tensor& images, const ops::DropoutSource& dropout) {
  const ViTOptions& opt = config_.options;
  HOTPATH_CHECK(images.dim() == 4, "ViT: expected images [N, ", opt.in_channels, ", ", opt.image_size, ", ",
                opt.image_size, "], got ", images.sizes());
  HOTPATH_CHECK(images.size(1) == opt.in_channels, "ViT: expected images [N, ", opt.in_channels, ", ",
                opt.image_size, ", ", opt.image_size, "], got ", images.sizes(), " (", images.size(1),
                " channels, the model has in_channels ", opt.in_channels, ")");
  HOTPATH_CHECK(images.size(2) == opt.image_size && images.size(3) == opt.image_size, "ViT: expected images [N, ",
                opt.in_channels, ", ", opt.image_size, ", ", opt.image_size, "], got ", images.sizes(),
                " (encoder.pos_embedding is sized for image_size ", opt.image_size, "; resize the images or build the "
                "model with that image_size)");

  const std::int64_t n = images.size(0);
  // [N, D, H/P, W/P] → [N, patches, D], patches in row-major order as torchvision's reshape + permute.
  at::Tensor x = conv_proj->forward(images).flatten(2).transpose(1, 2);
  x = at::cat({class_token.expand({n, -1, -1}), x}, 1);
  if (dropout.keyed()) {
    x = ops::fused_dropout(x + pos_embedding, dropout.draw(is_training() ? config_.options.dropout : 0.0,
                                                           kViTEmbeddingSite));
  } else {
    x = at::dropout(x + pos_embedding, config_.options.dropout, is_training());
  }
  for (std::size_t i = 0; i < layers.size(); ++i) x = layers[i]->forward(x, dropout, vit_layer_site(i));
  return ln->forward(x).select(1, 0);
}

at::Tensor ViT::forward(const at::Tensor& images) { return head->forward(features(images)); }

at::Tensor ViT::forward(const at::Tensor& images, const ops::DropoutSource& dropout) {
  return head->forward(features(images, dropout));
}

}  // namespace hotpath::models
