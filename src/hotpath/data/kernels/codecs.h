// Private to the image kernels: the per-format entry points behind image.h's dispatch
// (jpeg_codec.cpp: libjpeg-turbo; png_codec.cpp: libpng) and the colour conversions they share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hotpath/data/kernels/image.h"

namespace hotpath::data::detail {

ImageInfo jpeg_probe(std::span<const std::byte> bytes, const DecodeLimits& limits);
// jpeg_probe + the end-of-image check jpeg_decode_box_resized makes (a truncated file throws the same message).
ImageInfo jpeg_probe_complete(std::span<const std::byte> bytes, const DecodeLimits& limits);
// Full decode into `pixels` (resized to width * height * channels); returns the size.
ImageInfo jpeg_decode(std::span<const std::byte> bytes, int channels, const DecodeLimits& limits,
                      std::vector<std::uint8_t>& pixels);
void jpeg_decode_box_resized(std::span<const std::byte> bytes, const Box& box, int out_w, int out_h,
                             const DecodeResizeOptions& options, std::uint8_t* dst, DecodeScratch& scratch);
std::vector<std::byte> jpeg_encode(const std::uint8_t* pixels, int width, int height, int channels, int quality);

ImageInfo png_probe(std::span<const std::byte> bytes, const DecodeLimits& limits);
ImageInfo png_decode(std::span<const std::byte> bytes, int channels, const DecodeLimits& limits,
                     std::vector<std::uint8_t>& pixels);
std::vector<std::byte> png_encode(const std::uint8_t* pixels, int width, int height, int channels);

// PIL's convert("L"): L = (R*19595 + G*38470 + B*7471 + 0x8000) >> 16 (ITU-R 601-2 luma).
inline std::uint8_t luma_601(std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  return static_cast<std::uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

// In place: `count` packed RGB pixels to gray (the output trails the input, so it never overtakes it).
inline void rgb_to_gray_in_place(std::uint8_t* pixels, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) pixels[i] = luma_601(pixels[3 * i], pixels[3 * i + 1], pixels[3 * i + 2]);
}

}  // namespace hotpath::data::detail
