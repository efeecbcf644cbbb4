#include "hotpath/models/lora.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "hotpath/core/error.h"
#include "hotpath/formats/safetensors.h"
#include "models/lora_test_tree.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
using namespace hotpath::formats;  // LoraConfig, SafetensorsFile, lora_target_matches
namespace {

using lora_test::TinyClassifier;

LoraConfig qv_config() {
  LoraConfig c;
  c.r = 2;
  c.lora_alpha = 4;
  c.target_modules = {"query", "value"};
  c.modules_to_save = {"classifier"};
  return c;
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(LoraTargets, MatchExactSuffixAndRegexLikePeft) {
  LoraConfig c;
  c.target_modules = {"query", "attention.output.dense"};
  EXPECT_TRUE(lora_target_matches(c, "query"));
  EXPECT_TRUE(lora_target_matches(c, "encoder.layer.0.attention.self.query"));
  EXPECT_TRUE(lora_target_matches(c, "encoder.layer.3.attention.output.dense"));
  EXPECT_FALSE(lora_target_matches(c, "encoder.layer.3.output.dense"));
  EXPECT_FALSE(lora_target_matches(c, "encoder.layer.0.attention.self.myquery"));  // suffix only after a '.'
  EXPECT_FALSE(lora_target_matches(c, "query.lora_A"));
  c.target_regex = R"(.*layer\.1\..*(query|key))";  // a string target_modules: re.fullmatch
  EXPECT_TRUE(lora_target_matches(c, "encoder.layer.1.attention.self.key"));
  EXPECT_FALSE(lora_target_matches(c, "encoder.layer.0.attention.self.key"));
  EXPECT_FALSE(lora_target_matches(c, "encoder.layer.1.attention.self.key.x"));
}

TEST(LoraApply, AdaptsTargetsFreezesTheRestAndCountsTrainable) {
  TinyClassifier model(8, 2, 3);
  const std::int64_t base_params = model_test::parameter_count(model);
  const LoraReport r = apply_lora(model, qv_config());
  EXPECT_EQ(r.adapted, (std::vector<std::string>{"encoder.layer.0.attention.self.query",
                                                 "encoder.layer.0.attention.self.value",
                                                 "encoder.layer.1.attention.self.query",
                                                 "encoder.layer.1.attention.self.value"}));
  EXPECT_EQ(r.saved, std::vector<std::string>{"classifier"});
  // 4 adapters × (A [2, 8] + B [8, 2]) + classifier 8×3 + 3.
  const std::int64_t lora = 4 * (2 * 8 + 8 * 2);
  EXPECT_EQ(r.trainable_params, lora + 27);
  EXPECT_EQ(r.all_params, base_params + lora);
  EXPECT_NEAR(r.trainable_fraction(), double(lora + 27) / double(base_params + lora), 1e-12);
  EXPECT_EQ(r.summary().rfind("trainable params: 155 || all params: " + std::to_string(base_params + lora), 0), 0u)
      << r.summary();
  for (const auto& p : model.named_parameters()) {
    const bool trainable = p.key().find(".lora_") != std::string::npos || p.key().rfind("classifier.", 0) == 0;
    EXPECT_EQ(p.value().requires_grad(), trainable) << p.key();
  }
  const auto& q = model.encoder->layer[0]->as<lora_test::Layer>()->attention->self->query;
  EXPECT_TRUE(q->has_adapter());
  EXPECT_EQ(q->lora_A->weight.sizes(), (at::IntArrayRef{2, 8}));
  EXPECT_EQ(q->lora_B->weight.sizes(), (at::IntArrayRef{8, 2}));
  EXPECT_TRUE(q->lora_B->weight.eq(0).all().item<bool>());  // a fresh adapter changes nothing
  EXPECT_DOUBLE_EQ(q->scaling(), 2.0);
  EXPECT_FALSE(model.encoder->layer[0]->as<lora_test::Layer>()->attention->self->key->has_adapter());
  const auto names = model.named_parameters();
  EXPECT_TRUE(names.contains("encoder.layer.1.attention.self.value.lora_B.weight"));
  EXPECT_TRUE(names.contains("encoder.layer.1.attention.self.value.weight"));  // base names unchanged
}

TEST(LoraApply, OnlyAdaptersGetGradients) {
  TinyClassifier model;
  apply_lora(model, qv_config());
  const at::Tensor x = at::randn({2, 5, 8});
  model.forward(x).sum().backward();
  for (const auto& p : model.named_parameters()) {
    // lora_A's gradient is zero while B is zero; B's is not.
    EXPECT_EQ(p.value().grad().defined(), p.value().requires_grad()) << p.key();
  }
  const auto& v = model.encoder->layer[1]->as<lora_test::Layer>()->attention->self->value;
  EXPECT_GT(v->lora_B->weight.grad().abs().sum().item<double>(), 0.0);
}

TEST(LoraApply, RefusesPlainLinearContainersAndNoMatch) {
  TinyClassifier model;
  LoraConfig c = qv_config();
  c.target_modules = {"output.dense"};  // also hits encoder.layer.N.output.dense, a torch::nn::Linear
  expect_error([&] { apply_lora(model, c); }, "declare it hotpath::models::LoraLinear");
  c.target_modules = {"self"};
  expect_error([&] { apply_lora(model, c); }, "not a linear layer");
  c.target_modules = {"nothing"};
  expect_error([&] { apply_lora(model, c); }, "no module matches");
}

TEST(LoraMerge, MergedEqualsUnmergedAndDropsAdapters) {
  TinyClassifier model;
  apply_lora(model, qv_config());
  {
    c10::NoGradGuard no_grad;
    for (const auto& p : model.named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.3);
  }
  model.eval();
  const at::Tensor x = at::randn({2, 5, 8});
  at::Tensor base;
  {
    c10::NoGradGuard no_grad;
    const at::Tensor adapted = model.forward(x);
    EXPECT_EQ(merge_lora(model), 4);
    const at::Tensor merged = model.forward(x);
    EXPECT_TRUE(at::allclose(adapted, merged, 1e-5, 1e-6)) << (adapted - merged).abs().max();
  }
  for (const auto& p : model.named_parameters()) EXPECT_EQ(p.key().find("lora_"), std::string::npos) << p.key();
  EXPECT_EQ(merge_lora(model), 0);
}

TEST(LoraMerge, ScalingFollowsAlphaOverRankAndRslora) {
  LoraLinear l(4, 3);
  l->add_adapter(2, 8.0 / 2, 0.0);
  c10::NoGradGuard no_grad;
  l->lora_A->weight.copy_(at::arange(8, at::kFloat).reshape({2, 4}) / 10);
  l->lora_B->weight.copy_(at::arange(6, at::kFloat).reshape({3, 2}) / 10);
  const at::Tensor expect = l->weight + at::matmul(l->lora_B->weight, l->lora_A->weight) * 4.0;
  l->merge();
  EXPECT_TRUE(at::allclose(l->weight, expect));
  LoraConfig c;
  c.r = 16;
  c.lora_alpha = 32;
  EXPECT_DOUBLE_EQ(c.scaling(), 2.0);
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scaling(), 8.0);
}

TEST(LoraConfig, JsonRoundTripKeepsPeftFields) {
  LoraConfig c = qv_config();
  c.lora_dropout = 0.05;
  c.task_type = "SEQ_CLS";
  const nlohmann::json j = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "SEQ_CLS");
  EXPECT_EQ(j["r"], 2);
  EXPECT_EQ(j["fan_in_fan_out"], false);
  EXPECT_EQ(j["target_modules"], nlohmann::json({"query", "value"}));
  const LoraConfig back = LoraConfig::from_json(c.to_json());
  EXPECT_EQ(back.r, 2);
  EXPECT_DOUBLE_EQ(back.lora_alpha, 4);
  EXPECT_DOUBLE_EQ(back.lora_dropout, 0.05);
  EXPECT_EQ(back.target_modules, c.target_modules);
  EXPECT_EQ(back.modules_to_save, c.modules_to_save);
  EXPECT_EQ(back.task_type, "SEQ_CLS");
  // A string target_modules is a regex.
  EXPECT_EQ(LoraConfig::from_json(R"({"peft_type":"LORA","r":4,"target_modules":".*query"})").target_regex, ".*query");
}

