// ViT architecture and registry: torchvision's vit_b_16 key names and shapes, parameter counts,
// initialisation, attention against explicit math, forward shapes, dropout modes, bad input.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/vision/vit.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/dropout.h"
#include "models/model_test_support.h"

namespace hotpath::models {
namespace {

using model_test::parameter_count;

using Shape = std::vector<std::int64_t>;

// The parity tests' small case: 32×32 images, 8×8 patches (16 + 1 tokens), 2 layers.
ViTConfig small_config(std::int64_t num_classes = 10) {
  return {.patch_size = 8,
          .num_layers = 2,
          .num_heads = 3,
          .hidden_dim = 192,
          .mlp_dim = 768,
          .options = {.num_classes = num_classes, .image_size = 32}};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Keys, shapes and counts copied from torchvision.models.vit_b_16().state_dict() (torchvision 0.29).
TEST(ViT, VitB16KeysAndParameterCountAreTorchvisions) {
  const ModelHandle model = create_model("vit_b_16");
  const auto state = named_state(*model);
  EXPECT_EQ(state.size(), 152u);
  const std::map<std::string, Shape> expected = {
      {"class_token", {1, 1, 768}},
      {"conv_proj.weight", {768, 3, 16, 16}},
      {"conv_proj.bias", {768}},
      {"encoder.pos_embedding", {1, 197, 768}},
      {"encoder.layers.encoder_layer_0.ln_1.weight", {768}},
      {"encoder.layers.encoder_layer_0.ln_1.bias", {768}},
      {"encoder.layers.encoder_layer_0.self_attention.in_proj_weight", {2304, 768}},
      {"encoder.layers.encoder_layer_0.self_attention.in_proj_bias", {2304}},
      {"encoder.layers.encoder_layer_0.self_attention.out_proj.weight", {768, 768}},
      {"encoder.layers.encoder_layer_0.self_attention.out_proj.bias", {768}},
      {"encoder.layers.encoder_layer_0.ln_2.weight", {768}},
      {"encoder.layers.encoder_layer_0.ln_2.bias", {768}},
      {"encoder.layers.encoder_layer_0.mlp.0.weight", {3072, 768}},
      {"encoder.layers.encoder_layer_0.mlp.0.bias", {3072}},
      {"encoder.layers.encoder_layer_0.mlp.3.weight", {768, 3072}},
      {"encoder.layers.encoder_layer_0.mlp.3.bias", {768}},
      {"encoder.layers.encoder_layer_11.self_attention.in_proj_weight", {2304, 768}},
      {"encoder.layers.encoder_layer_11.mlp.3.bias", {768}},
      {"encoder.ln.weight", {768}},
      {"encoder.ln.bias", {768}},
      {"heads.head.weight", {1000, 768}},
      {"heads.head.bias", {1000}},
  };
  for (const auto& [name, shape] : expected) {
    const auto it = state.find(name);
    ASSERT_NE(it, state.end()) << "missing torchvision key " << name;
    EXPECT_EQ(it->second.sizes().vec(), shape) << name;
  }
  EXPECT_EQ(state.count("encoder.layers.encoder_layer_12.ln_1.weight"), 0u);
  EXPECT_EQ(parameter_count(*model), 86'567'656);
}

TEST(ViT, VitTinyParameterCountsMatchTorchvision) {
  // python: VisionTransformer(224, 16, 12, 3, 192, 768[, num_classes=10]).
  EXPECT_EQ(parameter_count(*create_model("vit_tiny")), 5'717'416);
  const ModelHandle ten = create_model("vit_tiny", {.num_classes = 10});
  EXPECT_EQ(parameter_count(*ten), 5'526'346);
  EXPECT_EQ(named_state(*ten).size(), 152u);
  // One input channel: conv_proj.weight 192×1×16×16 instead of 192×3×16×16.
  EXPECT_EQ(parameter_count(*create_model("vit_tiny", {.num_classes = 10, .in_channels = 1})),
            5'526'346 - 192 * 2 * 16 * 16);
}

TEST(ViT, PosEmbeddingIsSizedFromImageSize) {
  ViT net(vit_config("vit_tiny", {.num_classes = 10, .image_size = 64}));
  EXPECT_EQ(net.config().num_patches(), 16);
  EXPECT_EQ(named_state(net).at("encoder.pos_embedding").sizes().vec(), (Shape{1, 17, 192}));
  EXPECT_EQ(ViT(small_config()).pos_embedding.sizes().vec(), (Shape{1, 17, 192}));
}

TEST(ViT, InitialisationIsTorchvisions) {
  at::manual_seed(3);
  ViT net(vit_config("vit_tiny", {.num_classes = 10}));
  const auto state = named_state(net);
  EXPECT_TRUE(state.at("class_token").eq(0).all().item<bool>());
  EXPECT_TRUE(state.at("heads.head.weight").eq(0).all().item<bool>());
  EXPECT_TRUE(state.at("heads.head.bias").eq(0).all().item<bool>());
  EXPECT_NEAR(state.at("encoder.pos_embedding").std().item<double>(), 0.02, 0.001);
  EXPECT_TRUE(state.at("encoder.layers.encoder_layer_3.ln_2.weight").eq(1).all().item<bool>());
  EXPECT_TRUE(state.at("encoder.ln.bias").eq(0).all().item<bool>());
  // conv_proj: std sqrt(1 / (3 × 16 × 16)), zero bias.
  const double conv_std = std::sqrt(1.0 / 768.0);
  EXPECT_NEAR(state.at("conv_proj.weight").std().item<double>(), conv_std, 0.02 * conv_std);
  EXPECT_TRUE(state.at("conv_proj.bias").eq(0).all().item<bool>());
  // MultiheadAttention: xavier_uniform_ over the packed [3D, D] matrix, bound sqrt(6 / (D + 3D)); zero biases.
  const std::string block = "encoder.layers.encoder_layer_5.";
  const double xavier = std::sqrt(6.0 / (192.0 + 576.0));
  const at::Tensor in_proj = state.at(block + "self_attention.in_proj_weight");
  EXPECT_LE(in_proj.abs().max().item<double>(), xavier);
  EXPECT_GT(in_proj.abs().max().item<double>(), 0.95 * xavier);
  EXPECT_TRUE(state.at(block + "self_attention.in_proj_bias").eq(0).all().item<bool>());
  EXPECT_TRUE(state.at(block + "self_attention.out_proj.bias").eq(0).all().item<bool>());
  EXPECT_LE(state.at(block + "self_attention.out_proj.weight").abs().max().item<double>(), 1.0 / std::sqrt(192.0));
  // MLPBlock: xavier_uniform_ weights (bound sqrt(6 / (192 + 768))), normal(std=1e-6) biases.
  const at::Tensor fc1 = state.at(block + "mlp.0.weight");
  EXPECT_LE(fc1.abs().max().item<double>(), std::sqrt(6.0 / 960.0));
  EXPECT_GT(fc1.abs().max().item<double>(), 0.95 * std::sqrt(6.0 / 960.0));
  const at::Tensor b1 = state.at(block + "mlp.0.bias");
  EXPECT_LT(b1.abs().max().item<double>(), 1e-5);
  EXPECT_GT(b1.abs().max().item<double>(), 0.0);
}

// The block's attention equals softmax(q kᵀ / sqrt(head_dim)) v per head with q, k, v from the packed
// in_proj rows [0, D), [D, 2D), [2D, 3D) and heads as consecutive head_dim slices — MultiheadAttention's layout.
TEST(ViT, AttentionMatchesExplicitMath) {
  at::manual_seed(11);
  ViTEncoderBlock block(/*hidden_dim=*/12, /*num_heads=*/3, /*mlp_dim=*/8, 0.0, 0.0);
  {
    const at::NoGradGuard no_grad;
    block.in_proj_bias.normal_(0.0, 0.3);
    block.out_proj->bias.normal_(0.0, 0.3);
  }
  block.eval();
  const at::Tensor x = at::randn({2, 5, 12});
  const at::Tensor qkv = at::linear(x, block.in_proj_weight, block.in_proj_bias);
  std::vector<at::Tensor> heads;
  for (std::int64_t h = 0; h < 3; ++h) {
    const at::Tensor q = qkv.slice(2, h * 4, h * 4 + 4);
    const at::Tensor k = qkv.slice(2, 12 + h * 4, 12 + h * 4 + 4);
    const at::Tensor v = qkv.slice(2, 24 + h * 4, 24 + h * 4 + 4);
    heads.push_back(at::softmax(at::matmul(q, k.transpose(1, 2)) / 2.0, -1).matmul(v));
  }
  const at::Tensor expected = block.out_proj->forward(at::cat(heads, 2));
  const at::NoGradGuard no_grad;
  EXPECT_LE((block.attention(x) - expected).abs().max().item<double>(), 1e-5);
  // The block itself: pre-norm residuals.
  const at::Tensor y = block.attention(block.ln_1->forward(x)) + x;
  EXPECT_LE((block.forward(x) - (y + block.mlp->forward(block.ln_2->forward(y)))).abs().max().item<double>(), 1e-5);
}

TEST(ViT, ForwardShapes) {
  ViT net(small_config(7));
  net.eval();
  EXPECT_EQ(net.forward(at::randn({2, 3, 32, 32})).sizes().vec(), (Shape{2, 7}));
  EXPECT_EQ(net.features(at::randn({3, 3, 32, 32})).sizes().vec(), (Shape{3, 192}));
  EXPECT_EQ(net.feature_dim(), 192);
  // Channels-last input gives the same logits.
  const at::Tensor x = at::randn({2, 3, 32, 32});
  EXPECT_LE((net.forward(x) - net.forward(x.contiguous(at::MemoryFormat::ChannelsLast))).abs().max().item<double>(),
            1e-5);

  const ModelHandle tiny = create_model("vit_tiny", {.num_classes = 10, .in_channels = 1});
  tiny->eval();
  EXPECT_EQ(tiny->forward(at::randn({1, 1, 224, 224})).sizes().vec(), (Shape{1, 10}));
}

TEST(ViT, DropoutActsOnlyInTraining) {
  ViTConfig config = small_config();
  config.options.dropout = 0.3;
  config.options.attention_dropout = 0.3;
  ViT net(config);
  {
    const at::NoGradGuard no_grad;
    net.head->weight.normal_();  // a zero head would hide everything
  }
  const at::Tensor x = at::randn({2, 3, 32, 32});
  net.eval();
  EXPECT_TRUE(net.forward(x).equal(net.forward(x)));
  net.train();
  EXPECT_FALSE(net.forward(x).equal(net.forward(x)));
}

// The image task's keyed forward (data-parallel training): every dropout — embeddings, attention
// probabilities, attention output, MLP — is drawn per sample, so a sample's logits are the same in a batch of
// 8 or 4, at row 0 or 3, on 1 or 2 threads; eval and an unkeyed source are the plain forward.
TEST(ViT, KeyedDropoutFollowsTheSampleNotTheBatch) {
  ViTConfig config = small_config();
  config.options.dropout = 0.3;
  config.options.attention_dropout = 0.3;
  ViT net(config);
  const at::NoGradGuard no_grad;
  net.head->weight.normal_();  // a zero head would hide everything
  at::manual_seed(1);
  const at::Tensor x8 = at::randn({8, 3, 32, 32});
  const auto source = [](const std::vector<std::int64_t>& samples) {
    return ops::DropoutSource::per_sample(/*run_seed=*/9, /*epoch=*/2, at::tensor(samples, at::kLong));
  };
  net.train();
  const at::Tensor y8 = net.forward(x8, source({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(net.forward(x8, source({0, 1, 2, 3, 4, 5, 6, 7})).equal(y8)) << "keyed draws repeat";
  const at::Tensor y4 = net.forward(at::stack({x8[3], x8[1], x8[2], x8[0]}), source({3, 1, 2, 0}));
  EXPECT_LE((y4[0] - y8[3]).abs().max().item<double>(), 1e-5);
  EXPECT_LE((y4[3] - y8[0]).abs().max().item<double>(), 1e-5);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor y8_one_thread = net.forward(x8, source({0, 1, 2, 3, 4, 5, 6, 7}));
  at::set_num_threads(2);
  const at::Tensor y8_two_threads = net.forward(x8, source({0, 1, 2, 3, 4, 5, 6, 7}));
  at::set_num_threads(threads);
  EXPECT_LE((y8_one_thread - y8).abs().max().item<double>(), 1e-5);
  EXPECT_LE((y8_two_threads - y8).abs().max().item<double>(), 1e-5);
  // The draws matter: other samples' keys (the same images) give other logits; attention dropout alone too.
  EXPECT_GT((net.forward(x8, source({10, 11, 12, 13, 14, 15, 16, 17})) - y8).abs().max().item<double>(), 1e-3);
  // Not keyed: the default generator, as before (same seed, same draws as forward(images)).
  at::manual_seed(5);
  const at::Tensor unkeyed = net.forward(x8, ops::DropoutSource{});
  at::manual_seed(5);
  EXPECT_TRUE(unkeyed.equal(net.forward(x8)));
  // Eval draws nothing, keyed or not.
  net.eval();
  const at::Tensor eval = net.forward(x8);
  EXPECT_TRUE(net.forward(x8, source({0, 1, 2, 3, 4, 5, 6, 7})).equal(eval));
  EXPECT_GT((eval - y8).abs().max().item<double>(), 1e-3);
}

// Attention-probability dropout alone (hidden dropout 0) is keyed too: the block's output for a sample does
// not depend on the batch, and differs from the undropped output.
TEST(ViT, KeyedAttentionDropoutFollowsTheSample) {
  ViTEncoderBlock block(/*hidden_dim=*/12, /*num_heads=*/3, /*mlp_dim=*/8, /*dropout=*/0.0, /*attention_dropout=*/0.5);
  block.train();
  const at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({4, 5, 12});
  const auto source = [](const std::vector<std::int64_t>& samples) {
    return ops::DropoutSource::per_sample(3, 0, at::tensor(samples, at::kLong));
  };
  const at::Tensor y4 = block.forward(x, source({20, 21, 22, 23}), vit_layer_site(0));
  const at::Tensor y2 = block.forward(x.slice(0, 2, 4).flip(0), source({23, 22}), vit_layer_site(0));
  EXPECT_LE((y2[0] - y4[3]).abs().max().item<double>(), 1e-6);
  EXPECT_LE((y2[1] - y4[2]).abs().max().item<double>(), 1e-6);
  block.eval();
  EXPECT_GT((block.forward(x) - y4).abs().max().item<double>(), 1e-3);
  EXPECT_TRUE(block.forward(x, source({20, 21, 22, 23}), vit_layer_site(0)).equal(block.forward(x)))
      << "eval: no dropout, keyed or not";
}

TEST(ViT, TrainingStepReachesEveryParameter) {
  ViT net(small_config(3));
  {
    const at::NoGradGuard no_grad;
    net.head->weight.normal_();  // with torchvision's zero head no gradient would flow past it
  }
  net.train();
  net.forward(at::randn({2, 3, 32, 32})).logsumexp(1).sum().backward();
  for (const auto& p : net.named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().max().item<double>(), 0.0) << p.key();
  }
}

TEST(ViT, RejectsImagesOfTheWrongSizeOrChannels) {
  ViT net(small_config());
  const std::string size = error_of([&] { net.forward(at::randn({1, 3, 64, 64})); });
  EXPECT_NE(size.find("ViT: expected images [N, 3, 32, 32], got [1, 3, 64, 64]"), std::string::npos) << size;
  EXPECT_NE(size.find("image_size 32"), std::string::npos) << size;
  const std::string rect = error_of([&] { net.forward(at::randn({1, 3, 32, 40})); });
  EXPECT_NE(rect.find("got [1, 3, 32, 40]"), std::string::npos) << rect;
  const std::string channels = error_of([&] { net.forward(at::randn({1, 1, 32, 32})); });
  EXPECT_NE(channels.find("expected images [N, 3, 32, 32], got [1, 1, 32, 32] (1 channels"), std::string::npos)
      << channels;
  const std::string rank = error_of([&] { net.forward(at::randn({3, 32, 32})); });
  EXPECT_NE(rank.find("got [3, 32, 32]"), std::string::npos) << rank;
}

TEST(ViT, RejectsBadConfigs) {
  const std::string name = error_of([] { vit_config("vit_b_32"); });
  EXPECT_NE(name.find("'vit_b_32' is not one of vit_b_16, vit_tiny"), std::string::npos) << name;
  const std::string size = error_of([] { ViT(vit_config("vit_tiny", {.image_size = 100})); });
  EXPECT_NE(size.find("image_size 100 is not a positive multiple of patch_size 16"), std::string::npos) << size;
  ViTConfig heads = small_config();
  heads.num_heads = 5;
  EXPECT_THROW(ViT{heads}, Error);
  EXPECT_THROW(ViT(vit_config("vit_tiny", {.num_classes = 0})), Error);
  ViTConfig dropout = small_config();
  dropout.options.dropout = 1.0;
  EXPECT_THROW(ViT{dropout}, Error);
}

TEST(Registry, KnowsTheViTs) {
  const std::vector<std::string> names = model_names();
  for (const char* n : {"vit_b_16", "vit_tiny", "resnet18"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  const ModelHandle model = create_model("vit_tiny", {.num_classes = 5});
  const auto* vit = dynamic_cast<ViT*>(model.get());
  ASSERT_NE(vit, nullptr);
  EXPECT_EQ(vit->config().options.image_size, 224);
  EXPECT_EQ(named_state(*model).at("heads.head.weight").sizes().vec(), (Shape{5, 192}));
  const std::string residual = error_of([] { create_model("vit_tiny", {.zero_init_residual = true}); });
  EXPECT_NE(residual.find("zero_init_residual"), std::string::npos) << residual;
}

}  // namespace
}  // namespace hotpath::models
