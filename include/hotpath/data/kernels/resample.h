// hotpath/data/kernels/resample.h — PIL-compatible antialiased resampling of uint8 images.
//
// Separable two-pass filter with PIL's coefficients (ImagingResample: support scaled by the
// downscale factor, weights normalised per output pixel, a `box` of the source in fractional
// pixels), so results match PIL's `Image.resize(size, BILINEAR, box=...)` to within rounding.
//
//   ResampleScratch scratch;
//   resample_bilinear(src, src_w, src_h, src_stride, 3, box, dst, 224, 224, scratch);
#pragma once

#include <cstdint>
#include <vector>

#include "hotpath/data/kernels/image.h"

namespace hotpath::data {

struct ResampleScratch {
  std::vector<float> weights;
  std::vector<std::int32_t> bounds;
  std::vector<std::uint8_t> tmp;
};

void resample_bilinear(const std::uint8_t* src, int src_w, int src_h, std::ptrdiff_t src_stride,
                       int channels, const Box& box, std::uint8_t* dst, int dst_w, int dst_h,
                       ResampleScratch& scratch);

}  // namespace hotpath::data
