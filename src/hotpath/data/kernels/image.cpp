// Format dispatch and argument checks for the image kernels; the codecs live in jpeg_codec.cpp
// and png_codec.cpp.
#include "hotpath/data/kernels/image.h"

#include <array>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "codecs.h"
#include "hotpath/core/error.h"

namespace hotpath::data {
namespace {

constexpr std::array<unsigned char, 3> kJpegMagic = {0xFF, 0xD8, 0xFF};
constexpr std::array<unsigned char, 8> kPngMagic = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

template <std::size_t N>
bool starts_with(std::span<const std::byte> bytes, const std::array<unsigned char, N>& magic) {
  return bytes.size() >= N && std::memcmp(bytes.data(), magic.data(), N) == 0;
}

// "unknown image format (N bytes, starting 3c 68 74 6d)": what a mislabelled member looks like.
[[noreturn]] void fail_unknown(std::span<const std::byte> bytes) {
  std::ostringstream head;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
    head << (i == 0 ? "" : " ") << std::hex << std::setw(2) << std::setfill('0')
         << static_cast<int>(std::to_integer<unsigned char>(bytes[i]));
  }
  HOTPATH_CHECK(false, "unknown image format (", bytes.size(), " bytes",
                bytes.empty() ? std::string() : ", starting " + head.str(), "); expected JPEG or PNG");
  __builtin_unreachable();
}

void check_channels(int channels) {
  HOTPATH_CHECK(channels == 1 || channels == 3, "decode: channels ", channels, " must be 1 (gray) or 3 (RGB)");
}

}  // namespace

ImageFormat sniff_format(std::span<const std::byte> bytes) {
  if (starts_with(bytes, kJpegMagic)) return ImageFormat::kJpeg;
  if (starts_with(bytes, kPngMagic)) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

ImageInfo probe_image(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  switch (sniff_format(bytes)) {
    case ImageFormat::kJpeg: return detail::jpeg_probe(bytes, limits);
    case ImageFormat::kPng: return detail::png_probe(bytes, limits);
    case ImageFormat::kUnknown: break;
  }
  fail_unknown(bytes);
}

ImageInfo probe_image_complete(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  if (sniff_format(bytes) == ImageFormat::kJpeg) return detail::jpeg_probe_complete(bytes, limits);
  return probe_image(bytes, limits);
}

Image decode_image(std::span<const std::byte> bytes, int channels, const DecodeLimits& limits) {
  check_channels(channels);
  Image image;
  ImageInfo info;
  switch (sniff_format(bytes)) {
    case ImageFormat::kJpeg: info = detail::jpeg_decode(bytes, channels, limits, image.pixels); break;
    case ImageFormat::kPng: info = detail::png_decode(bytes, channels, limits, image.pixels); break;
    case ImageFormat::kUnknown: fail_unknown(bytes);
  }
  image.width = info.width;
  image.height = info.height;
  image.channels = channels;
  return image;
}

void decode_box_resized(std::span<const std::byte> bytes, const Box& box, int out_w, int out_h,
                        const DecodeResizeOptions& options, std::uint8_t* dst, DecodeScratch& scratch) {
  check_channels(options.channels);
  HOTPATH_CHECK(dst != nullptr, "decode_box_resized: null destination");
  HOTPATH_CHECK(out_w > 0 && out_h > 0 && static_cast<std::int64_t>(out_w) * out_h <= options.limits.max_pixels,
                "decode_box_resized: output size ", out_w, "x", out_h, " must be positive and within max_pixels");
  switch (sniff_format(bytes)) {
    case ImageFormat::kJpeg:
      detail::jpeg_decode_box_resized(bytes, box, out_w, out_h, options, dst, scratch);
      return;
    case ImageFormat::kPng: {
      const ImageInfo info = detail::png_decode(bytes, options.channels, options.limits, scratch.pixels);
      scratch.dct_denominator = 1;
      resample_bilinear(scratch.pixels.data(), info.width, info.height,
                        static_cast<std::ptrdiff_t>(info.width) * options.channels, options.channels, box, dst, out_w,
                        out_h, scratch.resample);
      return;
    }
    case ImageFormat::kUnknown: break;
  }
  fail_unknown(bytes);
}

std::vector<std::byte> encode_jpeg(const std::uint8_t* pixels, int width, int height, int channels, int quality) {
  return detail::jpeg_encode(pixels, width, height, channels, quality);
}

std::vector<std::byte> encode_png(const std::uint8_t* pixels, int width, int height, int channels) {
  return detail::png_encode(pixels, width, height, channels);
}

}  // namespace hotpath::data