TEST(LoraConfig, BadConfigsAreOneLineErrors) {
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"IA3","r":4,"target_modules":["q"]})", "a.json"); },
               "a.json: peft_type \"IA3\" is not supported");
  expect_error([] { LoraConfig::from_json(R"({"r":4,"target_modules":["q"]})", "a.json"); }, "missing \"peft_type\"");
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"LORA","target_modules":["q"]})", "a.json"); },
               "a.json: missing \"r\"");
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"LORA","r":0,"target_modules":["q"]})"); },
               "\"r\" must be a positive integer");
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"LORA","r":"8","target_modules":["q"]})"); },
               "\"r\" must be a positive integer");
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"LORA","r":8})"); }, "missing \"target_modules\"");
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"LORA","r":8,"target_modules":[1]})"); },
               "list of strings");
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"LORA","r":8,"target_modules":["q"],"bias":"all"})"); },
               "bias \"all\" is not supported");
  expect_error(
      [] { LoraConfig::from_json(R"({"peft_type":"LORA","r":8,"target_modules":["q"],"fan_in_fan_out":true})"); },
      "\"fan_in_fan_out\": true is not supported");
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"LORA","r":8,"target_modules":["q"],"use_dora":true})"); },
               "\"use_dora\": true");
  expect_error(
      [] { LoraConfig::from_json(R"({"peft_type":"LORA","r":8,"target_modules":["q"],"rank_pattern":{"q":2}})"); },
      "\"rank_pattern\" is not supported");
  expect_error([] { LoraConfig::from_json("{\"peft_type\":"); }, "invalid JSON");
  expect_error([] { LoraConfig::from_json(R"({"peft_type":"LORA","r":8,"target_modules":"(["})"); }, "does not compile");
}

TEST(LoraSave, WritesPeftKeysAndLoadsBack) {
  test::TempDir dir;
  TinyClassifier a;
  const LoraConfig config = qv_config();
  apply_lora(a, config);
  {
    c10::NoGradGuard no_grad;
    for (const auto& p : a.named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.3);
  }
  save_lora(a, config, dir.path());
  const SafetensorsFile file(dir.file("adapter_model.safetensors"));
  std::vector<std::string> names;
  for (const auto& t : file.tensors()) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names.size(), 10u);
  EXPECT_EQ(names.front(), "base_model.model.classifier.bias");
  EXPECT_NE(std::find(names.begin(), names.end(), "base_model.model.encoder.layer.0.attention.self.query.lora_A.weight"),
            names.end());
  EXPECT_EQ(file.metadata().at("format"), "pt");

  TinyClassifier b;  // different base init: copy the base over, then load the adapter
  {
    c10::NoGradGuard no_grad;
    const auto src = a.named_parameters();
    for (const auto& p : b.named_parameters()) p.value().copy_(src[p.key()]);
  }
  const LoraConfig loaded = load_lora(b, dir.path());
  EXPECT_EQ(loaded.target_modules, config.target_modules);
  a.eval();
  b.eval();
  c10::NoGradGuard no_grad;
  const at::Tensor x = at::randn({2, 5, 8});
  EXPECT_TRUE(at::equal(a.forward(x), b.forward(x)));

  // A file tensor the model has no place for is an error naming it.
  TinyClassifier c;
  LoraConfig narrower = config;
  narrower.target_modules = {"query"};
  test::write_file(dir.file("adapter_config.json"), narrower.to_json());
  expect_error([&] { load_lora(c, dir.path()); }, "value.lora_A.weight\" matches no adapter");
  LoraConfig other_rank = config;
  other_rank.r = 3;
  test::write_file(dir.file("adapter_config.json"), other_rank.to_json());
  expect_error([&] { load_lora(c, dir.path()); }, "lora_A.weight\" has shape [2, 8], the model's is [3, 8]");
  test::write_file(dir.file("adapter_config.json"), std::string_view("{\"peft_type\":\"LORA\"}"));
  expect_error([&] { load_lora(c, dir.path()); }, "adapter_config.json: missing \"r\"");
}


