// Prefix tuning (models/text/prefix.h, formats/prefix_config.h), python-free: PEFT's config fields and the
// refusals, the table's layout, what is trained, save → load, checkpointed gradients, positions. Parity
// with peft both ways is prefix_parity_test.cpp.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/formats/prefix_config.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/text/prefix.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/attention.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

using formats::BertConfig;
using formats::PrefixConfig;
using test::TempDir;

constexpr const char* kTinyBert = R"({"model_type": "bert", "vocab_size": 50, "hidden_size": 16,
  "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 24, "max_position_embeddings": 20,
  "id2label": {"0": "a", "1": "b", "2": "c"}, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})";
constexpr const char* kTinyDistil = R"({"model_type": "distilbert", "vocab_size": 50, "dim": 16, "n_layers": 2,
  "n_heads": 2, "hidden_dim": 24, "max_position_embeddings": 20, "activation": "gelu", "dropout": 0.0})";

// What peft 0.21's save_pretrained writes for PrefixTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=5,
// prefix_projection=True, encoder_hidden_size=12) on a 2-layer, 16-wide, 4-head BERT.
constexpr const char* kPeftConfig = R"({"auto_mapping": null, "base_model_name_or_path": null,
  "encoder_hidden_size": 12, "inference_mode": true, "init_weights": null,
  "modules_to_save": ["classifier", "score", "classifier", "score"], "num_attention_heads": 4, "num_layers": 2,
  "num_transformer_submodules": 1, "num_virtual_tokens": 5, "peft_type": "PREFIX_TUNING", "peft_version": "0.21.2",
  "prefix_projection": true, "revision": null, "task_type": "SEQ_CLS", "token_dim": 16})";

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::shared_ptr<BertForSequenceClassification> tiny(const char* json = kTinyBert, BertOptions options = {}) {
  at::manual_seed(7);
  return std::make_shared<BertForSequenceClassification>(BertConfig::from_json(json), options);
}

struct Batch {
  at::Tensor ids, mask, types;
};

Batch batch() {
  Batch b;
  b.ids = at::randint(1, 50, {3, 6}, at::kLong);
  b.mask = at::ones({3, 6}, at::kLong);
  b.mask.index_put_({1, at::indexing::Slice(4)}, 0);
  b.types = at::zeros({3, 6}, at::kLong);
  return b;
}

void perturb(torch::nn::Module& m, double scale) {
  const at::NoGradGuard no_grad;
  for (auto& p : m.parameters()) {
    if (p.requires_grad()) p.add_(at::randn(p.sizes()) * scale);
  }
}

TEST(PrefixConfig, ReadsWhatPeftWrites) {
  const PrefixConfig c = PrefixConfig::from_json(kPeftConfig);
  EXPECT_EQ(c.num_virtual_tokens, 5);
  EXPECT_EQ(c.token_dim, 16);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.head_dim(), 4);
  EXPECT_EQ(c.table_width(), 64);
  EXPECT_TRUE(c.prefix_projection);
  EXPECT_EQ(c.encoder_hidden_size, 12);
  EXPECT_EQ(c.task_type, "SEQ_CLS");
  EXPECT_TRUE(c.inference_mode);
  const PrefixConfig back = PrefixConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(formats::peft_type_of(kPeftConfig), "PREFIX_TUNING");
}

TEST(PrefixConfig, RefusesWhatItCannotRunWithOneLineNamingTheField) {
  const auto bad = [](const std::string& field, const std::string& value) {
    std::string json = kPeftConfig;
    const auto at = json.find("\"" + field + "\": ");
    EXPECT_NE(at, std::string::npos) << field;
    const auto start = at + field.size() + 4;
    const auto end = json.find_first_of(",}", start);
    json.replace(start, end - start, value);
    return error_of([&] { (void)PrefixConfig::from_json(json, "adapter/adapter_config.json"); });
  };
  EXPECT_NE(bad("peft_type", "\"LORA\"").find("adapter/adapter_config.json: peft_type \"LORA\" is not prefix tuning"),
            std::string::npos);
  EXPECT_NE(bad("token_dim", "18").find("\"token_dim\" (18) must be a multiple of \"num_attention_heads\" (4)"),
            std::string::npos);
  EXPECT_NE(bad("num_virtual_tokens", "0").find("field \"num_virtual_tokens\" must be >= 1"), std::string::npos);
  EXPECT_NE(bad("num_layers", "null").find("missing required field \"num_layers\""), std::string::npos);
  EXPECT_NE(bad("num_transformer_submodules", "2").find("encoder-decoder"), std::string::npos);
  EXPECT_NE(bad("task_type", "\"CAUSAL_LM\"").find("task_type \"CAUSAL_LM\" is not supported"), std::string::npos);
  EXPECT_NE(bad("encoder_hidden_size", "null").find("missing required field \"encoder_hidden_size\""),
            std::string::npos);
  for (const std::string& e : {bad("token_dim", "\"16\""), bad("init_weights", "\"gaussian\"")}) {
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_NE(e.find("adapter/adapter_config.json"), std::string::npos) << e;
  }
}

