// Crop boxes with torchvision's semantics (transforms.py: RandomResizedCrop.get_params;
// functional.py: _compute_resized_output_size and center_crop). Python's round() rounds half to
// even, which std::nearbyint does in the default rounding mode.
#include "hotpath/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::data {
namespace {

int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

// One attempt of torchvision's get_params (RandomResizedCrop, RandomErasing): an area of U(scale_min, scale_max)
// of `area` and a log-uniform ratio r; returns {round(sqrt(a·r)), round(sqrt(a/r))}, in the draw order both use.
std::pair<int, int> draw_sides(double area, double scale_min, double scale_max, double ratio_min, double ratio_max,
                               Rng& rng) {
  const double target_area = area * rng.uniform(scale_min, scale_max);
  const double aspect_ratio = std::exp(rng.uniform(std::log(ratio_min), std::log(ratio_max)));
  return {round_half_even(std::sqrt(target_area * aspect_ratio)), round_half_even(std::sqrt(target_area / aspect_ratio))};
}

}  // namespace

Box random_resized_crop_box(int width, int height, const RandomResizedCropParams& params, Rng& rng) {
  HOTPATH_CHECK(width > 0 && height > 0, "random_resized_crop_box: image size ", width, "x", height,
                " must be positive");
  HOTPATH_CHECK(params.scale_min > 0 && params.scale_min <= params.scale_max, "random_resized_crop_box: scale range [",
                params.scale_min, ", ", params.scale_max, "] must be positive and ordered");
  HOTPATH_CHECK(params.ratio_min > 0 && params.ratio_min <= params.ratio_max, "random_resized_crop_box: ratio range [",
                params.ratio_min, ", ", params.ratio_max, "] must be positive and ordered");
  const double area = static_cast<double>(width) * height;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const auto [w, h] = draw_sides(area, params.scale_min, params.scale_max, params.ratio_min, params.ratio_max, rng);
    if (0 < w && w <= width && 0 < h && h <= height) {
      const auto top = rng.uniform_int(0, height - h);
      const auto left = rng.uniform_int(0, width - w);
      return Box{static_cast<double>(left), static_cast<double>(top), static_cast<double>(w), static_cast<double>(h),
                 /*crop_first=*/true};
    }
  }
  // Fallback: the centred crop of the whole image with the ratio clamped into range.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int w = width;
  int h = height;
  if (in_ratio < params.ratio_min) {
    h = round_half_even(w / params.ratio_min);
  } else if (in_ratio > params.ratio_max) {
    w = round_half_even(h * params.ratio_max);
  }
  // torchvision would produce an empty crop for a 1-pixel side and extreme ratios; keep one pixel.
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  return Box{static_cast<double>((width - w) / 2), static_cast<double>((height - h) / 2), static_cast<double>(w),
             static_cast<double>(h), /*crop_first=*/true};
}

Box resize_center_crop_box(int width, int height, int resize_shorter, int crop) {
  HOTPATH_CHECK(width > 0 && height > 0, "resize_center_crop_box: image size ", width, "x", height, " must be positive");
  HOTPATH_CHECK(resize_shorter > 0 && crop > 0 && crop <= resize_shorter, "resize_center_crop_box: crop ", crop,
                " must be positive and at most the resized shorter side ", resize_shorter);
  // _compute_resized_output_size: the short side becomes `resize_shorter`, the long side
  // int(size * long / short) (true division, then truncation).
  const bool portrait = width <= height;
  const int short_side = portrait ? width : height;
  const int long_side = portrait ? height : width;
  const auto new_long = static_cast<int>(static_cast<double>(static_cast<std::int64_t>(resize_shorter) * long_side) /
                                         static_cast<double>(short_side));
  const int new_w = portrait ? resize_shorter : new_long;
  const int new_h = portrait ? new_long : resize_shorter;
  // center_crop: crop_top = int(round((h - crop) / 2.0)), crop_left likewise.
  const int top = round_half_even((new_h - crop) / 2.0);
  const int left = round_half_even((new_w - crop) / 2.0);
  const double sx = static_cast<double>(width) / new_w;
  const double sy = static_cast<double>(height) / new_h;
  return Box{left * sx, top * sy, crop * sx, crop * sy, /*crop_first=*/false};
}

PixelRect random_erasing_rect(int width, int height, const RandomErasingParams& params, Rng& rng) {
  HOTPATH_CHECK(width > 0 && height > 0, "random_erasing_rect: image size ", width, "x", height, " must be positive");
  HOTPATH_CHECK(params.probability >= 0 && params.probability <= 1, "random_erasing_rect: probability ",
                params.probability, " must be in [0, 1]");
  HOTPATH_CHECK(params.scale_min >= 0 && params.scale_min <= params.scale_max && params.scale_max <= 1,
                "random_erasing_rect: scale range [", params.scale_min, ", ", params.scale_max,
                "] must be ordered within [0, 1]");
  HOTPATH_CHECK(params.ratio_min > 0 && params.ratio_min <= params.ratio_max, "random_erasing_rect: ratio range [",
                params.ratio_min, ", ", params.ratio_max, "] must be positive and ordered");
  if (params.probability <= 0 || !rng.bernoulli(params.probability)) return {};
  const double area = static_cast<double>(width) * height;
  for (int attempt = 0; attempt < 10; ++attempt) {
    // RandomErasing's ratio is height / width (RandomResizedCrop's is width / height).
    const auto [h, w] = draw_sides(area, params.scale_min, params.scale_max, params.ratio_min, params.ratio_max, rng);
    if (!(h < height && w < width)) continue;
    const auto top = static_cast<int>(rng.uniform_int(0, height - h));
    const auto left = static_cast<int>(rng.uniform_int(0, width - w));
    return PixelRect{left, top, left + w, top + h};
  }
  return {};
}

}  // namespace hotpath::data
