#include "hotpath/train/recipe.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "hotpath/core/error.h"
#include "support/test_support.h"

namespace hotpath::train {
namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_recipe(yaml, overrides, "r.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Recipe, EmptyRecipeGivesTheDefaults) {
  const Recipe r = parse_recipe("", {}, "r.yaml");
  EXPECT_EQ(r.model.name, "resnet18");
  EXPECT_EQ(r.train.batch_size, 256);
  EXPECT_EQ(r.optimizer.name, "sgd");
  EXPECT_EQ(r.source, "r.yaml");
}

TEST(Recipe, ReadsEverySectionWithTypes) {
  const Recipe r = parse_recipe(R"(
name: fm
output_dir: runs/fm
model: {name: cnn_small, num_classes: 10, freeze: [features.0], channels_last: false}
data:
  train: a-{000..003}.tar
  eval: [b.tar, c.tar]
  image_size: 28
  channels: 1
  mean: [0.5]
  std: [0.25]
train: {epochs: 3, batch_size: 64, accum_steps: 4, precision: bf16, seed: 7, ema_decay: 0.99}
optimizer: {name: adamw, lr: 1.0e-3, weight_decay: 0.05}
schedule: {name: warmup_cosine, warmup_epochs: 0.5}
checkpoint: {keep_last: 3, metric: loss}
)",
                                {}, "r.yaml");
  EXPECT_EQ(r.name, "fm");
  EXPECT_EQ(r.model.name, "cnn_small");
  EXPECT_EQ(r.model.freeze, std::vector<std::string>{"features.0"});
  EXPECT_FALSE(r.model.channels_last);
  EXPECT_EQ(r.data.train, std::vector<std::string>{"a-{000..003}.tar"});  // one string = one pattern
  EXPECT_EQ(r.data.eval.size(), 2u);
  EXPECT_EQ(r.data.mean, std::vector<double>{0.5});
  EXPECT_EQ(r.train.accum_steps, 4);
  EXPECT_EQ(r.train.precision, "bf16");
  EXPECT_EQ(r.train.seed, 7u);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(r.schedule.warmup_epochs, 0.5);
  EXPECT_EQ(r.checkpoint.metric, "loss");
}

TEST(Recipe, UnknownKeyIsNamedWithTheSectionsAllowedKeys) {
  const std::string e = error_of("train:\n  epochz: 3\n");
  EXPECT_NE(e.find("r.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'train.epochz'"), std::string::npos) << e;
  EXPECT_NE(e.find("epochs"), std::string::npos) << e;  // the allowed keys are listed
}

