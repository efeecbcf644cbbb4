#include "hotpath/infer/preprocess.h"

#include <ATen/Functions.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar_writer.h"
#include "support/test_support.h"

namespace hotpath::infer {
namespace {

using test::TempDir;
using Json = nlohmann::json;

// A w × h RGB image with detail at every scale (gradients + a checkerboard), so resampling shows.
std::vector<std::uint8_t> pattern(int w, int h) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      auto* p = &px[(static_cast<std::size_t>(y) * w + x) * 3];
      p[0] = static_cast<std::uint8_t>(x * 255 / w);
      p[1] = static_cast<std::uint8_t>(y * 255 / h);
      p[2] = static_cast<std::uint8_t>(((x / 3 + y / 2) % 2) * 200 + (x * y) % 37);
    }
  }
  return px;
}

struct Images {
  std::vector<std::byte> jpeg, png, gray_png;
};

Images make_images() {
  const auto rgb = pattern(57, 41);
  std::vector<std::uint8_t> gray(57 * 41);
  for (std::size_t i = 0; i < gray.size(); ++i) gray[i] = rgb[i * 3 + 2];
  return {data::encode_jpeg(rgb.data(), 57, 41, 3, 90), data::encode_png(rgb.data(), 57, 41, 3),
          data::encode_png(gray.data(), 57, 41, 1)};
}

EvalPreprocess preprocess(std::int64_t channels, EvalCrop crop, bool channels_last) {
  EvalPreprocess p;
  p.image_size = 24;
  p.channels = channels;
  p.crop = crop;
  p.resize_shorter = 32;
  p.channels_last = channels_last;
  if (channels == 3) {
    p.mean = {0.485, 0.456, 0.406};
    p.std = {0.229, 0.224, 0.225};
  } else {
    p.mean = {0.2860};
    p.std = {0.3530};
  }
  return p;
}

// apply() on each image equals the loader's row for it, bit for bit, in every setting.
TEST(EvalPreprocess, ApplyEqualsTheLoadersRow) {
  TempDir dir;
  const Images images = make_images();
  const std::vector<const std::vector<std::byte>*> files{&images.jpeg, &images.png, &images.gray_png};
  formats::ShardWriter writer(dir.file("s-%06d.tar"), {});
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string ext = i == 0 ? "jpg" : "png";
    writer.write({"sample" + std::to_string(i), {{ext, *files[i]}, {"cls", test::as_bytes("1")}}});
  }
  writer.close();

  for (const std::int64_t channels : {1, 3}) {
    for (const EvalCrop crop : {EvalCrop::kResizeCenterCrop, EvalCrop::kResize}) {
      for (const bool channels_last : {false, true}) {
        SCOPED_TRACE(testing::Message() << "channels " << channels << ", " << eval_crop_name(crop)
                                        << (channels_last ? ", channels-last" : ", NCHW"));
        const EvalPreprocess p = preprocess(channels, crop, channels_last);
        data::LoaderOptions o = p.loader_options(writer.shards());
        o.batch_size = 2;  // the last batch is partial and kept
        o.workers = 1;
        o.max_bad_samples = 0;
        data::Loader loader(o);
        std::size_t i = 0;
        for (const data::Batch& batch : loader.epoch(0)) {
          for (std::int64_t row = 0; row < batch.images.size(0); ++row, ++i) {
            ASSERT_LT(i, files.size());
            const at::Tensor expected = batch.images[row];
            const at::Tensor got = p.apply(*files[i]);
            EXPECT_EQ(got.sizes(), expected.sizes());
            EXPECT_EQ(got.strides(), expected.strides());
            EXPECT_TRUE(at::equal(got, expected)) << "sample " << i;
          }
        }
        EXPECT_EQ(i, files.size());
      }
    }
  }
}

TEST(EvalPreprocess, LoadImageNamesTheFile) {
  TempDir dir;
  test::write_file(dir.file("fake.png"), "not an image");
  const EvalPreprocess p = preprocess(3, EvalCrop::kResizeCenterCrop, false);
  try {
    (void)p.load_image(dir.file("fake.png"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir.file("fake.png") + ": ", 0), 0U) << e.what();
  }
  EXPECT_THROW((void)p.load_image(dir.file("missing.png")), Error);
}

