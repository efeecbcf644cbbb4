// Text recipes through train(): a tiny BERT "pretrained" directory built by the test, text shards
// packed from a separable toy task, full and LoRA fine-tuning, the run directory it leaves,
// bit-exact resume (mid-epoch, at an epoch boundary, after a stop request), gradient accumulation
// against one big batch, and best/.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "hotpath/text/text_data.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"
#include "support/test_support.h"

namespace hotpath::train {
namespace {

namespace fs = std::filesystem;

// config.json + model.safetensors (bare encoder keys, as sentence-transformers ships them) + vocab.txt.
// `dropout` > 0 makes training draw from the RNG (what a resumed run must restore).
void write_tiny_bert(const fs::path& dir, double dropout = 0.0) {
  fs::create_directories(dir);
  const std::string p = std::to_string(dropout);
  const std::string config = R"({"model_type":"bert","vocab_size":32,"hidden_size":32,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":64,"max_position_embeddings":64,"type_vocab_size":2,
    "hidden_act":"gelu","layer_norm_eps":1e-12,"hidden_dropout_prob":)" + p +
                             R"(,"attention_probs_dropout_prob":)" + p + R"(,
    "pad_token_id":0,"initializer_range":0.02})";
  test::write_file((dir / "config.json").string(), config);
  at::manual_seed(7);
  models::BertModel encoder(formats::BertConfig::from_json(config));
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
    pack("train", 96, 0);
    pack("test", 48, 1);
  }

  void pack(const std::string& split, int n, int offset) {
    write_task(tmp_.path() / (split + ".txt"), tmp_.path() / (split + ".labels"), n, offset);
    text::TextPackOptions o;
    o.source.labels_path = (tmp_.path() / (split + ".labels")).string();
    o.output_prefix = (tmp_.path() / split).string();
    text::pack_text((tmp_.path() / (split + ".txt")).string(), o);
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
  options.trace_path = tmp_.file("trace.json");  // the one loop: --trace and the progress line for text too
  options.trace_steps = 2;
  const TrainResult r = train(recipe(), options);
  ASSERT_TRUE(r.eval.has_value()) << log.str();
  EXPECT_GT(r.eval->top1, 90.0) << log.str();  // the majority class is ~2/3 of the test set
  EXPECT_NE(log.str().find("epoch 30/30"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("samples/s"), std::string::npos) << log.str();
  const auto trace = nlohmann::json::parse(read_file(tmp_.file("trace.json")));
  std::map<std::string, int> events;
  for (const auto& e : trace["traceEvents"]) events[e["name"].get<std::string>()]++;
  EXPECT_EQ(events["step"], 2);
  EXPECT_EQ(events["forward"], 2);
  EXPECT_EQ(events["backward"], 2);
  const fs::path model = tmp_.path() / "run" / "model";
  EXPECT_TRUE(fs::exists(model / "config.json"));
  EXPECT_TRUE(fs::exists(model / "vocab.txt"));
  // The saved directory loads back as a classifier and gives the trained model's accuracy.
  const auto loaded = models::load_bert_classifier(model);
  EXPECT_EQ(loaded->config().num_labels, 2);
  EXPECT_TRUE(fs::exists(tmp_.path() / "run" / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(tmp_.path() / "run" / "adapter"));
  EXPECT_EQ(list_checkpoints(tmp_.file("run/checkpoints")).size(), 2u);  // checkpoint.keep_last
  EXPECT_EQ(fs::path(*latest_checkpoint(tmp_.file("run/checkpoints"))).filename(), checkpoint_name(r.steps));
  EXPECT_FALSE(fs::is_empty(tmp_.path() / "run" / "tensorboard"));
  EXPECT_TRUE(fs::exists(tmp_.path() / "run" / "best" / "model.safetensors"));
  const auto profile = nlohmann::json::parse(read_file(tmp_.file("run/profile.json")));
  EXPECT_GT(profile.at("peak_memory_bytes").get<std::int64_t>(), 0);
  EXPECT_GE(profile.at("padding_fraction").get<double>(), 0.0);
  EXPECT_GT(profile.at("steps").get<std::int64_t>(), 0);
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
    train(recipe({"train.precision=fp16"}), quiet_to(log, true));
    FAIL() << "fp16 on the CPU accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.precision"), std::string::npos) << e.what();
  }
  // A key of image recipes is refused, not ignored (and the other way round: tests/train/trainer_test.cpp).
  try {
    std::ostringstream log;
    train(recipe({"data.image_size=64"}), quiet_to(log, true));
    FAIL() << "an image key in a text recipe accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.image_size applies to image recipes"), std::string::npos) << e.what();
  }
}


