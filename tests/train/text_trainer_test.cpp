// Text recipes through train(): a tiny BERT "pretrained" directory built by the test, text shards
// packed from a separable toy task, full and LoRA fine-tuning, and the run directory it leaves.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/models/bert.h"
#include "hotpath/models/weights.h"
#include "hotpath/text/text_data.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"
#include "support/test_support.h"

namespace hotpath::train {
namespace {

namespace fs = std::filesystem;

// config.json + model.safetensors (bare encoder keys, as sentence-transformers ships them) + vocab.txt.
void write_tiny_bert(const fs::path& dir) {
  fs::create_directories(dir);
  const std::string config = R"({"model_type":"bert","vocab_size":32,"hidden_size":32,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":64,"max_position_embeddings":64,"type_vocab_size":2,
    "hidden_act":"gelu","layer_norm_eps":1e-12,"hidden_dropout_prob":0.0,"attention_probs_dropout_prob":0.0,
    "pad_token_id":0,"initializer_range":0.02})";
  test::write_file((dir / "config.json").string(), config);
  at::manual_seed(7);
  models::BertModel encoder(models::BertConfig::from_json(config));
  models::save_safetensors(encoder, (dir / "model.safetensors").string());
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const char* w : {"good", "bad", "movie", "film", "very", "really", "the", "a", "was", "is"}) vocab += std::string(w) + "\n";
  test::write_file((dir / "vocab.txt").string(), vocab);
}

// Label 1 when the text says "good", 0 for "bad"; the filler words carry no signal.
// About 2/3 of the samples are "good".
void write_task(const fs::path& text, const fs::path& labels, int n, int offset) {
  const char* fillers[] = {"the movie", "a film", "the film was", "really", "very very", "a movie is"};
  std::ostringstream t, l;
  std::mt19937 rng(static_cast<unsigned>(offset));  // labels and fillers drawn independently
  for (int i = 0; i < n; ++i) {
    const bool good = rng() % 3 != 0;
    t << fillers[rng() % 6] << " " << (good ? "good" : "bad") << " " << fillers[rng() % 6] << "\n";
    l << (good ? 1 : 0) << "\n";
  }
  test::write_file(text.string(), t.str());
  test::write_file(labels.string(), l.str());
}

TrainOptions quiet_to(std::ostringstream& log, bool quiet) {
  TrainOptions options;
  options.out = &log;
  options.quiet = quiet;
  return options;
}

class TextTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    write_tiny_bert(tmp_.path() / "bert");
    for (const auto& [split, n, offset] : {std::tuple{"train", 96, 0}, std::tuple{"test", 48, 1}}) {
      write_task(tmp_.path() / (std::string(split) + ".txt"), tmp_.path() / (std::string(split) + ".labels"), n,
                 offset);
      text::TextPackOptions o;
      o.source.labels_path = (tmp_.path() / (std::string(split) + ".labels")).string();
      o.output_prefix = (tmp_.path() / split).string();
      text::pack_text((tmp_.path() / (std::string(split) + ".txt")).string(), o);
    }
  }

  Recipe recipe(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> overrides = {"data.kind=text", "model.name=bert", "model.pretrained=" + tmp_.file("bert"),
                                          "data.train=" + tmp_.file("train-*.tar"),
                                          "data.eval=" + tmp_.file("test-*.tar"), "data.max_length=16",
                                          "train.epochs=30", "train.batch_size=16", "train.threads=1",
                                          "train.log_every=2", "optimizer.name=adamw", "optimizer.lr=0.003",
                                          "schedule.name=constant", "output_dir=" + tmp_.file("run")};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_recipe("", overrides, "<test>");
  }

  test::TempDir tmp_;
};

TEST_F(TextTrainer, FullFineTuneLearnsTheTaskAndWritesAHuggingFaceModelDir) {
  std::ostringstream log;
  TrainOptions options;
  options.out = &log;
  options.quiet = true;
  const TrainResult r = train(recipe(), options);
  ASSERT_TRUE(r.eval.has_value()) << log.str();
  EXPECT_GT(r.eval->top1, 90.0) << log.str();  // the majority class is ~2/3 of the test set
  const fs::path model = tmp_.path() / "run" / "model";
  EXPECT_TRUE(fs::exists(model / "config.json"));
  EXPECT_TRUE(fs::exists(model / "vocab.txt"));
  // The saved directory loads back as a classifier and gives the trained model's accuracy.
  const auto loaded = models::load_bert_classifier(model);
  EXPECT_EQ(loaded->config().num_labels, 2);
  EXPECT_TRUE(fs::exists(tmp_.path() / "run" / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(tmp_.path() / "run" / "adapter"));
}

TEST_F(TextTrainer, LoraTrainsOnlyAdaptersAndSavesAPeftAdapter) {
  std::ostringstream log;
  const TrainResult r =
      train(recipe({"model.lora_r=4", "model.lora_alpha=8", "optimizer.lr=0.01", "train.epochs=40",
                    "model.gradient_checkpointing=true"}),
            quiet_to(log, false));
  ASSERT_TRUE(r.eval.has_value()) << log.str();
  EXPECT_GT(r.eval->top1, 80.0) << log.str();
  EXPECT_NE(log.str().find("trainable%"), std::string::npos) << log.str();
  EXPECT_TRUE(fs::exists(tmp_.path() / "run" / "adapter" / "adapter_config.json"));
  EXPECT_TRUE(fs::exists(tmp_.path() / "run" / "adapter" / "adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(tmp_.path() / "run" / "model" / "model.safetensors"));  // merged
}

TEST_F(TextTrainer, TextRecipeErrorsNameTheKey) {
  EXPECT_THROW(parse_recipe("", {"data.kind=text"}, "<test>"), Error);  // no model.pretrained
  try {
    std::ostringstream log;
    train(recipe({"train.accum_steps=2", "train.batch_size=16"}), quiet_to(log, true));
    FAIL() << "accum_steps accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.accum_steps"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotpath::train