TEST(LoraLinear, WithoutAdapterIsATorchLinear) {
  at::manual_seed(5);
  LoraLinear ours(6, 4);
  at::manual_seed(5);
  torch::nn::Linear theirs(6, 4);  // same initialisation from the same seed
  EXPECT_TRUE(at::equal(ours->weight, theirs->weight));
  EXPECT_TRUE(at::equal(ours->bias, theirs->bias));
  const at::Tensor x = at::randn({3, 6});
  EXPECT_TRUE(at::equal(ours->forward(x), theirs->forward(x)));
  EXPECT_EQ(ours->named_parameters().keys(), theirs->named_parameters().keys());
}

TEST(LoraLinear, DropoutAppliesToTheAdapterInputOnly) {
  LoraLinear l(6, 4);
  l->add_adapter(2, 1.5, 0.5);
  {
    c10::NoGradGuard no_grad;
    l->lora_B->weight.normal_();
  }
  l->train();
  const at::Tensor x = at::randn({3, 6});
  at::manual_seed(11);
  const at::Tensor y = l->forward(x);
  at::manual_seed(11);
  const at::Tensor dropped = at::dropout(x, 0.5, /*train=*/true);
  const at::Tensor expect = at::linear(x, l->weight, l->bias) +
                            at::matmul(at::matmul(dropped, l->lora_A->weight.t()), l->lora_B->weight.t()) * 1.5;
  EXPECT_TRUE(at::allclose(y, expect, 1e-5, 1e-6));
  l->eval();
  const at::Tensor y_eval = l->forward(x);
  const at::Tensor expect_eval =
      at::linear(x, l->weight, l->bias) + at::matmul(at::matmul(x, l->lora_A->weight.t()), l->lora_B->weight.t()) * 1.5;
  EXPECT_TRUE(at::allclose(y_eval, expect_eval, 1e-5, 1e-6));
}

}  // namespace
}  // namespace hotpath::models