// PEFT's get_prompt: table.view(n, 2·layers, heads, head_dim).permute(2, 0, 3, 1, 4), layer i taking rows 2i
// (keys) and 2i + 1 (values) of the first dimension.
TEST(Prefix, LayerKeysAndValuesFollowPeftsLayout) {
  PrefixConfig c = PrefixConfig::from_json(kPeftConfig);
  c.inference_mode = true;
  PrefixEncoder encoder(c);
  EXPECT_FALSE(encoder->projected());
  const at::Tensor table = at::arange(5 * 64, at::kFloat).view({5, 64});
  for (std::int64_t layer = 0; layer < 2; ++layer) {
    const at::Tensor kv = encoder->layer_kv(table, layer);
    ASSERT_EQ(kv.sizes(), (at::IntArrayRef{2, 4, 5, 4}));
    for (std::int64_t which = 0; which < 2; ++which) {
      for (std::int64_t h = 0; h < 4; ++h) {
        for (std::int64_t t = 0; t < 5; ++t) {
          // Column of (block 2·layer + which, head h, dim 0) in row t.
          const float expected = static_cast<float>(t * 64 + (2 * layer + which) * 16 + h * 4);
          EXPECT_EQ(kv[which][h][t][0].item<float>(), expected);
        }
      }
    }
  }
}

TEST(Prefix, TrainsOnlyThePrefixAndTheHead) {
  auto model = tiny();
  const PrefixConfig c = prefix_config_for(*model, {.num_virtual_tokens = 3, .prefix_projection = true,
                                                    .encoder_hidden_size = 8});
  const LoraReport report = apply_prefix(*model, c);
  std::vector<std::string> trainable;
  for (const auto& p : model->named_parameters()) {
    if (p.value().requires_grad()) trainable.push_back(p.key());
  }
  EXPECT_EQ(trainable, (std::vector<std::string>{"bert.prefix_encoder.embedding.weight",
                                                 "bert.prefix_encoder.transform.0.weight",
                                                 "bert.prefix_encoder.transform.0.bias",
                                                 "bert.prefix_encoder.transform.2.weight",
                                                 "bert.prefix_encoder.transform.2.bias", "classifier.weight",
                                                 "classifier.bias"}));
  EXPECT_EQ(report.trainable_params, 3 * 16 + 16 * 8 + 8 + 8 * 64 + 64 + 3 * 16 + 3);
  EXPECT_NE(report.summary().find("trainable params: "), std::string::npos);
}

TEST(Prefix, ChangesTheOutputAndSavesAndLoadsExactly) {
  auto model = tiny();
  const Batch b = batch();
  model->eval();
  const at::NoGradGuard no_grad;
  const at::Tensor plain = model->forward(b.ids, b.mask, b.types);
  const PrefixConfig c = prefix_config_for(*model, {.num_virtual_tokens = 4, .prefix_projection = true});
  apply_prefix(*model, c);
  perturb(*model, 0.5);
  model->eval();
  const at::Tensor prefixed = model->forward(b.ids, b.mask, b.types);
  EXPECT_FALSE(at::allclose(plain, prefixed, 1e-3, 1e-3));

  TempDir dir;
  save_prefix(*model, c, dir.path() / "adapter");
  auto other = tiny();
  const PrefixConfig loaded = load_prefix(*other, dir.path() / "adapter");
  EXPECT_TRUE(loaded.inference_mode);
  EXPECT_FALSE(other->encoder->prefix()->projected());  // the file holds the MLP's output
  other->eval();
  EXPECT_TRUE(at::allclose(other->forward(b.ids, b.mask, b.types), prefixed, 1e-6, 1e-6));
}