// (step → loss) of the metrics.jsonl lines of `split`.
std::map<std::int64_t, double> losses(const fs::path& run, const std::string& split = "train") {
  std::map<std::int64_t, double> out;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] == split) out[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

// The largest |a - b| over the tensors of two safetensors files with the same keys.
double max_diff(const fs::path& a, const fs::path& b) {
  const auto ta = models::read_tensors(a.string());
  const auto tb = models::read_tensors(b.string());
  EXPECT_EQ(ta.size(), tb.size());
  double diff = 0;
  for (const auto& [name, t] : ta) {
    if (!tb.contains(name)) {
      ADD_FAILURE() << name << " missing from " << b;
      continue;
    }
    if (t.is_floating_point()) diff = std::max(diff, (t - tb.at(name)).abs().max().item<double>());
  }
  return diff;
}

enum class Cut { kMidEpoch, kEpochBoundary, kStopRequest };

class TextTrainerResume : public TextTrainer, public ::testing::WithParamInterface<std::tuple<Cut, bool>> {};

// An uninterrupted run vs one cut short and resumed: metrics.jsonl byte for byte (train losses, lr,
// padding, evals; the cut-short run's extra eval is dropped), the final model and best/ bit for bit.
// Dropout is on, so the RNG state travels through the checkpoint too.
TEST_P(TextTrainerResume, GivesTheSameMetricsAndModelBitForBit) {
  const auto [cut, lora] = GetParam();
  write_tiny_bert(tmp_.path() / "bert", /*dropout=*/0.1);
  std::vector<std::string> keys = {"train.epochs=2", "train.log_every=2", "checkpoint.keep_last=1"};
  // The LoRA cases also keep an EMA, which the checkpoint must carry as well.
  if (lora) {
    keys.insert(keys.end(), {"model.lora_r=4", "model.lora_dropout=0.1", "optimizer.lr=0.01", "train.ema_decay=0.9"});
  }
  const auto with = [&](const std::string& out, std::vector<std::string> extra) {
    extra.insert(extra.begin(), keys.begin(), keys.end());
    extra.push_back("output_dir=" + tmp_.file(out));
    return recipe(extra);
  };
  std::ostringstream log;
  const TrainResult full = train(with("a", {}), quiet_to(log, true));
  EXPECT_EQ(full.steps, 12);  // 96 samples / 16 × 2 epochs

  std::atomic<bool> stop{true};  // asked before the first step: the trainer stops after it
  TrainOptions first = quiet_to(log, true);
  std::vector<std::string> first_keys;
  std::int64_t cut_step = 1;
  if (cut == Cut::kStopRequest) {
    first.stop = &stop;
  } else {
    cut_step = cut == Cut::kMidEpoch ? 3 : 6;  // step 3 leaves a half-full metrics window (log_every 2)
    first_keys.push_back("train.max_steps=" + std::to_string(cut_step));
  }
  const TrainResult r1 = train(with("b", first_keys), first);
  EXPECT_EQ(r1.steps, cut_step);
  EXPECT_EQ(r1.interrupted, cut == Cut::kStopRequest);
  const auto latest = latest_checkpoint(tmp_.file("b/checkpoints"));
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(fs::path(*latest).filename(), checkpoint_name(cut_step));
  EXPECT_EQ(fs::exists(tmp_.path() / "b" / "model"), cut != Cut::kStopRequest);  // interrupted: checkpoint only

  TrainOptions again = quiet_to(log, true);
  again.resume = true;
  const TrainResult r2 = train(with("b", {}), again);
  EXPECT_EQ(r2.steps, 12);
  EXPECT_EQ(r2.epochs_completed, 2);
  EXPECT_EQ(losses(tmp_.path() / "a").size(), 6u);
  EXPECT_EQ(read_file(tmp_.file("a/metrics.jsonl")), read_file(tmp_.file("b/metrics.jsonl")));
  EXPECT_EQ(max_diff(tmp_.path() / "a/model/model.safetensors", tmp_.path() / "b/model/model.safetensors"), 0.0);
  EXPECT_EQ(read_file(tmp_.file("a/best/metrics.json")), read_file(tmp_.file("b/best/metrics.json")));
  EXPECT_EQ(max_diff(tmp_.path() / "a/best/model.safetensors", tmp_.path() / "b/best/model.safetensors"), 0.0);
  if (lora) {
    EXPECT_EQ(max_diff(tmp_.path() / "a/adapter/adapter_model.safetensors",
                       tmp_.path() / "b/adapter/adapter_model.safetensors"),
              0.0);
  }
}

std::string resume_case_name(const ::testing::TestParamInfo<std::tuple<Cut, bool>>& info) {
  static const char* const kCuts[] = {"MidEpoch", "EpochBoundary", "StopRequest"};
  return std::string(kCuts[static_cast<int>(std::get<0>(info.param))]) + (std::get<1>(info.param) ? "Lora" : "Full");
}

INSTANTIATE_TEST_SUITE_P(CutsAndLora, TextTrainerResume,
                         ::testing::Combine(::testing::Values(Cut::kMidEpoch, Cut::kEpochBoundary, Cut::kStopRequest),
                                            ::testing::Bool()),
                         resume_case_name);

TEST_F(TextTrainer, ResumeWithTokenBudgetMicroBatchesIsBitExact) {
  // Token-budget micro-batches vary in size and count from epoch to epoch; cut mid-step-sequence.
  write_tiny_bert(tmp_.path() / "bert", /*dropout=*/0.1);
  const std::vector<std::string> keys = {"train.epochs=2", "train.log_every=3", "data.max_tokens=80",
                                         "train.accum_steps=2"};
  const auto with = [&](const std::string& out, const std::vector<std::string>& extra) {
    auto all = keys;
    all.insert(all.end(), extra.begin(), extra.end());
    all.push_back("output_dir=" + tmp_.file(out));
    return recipe(all);
  };
  std::ostringstream log;
  const TrainResult full = train(with("a", {}), quiet_to(log, true));
  ASSERT_GT(full.steps, 8);
  train(with("b", {"train.max_steps=" + std::to_string(full.steps / 2 + 1)}), quiet_to(log, true));
  TrainOptions again = quiet_to(log, true);
  again.resume = true;
  EXPECT_EQ(train(with("b", {}), again).steps, full.steps);
  EXPECT_EQ(read_file(tmp_.file("a/metrics.jsonl")), read_file(tmp_.file("b/metrics.jsonl")));
  EXPECT_EQ(max_diff(tmp_.path() / "a/model/model.safetensors", tmp_.path() / "b/model/model.safetensors"), 0.0);
}

TEST_F(TextTrainer, AccumulationEqualsOneBigBatch) {
  // 92 samples: micro-batches of 8 pair up into the big batches of 16, and the last step of each epoch
  // is 8 + 4 samples, so the weighting by samples (not by micro-batch count) is what makes it match.
  pack("odd", 92, 2);
  std::vector<std::string> keys = {"data.train=" + tmp_.file("odd-*.tar"), "data.bucket=false", "train.epochs=2",
                                   "train.log_every=1", "train.batch_size=16", "train.label_smoothing=0.1",
                                   "optimizer.name=sgd", "optimizer.lr=0.1"};  // SGD: no Adam sign amplification
  std::ostringstream log;
  auto big_keys = keys;
  big_keys.push_back("output_dir=" + tmp_.file("big"));
  const TrainResult big = train(recipe(big_keys), quiet_to(log, true));
  auto acc_keys = keys;
  acc_keys.insert(acc_keys.end(), {"train.accum_steps=2", "output_dir=" + tmp_.file("acc")});
  const TrainResult acc = train(recipe(acc_keys), quiet_to(log, true));
  EXPECT_EQ(big.steps, 12);
  EXPECT_EQ(acc.steps, 12);
  const auto lb = losses(tmp_.path() / "big"), la = losses(tmp_.path() / "acc");
  ASSERT_EQ(lb.size(), 12u);
  ASSERT_EQ(la.size(), 12u);
  for (const auto& [step, loss] : lb) EXPECT_NEAR(la.at(step), loss, 1e-5) << "step " << step;
  EXPECT_LT(max_diff(tmp_.path() / "big/model/model.safetensors", tmp_.path() / "acc/model/model.safetensors"), 1e-5);
}

TEST_F(TextTrainer, BestDirIsTheModelOfTheBestEval) {
  // Constant lr and per-epoch data plans: a run of E epochs ends with the weights the longer run had
  // after epoch E, so best/ must equal that shorter run's model/ bit for bit.
  std::ostringstream log;
  const std::vector<std::string> lora = {"model.lora_r=4", "model.lora_alpha=8", "optimizer.lr=0.01"};
  auto long_keys = lora;
  long_keys.insert(long_keys.end(), {"train.epochs=5", "output_dir=" + tmp_.file("long")});
  train(recipe(long_keys), quiet_to(log, true));
  const fs::path best = tmp_.path() / "long" / "best";
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "metrics.json", "adapter/adapter_config.json",
                        "adapter/adapter_model.safetensors"}) {
    EXPECT_TRUE(fs::exists(best / f)) << f;
  }
  const auto bm = nlohmann::json::parse(read_file((best / "metrics.json").string()));
  const auto evals = [&] {
    std::map<std::int64_t, double> top1;
    std::ifstream in(tmp_.path() / "long" / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["split"] == "eval") top1[j["epoch"].get<std::int64_t>()] = j["top1"].get<double>();
    }
    return top1;
  }();
  ASSERT_EQ(evals.size(), 5u);
  std::int64_t best_epoch = 1;
  for (const auto& [epoch, top1] : evals) {
    if (top1 > evals.at(best_epoch)) best_epoch = epoch;  // the first of equals: later ties do not replace it
  }
  EXPECT_EQ(bm["epoch"].get<std::int64_t>(), best_epoch);
  EXPECT_EQ(bm["top1"].get<double>(), evals.at(best_epoch));
  auto short_keys = lora;
  short_keys.insert(short_keys.end(),
                    {"train.epochs=" + std::to_string(best_epoch), "output_dir=" + tmp_.file("short")});
  train(recipe(short_keys), quiet_to(log, true));
  EXPECT_EQ(max_diff(best / "model.safetensors", tmp_.path() / "short/model/model.safetensors"), 0.0);
  EXPECT_EQ(models::load_bert_classifier(best)->config().num_labels, 2);
}

