#include "hotpath/infer/preprocess.h"

#include <ATen/ops/empty.h>

#include <cmath>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/data/transforms.h"
#include "internal/preprocess_json.h"

namespace hotpath::infer {
namespace {

constexpr std::int64_t kMaxImageSize = 4096;      // as a recipe's data.image_size
constexpr std::int64_t kMaxResizeShorter = 65536;
// Normalization within sane magnitudes: pixels are 0..1, so a std of 1e-40 (finite, > 0) turns every pixel
// into inf while the answers still look plausible, and a mean past 1e6 drowns the image.
constexpr double kMinStd = 1e-6;
constexpr double kMaxStd = 1e6;
constexpr double kMaxMean = 1e6;

// What loader_options() and apply() rely on; from_json reports the same conditions field by field.
void check_valid(const EvalPreprocess& p) {
  HOTPATH_CHECK(p.image_size >= 1 && p.image_size <= kMaxImageSize, "EvalPreprocess: image_size is ", p.image_size,
                ", expected 1 to ", kMaxImageSize);
  HOTPATH_CHECK(p.channels == 1 || p.channels == 3, "EvalPreprocess: channels is ", p.channels, ", expected 1 or 3");
  HOTPATH_CHECK(p.crop == EvalCrop::kResize || (p.resize_shorter >= p.image_size && p.resize_shorter <= kMaxResizeShorter),
                "EvalPreprocess: resize_shorter is ", p.resize_shorter, ", expected image_size (", p.image_size,
                ") to ", kMaxResizeShorter);
  HOTPATH_CHECK(p.mean.size() == static_cast<std::size_t>(p.channels) && p.std.size() == p.mean.size(),
                "EvalPreprocess: mean and std need ", p.channels, " values each, got ", p.mean.size(), " and ",
                p.std.size());
  for (std::size_t c = 0; c < p.std.size(); ++c) {
    HOTPATH_CHECK(std::isfinite(p.mean[c]) && std::abs(p.mean[c]) <= kMaxMean && std::isfinite(p.std[c]) &&
                      p.std[c] >= kMinStd && p.std[c] <= kMaxStd,
                  "EvalPreprocess: channel ", c, " has mean ", p.mean[c], " and std ", p.std[c],
                  ", expected |mean| <= ", kMaxMean, " and std from ", kMinStd, " to ", kMaxStd);
  }
}

}  // namespace

const char* eval_crop_name(EvalCrop crop) {
  return crop == EvalCrop::kResize ? "resize" : "resize_center_crop";
}

data::LoaderOptions EvalPreprocess::loader_options(std::vector<std::string> shards) const {
  check_valid(*this);
  data::LoaderOptions o;
  o.shards = std::move(shards);
  o.size = static_cast<int>(image_size);
  o.channels = static_cast<int>(channels);
  o.crop = crop == EvalCrop::kResize ? data::CropMode::kResize : data::CropMode::kResizeCenterCrop;
  o.resize_shorter = static_cast<int>(resize_shorter);
  o.flip_probability = 0;
  o.translate = 0;
  o.allow_dct_scaling = false;  // exact torchvision preprocessing for evaluation
  for (std::size_t c = 0; c < mean.size() && c < 3; ++c) {
    o.normalization.mean[c] = static_cast<float>(mean[c]);
    o.normalization.std[c] = static_cast<float>(std[c]);
  }
  o.format = {.type = data::PixelType::kFloat32,
              .layout = channels_last ? data::PixelLayout::kHWC : data::PixelLayout::kCHW,
              .normalize = true};
  o.shuffle = false;
  o.drop_last = false;
  return o;
}

// The loader's per-sample path (Loader::State::process) without the random parts, which the eval
// options switch off; the options come from loader_options() so the two cannot disagree on a setting.
at::Tensor EvalPreprocess::apply(std::span<const std::byte> encoded) const {
  const data::LoaderOptions o = loader_options({});
  const data::ImageInfo info = data::probe_image(encoded, o.limits);
  data::Box box{0, 0, static_cast<double>(info.width), static_cast<double>(info.height)};
  if (o.crop == data::CropMode::kResizeCenterCrop) {
    box = data::resize_center_crop_box(info.width, info.height, o.resize_shorter, o.size);
  }
  std::vector<std::uint8_t> hwc(static_cast<std::size_t>(o.size) * o.size * o.channels);
  data::DecodeScratch scratch;
  data::decode_box_resized(encoded, box, o.size, o.size,
                           {.channels = o.channels, .allow_dct_scaling = o.allow_dct_scaling, .limits = o.limits},
                           hwc.data(), scratch);
  // channels_last: HWC memory viewed as [C, H, W], like a row of the loader's channels-last batch.
  at::Tensor out = channels_last ? at::empty({image_size, image_size, channels}, at::kFloat).permute({2, 0, 1})
                                 : at::empty({channels, image_size, image_size}, at::kFloat);
  data::store_sample(hwc.data(), o.size, o.size, o.channels, /*flip=*/false, o.normalization, o.format,
                     out.data_ptr());
  return out;
}

at::Tensor EvalPreprocess::load_image(const std::string& path) const {
  const std::string bytes = read_file(path, read_limit::kImage, "image");
  try {
    return apply(std::as_bytes(std::span(bytes.data(), bytes.size())));
  } catch (const Error& e) {
    throw e.with_context(path);
  }
}

nlohmann::ordered_json to_json(const EvalPreprocess& p) {
  return internal::eval_preprocess_to_json(p, "channels");
}

EvalPreprocess eval_preprocess_from_json(const nlohmann::json& j, const std::string& where) {
  return internal::eval_preprocess_from_json(j, where, "channels");
}

namespace internal {

nlohmann::ordered_json eval_preprocess_to_json(const EvalPreprocess& p, const char* channels_key) {
  nlohmann::ordered_json j;
  j[channels_key] = p.channels;
  j["image_size"] = p.image_size;
  j["eval_crop"] = eval_crop_name(p.crop);
  j["resize_shorter"] = p.resize_shorter;
  j["mean"] = p.mean;
  j["std"] = p.std;
  j["channels_last"] = p.channels_last;
  return j;
}

EvalPreprocess eval_preprocess_from_json(const nlohmann::json& j, const std::string& where, const char* channels_key) {
  HOTPATH_CHECK(j.is_object(), where, ": expected a JSON object, got ", j.type_name());
  const auto field = [&](const char* key, bool required) -> const nlohmann::json* {
    const auto it = j.find(key);
    if (it == j.end()) {
      HOTPATH_CHECK(!required, where, ": missing field '", key, "'");
      return nullptr;
    }
    return &*it;
  };
  const auto integer = [&](const char* key, bool required, std::int64_t lo, std::int64_t hi, std::int64_t& value) {
    const nlohmann::json* v = field(key, required);
    if (v == nullptr) return;
    HOTPATH_CHECK(v->is_number_integer(), where, ": field '", key, "' must be an integer, got ", v->type_name());
    // JSON's positive integers parse as unsigned: compare before converting (hi >= lo >= 0 here).
    const bool in_range = v->is_number_unsigned() ? v->get<std::uint64_t>() >= static_cast<std::uint64_t>(lo) &&
                                                        v->get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                                                  : v->get<std::int64_t>() >= lo && v->get<std::int64_t>() <= hi;
    HOTPATH_CHECK(in_range, where, ": field '", key, "' is ", v->dump(), ", expected ", lo, " to ", hi);
    value = v->get<std::int64_t>();
  };
  EvalPreprocess p;
  const auto numbers = [&](const char* key, std::vector<double>& value) {  // one per channel
    const nlohmann::json* v = field(key, true);
    HOTPATH_CHECK(v->is_array(), where, ": field '", key, "' must be an array of numbers, got ", v->type_name());
    HOTPATH_CHECK(v->size() == static_cast<std::size_t>(p.channels), where, ": field '", key, "' has ", v->size(),
                  " values, expected ", p.channels, " (one per channel)");
    value.clear();
    for (const auto& x : *v) {
      HOTPATH_CHECK(x.is_number(), where, ": field '", key, "' must be an array of numbers, found ", x.type_name());
      value.push_back(x.get<double>());
    }
  };

  integer(channels_key, true, 1, 3, p.channels);
  HOTPATH_CHECK(p.channels == 1 || p.channels == 3, where, ": field '", channels_key, "' is ", p.channels,
                ", expected 1 or 3");
  integer("image_size", true, 1, kMaxImageSize, p.image_size);
  if (const nlohmann::json* v = field("eval_crop", false)) {
    HOTPATH_CHECK(v->is_string(), where, ": field 'eval_crop' must be a string, got ", v->type_name());
    const auto& name = v->get_ref<const std::string&>();
    HOTPATH_CHECK(name == "resize_center_crop" || name == "resize", where,
                  ": field 'eval_crop' must be resize_center_crop or resize, got '", printable(name), "'");
    p.crop = name == "resize" ? EvalCrop::kResize : EvalCrop::kResizeCenterCrop;
  }
  // A plain resize never reads resize_shorter; any positive value is accepted there.
  integer("resize_shorter", false, 1, kMaxResizeShorter, p.resize_shorter);
  HOTPATH_CHECK(p.crop == EvalCrop::kResize || p.resize_shorter >= p.image_size, where,
                ": field 'resize_shorter' is ", p.resize_shorter, ", expected at least image_size (", p.image_size,
                ") for resize_center_crop");
  numbers("mean", p.mean);
  numbers("std", p.std);
  for (std::size_t c = 0; c < p.std.size(); ++c) {
    HOTPATH_CHECK(std::isfinite(p.mean[c]) && std::abs(p.mean[c]) <= kMaxMean, where, ": field 'mean' value ", c,
                  " is ", p.mean[c], ", expected a finite value from ", -kMaxMean, " to ", kMaxMean);
    HOTPATH_CHECK(std::isfinite(p.std[c]) && p.std[c] >= kMinStd && p.std[c] <= kMaxStd, where, ": field 'std' value ",
                  c, " is ", p.std[c], ", expected a finite value from ", kMinStd, " to ", kMaxStd);
  }
  if (const nlohmann::json* v = field("channels_last", false)) {
    HOTPATH_CHECK(v->is_boolean(), where, ": field 'channels_last' must be true or false, got ", v->type_name());
    p.channels_last = v->get<bool>();
  }
  return p;
}

}  // namespace internal
}  // namespace hotpath::infer