// The prefix is an input of each checkpointed layer: the recomputation gives it the same gradient.
TEST(Prefix, ActivationCheckpointingGivesThePrefixItsGradient) {
  std::map<bool, std::map<std::string, at::Tensor>> grads;
  const Batch b = batch();
  const at::Tensor labels = at::tensor({0, 2, 1}, at::kLong);
  for (const bool checkpointing : {false, true}) {
    auto model = tiny(kTinyBert, {.attention = &ops::fused_attention, .gradient_checkpointing = checkpointing});
    apply_prefix(*model, prefix_config_for(*model, {.num_virtual_tokens = 3, .prefix_projection = true}));
    model->train();
    const at::Tensor loss = at::cross_entropy_loss(model->forward(b.ids, b.mask, b.types), labels);
    loss.backward();
    for (const auto& p : model->named_parameters()) {
      if (p.value().requires_grad()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        grads[checkpointing][p.key()] = p.value().grad().clone();
      }
    }
  }
  ASSERT_EQ(grads[false].size(), 7u);
  for (const auto& [name, g] : grads[false]) {
    EXPECT_GT(g.abs().sum().item<double>(), 0.0) << name;
    EXPECT_TRUE(at::allclose(grads[true].at(name), g, 1e-5, 1e-6)) << name;
  }
}

TEST(Prefix, TextPositionsStartAfterThePrefix) {
  auto model = tiny();  // max_position_embeddings 20
  apply_prefix(*model, prefix_config_for(*model, {.num_virtual_tokens = 15}));
  model->eval();
  const at::NoGradGuard no_grad;
  EXPECT_NO_THROW(model->forward(at::ones({1, 5}, at::kLong)));
  EXPECT_NE(error_of([&] { (void)model->forward(at::ones({1, 6}, at::kLong)); })
                .find("sequence length 6 after a prefix of 15 tokens exceeds max_position_embeddings 20"),
            std::string::npos);
}

TEST(Prefix, RefusesAnotherModelsPrefixDistilBertAndBadFiles) {
  auto distil = tiny(kTinyDistil);
  EXPECT_NE(error_of([&] { (void)prefix_config_for(*distil, {}); }).find("distilbert is not supported"),
            std::string::npos);
  auto model = tiny();
  EXPECT_NE(error_of([&] { (void)prefix_config_for(*model, {.num_virtual_tokens = 20}); })
                .find("leave no position for the text"),
            std::string::npos);

  // A prefix for a 3-layer model.
  TempDir dir;
  PrefixConfig other = prefix_config_for(*model, {.num_virtual_tokens = 2});
  other.num_layers = 3;
  const auto write = [&](const std::string& sub, const PrefixConfig& c, std::map<std::string, at::Tensor> tensors) {
    std::filesystem::create_directories(dir.path() / sub);
    std::ofstream(dir.path() / sub / "adapter_config.json") << c.to_json();
    write_tensors((dir.path() / sub / "adapter_model.safetensors").string(), tensors, {});
  };
  const std::map<std::string, at::Tensor> good = {{"prompt_embeddings", at::zeros({2, 64})},
                                                  {"base_model.classifier.weight", at::zeros({3, 16})},
                                                  {"base_model.classifier.bias", at::zeros({3})}};
  write("layers", other, good);
  EXPECT_NE(error_of([&] { (void)load_prefix(*model, dir.path() / "layers"); })
                .find("the prefix has num_layers 3 but"),
            std::string::npos);
  const PrefixConfig mine = prefix_config_for(*model, {.num_virtual_tokens = 2});
  auto wrong_length = good;
  wrong_length["prompt_embeddings"] = at::zeros({3, 64});
  write("length", mine, wrong_length);
  EXPECT_NE(error_of([&] { (void)load_prefix(*model, dir.path() / "length"); })
                .find("tensor \"prompt_embeddings\" has shape [3, 64], expected [2, 64]"),
            std::string::npos);
  auto extra = good;
  extra["base_model.bert.pooler.dense.weight"] = at::zeros({16, 16});
  write("extra", mine, extra);
  EXPECT_NE(error_of([&] { (void)load_prefix(*model, dir.path() / "extra"); })
                .find("tensor \"base_model.bert.pooler.dense.weight\" is not part of"),
            std::string::npos);
  EXPECT_TRUE(model->encoder->prefix().is_empty());  // every refusal left the model as it was
  write("ok", mine, good);
  EXPECT_NO_THROW(load_prefix(*model, dir.path() / "ok"));
  EXPECT_FALSE(model->encoder->prefix().is_empty());
}

}  // namespace
}  // namespace hotpath::models
