#include "hotpath/infer/package.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/classifier.h"
#include "hotpath/models/weights.h"
#include "support/test_support.h"

namespace hotpath::infer {
namespace {

using test::TempDir;

// model.json exactly as `hotpath train` has written it since the first version: flat keys,
// "in_channels" for the channel count. Old run directories must load; new ones must read the same.
constexpr const char* kModelJson = R"({
  "format": "hotpath-model",
  "model": "cnn_small",
  "num_classes": 3,
  "in_channels": 1,
  "image_size": 24,
  "eval_crop": "resize",
  "resize_shorter": 32,
  "mean": [
    0.286
  ],
  "std": [
    0.353
  ],
  "class_names": [
    "shirt",
    "shoe",
    "bag"
  ],
  "channels_last": true,
  "weights": "model.safetensors"
}
)";

TEST(Package, ModelJsonKeepsItsFormat) {
  TempDir dir;
  test::write_file(dir.file("model.json"), kModelJson);
  const Package p = read_package(dir.path().string());
  EXPECT_EQ(p.dir, dir.path().string());
  EXPECT_EQ(p.architecture, "cnn_small");
  EXPECT_EQ(p.num_classes, 3);
  EXPECT_EQ(p.image.channels, 1);
  EXPECT_EQ(p.image.image_size, 24);
  EXPECT_EQ(p.image.crop, EvalCrop::kResize);
  EXPECT_EQ(p.image.resize_shorter, 32);
  EXPECT_EQ(p.image.mean, std::vector<double>{0.286});
  EXPECT_EQ(p.image.std, std::vector<double>{0.353});
  EXPECT_TRUE(p.image.channels_last);
  EXPECT_EQ(p.labels, (std::vector<std::string>{"shirt", "shoe", "bag"}));
  EXPECT_EQ(run_directory_json(p), kModelJson);
}

TEST(Package, OptionalFieldsDefault) {
  TempDir dir;
  test::write_file(dir.file("model.json"),
                   R"({"model": "cnn_small", "num_classes": 2, "in_channels": 3, "image_size": 224,
                       "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]})");
  const Package p = read_package(dir.path().string());
  EXPECT_EQ(p.image.crop, EvalCrop::kResizeCenterCrop);
  EXPECT_EQ(p.image.resize_shorter, 256);
  EXPECT_FALSE(p.image.channels_last);
  EXPECT_TRUE(p.labels.empty());
  EXPECT_EQ(p.weights, "model.safetensors");
}

TEST(Package, ErrorsNameTheFileAndField) {
  TempDir dir;
  const std::string path = dir.file("model.json");
  const auto error = [&](const std::string& from, const std::string& to) {
    std::string text = kModelJson;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    test::write_file(path, text);
    try {
      (void)read_package(dir.path().string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("\"in_channels\": 1", "\"in_channels\": 2"),
            path + ": field 'in_channels' is 2, expected 1 or 3");
  EXPECT_EQ(error("\"in_channels\": 1,", ""), path + ": missing field 'in_channels'");
  EXPECT_EQ(error("\"eval_crop\": \"resize\"", "\"eval_crop\": \"crop\""),
            path + ": field 'eval_crop' must be resize_center_crop or resize, got 'crop'");
  EXPECT_EQ(error("0.353", "0.353, 1"), path + ": field 'std' has 2 values, expected 1 (one per channel)");
  EXPECT_EQ(error("\"bag\"", "\"bag\", \"hat\""), path + ": class_names has 4 names for 3 classes");
  EXPECT_EQ(error("\"num_classes\": 3", "\"num_classes\": \"3\""),
            path + ": field 'num_classes' has the wrong type (string)");
  EXPECT_EQ(error("{", "[").rfind(path + ": invalid JSON: ", 0), 0U);
  EXPECT_THROW((void)read_package(dir.file("nothing")), Error);
}

// A package trained channels-last loads with channels-last weights; the classifier's top-k is the
// softmax's, labelled with the package's class names.
TEST(Classifier, TopKOfAPackage) {
  TempDir dir;
  at::manual_seed(0);
  const models::ModelHandle trained = models::create_model("cnn_small", {.num_classes = 3, .in_channels = 1});
  models::save_safetensors(*trained, dir.file("model.safetensors"));
  test::write_file(dir.file("model.json"), kModelJson);
  const Package package = read_package(dir.path().string());
  const Classifier classifier = Classifier::from_package(package);
  for (const auto& p : classifier.model()->parameters()) {
    if (p.dim() == 4) {
      EXPECT_TRUE(p.is_contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  EXPECT_FALSE(classifier.model()->is_training());

  const at::Tensor batch = at::randn({2, 1, 24, 24}).contiguous(at::MemoryFormat::ChannelsLast);
  trained->eval();
  const at::Tensor probs = at::softmax(trained->forward(batch), 1);
  const auto top = classifier.classify(batch, 5);  // k clamped to the 3 classes
  ASSERT_EQ(top.size(), 2U);
  const std::vector<std::string> names{"shirt", "shoe", "bag"};
  for (std::int64_t n = 0; n < 2; ++n) {
    ASSERT_EQ(top[static_cast<std::size_t>(n)].size(), 3U);
    for (std::size_t i = 0; i < 3; ++i) {
      const TopK& t = top[static_cast<std::size_t>(n)][i];
      EXPECT_EQ(t.label, names[static_cast<std::size_t>(t.index)]);
      EXPECT_NEAR(t.prob, probs[n][t.index].item<double>(), 1e-6);
      if (i > 0) {
        EXPECT_GE(top[static_cast<std::size_t>(n)][i - 1].prob, t.prob);
      }
    }
  }
  // Without class names the label is the index.
  const Classifier unnamed(classifier.model(), package.image, {});
  const TopK first = unnamed.classify(batch, 1).front().front();
  EXPECT_EQ(first.label, std::to_string(first.index));
  EXPECT_THROW((void)unnamed.classify(batch, 0), Error);
}

}  // namespace
}  // namespace hotpath::infer