TEST(Recipe, NestedSectionsReadAndTheirUnknownKeysAreNamed) {
  const Recipe r = parse_recipe("data: {kind: text}\nmodel: {pretrained: m, adapter: {config: seq_bn, reduction_factor: 8}}\n",
                                {"model.adapter.non_linearity=swish"}, "r.yaml");
  EXPECT_EQ(r.model.adapter.config, "seq_bn");
  EXPECT_EQ(r.model.adapter.reduction_factor, 8.0);
  EXPECT_EQ(r.model.adapter.non_linearity, "swish");
  EXPECT_EQ(parse_recipe(to_yaml(r)).model.adapter.reduction_factor, 8.0);
  const std::string e = error_of("model:\n  adapter:\n    confg: seq_bn\n");
  EXPECT_NE(e.find("r.yaml:3: unknown key 'model.adapter.confg'; model.adapter accepts: config, reduction_factor, "
                   "non_linearity"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of("model: {adapter: seq_bn}\n").find("model.adapter: expected a mapping of keys (config,"),
            std::string::npos);
}

TEST(Recipe, UnknownTopLevelKeyIsAnError) {
  const std::string e = error_of("modle: {name: x}\n");
  EXPECT_NE(e.find("unknown key 'modle'"), std::string::npos) << e;
  EXPECT_NE(e.find("model"), std::string::npos) << e;
}

TEST(Recipe, WrongTypeNamesKeyLineAndValue) {
  const std::string e = error_of("train:\n  epochs: ten\n");
  EXPECT_NE(e.find("r.yaml:2: train.epochs: expected an integer, got 'ten'"), std::string::npos) << e;
  EXPECT_NE(error_of("model: {channels_last: maybe}").find("expected a boolean"), std::string::npos);
  EXPECT_NE(error_of("data: {mean: 0.5}").find("expected a list of numbers"), std::string::npos);
  EXPECT_NE(error_of("train: [1, 2]").find("train: expected a mapping"), std::string::npos);
}

TEST(Recipe, ChoiceOutsideItsSetListsTheAllowedValues) {
  const std::string e = error_of("train: {precision: fp8}");
  EXPECT_NE(e.find("train.precision: 'fp8' is not one of: fp32, bf16, fp16"), std::string::npos) << e;
}

TEST(Recipe, RangeChecksNameTheKey) {
  EXPECT_NE(error_of("train: {batch_size: 100, accum_steps: 3}").find("train.accum_steps"), std::string::npos);
  EXPECT_NE(error_of("train: {epochs: 0}").find("train.epochs"), std::string::npos);
  EXPECT_NE(error_of("data: {channels: 1}").find("data.mean"), std::string::npos);  // 3 defaults for 1 channel
  EXPECT_NE(error_of("optimizer: {lr: -1}").find("optimizer.lr"), std::string::npos);
  EXPECT_NE(error_of("train: {dist_timeout_s: 1.0e-6}").find("train.dist_timeout_s"), std::string::npos);
}

TEST(Recipe, InvalidYamlNamesLineAndColumn) {
  const std::string e = error_of("train:\n  epochs: [1, 2\n");
  EXPECT_NE(e.find("r.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
}

TEST(Recipe, SetOverridesAreTypedAndValidated) {
  const Recipe r = parse_recipe("train: {epochs: 3}", {"train.epochs=5", "optimizer.lr=0.05", "data.eval=[x.tar,y.tar]",
                                                       "model.name=cnn_small"},
                                "r.yaml");
  EXPECT_EQ(r.train.epochs, 5);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 0.05);
  EXPECT_EQ(r.data.eval, (std::vector<std::string>{"x.tar", "y.tar"}));
  EXPECT_EQ(r.model.name, "cnn_small");
  EXPECT_NE(error_of("", {"train.epochz=5"}).find("unknown key 'train.epochz'"), std::string::npos);
  EXPECT_NE(error_of("", {"train.epochs=many"}).find("train.epochs (from --set): expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of("", {"train.epochs"}).find("expected key=value"), std::string::npos);
}

TEST(Recipe, ToYamlRoundTrips) {
  Recipe r = parse_recipe("model: {name: cnn_small, freeze: [a, b]}\ndata: {channels: 1, mean: [0.1], std: [0.3]}",
                          {"optimizer.lr=0.1", "train.ema_decay=0.999"}, "r.yaml");
  const std::string yaml = to_yaml(r);
  const Recipe back = parse_recipe(yaml, {}, "r.yaml");
  EXPECT_EQ(to_yaml(back), yaml);
  EXPECT_DOUBLE_EQ(back.optimizer.lr, 0.1);  // shortest round-trip formatting, not 0.10000000000000001
  EXPECT_NE(yaml.find("lr: 0.1\n"), std::string::npos) << yaml;
  EXPECT_EQ(back.model.freeze, r.model.freeze);
}

TEST(Recipe, EveryKeyIsListedOnce) {
  const auto keys = recipe_keys();
  std::set<std::string> unique(keys.begin(), keys.end());
  EXPECT_EQ(unique.size(), keys.size());
  EXPECT_TRUE(unique.count("train.accum_steps"));
}

TEST(Recipe, ShippedConfigsParse) {
  for (const char* name : {"configs/fashion_mnist.yaml"}) {
    EXPECT_NO_THROW(load_recipe(test::source_path(name))) << name;
  }
}

TEST(Recipe, MissingFileIsOneClearLine) {
  try {
    load_recipe("/nonexistent/recipe.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/recipe.yaml: cannot open: No such file or directory");
  }
}

}  // namespace
}  // namespace hotpath::train
