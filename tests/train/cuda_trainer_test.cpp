// Label gpu: the training loop on CUDA. fp16 autocast + the dynamic loss scaler (and bf16) train an image
// and a text recipe to the accuracy the CPU fp32 run reaches on the same data; with deterministic
// algorithms, a run cut short and resumed on CUDA equals an uninterrupted CUDA run bit for bit.
// Fixtures are written by the test (the same toy tasks as trainer_test.cpp and text_trainer_test.cpp).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/mapped_file.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar_writer.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "hotpath/text/text_data.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"
#include "support/cuda_test_support.h"
#include "support/test_support.h"

namespace hotpath::train {
namespace {

namespace fs = std::filesystem;

// Gray size×size images of 4 classes: a bright 4×4 square in a class-specific corner on noise.
std::string write_image_shards(const test::TempDir& dir, int count, int size) {
  formats::ShardWriter writer(dir.file("d-%06d.tar"), {.max_samples = 32});
  std::uint32_t noise = 12345;
  for (int i = 0; i < count; ++i) {
    const int label = i % 4;
    std::vector<std::uint8_t> px(static_cast<std::size_t>(size) * size);
    for (auto& p : px) {
      noise = noise * 1664525u + 1013904223u;
      p = static_cast<std::uint8_t>((noise >> 24) / 4);
    }
    const int x0 = (label % 2) * (size - 6) + 1, y0 = (label / 2) * (size - 6) + 1;
    for (int y = y0; y < y0 + 4; ++y) {
      for (int x = x0; x < x0 + 4; ++x) px[static_cast<std::size_t>(y) * size + x] = 230;
    }
    const std::string cls = std::to_string(label);
    writer.write({std::to_string(100000 + i), {{"png", data::encode_png(px.data(), size, size, 1)}, {"cls", test::as_bytes(cls)}}});
  }
  writer.close();
  return dir.file("d-*.tar");
}

Recipe image_recipe(const std::string& shards, const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.name=cnn_small",    "model.num_classes=4",     "data.train=" + shards,
                                "data.eval=" + shards,     "data.image_size=16",      "data.channels=1",
                                "data.mean=[0.3]",         "data.std=[0.3]",          "data.train_crop=resize",
                                "data.eval_crop=resize",   "data.resize_shorter=16",  "data.translate=1",
                                "data.flip=0",             "data.workers=2",          "data.shuffle_buffer=32",
                                "train.batch_size=16",     "train.epochs=4",          "train.threads=1",
                                "train.log_every=1",       "optimizer.lr=0.1",        "schedule.name=one_cycle",
                                "output_dir=" + out};
  o.insert(o.end(), extra.begin(), extra.end());
  return parse_recipe("", o, "cuda-test.yaml");
}

// A 2-layer BERT "pretrained" directory and a separable toy task ("good" → 1, "bad" → 0) as text shards.
void write_text_fixture(const test::TempDir& dir) {
  const fs::path bert = dir.path() / "bert";
  fs::create_directories(bert);
  const std::string config = R"({"model_type":"bert","vocab_size":32,"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":128,"max_position_embeddings":64,"type_vocab_size":2,
    "hidden_act":"gelu","layer_norm_eps":1e-12,"hidden_dropout_prob":0.1,"attention_probs_dropout_prob":0.1,
    "pad_token_id":0,"initializer_range":0.02})";
  test::write_file((bert / "config.json").string(), config);
  at::manual_seed(7);
  models::BertModel encoder(formats::BertConfig::from_json(config));
  models::save_safetensors(encoder, (bert / "model.safetensors").string());
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const char* w : {"good", "bad", "movie", "film", "very", "really", "the", "a", "was", "is"}) {
    vocab += std::string(w) + "\n";
  }
  test::write_file((bert / "vocab.txt").string(), vocab);
  const char* fillers[] = {"the movie", "a film", "the film was", "really", "very very", "a movie is"};
  for (const auto& [split, n] : std::vector<std::pair<std::string, int>>{{"train", 128}, {"test", 64}}) {
    std::ostringstream t, l;
    std::mt19937 rng(split == "train" ? 0u : 1u);
    for (int i = 0; i < n; ++i) {
      const bool good = rng() % 3 != 0;
      t << fillers[rng() % 6] << " " << (good ? "good" : "bad") << " " << fillers[rng() % 6] << "\n";
      l << (good ? 1 : 0) << "\n";
    }
    test::write_file(dir.file(split + ".txt"), t.str());
    test::write_file(dir.file(split + ".labels"), l.str());
    text::TextPackOptions o;
    o.source.labels_path = dir.file(split + ".labels");
    o.output_prefix = dir.file(split);
    text::pack_text(dir.file(split + ".txt"), o);
  }
}

Recipe text_recipe(const test::TempDir& dir, const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"data.kind=text",          "model.name=bert",        "model.pretrained=" + dir.file("bert"),
                                "data.train=" + dir.file("train-*.tar"), "data.eval=" + dir.file("test-*.tar"),
                                "data.max_length=16",      "train.epochs=20",        "train.batch_size=16",
                                "train.threads=1",         "train.log_every=2",      "optimizer.name=adamw",
                                "optimizer.lr=0.003",      "schedule.name=constant", "output_dir=" + out};
  o.insert(o.end(), extra.begin(), extra.end());
  return parse_recipe("", o, "cuda-text-test.yaml");
}

