// Longformer against transformers (tests/oracles/longformer_ref.py): a tiny seeded
// LongformerForSequenceClassification (windows 4 and 8 over 40 tokens, padding, global tokens) loaded from its
// save_pretrained directory — the classifier's logits, the encoder's hidden states with explicit global tokens,
// one LongformerSelfAttention block on its own — through the fused sliding-window kernel and its dense twin;
// training gradients of the fused path against the dense twin; config errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/formats/bert_config.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/text/hf_weights.h"
#include "hotpath/models/text/longformer.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/sliding_attention.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

using ops::AttentionKernel;

class LongformerParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::cached_python_fixtures("tests/oracles/longformer_ref.py", "longformer-ref") / "cls";
  }
  static std::map<std::string, at::Tensor> ref() { return read_tensors((dir_ / "ref.safetensors").string()); }
  static inline std::filesystem::path dir_;
};

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST_F(LongformerParity, ClassifierLogitsMatchTransformersThroughBothKernels) {
  const auto r = ref();
  for (const AttentionKernel kernel : {AttentionKernel::kAuto, AttentionKernel::kReference}) {
    LoadReport report;
    BertLoadOptions options;
    options.model.sliding_kernel = kernel;
    auto model = load_bert_classifier(dir_, options, &report);
    EXPECT_TRUE(report.complete()) << report.summary();
    const at::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(r.at("input_ids"), r.at("attention_mask"));
    ASSERT_EQ(logits.sizes(), r.at("logits").sizes());
    EXPECT_LT(max_abs_diff(logits, r.at("logits")), 1e-4) << "kernel " << static_cast<int>(kernel);
    EXPECT_GT(logits.std().item<double>(), 0.1);  // not trivially equal: the classes differ across the batch
  }
}

TEST_F(LongformerParity, EncoderWithGlobalTokensMatchesTransformersOnEveryToken) {
  const auto r = ref();
  auto model = load_bert_model(dir_);  // the classifier's encoder ("longformer." keys), without a pooler
  const at::NoGradGuard no_grad;
  const at::Tensor roles = ops::token_roles(r.at("attention_mask"), r.at("global_attention_mask"));
  const at::Tensor hidden = model->forward(r.at("input_ids"), roles);
  const at::Tensor keep = r.at("attention_mask").unsqueeze(-1).to(at::kBool);
  ASSERT_EQ(hidden.sizes(), r.at("hidden").sizes());
  EXPECT_LT(max_abs_diff(hidden.masked_fill(keep.logical_not(), 0), r.at("hidden").masked_fill(keep.logical_not(), 0)),
            1e-4);
}

TEST_F(LongformerParity, SelfAttentionBlockMatchesLongformerSelfAttention) {
  const auto r = ref();
  const formats::BertConfig config = formats::BertConfig::from_file(dir_ / "config.json");
  LongformerSelfAttention attention(config, 6);
  LoadReport report = load_safetensors(*attention, (dir_ / "attention.safetensors").string());
  EXPECT_TRUE(report.complete()) << report.summary();
  const at::NoGradGuard no_grad;
  const at::Tensor roles = r.at("attention_roles").to(at::kChar);
  for (const AttentionKernel kernel : {AttentionKernel::kAuto, AttentionKernel::kReference}) {
    attention->set_kernel(kernel);
    const at::Tensor out = attention->forward(r.at("attention_hidden"), roles);
    EXPECT_LT(max_abs_diff(out, r.at("attention_output")), 1e-4) << "kernel " << static_cast<int>(kernel);
  }
}

// Training: the fused kernel's backward gives the dense twin's parameter gradients.
TEST_F(LongformerParity, FusedGradientsMatchTheDenseTwin) {
  const auto r = ref();
  std::vector<std::vector<at::Tensor>> grads;
  for (const AttentionKernel kernel : {AttentionKernel::kAuto, AttentionKernel::kReference}) {
    BertLoadOptions options;
    options.model.sliding_kernel = kernel;
    auto model = load_bert_classifier(dir_, options);
    const at::Tensor logits = model->forward(r.at("input_ids"), r.at("attention_mask"));
    const at::Tensor loss = at::cross_entropy_loss(logits, at::tensor({0, 1, 2, 1}, at::kLong));
    loss.backward();
    std::vector<at::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    grads.push_back(g);
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  double worst = 0.0, largest = 0.0;
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    worst = std::max(worst, max_abs_diff(grads[0][i], grads[1][i]));
    largest = std::max(largest, grads[1][i].abs().max().item<double>());
  }
  EXPECT_LT(worst, 1e-4 * std::max(1.0, largest));
  EXPECT_GT(largest, 0.0);
}

TEST(LongformerConfig, BadAttentionWindowsAreOneLine) {
  const std::string base =
      R"({"model_type": "longformer", "vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 40, )";
  const formats::BertConfig ok = formats::BertConfig::from_json(base + R"("attention_window": 6})");
  EXPECT_EQ(ok.arch, formats::BertArch::kLongformer);
  EXPECT_EQ(ok.attention_window, (std::vector<std::int64_t>{6, 6}));
  EXPECT_EQ(ok.pad_token_id, 1);  // RoBERTa's
  const auto error = [&](const std::string& tail) {
    try {
      (void)formats::BertConfig::from_json(base + tail);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(R"("attention_window": 5})").find("attention_window\" of layer 0 is 5; expected an even size"),
            std::string::npos);
  EXPECT_NE(error(R"("attention_window": [4]})").find("lists 1 windows for 2 layers"), std::string::npos);
  EXPECT_NE(error(R"("attention_window": [4, "x"]})").find("must hold integers"), std::string::npos);
}

TEST(LongformerModel, RefusesPrefixesAndOverlongInputs) {
  formats::BertConfig config = formats::BertConfig::from_json(
      R"({"model_type": "longformer", "vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 40, "attention_window": 4})");
  BertForSequenceClassification model(config);
  EXPECT_THROW((void)prefix_config_for(model, {.num_virtual_tokens = 2}), Error);
  // Too long for the position table: one line naming the limit.
  try {
    (void)model.forward(at::full({1, 40}, 5, at::kLong));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds max_position_embeddings"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotpath::models
