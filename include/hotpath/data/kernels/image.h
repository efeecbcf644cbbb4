// hotpath/data/kernels/image.h — stateless image kernels: probe, decode, decode-crop-resize, encode.
//
// JPEG goes through libjpeg-turbo, PNG through libpng. Every function takes the encoded bytes,
// checks them (format, dimensions against DecodeLimits, truncation, corrupt data) and throws
// hotpath::Error with the reason; callers add "shard:offset:member" context. Nothing aborts,
// longjmps past C++ frames or allocates without bound.
//
//   auto info = probe_image(bytes, {});                       // format, size, channels
//   decode_box_resized(bytes, {.x = 10, .y = 20, .w = 300, .h = 200}, 224, 224,
//                      {.channels = 3}, dst_hwc, scratch);   // crop + resize during decode
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hotpath/data/kernels/resample.h"  // Box, ResampleScratch

namespace hotpath::data {

enum class ImageFormat { kUnknown, kJpeg, kPng };
ImageFormat sniff_format(std::span<const std::byte> bytes);  // by magic bytes, not by extension

struct DecodeLimits {
  // Decompression-bomb guard: images whose header claims more pixels are refused before any
  // pixel memory is allocated. Default matches PIL's hard limit (2 × Image.MAX_IMAGE_PIXELS).
  std::int64_t max_pixels = 178956970;
};

struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0;
  int height = 0;
  int channels = 0;  // in the file: 1 (gray), 2 (gray+alpha), 3 (RGB/YCbCr), 4 (RGBA/CMYK)
};

ImageInfo probe_image(std::span<const std::byte> bytes, const DecodeLimits& limits = {});
// probe_image, and for JPEG the check decode_box_resized makes that an end-of-image marker follows the scan data
// (a truncated file throws the same message): for callers whose decoder reads the file elsewhere (nvJPEG).
ImageInfo probe_image_complete(std::span<const std::byte> bytes, const DecodeLimits& limits = {});

// A decoded image, rows packed (stride = width * channels).
struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;  // 1 or 3
  std::vector<std::uint8_t> pixels;
};

// Full-size decode to `channels` (1 = gray, 3 = RGB; gray → RGB replicates, RGB → gray uses
// the JPEG/ITU-R 601 luma weights like PIL's convert("L"); alpha is dropped like PIL's convert("RGB")).
Image decode_image(std::span<const std::byte> bytes, int channels = 3, const DecodeLimits& limits = {});

struct DecodeResizeOptions {
  int channels = 3;
  // JPEG: decode at 1/2, 1/4 or 1/8 scale in the DCT domain when the box at that scale still
  // has at least out_w × out_h pixels (quality stays that of a downscale; speed goes up).
  bool allow_dct_scaling = true;
  DecodeLimits limits{};
};

// Per-thread scratch memory reused across calls (no allocation in steady state).
struct DecodeScratch {
  std::vector<std::uint8_t> pixels;  // the decoded region
  ResampleScratch resample;
  int dct_denominator = 1;  // JPEG DCT scale 1/N the last call decoded at (1 = full size)
};

// Decodes only the part of the image under `box` (JPEG: jpeg_crop_scanline / jpeg_skip_scanlines)
// and resamples it to out_w × out_h with PIL's antialiased bilinear filter (the same result as
// PIL `img.resize((out_w, out_h), BILINEAR, box=...)`, or `img.crop(box).resize(...)` when
// box.crop_first), writing packed HWC uint8 to `dst` (out_w * out_h * channels bytes). The box must
// lie inside the image. Without DCT scaling the result equals decode_image + resample_bilinear.
void decode_box_resized(std::span<const std::byte> bytes, const Box& box, int out_w, int out_h,
                        const DecodeResizeOptions& options, std::uint8_t* dst, DecodeScratch& scratch);

// Encoders for packing/re-encoding. JPEG uses 4:2:0 subsampling for RGB (like PIL's default).
std::vector<std::byte> encode_jpeg(const std::uint8_t* pixels, int width, int height, int channels, int quality);
std::vector<std::byte> encode_png(const std::uint8_t* pixels, int width, int height, int channels);

}  // namespace hotpath::data
