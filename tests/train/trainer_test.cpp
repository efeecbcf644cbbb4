// The training loop end to end on tiny shards the test writes: bit-exact resume, gradient
// accumulation equal to the large batch, checkpoints, outputs and the errors a user meets.
#include "hotpath/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/formats/tar_writer.h"
#include "hotpath/models/weights.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/infer/evaluate.h"
#include "hotpath/infer/package.h"
#include "hotpath/train/recipe.h"
#include "hotpath/core/remove_tree.h"
#include "support/test_support.h"

namespace hotpath::train {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// `count` gray images of size×size: class k (of 4) is a bright 4×4 square at a class-specific
// corner on noise, so a small CNN learns it in a few steps.
std::string write_shards(const TempDir& dir, int count, int size, int per_shard = 32) {
  formats::ShardWriter writer(dir.file("d-%06d.tar"), {.max_samples = static_cast<std::uint64_t>(per_shard)});
  std::uint32_t noise = 12345;
  for (int i = 0; i < count; ++i) {
    const int label = i % 4;
    std::vector<std::uint8_t> px(static_cast<std::size_t>(size) * size);
    for (auto& p : px) {
      noise = noise * 1664525u + 1013904223u;
      p = static_cast<std::uint8_t>((noise >> 24) / 4);
    }
    const int x0 = (label % 2) * (size - 6) + 1;
    const int y0 = (label / 2) * (size - 6) + 1;
    for (int y = y0; y < y0 + 4; ++y) {
      for (int x = x0; x < x0 + 4; ++x) px[static_cast<std::size_t>(y) * size + x] = 230;
    }
    const auto png = data::encode_png(px.data(), size, size, 1);
    const std::string cls = std::to_string(label);
    writer.write({std::to_string(100000 + i), {{"png", png}, {"cls", test::as_bytes(cls)}}});
  }
  writer.close();
  return dir.file("d-*.tar");
}

std::vector<std::string> base_overrides(const std::string& shards, const std::string& out) {
  return {"model.name=cnn_small",  "model.num_classes=4",     "data.train=" + shards,   "data.eval=" + shards,
          "data.image_size=16",    "data.channels=1",         "data.mean=[0.3]",        "data.std=[0.3]",
          "data.train_crop=resize", "data.eval_crop=resize",  "data.resize_shorter=16", "data.translate=1",
          "data.flip=0",  // a mirrored image is another class here
          "data.workers=2",        "data.shuffle_buffer=32",  "train.batch_size=16",    "train.epochs=2",
          "train.threads=1",       "train.log_every=1",       "train.label_smoothing=0.1",
          "train.clip_grad_norm=2.0", "train.ema_decay=0.9",  "optimizer.lr=0.05",      "schedule.name=one_cycle",
          "output_dir=" + out};
}

Recipe make_recipe(const std::vector<std::string>& overrides) { return parse_recipe("", overrides, "test.yaml"); }

TrainOptions quiet() {
  TrainOptions o;
  o.quiet = true;
  return o;
}

// (split, step) → loss for every metrics.jsonl line of `split`.
std::map<std::int64_t, double> losses(const std::string& run_dir, const std::string& split = "train") {
  std::map<std::int64_t, double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] == split) out[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

double max_weight_diff(const std::string& a, const std::string& b) {
  const auto ta = models::read_tensors(a);
  const auto tb = models::read_tensors(b);
  EXPECT_EQ(ta.size(), tb.size());
  double diff = 0;
  for (const auto& [name, t] : ta) {
    if (!t.is_floating_point()) continue;
    diff = std::max(diff, (t - tb.at(name)).abs().max().item<double>());
  }
  return diff;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class Trainer : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
  TempDir dir_;
};

TEST(StepBreakdown, NamesTheBottleneckWithTheTasksRemedy) {
  StepBreakdown b{.data_s = 1,
                  .forward_s = 2,
                  .backward_s = 5,
                  .optimizer_s = 1,
                  .steps = 3,
                  .remedies = {.input = "more workers", .optimizer = "fewer parameters", .compute = "bf16"}};
  EXPECT_NE(b.summary().find("bottleneck: backward (bf16)"), std::string::npos) << b.summary();
  b.optimizer_s = 9;
  EXPECT_NE(b.summary().find("bottleneck: optimizer (fewer parameters)"), std::string::npos) << b.summary();
  b.data_s = 5;  // > 20% of the step is data: input-bound whatever the largest phase
  EXPECT_NE(b.summary().find("(more workers)"), std::string::npos) << b.summary();
  EXPECT_EQ(StepBreakdown{}.summary(), "no steps timed");
}

TEST_F(Trainer, ResumeMidEpochGivesTheSameLossesBitForBit) {
  const std::string shards = write_shards(dir_, 96, 16);  // 6 steps/epoch × 2 epochs
  const std::string a = dir_.file("a"), b = dir_.file("b");
  const TrainResult full = train(make_recipe(base_overrides(shards, a)), quiet());
  EXPECT_EQ(full.steps, 12);
  EXPECT_EQ(full.epochs_completed, 2);

  auto first = base_overrides(shards, b);
  first.push_back("train.max_steps=4");  // stops mid-epoch 1 with a checkpoint
  EXPECT_EQ(train(make_recipe(first), quiet()).steps, 4);
  ASSERT_TRUE(latest_checkpoint(b + "/checkpoints").has_value());
  EXPECT_EQ(fs::path(*latest_checkpoint(b + "/checkpoints")).filename(), "step-00000004");
  TrainOptions resume = quiet();
  resume.resume = true;
  EXPECT_EQ(train(make_recipe(base_overrides(shards, b)), resume).steps, 12);

  const auto la = losses(a), lb = losses(b);
  ASSERT_EQ(la.size(), 12u);
  ASSERT_EQ(lb.size(), 12u);  // the resumed run's metrics read as one run
  for (const auto& [step, loss] : la) EXPECT_EQ(loss, lb.at(step)) << "step " << step;
  EXPECT_EQ(losses(a, "eval"), losses(b, "eval"));
  EXPECT_EQ(max_weight_diff(a + "/model.safetensors", b + "/model.safetensors"), 0.0);
}

// trainer.json of format 1 (the image loop before the loops became one: no format, kind, resume_key or
// metrics window; the resume key at the top level) still resumes, and still refuses another batch layout.
TEST_F(Trainer, ResumesAFormat1ImageCheckpoint) {
  const std::string shards = write_shards(dir_, 96, 16);
  const std::string out = dir_.file("old");
  auto first = base_overrides(shards, out);
  first.push_back("train.max_steps=4");
  ASSERT_EQ(train(make_recipe(first), quiet()).steps, 4);
  const std::string state_path = *latest_checkpoint(out + "/checkpoints") + "/trainer.json";
  auto j = nlohmann::json::parse(read_file(state_path));
  nlohmann::json old{{"step", j["step"]},   {"epoch", j["epoch"]},   {"batch", j["batch"]},
                     {"best_step", -1},     {"scaler", j["scaler"]}, {"recipe", j["recipe"]},
                     {"seed", 0},           {"batch_size", 16},      {"accum_steps", 1}};
  { std::ofstream(state_path, std::ios::trunc) << old.dump(2); }
  TrainOptions resume = quiet();
  resume.resume = true;
  auto other = base_overrides(shards, out);
  other.push_back("train.batch_size=8");
  EXPECT_NE(error_of([&] { train(make_recipe(other), resume); }).find("train.batch_size=16"), std::string::npos);
  EXPECT_EQ(train(make_recipe(base_overrides(shards, out)), resume).steps, 12);
}

TEST_F(Trainer, ResumeAtAnEpochBoundaryGivesTheSameLosses) {
  const std::string shards = write_shards(dir_, 96, 16);
  const std::string a = dir_.file("a"), b = dir_.file("b");
  train(make_recipe(base_overrides(shards, a)), quiet());
  auto first = base_overrides(shards, b);
  first.push_back("train.max_steps=6");  // exactly one epoch
  train(make_recipe(first), quiet());
  TrainOptions resume = quiet();
  resume.resume = true;
  train(make_recipe(base_overrides(shards, b)), resume);
  EXPECT_EQ(losses(a), losses(b));
  EXPECT_EQ(max_weight_diff(a + "/model.safetensors", b + "/model.safetensors"), 0.0);
}

TEST_F(Trainer, LearnsAndWritesTheRunDirectory) {
  const std::string shards = write_shards(dir_, 128, 16);
  const std::string out = dir_.file("run");
  auto o = base_overrides(shards, out);
  o.push_back("train.epochs=4");
  o.push_back("checkpoint.keep_last=2");
  o.push_back("optimizer.lr=0.1");
  const std::string trace = dir_.file("trace.json");
  TrainOptions opts = quiet();
  opts.trace_path = trace;
  opts.trace_steps = 2;
  const TrainResult r = train(make_recipe(o), opts);
  ASSERT_TRUE(r.eval.has_value());
  EXPECT_GT(r.eval->top1, 60.0) << "4 classes; chance is 25%";
  EXPECT_EQ(r.eval->samples, 128);
  for (const char* f : {"config.yaml", "metrics.jsonl", "model.json", "model.safetensors", "profile.json",
                        "best/model.safetensors", "best/metrics.json"}) {
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  }
  EXPECT_EQ(list_checkpoints(out + "/checkpoints").size(), 2u);  // keep_last
  EXPECT_FALSE(fs::is_empty(out + "/tensorboard"));
  // The resolved config reads back as the same recipe.
  EXPECT_EQ(to_yaml(load_recipe(out + "/config.yaml")), to_yaml(make_recipe(o)));
  // Trace: the traced steps with their phases.
  const auto tj = nlohmann::json::parse(read_file(trace));
  std::map<std::string, int> names;
  for (const auto& e : tj["traceEvents"]) names[e["name"].get<std::string>()]++;
  EXPECT_EQ(names["step"], 2);
  EXPECT_EQ(names["forward"], 2);
  EXPECT_EQ(names["backward"], 2);
  EXPECT_EQ(r.breakdown.steps, 32);  // 128 / 16 × 4 epochs
  EXPECT_NE(r.breakdown.summary().find("bottleneck"), std::string::npos);
  // The package evaluates to the same numbers through `eval`'s path.
  const infer::Package pkg = infer::read_package(out);
  auto model = infer::load_package_model(pkg);
  data::LoaderOptions lo = pkg.image.loader_options(data::resolve_shards({shards}));
  lo.batch_size = 16;
  data::Loader loader(lo);
  const infer::EvalResult again = infer::evaluate(*model, loader);
  EXPECT_DOUBLE_EQ(again.top1, r.eval->top1);
}

TEST_F(Trainer, GradientAccumulationEqualsTheLargeBatchStep) {
  // ViT: LayerNorm is per sample, so 4 micro-batches of 2 give the gradient of one batch of 8
  // (BatchNorm's batch statistics would differ by design).
  const std::string shards = write_shards(dir_, 8, 224, 8);
  std::vector<std::string> o = {"model.name=vit_tiny", "model.num_classes=4", "model.channels_last=false",
                                "data.train=" + shards, "data.image_size=224", "data.channels=3",
                                "data.train_crop=resize", "data.flip=0", "data.workers=1", "train.batch_size=8",
                                "train.epochs=1", "train.threads=1", "optimizer.momentum=0", "optimizer.lr=0.5",
                                "schedule.name=constant"};
  auto one = o, four = o;
  one.push_back("output_dir=" + dir_.file("one"));
  four.push_back("output_dir=" + dir_.file("four"));
  four.push_back("train.accum_steps=4");
  train(make_recipe(one), quiet());
  train(make_recipe(four), quiet());
  EXPECT_LE(max_weight_diff(dir_.file("one/model.safetensors"), dir_.file("four/model.safetensors")), 1e-5);
  EXPECT_NEAR(losses(dir_.file("one")).at(1), losses(dir_.file("four")).at(1), 1e-5);
  // And the step did something: the weights moved from their initial values.
  auto init = models::create_model("vit_tiny", {.num_classes = 4});
  models::save_safetensors(*init, dir_.file("init.safetensors"));
  EXPECT_GT(max_weight_diff(dir_.file("init.safetensors"), dir_.file("one/model.safetensors")), 1e-3);
}

TEST_F(Trainer, Bf16AutocastTrainsCloseToFp32ButNotIdentically) {
  const std::string shards = write_shards(dir_, 64, 16);
  auto fp32 = base_overrides(shards, dir_.file("fp32"));
  fp32.push_back("train.max_steps=3");
  auto bf16 = base_overrides(shards, dir_.file("bf16"));
  bf16.push_back("train.max_steps=3");
  bf16.push_back("train.precision=bf16");
  train(make_recipe(fp32), quiet());
  train(make_recipe(bf16), quiet());
  const auto a = losses(dir_.file("fp32")), b = losses(dir_.file("bf16"));
  ASSERT_EQ(b.size(), 3u);
  for (const auto& [step, loss] : a) {
    EXPECT_NEAR(loss, b.at(step), 0.05) << "step " << step;
  }
  EXPECT_NE(a.at(1), b.at(1)) << "bf16 convolutions round differently: autocast must be active";
}

TEST_F(Trainer, SkippedLabelsAreNamedOnTheConsoleLikeCorruptImages) {
  const std::string shards = write_shards(dir_, 32, 16);
  {  // Two samples whose labels the loss would silently ignore (-100) or index past its 4 classes (7).
    formats::ShardWriter bad(dir_.file("d-9%05d.tar"), {});
    const std::vector<std::uint8_t> px(16 * 16, 128);
    const auto png = data::encode_png(px.data(), 16, 16, 1);
    bad.write({"bad-ignore", {{"png", png}, {"cls", test::as_bytes(std::string("-100"))}}});
    bad.write({"bad-range", {{"png", png}, {"cls", test::as_bytes(std::string("7"))}}});
    bad.close();
  }
  auto o = base_overrides(shards, dir_.file("run"));
  o.push_back("train.epochs=2");
  std::ostringstream console;
  TrainOptions options;
  options.out = &console;
  train(make_recipe(o), options);
  const std::string text = console.str();
  EXPECT_NE(text.find("epoch 1: 2 bad samples skipped (2 in this run, data.max_bad_samples 100), e.g. "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("outside [0, 4)"), std::string::npos) << text;
  EXPECT_NE(text.find("epoch 2: 2 bad samples skipped (4 in this run"), std::string::npos)
      << "each epoch names the ones it skipped:\n" << text;
}

TEST_F(Trainer, FrozenPrefixesAndANewHeadFromPartialWeights) {
  const std::string shards = write_shards(dir_, 32, 16);
  auto o = base_overrides(shards, dir_.file("pre"));
  o.push_back("train.epochs=1");
  o.push_back("schedule.name=constant");
  train(make_recipe(o), quiet());
  // Fine-tune: 4 → 6 classes (new head), features.0 frozen.
  auto ft = base_overrides(shards, dir_.file("ft"));
  ft.push_back("train.epochs=1");
  ft.push_back("model.num_classes=6");
  ft.push_back("model.weights=" + dir_.file("pre/model.safetensors"));
  ft.push_back("model.freeze=[features.0]");
  ft.push_back("train.ema_decay=0");
  ft.push_back("schedule.name=constant");
  EXPECT_NE(error_of([&] { train(make_recipe(ft), quiet()); }).find("classifier.weight"), std::string::npos)
      << "a head of another shape is refused without allow_partial";
  ft.push_back("model.allow_partial=true");
  train(make_recipe(ft), quiet());
  const auto pre = models::read_tensors(dir_.file("pre/model.safetensors"));
  const auto post = models::read_tensors(dir_.file("ft/model.safetensors"));
  EXPECT_TRUE(pre.at("features.0.weight").equal(post.at("features.0.weight"))) << "frozen";
  EXPECT_FALSE(pre.at("features.3.weight").equal(post.at("features.3.weight"))) << "trained";
  EXPECT_EQ(post.at("classifier.weight").size(0), 6);
}

TEST_F(Trainer, NanLossStopsWithAClearMessage) {
  const std::string shards = write_shards(dir_, 64, 16);
  auto o = base_overrides(shards, dir_.file("nan"));
  o.push_back("optimizer.lr=1.0e+12");
  o.push_back("schedule.name=constant");
  o.push_back("train.clip_grad_norm=0");
  o.push_back("train.epochs=4");
  const std::string e = error_of([&] { train(make_recipe(o), quiet()); });
  EXPECT_NE(e.find("the loss became"), std::string::npos) << e;
  EXPECT_NE(e.find("Lower optimizer.lr"), std::string::npos) << e;
}

TEST_F(Trainer, ErrorsNameTheProblem) {
  const std::string shards = write_shards(dir_, 32, 16);
  auto missing = base_overrides(shards, dir_.file("m"));
  missing.push_back("data.train=" + dir_.file("nope-000000.tar"));
  const std::string e = error_of([&] { train(make_recipe(missing), quiet()); });
  EXPECT_NE(e.find("nope-000000.tar"), std::string::npos) << e;
  EXPECT_NE(e.find("data.train"), std::string::npos) << e;
  auto fp16 = base_overrides(shards, dir_.file("h"));
  fp16.push_back("train.precision=fp16");
  fp16.push_back("train.device=cpu");
  EXPECT_NE(error_of([&] { train(make_recipe(fp16), quiet()); }).find("fp16 needs a CUDA device"), std::string::npos);
  TrainOptions resume = quiet();
  resume.resume = true;
  EXPECT_NE(error_of([&] { train(make_recipe(base_overrides(shards, dir_.file("r"))), resume); })
                .find("no checkpoint to resume from"),
            std::string::npos);
  auto big = base_overrides(shards, dir_.file("b"));
  big.push_back("train.batch_size=64");
  EXPECT_NE(error_of([&] { train(make_recipe(big), quiet()); }).find("fewer than one batch"), std::string::npos);
  auto lora = base_overrides(shards, dir_.file("l"));
  lora.push_back("model.lora_r=4");  // a text-recipe key: refused, not ignored
  EXPECT_NE(error_of([&] { train(make_recipe(lora), quiet()); }).find("model.lora_r applies to text recipes"),
            std::string::npos);
}

TEST_F(Trainer, ARunDirectoryHoldingAnotherRunIsRefusedUnlessResumeOrOverwrite) {
  const std::string shards = write_shards(dir_, 32, 16);
  auto o = base_overrides(shards, dir_.file("r"));
  o.push_back("train.max_steps=1");
  train(make_recipe(o), quiet());
  const std::string metrics = read_file(dir_.file("r/metrics.jsonl"));
  auto again = o;
  again.push_back("optimizer.lr=0.01");
  const std::string e = error_of([&] { train(make_recipe(again), quiet()); });
  EXPECT_NE(e.find("holds another run"), std::string::npos) << e;
  EXPECT_EQ(read_file(dir_.file("r/metrics.jsonl")), metrics) << "the refused run changed nothing";
  TrainOptions both = quiet();
  both.resume = both.overwrite = true;
  EXPECT_NE(error_of([&] { train(make_recipe(again), both); }).find("exclude each other"), std::string::npos);
  TrainOptions overwrite = quiet();
  overwrite.overwrite = true;
  EXPECT_EQ(train(make_recipe(again), overwrite).steps, 1);
  EXPECT_EQ(list_checkpoints(dir_.file("r/checkpoints")).size(), 1u);
  EXPECT_EQ(read_file(dir_.file("r/metrics.jsonl")).size(), metrics.size()) << "one run's metrics, not two";
}

TEST_F(Trainer, ResumeRefusesACheckpointOfAnotherShape) {
  const std::string shards = write_shards(dir_, 32, 16);
  auto o = base_overrides(shards, dir_.file("r"));
  o.push_back("train.max_steps=1");
  train(make_recipe(o), quiet());
  auto other = base_overrides(shards, dir_.file("r"));
  other.push_back("model.num_classes=5");
  TrainOptions resume = quiet();
  resume.resume = true;
  const std::string e = error_of([&] { train(make_recipe(other), resume); });
  EXPECT_NE(e.find("classifier."), std::string::npos) << e;  // the head whose shape changed
  EXPECT_NE(e.find("step-00000001"), std::string::npos) << e;
}

TEST(Checkpoint, ListsOnlyCompleteDirectoriesInStepOrderAndPrunes) {
  TempDir dir;
  const std::string root = dir.file("ck");
  CheckpointData data;
  data.model["w"] = at::ones({2});
  data.rng["cpu"] = at::zeros({4}, at::kByte);
  data.trainer_json = "{}";
  for (int step : {5, 100, 20}) save_checkpoint(root + "/" + checkpoint_name(step), data);
  fs::create_directories(root + "/step-00000200.tmp");  // a save that died half-way
  auto all = list_checkpoints(root);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(fs::path(all.back()).filename(), "step-00000100");
  EXPECT_EQ(fs::path(*latest_checkpoint(root)).filename(), "step-00000100");
  prune_checkpoints(root, 2);
  all = list_checkpoints(root);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(fs::path(all.front()).filename(), "step-00000020");
  EXPECT_FALSE(fs::exists(root + "/step-00000200.tmp"));
  const CheckpointData back = load_checkpoint(all.back());
  EXPECT_TRUE(back.model.at("w").equal(at::ones({2})));
  EXPECT_TRUE(back.ema.empty());
}

TEST(Checkpoint, StrayOrOverflowingNamesAreReportedNeverTrustedOrPruned) {
  TempDir dir;
  const std::string root = dir.file("ck");
  CheckpointData data;
  data.model["w"] = at::ones({2});
  data.rng["cpu"] = at::zeros({4}, at::kByte);
  data.trainer_json = "{}";
  save_checkpoint(root + "/" + checkpoint_name(5), data);
  for (const char* stray : {"step-99999999999999999999", "step-12abc", "step--5"}) {
    fs::create_directories(root + "/" + stray);
    const std::string e = error_of([&] { (void)list_checkpoints(root); });
    EXPECT_NE(e.find(std::string(stray) + ": not a checkpoint name"), std::string::npos) << e;
    EXPECT_NE(error_of([&] { prune_checkpoints(root, 1); }), "") << stray;
    EXPECT_TRUE(fs::exists(root + "/step-00000005")) << "nothing pruned on account of " << stray;
    hotpath::remove_tree(root + "/" + stray);
  }
  EXPECT_NE(error_of([] { (void)checkpoint_name(-1); }).find("checkpoint step"), std::string::npos);
}

TEST(Checkpoint, MissingPartIsNamed) {
  TempDir dir;
  fs::create_directories(dir.file("step-00000001"));
  try {
    load_checkpoint(dir.file("step-00000001"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors: missing from the checkpoint"), std::string::npos);
  }
}

}  // namespace
}  // namespace hotpath::train
