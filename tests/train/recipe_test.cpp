#include "hotpath/train/recipe.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <variant>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/train/trainer.h"
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

// Every row reads and writes its own member: no two rows alias one field.
TEST(Recipe, EveryRowOfTheTableHasItsOwnMember) {
  Recipe r;
  std::set<const void*> members;
  for (const RecipeKey& k : recipe_table()) {
    const void* at = std::visit([&](auto field) -> const void* { return &field(r); }, k.field);
    EXPECT_TRUE(members.insert(at).second) << k.name;
    EXPECT_NE(std::string(k.doc), "") << k.name;
  }
  EXPECT_EQ(members.size(), recipe_keys().size());
}

// Issue 25's test of the table: one more row, and the key is read, bounds-checked, refused in a recipe of the
// other task kind, part of the resume key and listed by --help-recipe (recipe_help), with nothing else written.
// (The row stores into schedule.gamma: a test cannot add a member to Recipe.)
TEST(Recipe, AKeyAddedInOneRowIsReadBoundedRefusedForTheOtherKindAndListed) {
  std::vector<RecipeKey> table = recipe_table();
  table.push_back({.name = "train.jitter",
                   .field = +[](Recipe& r) -> double& { return r.schedule.gamma; },
                   .doc = "a key added by the test",
                   .lo = 0,
                   .hi = 0.5,
                   .kinds = TaskKinds::kText,
                   .resume = true});
  const std::string text = "model: {pretrained: dir}\ndata: {kind: text}\n";
  const auto error_with = [&](const std::string& yaml) {
    try {
      check_task_keys(parse_recipe_with(table, yaml, {}, "r.yaml"), table);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_DOUBLE_EQ(parse_recipe_with(table, text + "train: {jitter: 0.25}\n", {}, "r.yaml").schedule.gamma, 0.25);
  EXPECT_DOUBLE_EQ(parse_recipe_with(table, text, {"train.jitter=0.5"}, "r.yaml").schedule.gamma, 0.5);
  EXPECT_NE(error_with(text + "train: {jitter: 0.7}\n").find("r.yaml: train.jitter: expected a finite number in [0, 0.5], got 0.7"),
            std::string::npos)
      << error_with(text + "train: {jitter: 0.7}\n");
  EXPECT_NE(error_with("train: {jitter: 0.25}\n").find("train.jitter applies to text recipes"), std::string::npos)
      << error_with("train: {jitter: 0.25}\n");
  EXPECT_NE(error_of("train: {jitter: 0.25}\n").find("unknown key 'train.jitter'"), std::string::npos);  // not in the real table
  const std::string help = recipe_help(table);
  EXPECT_NE(help.find("| `train.jitter` | number | `0.1` | [0.0, 0.5] | text | yes | a key added by the test |"),
            std::string::npos)
      << help.substr(help.size() - 400);
  const Recipe r = parse_recipe_with(table, text + "train: {jitter: 0.25}\n", {}, "r.yaml");
  EXPECT_DOUBLE_EQ(resume_values(r, table).at("train.jitter").get<double>(), 0.25);
  EXPECT_FALSE(resume_values(r).contains("train.jitter"));
}

TEST(Recipe, KeysOfTheOtherTaskKindAreRefusedNamingTheKey) {
  const auto refusal = [](const std::string& yaml) {
    try {
      check_task_keys(parse_recipe(yaml, {}, "r.yaml"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal("model: {pretrained: dir}\ndata: {kind: text, flip: 0.2}\n"),
            "r.yaml: data.flip applies to image recipes; this one has data.kind text (remove the key)");
  EXPECT_NE(refusal("model: {lora_r: 4}\n").find("model.lora_r applies to text recipes"), std::string::npos);
  // A default value is not a setting: a resolved text recipe (to_yaml writes every key) reads back.
  const Recipe text = parse_recipe("model: {pretrained: dir, lora_r: 8}\ndata: {kind: text}\n", {}, "r.yaml");
  EXPECT_NO_THROW(parse_recipe(to_yaml(text), {}, "run/recipe.yaml"));
}

// What a resumed run must match: the table's resume rows of the recipe's kind, booleans as 0/1 as checkpoints
// have always recorded them.
TEST(Recipe, ResumeValuesAreTheResumeRowsOfTheRecipesKind) {
  const Recipe image = parse_recipe("train: {seed: 7, batch_size: 64, accum_steps: 2}\n", {}, "r.yaml");
  const auto key = resume_values(image);
  EXPECT_EQ(key.size(), 3u) << key.dump();
  EXPECT_EQ(key.at("train.seed").get<std::uint64_t>(), 7u);
  EXPECT_EQ(key.at("train.batch_size").get<std::int64_t>(), 64);
  EXPECT_EQ(key.at("train.accum_steps").get<std::int64_t>(), 2);
  const Recipe text =
      parse_recipe("model: {pretrained: dir, prefix_tokens: 4, prefix_projection: true}\ndata: {kind: text}\n", {}, "r.yaml");
  const auto tkey = resume_values(text);
  EXPECT_EQ(tkey.at("model.prefix_projection"), 1);
  EXPECT_EQ(tkey.at("data.bucket"), 1);
  EXPECT_EQ(tkey.at("model.adapter.config"), "");
  for (const char* k : {"model.lora_r", "model.prefix_tokens", "data.max_length", "data.pad_to_multiple_of",
                        "data.max_tokens", "train.seed"}) {
    EXPECT_TRUE(tkey.contains(k)) << k;
  }
  EXPECT_EQ(text.train.micro_batch_size(), text.train.batch_size);  // accum_steps 1
}

// docs/training.md's key table is `hotpath train --help-recipe`'s output, as generated now.
TEST(Recipe, TheDocsTableIsTheHelpRecipeOutput) {
  const std::vector<std::byte> bytes = test::read_bytes(test::source_path("docs/training.md"));
  const std::string docs(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::string begin = "<!-- recipe-keys: hotpath train --help-recipe -->\n";
  const std::string end = "<!-- /recipe-keys -->";
  const auto b = docs.find(begin);
  const auto e = docs.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/training.md lacks the line " << begin;
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(docs.substr(b + begin.size(), e - b - begin.size()), recipe_help())
      << "regenerate it: build/hotpath train --help-recipe";
}

// What holds on every CPU: auto is bf16 exactly where the dispatch level has native bf16 dot products, fp32 under
// an AVX2 cap (an AVX2-only machine's choice), and a concrete precision is never changed.
TEST(Recipe, AutoPrecisionIsBf16OnlyWhereTheCpuComputesBf16Natively) {
  Recipe r = parse_recipe("train:\n  precision: auto\n  device: cpu\n", {}, "r.yaml");
  const bool native = cpu::max_isa() >= cpu::Isa::kAvx512Bf16;
  EXPECT_EQ(with_precision_resolved(r).train.precision, native ? "bf16" : "fp32");
  cpu::set_max_isa(cpu::Isa::kAvx2);
  EXPECT_EQ(with_precision_resolved(r).train.precision, "fp32");
  cpu::reset_max_isa();
  for (const char* concrete : {"fp32", "bf16"}) {
    r.train.precision = concrete;
    EXPECT_EQ(with_precision_resolved(r).train.precision, concrete);
  }
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