TEST_F(TextTrainer, EmaModelIsTheAverageOfTheTrainedWeights) {
  // One step with decay 0.5: every encoder weight of run/model is (pretrained + trained) / 2.
  std::ostringstream log;
  train(recipe({"train.max_steps=1", "output_dir=" + tmp_.file("plain")}), quiet_to(log, true));
  train(recipe({"train.max_steps=1", "train.ema_decay=0.5", "output_dir=" + tmp_.file("ema")}), quiet_to(log, true));
  EXPECT_TRUE(fs::exists(*latest_checkpoint(tmp_.file("ema/checkpoints")) + "/ema.safetensors"));
  const auto w0 = models::read_tensors(tmp_.file("bert/model.safetensors"));
  const auto w1 = models::read_tensors(tmp_.file("plain/model/model.safetensors"));
  const auto we = models::read_tensors(tmp_.file("ema/model/model.safetensors"));
  int compared = 0;
  double moved = 0;
  for (const auto& [name, t0] : w0) {
    const std::string key = "bert." + name;
    if (!t0.is_floating_point() || !w1.contains(key)) continue;
    EXPECT_LT((we.at(key) - (t0 + w1.at(key)) / 2).abs().max().item<double>(), 1e-6) << key;
    moved = std::max(moved, (w1.at(key) - t0).abs().max().item<double>());
    ++compared;
  }
  EXPECT_GT(compared, 10);
  EXPECT_GT(moved, 1e-4);  // the step changed the weights, so the average is not trivially either
}