TEST(EvalPreprocess, JsonRoundTrips) {
  for (const bool channels_last : {false, true}) {
    const EvalPreprocess p = preprocess(1, EvalCrop::kResize, channels_last);
    const auto j = to_json(p);
    EXPECT_EQ(j.dump(), std::string(R"({"channels":1,"image_size":24,"eval_crop":"resize","resize_shorter":32,)") +
                            R"("mean":[0.286],"std":[0.353],"channels_last":)" + (channels_last ? "true}" : "false}"));
    const EvalPreprocess q = eval_preprocess_from_json(Json::parse(j.dump()), "x");
    EXPECT_EQ(q.image_size, p.image_size);
    EXPECT_EQ(q.channels, p.channels);
    EXPECT_EQ(q.crop, p.crop);
    EXPECT_EQ(q.resize_shorter, p.resize_shorter);
    EXPECT_EQ(q.mean, p.mean);
    EXPECT_EQ(q.std, p.std);
    EXPECT_EQ(q.channels_last, p.channels_last);
  }
  // Only channels, image_size, mean and std are required.
  const EvalPreprocess d = eval_preprocess_from_json(
      Json::parse(R"({"channels": 3, "image_size": 224, "mean": [0, 0, 0], "std": [1, 1, 1]})"), "x");
  EXPECT_EQ(d.crop, EvalCrop::kResizeCenterCrop);
  EXPECT_EQ(d.resize_shorter, 256);
  EXPECT_FALSE(d.channels_last);
}

TEST(EvalPreprocess, FromJsonNamesTheField) {
  const Json ok = Json::parse(to_json(preprocess(3, EvalCrop::kResizeCenterCrop, false)).dump());
  const auto error = [&](const std::string& key, const Json& value) {
    Json j = ok;
    if (value.is_discarded()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
    try {
      (void)eval_preprocess_from_json(j, "run/model.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Json missing = Json(Json::value_t::discarded);
  const struct {
    std::string key;
    Json value;
    std::string message;
  } cases[] = {
      {"channels", missing, "run/model.json: missing field 'channels'"},
      {"channels", 2, "run/model.json: field 'channels' is 2, expected 1 or 3"},
      {"channels", 4, "run/model.json: field 'channels' is 4, expected 1 to 3"},
      {"channels", "3", "run/model.json: field 'channels' must be an integer, got string"},
      {"image_size", missing, "run/model.json: missing field 'image_size'"},
      {"image_size", 0, "run/model.json: field 'image_size' is 0, expected 1 to 4096"},
      {"image_size", 24.0, "run/model.json: field 'image_size' must be an integer, got number"},
      {"image_size", 18446744073709551615ULL, "run/model.json: field 'image_size' is 18446744073709551615"},
      {"image_size", 64, "run/model.json: field 'resize_shorter' is 32, expected at least image_size (64)"},
      {"eval_crop", "center", "run/model.json: field 'eval_crop' must be resize_center_crop or resize, got 'center'"},
      {"eval_crop", 1, "run/model.json: field 'eval_crop' must be a string, got number"},
      {"resize_shorter", 23, "run/model.json: field 'resize_shorter' is 23, expected at least image_size (24)"},
      {"resize_shorter", -1, "run/model.json: field 'resize_shorter' is -1, expected 1 to 65536"},
      {"mean", missing, "run/model.json: missing field 'mean'"},
      {"mean", Json::array({0.5, 0.5}), "run/model.json: field 'mean' has 2 values, expected 3 (one per channel)"},
      {"mean", Json::array({0.5, "a", 0.5}), "run/model.json: field 'mean' must be an array of numbers, found string"},
      {"std", 0.5, "run/model.json: field 'std' must be an array of numbers, got number"},
      {"std", Json::array({0.5, 0.0, 0.5}), "run/model.json: field 'std' value 1 is 0, expected a finite value from 1e-06 to 1e+06"},
      {"std", Json::array({0.5, -1, 0.5}), "run/model.json: field 'std' value 1 is -1"},
      // Finite and > 0, yet every pixel divided by it is inf (issue 28).
      {"std", Json::array({0.5, 1e-40, 0.5}), "run/model.json: field 'std' value 1 is 1e-40, expected a finite value"},
      {"std", Json::array({0.5, 1e30, 0.5}), "run/model.json: field 'std' value 1 is 1e+30"},
      {"mean", Json::array({0.5, 1e300, 0.5}), "run/model.json: field 'mean' value 1 is 1e+300, expected a finite value"},
      {"channels_last", 1, "run/model.json: field 'channels_last' must be true or false, got number"},
  };
  for (const auto& c : cases) {
    const std::string message = error(c.key, c.value);
    EXPECT_EQ(message.rfind(c.message, 0), 0U) << c.key << " = " << c.value.dump() << ": " << message;
  }
  EXPECT_THROW((void)eval_preprocess_from_json(Json::array(), "x"), Error);
  // A plain resize never reads resize_shorter.
  Json resize = ok;
  resize["eval_crop"] = "resize";
  resize["resize_shorter"] = 1;
  EXPECT_EQ(eval_preprocess_from_json(resize, "x").crop, EvalCrop::kResize);
}

TEST(EvalPreprocess, RefusesAnInvalidValue) {
  EvalPreprocess p = preprocess(3, EvalCrop::kResizeCenterCrop, false);
  p.mean.pop_back();
  EXPECT_THROW((void)p.loader_options({}), Error);
  EXPECT_THROW((void)p.apply(make_images().png), Error);
}

}  // namespace
}  // namespace hotpath::infer
