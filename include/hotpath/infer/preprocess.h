// hotpath/infer/preprocess.h — the eval transform of an image classifier, written once.
//
// One value says how an image becomes the model's input at evaluation time (resize + center crop
// or plain resize, mean/std, channels, layout). Training's eval loader, the model package, predict
// and the server all take it from here, so what a model is evaluated on is what it is served with.
//
//   EvalPreprocess pre = package.preprocess;                       // stored in model.json
//   data::Loader eval(pre.loader_options(shards));                 // shards → eval batches
//   at::Tensor x = pre.load_image("cat.jpg").unsqueeze(0);         // one file → the same row
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hotpath/data/loader.h"

namespace hotpath::infer {

enum class EvalCrop { kResizeCenterCrop, kResize };  // "resize_center_crop" | "resize"

struct EvalPreprocess {
  std::int64_t image_size = 224;       // output height = width
  std::int64_t channels = 3;           // 1 or 3
  EvalCrop crop = EvalCrop::kResizeCenterCrop;
  std::int64_t resize_shorter = 256;   // kResizeCenterCrop: shorter side resized to this, then center crop
  std::vector<double> mean, std;       // one per channel
  bool channels_last = false;          // batches in NHWC memory (the model was trained channels-last)

  // Loader settings that apply it to shards: no augmentation, no shuffle, keep the tail, exact (no DCT
  // scaling). The caller sets batch_size, workers, prefetch, max_bad_samples.
  [[nodiscard]] data::LoaderOptions loader_options(std::vector<std::string> shards) const;
  // One encoded image (JPEG/PNG bytes) → [C, H, W] float tensor, bit-identical to the loader's sample
  // row (channels_last: the same HWC memory, as a [C, H, W] view with channels-last strides).
  [[nodiscard]] at::Tensor apply(std::span<const std::byte> encoded) const;
  [[nodiscard]] at::Tensor load_image(const std::string& path) const;  // reads the file; errors name it
};

const char* eval_crop_name(EvalCrop crop);

// JSON object {"channels", "image_size", "eval_crop", "resize_shorter", "mean", "std", "channels_last"};
// from_json checks every field (types, ranges, mean/std sizes == channels, std > 0) naming `where` and
// the field. channels, image_size, mean and std are required; the others default as above.
nlohmann::ordered_json to_json(const EvalPreprocess& p);
EvalPreprocess eval_preprocess_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace hotpath::infer