TrainOptions quiet_to(std::ostringstream& log) {
  TrainOptions options;
  options.out = &log;
  options.quiet = false;
  return options;
}

std::vector<double> loss_scales(const std::string& run_dir) {
  std::vector<double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] == "train" && j.contains("loss_scale")) out.push_back(j["loss_scale"].get<double>());
  }
  return out;
}

class CudaTrainer : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
  test::TempDir dir_;
};

TEST_F(CudaTrainer, ImageFp16ReachesTheCpuFp32Accuracy) {
  HOTPATH_REQUIRE_CUDA();
  const std::string shards = write_image_shards(dir_, 128, 16);
  std::ostringstream log;
  const TrainResult cpu = train(image_recipe(shards, dir_.file("cpu"), {"train.device=cpu"}), quiet_to(log));
  const TrainResult gpu = train(image_recipe(shards, dir_.file("gpu"), {"train.device=cuda", "train.precision=fp16",
                                                                        "model.channels_last=true"}),
                                quiet_to(log));
  ASSERT_TRUE(cpu.eval && gpu.eval) << log.str();
  EXPECT_GT(cpu.eval->top1, 60.0) << log.str();
  EXPECT_GE(gpu.eval->top1, cpu.eval->top1 - 5.0) << log.str();
  EXPECT_NE(log.str().find("on cuda:0 (cuDNN benchmark on)"), std::string::npos) << log.str();
  EXPECT_FALSE(loss_scales(dir_.file("gpu")).empty()) << "fp16 runs log the loss scale";
  // The breakdown from CUDA events: every step timed (no every-10th sampling), none left pending.
  EXPECT_EQ(gpu.breakdown.steps, gpu.steps);
  EXPECT_GT(gpu.breakdown.forward_s, 0.0);
  EXPECT_GT(gpu.breakdown.backward_s, 0.0);
}

TEST_F(CudaTrainer, TextFp16AndBf16ReachTheCpuFp32Accuracy) {
  HOTPATH_REQUIRE_CUDA();
  write_text_fixture(dir_);
  std::ostringstream log;
  const TrainResult cpu = train(text_recipe(dir_, dir_.file("cpu"), {"train.device=cpu"}), quiet_to(log));
  ASSERT_TRUE(cpu.eval) << log.str();
  EXPECT_GT(cpu.eval->top1, 90.0) << log.str();
  for (const char* precision : {"fp16", "bf16"}) {
    const std::string out = dir_.file(std::string("gpu-") + precision);
    const TrainResult gpu =
        train(text_recipe(dir_, out, {"train.device=cuda", std::string("train.precision=") + precision}), quiet_to(log));
    ASSERT_TRUE(gpu.eval) << log.str();
    EXPECT_GE(gpu.eval->top1, cpu.eval->top1 - 5.0) << precision << "\n" << log.str();
    // The trained model directory loads back on the CPU (tensors were copied off the device).
    EXPECT_EQ(models::load_bert_classifier(fs::path(out) / "model")->config().num_labels, 2);
  }
  EXPECT_NE(log.str().find("(on CUDA: SDPA "), std::string::npos) << "the dispatch report\n" << log.str();
}

// Deterministic algorithms (and cuBLAS's fixed workspace) make two CUDA runs of one recipe equal; a run
// stopped at step 5 and resumed must then equal the uninterrupted one bit for bit (RNG, scaler, optimizer).
TEST_F(CudaTrainer, ResumeIsExactOnTheSameDevice) {
  HOTPATH_REQUIRE_CUDA();
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  write_text_fixture(dir_);
  const std::string shards = write_image_shards(dir_, 96, 16);
  const std::vector<std::string> cuda = {"train.device=cuda", "train.precision=fp16", "train.epochs=2"};
  std::ostringstream log;
  for (const bool text : {false, true}) {
    const auto recipe = [&](const std::string& out, std::vector<std::string> extra) {
      extra.insert(extra.begin(), cuda.begin(), cuda.end());
      return text ? text_recipe(dir_, out, extra) : image_recipe(shards, out, extra);
    };
    const std::string a = dir_.file(text ? "ta" : "ia"), b = dir_.file(text ? "tb" : "ib");
    const TrainResult full = train(recipe(a, {}), quiet_to(log));
    EXPECT_EQ(train(recipe(b, {"train.max_steps=5"}), quiet_to(log)).steps, 5);
    TrainOptions resume = quiet_to(log);
    resume.resume = true;
    EXPECT_EQ(train(recipe(b, {}), resume).steps, full.steps);
    EXPECT_EQ(read_file(a + "/metrics.jsonl"), read_file(b + "/metrics.jsonl")) << (text ? "text" : "image");
    EXPECT_NE(log.str().find("deterministic algorithms"), std::string::npos) << log.str();
  }
  at::globalContext().setDeterministicAlgorithms(false, false);
}

}  // namespace
}  // namespace hotpath::train
