// hotpath/models/vision/vit.h — Vision Transformers whose parameter names are torchvision's vit_b_16 state_dict keys.
//
//   auto net = std::make_shared<ViT>(vit_config("vit_tiny", {.num_classes = 10, .image_size = 32}));
//   load_safetensors(*net, "vit_b_16.safetensors");  // weights.h; torchvision's keys load unchanged
//   at::Tensor logits = net->forward(images);        // images [N, C, image_size, image_size]
//
// Matches torchvision.models.vision_transformer.VisionTransformer (0.29) without a conv stem or a
// representation layer: conv_proj (patch embedding conv, kernel = stride = patch), class_token
// [1, 1, D], encoder.pos_embedding [1, (image/patch)^2 + 1, D], encoder.layers.encoder_layer_{i}
// with ln_1, self_attention (nn.MultiheadAttention's in_proj_weight/in_proj_bias/out_proj), ln_2,
// mlp.0 / mlp.3 (Linear, exact GELU between), encoder.ln, heads.head; LayerNorm eps 1e-6, pre-norm
// blocks, the class token's final state feeds the head. Same initialisation as torchvision.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/models/classifier.h"
#include "hotpath/ops/dropout.h"

namespace hotpath::models {

struct ViTOptions {
  std::int64_t num_classes = 1000;
  std::int64_t in_channels = 3;  // torchvision fixes 3; conv_proj.weight is [D, in_channels, P, P]
  std::int64_t image_size = 224;  // square inputs only; sizes encoder.pos_embedding
  double dropout = 0.0;           // after the embedding, attention output and MLP linears (train only)
  double attention_dropout = 0.0;  // on the attention probabilities (train only)
};

struct ViTConfig {
  std::int64_t patch_size = 16;
  std::int64_t num_layers = 12;
  std::int64_t num_heads = 12;
  std::int64_t hidden_dim = 768;
  std::int64_t mlp_dim = 3072;
  ViTOptions options;

  // Patches per image, (image_size / patch_size)^2; the sequence is one longer (the class token).
  [[nodiscard]] std::int64_t num_patches() const;
};

// "vit_b_16" (torchvision's: patch 16, 12 layers, 12 heads, D 768, MLP 3072) or "vit_tiny" (patch 16,
// 12 layers, 3 heads, D 192, MLP 768, as DeiT-Ti); anything else is a hotpath::Error naming both.
ViTConfig vit_config(const std::string& name, const ViTOptions& options = {});

// Dropout sites of a keyed ops::DropoutSource in ViT::forward: the embeddings' dropout, and in layer i, from
// vit_layer_site(i): the attention probabilities, the attention output, the MLP's hidden and output dropouts.
inline constexpr std::uint64_t kViTEmbeddingSite = 1;
inline constexpr std::uint64_t kViTAttentionSite = 0;
inline constexpr std::uint64_t kViTAttentionOutputSite = 1;
inline constexpr std::uint64_t kViTMlpHiddenSite = 2;
inline constexpr std::uint64_t kViTMlpOutputSite = 3;
constexpr std::uint64_t vit_layer_site(std::size_t i) { return 16 * (static_cast<std::uint64_t>(i) + 1); }

// One pre-norm transformer block (torchvision's EncoderBlock); public so tests can reach its parts.
class ViTEncoderBlock : public torch::nn::Module {
 public:
  ViTEncoderBlock(std::int64_t hidden_dim, std::int64_t num_heads, std::int64_t mlp_dim, double dropout,
                  double attention_dropout);

  // [N, L, D] → [N, L, D]. A keyed `dropout` draws this block's masks per sample at first_site + the
  // kViT*Site offsets above; not keyed: ATen's dropout from the default generator (torchvision's).
  at::Tensor forward(const at::Tensor& x, const ops::DropoutSource& dropout = {}, std::uint64_t first_site = 0);
  // Multi-head self-attention alone (no norm, no residual): what nn.MultiheadAttention(x, x, x) returns.
  at::Tensor attention(const at::Tensor& x, const ops::DropoutSource& dropout = {}, std::uint64_t first_site = 0);

  torch::nn::LayerNorm ln_1{nullptr};
  std::shared_ptr<torch::nn::Module> self_attention;  // holds in_proj_weight, in_proj_bias, out_proj
  at::Tensor in_proj_weight;                         // [3D, D]: q, k, v stacked, as nn.MultiheadAttention
  at::Tensor in_proj_bias;                           // [3D]
  torch::nn::Linear out_proj{nullptr};
  torch::nn::LayerNorm ln_2{nullptr};
  torch::nn::Sequential mlp{nullptr};  // 0 Linear, 1 GELU, 2 Dropout, 3 Linear, 4 Dropout

 private:
  std::int64_t num_heads_;
  double dropout_;
  double attention_dropout_;
};

class ViT : public ImageClassifier {
 public:
  explicit ViT(const ViTConfig& config);

  at::Tensor forward(const at::Tensor& images) override;
  // Training with a keyed `dropout`: every dropout (embeddings, attention probabilities, attention output,
  // MLP) is drawn per sample at its site (above); eval, or dropout 0, draws nothing.
  at::Tensor forward(const at::Tensor& images, const ops::DropoutSource& dropout) override;
  // Everything up to the head: the class token after encoder.ln, [N, hidden_dim].
  at::Tensor features(const at::Tensor& images, const ops::DropoutSource& dropout = {});

  [[nodiscard]] const ViTConfig& config() const { return config_; }
  [[nodiscard]] std::int64_t feature_dim() const { return config_.hidden_dim; }

  // Named as in torchvision; registered under these names, so the state_dict keys follow.
  torch::nn::Conv2d conv_proj{nullptr};
  at::Tensor class_token;    // [1, 1, D]
  at::Tensor pos_embedding;  // "encoder.pos_embedding", [1, num_patches + 1, D]
  std::vector<std::shared_ptr<ViTEncoderBlock>> layers;  // "encoder.layers.encoder_layer_{i}"
  torch::nn::LayerNorm ln{nullptr};                       // "encoder.ln"
  torch::nn::Linear head{nullptr};                        // "heads.head"

 private:
  ViTConfig config_;
};

}  // namespace hotpath::models
