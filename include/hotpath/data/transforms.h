// hotpath/data/transforms.h — the image transforms of a classification pipeline.
//
// Crop boxes follow torchvision exactly (RandomResizedCrop.get_params; Resize(shorter side) +
// CenterCrop), expressed as a box in source pixels so the decoder can crop and scale while it
// decodes. store_sample() applies flip and normalisation while writing one sample into its slot
// of a preallocated batch in the requested dtype and layout.
//
//   Rng rng = Rng::for_stream(seed, {epoch, index});
//   Box box = random_resized_crop_box(info.width, info.height, {}, rng);
//   decode_box_resized(bytes, box, 224, 224, {}, hwc, scratch);
//   store_sample(hwc, 224, 224, 3, rng.bernoulli(0.5), kImageNetNorm, StoreFormat{}, slot);
#pragma once

#include <cstdint>

#include "hotpath/core/random.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/data/kernels/resample.h"

namespace hotpath::data {

struct RandomResizedCropParams {
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
};

// torchvision.transforms.RandomResizedCrop.get_params: up to 10 attempts of (area fraction
// ~ U(scale), log-ratio ~ U(log ratio)), w = round(sqrt(area*ratio)), h = round(sqrt(area/ratio)),
// accepted if 0 < w <= width and 0 < h <= height, top-left uniform; else the centre fallback
// (ratio clamped to [ratio_min, ratio_max]). Returns integer pixel boxes like torchvision.
Box random_resized_crop_box(int width, int height, const RandomResizedCropParams& params, Rng& rng);

// torchvision Resize(resize_shorter) followed by CenterCrop(crop), as a box of the source image
// that maps onto the crop × crop output (same sizes and rounding as torchvision on PIL images;
// crop_first unset, since torchvision resizes the whole image before cropping). crop must not
// exceed resize_shorter (torchvision would pad).
Box resize_center_crop_box(int width, int height, int resize_shorter, int crop);

// torchvision.transforms.RandomErasing(p, scale, ratio, value=0) — Zhong et al., "Random Erasing Data
// Augmentation" — placed after Normalize: erased pixels become 0, i.e. the dataset mean.
struct RandomErasingParams {
  double probability = 0.0;  // 0 = off (draws nothing)
  double scale_min = 0.02;   // erased area as a fraction of the image
  double scale_max = 0.33;
  double ratio_min = 0.3;    // height / width of the erased rectangle (log-uniform)
  double ratio_max = 3.3;
};

// RandomErasing.forward + get_params on a width × height image: erase with `probability`, then up to 10
// attempts of (area ~ U(scale), log-ratio ~ U(log ratio)), h = round(sqrt(area·ratio)),
// w = round(sqrt(area/ratio)), accepted if h < height and w < width, top-left uniform. Empty (zero width)
// when the coin says no or no attempt fits (torchvision then returns the image unchanged).
PixelRect random_erasing_rect(int width, int height, const RandomErasingParams& params, Rng& rng);

enum class PixelType { kUInt8, kFloat32, kBFloat16 };
enum class PixelLayout { kCHW, kHWC };

struct Normalization {
  float mean[3] = {0.485f, 0.456f, 0.406f};  // on the [0, 1] scale, like torchvision Normalize
  float std[3] = {0.229f, 0.224f, 0.225f};
};

struct StoreFormat {
  PixelType type = PixelType::kFloat32;
  PixelLayout layout = PixelLayout::kCHW;
  bool normalize = true;  // float/bf16: (x/255 - mean)/std, or x/255 when false; uint8 is stored raw
};

// Writes one packed HWC uint8 image (optionally mirrored left-right) into `dst`, a sample slot of
// width*height*channels elements of `format.type` in `format.layout`. channels is 1 or 3 (gray
// uses mean[0]/std[0]). Float math is x * (1/(255 std)) + (-mean/std), within 1e-6 of
// torchvision's (x/255 - mean)/std; bf16 rounds that float to nearest even.
void store_sample(const std::uint8_t* hwc, int width, int height, int channels, bool flip,
                  const Normalization& norm, const StoreFormat& format, void* dst);

// Fills `rect` of a sample store_sample wrote (same width, height, channels, format) with the mean
// pixel: 0 where the format normalises (torchvision's RandomErasing(value=0) after Normalize), mean
// on the [0, 1] scale for unnormalised float, the nearest uint8 to mean·255 for uint8. rect must lie
// inside the image.
void erase_sample(const PixelRect& rect, int width, int height, int channels, const Normalization& norm,
                  const StoreFormat& format, void* dst);

// The uint8 level nearest mean[channel]·255: what erased pixels hold in a uint8 sample (erase_sample, and the
// device twin's erasing before it normalises).
std::uint8_t mean_pixel_level(const Normalization& norm, int channel);

}  // namespace hotpath::data
