// hotpath/data/kernels/resample.h — PIL-compatible antialiased resampling of uint8 images.
//
// Separable two-pass filter with PIL's coefficients (ImagingResample: support scaled by the
// downscale factor, weights normalised per output pixel, a `box` of the source in fractional
// pixels, 22-bit fixed point), so results match PIL's `Image.resize(size, BILINEAR, box=...)`.
//
//   ResampleScratch scratch;
//   resample_bilinear(src, src_w, src_h, src_stride, 3, box, dst, 224, 224, scratch);
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hotpath::data {

// A region of the source image in source pixel coordinates (may be fractional).
struct Box {
  double x = 0;
  double y = 0;
  double w = 0;
  double h = 0;
  // Where the filter may read near the box edges.
  //   false: anywhere in the image, like PIL `resize(size, box=...)` (and hence torchvision's
  //          Resize + CenterCrop, which resizes the whole image and then crops);
  //   true:  only inside the box (rounded out to whole pixels), like cropping first and resizing
  //          the crop (torchvision's RandomResizedCrop on PIL images).
  bool crop_first = false;
};

// Columns [x0, x1) and rows [y0, y1) of an image.
struct PixelRect {
  int x0 = 0;
  int y0 = 0;
  int x1 = 0;
  int y1 = 0;
  [[nodiscard]] int width() const { return x1 - x0; }
  [[nodiscard]] int height() const { return y1 - y0; }
};

// Coefficient tables and the intermediate (horizontally filtered) rows, reused across calls.
struct ResampleScratch {
  std::vector<std::int32_t> coeffs;
  std::vector<std::int16_t> packed;                 // coefficients laid out for the AVX2 kernel
  std::vector<std::array<std::int32_t, 4>> pairs;   // the AVX2 kernel's load plan per output pair
  std::vector<std::uint8_t> tmp;
};

// Resamples `box` of a src_w × src_h image with `channels` interleaved uint8 channels to
// dst_w × dst_h (packed rows). The box must lie inside the image and have a positive size.
// 3-channel images take an AVX2 horizontal pass and every image an AVX2 vertical pass where the CPU
// dispatch allows (core/cpu.h, op "resample"); the results are bit-identical to the reference loops.
void resample_bilinear(const std::uint8_t* src, int src_w, int src_h, std::ptrdiff_t src_stride,
                       int channels, const Box& box, std::uint8_t* dst, int dst_w, int dst_h,
                       ResampleScratch& scratch);

// The source pixels resample_bilinear reads for these arguments (its filter footprint).
PixelRect resample_footprint(int src_w, int src_h, const Box& box, int dst_w, int dst_h);

// resample_bilinear when only a window of the source is in memory (a crop-decoded JPEG region):
// `window` points at pixel (rect.x0, rect.y0) of the src_w × src_h image and `rect` must contain
// resample_footprint(). The result is identical to resampling the whole image.
void resample_bilinear_window(const std::uint8_t* window, std::ptrdiff_t stride, const PixelRect& rect,
                              int src_w, int src_h, int channels, const Box& box, std::uint8_t* dst,
                              int dst_w, int dst_h, ResampleScratch& scratch);

}  // namespace hotpath::data