TEST_F(TextTrainer, ResumeErrorsNameWhatDiffers) {
  std::ostringstream log;
  TrainOptions resume = quiet_to(log, true);
  resume.resume = true;
  try {
    train(recipe(), resume);
    FAIL() << "resume without a checkpoint accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint to resume from"), std::string::npos) << e.what();
  }
  train(recipe({"train.max_steps=2"}), quiet_to(log, true));
  try {
    train(recipe({"train.batch_size=8"}), resume);
    FAIL() << "resume with another batch size accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.batch_size=16"), std::string::npos) << e.what();
  }
  try {
    train(recipe({"model.lora_r=4"}), resume);
    FAIL() << "resume of a full fine-tune as LoRA accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.lora_r"), std::string::npos) << e.what();
  }
  // The shuffle plan comes from the seed and the data: another one cannot continue at the same batch.
  try {
    train(recipe({"train.max_steps=3", "train.seed=7"}), resume);
    FAIL() << "resume with another seed accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.seed=0"), std::string::npos) << e.what();
  }
  try {
    train(recipe({"train.max_steps=3", "data.max_length=32"}), resume);
    FAIL() << "resume with another max_length accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.max_length"), std::string::npos) << e.what();
  }
  // A finished run (here: max_steps reached) is not resumed silently: its metrics would be rewound.
  const std::string before = read_file(tmp_.file("run/metrics.jsonl"));
  try {
    train(recipe({"train.max_steps=2"}), resume);
    FAIL() << "resume of a finished run accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the run already finished (step 2 of 2)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(tmp_.file("run/metrics.jsonl")), before);
}

}  // namespace
}  // namespace hotpath::train
