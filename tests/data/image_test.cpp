// Image kernels: format sniffing, probing, decoding, crop-and-resize decoding and bad inputs.
// Fixtures are synthetic images encoded by hotpath's own encoders; parity with PIL on real photos
// lives in image_parity_test.cpp.
#include "hotpath/data/kernels/image.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/data/kernels/resample.h"

namespace hotpath::data {
namespace {

// A smooth colour field with some texture: compresses like a photo, exercises every channel.
std::vector<std::uint8_t> synthetic_rgb(int w, int h, int channels = 3) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * channels);
  std::mt19937 gen(42);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        const double v = 128 + 90 * std::sin(0.031 * x * (c + 1) + 0.017 * y) + 20 * std::cos(0.11 * (x + 2 * y)) +
                         static_cast<int>(gen() % 9) - 4;
        px[(static_cast<std::size_t>(y) * w + x) * channels + c] = static_cast<std::uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  }
  return px;
}

std::vector<std::byte> make_jpeg(int w, int h, int channels = 3, int quality = 90) {
  const auto px = synthetic_rgb(w, h, channels);
  return encode_jpeg(px.data(), w, h, channels, quality);
}

double mean_abs_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return a.empty() ? 0 : sum / static_cast<double>(a.size());
}

// Runs fn, expecting hotpath::Error whose message contains `needle`.
template <typename Fn>
void expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected hotpath::Error containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// Big-endian 16-bit at offset.
void put_be16(std::vector<std::byte>& bytes, std::size_t at, int value) {
  bytes[at] = static_cast<std::byte>((value >> 8) & 0xFF);
  bytes[at + 1] = static_cast<std::byte>(value & 0xFF);
}

// Offset of the SOF0/SOF2 marker segment in a JPEG.
std::size_t find_sof(const std::vector<std::byte>& jpeg) {
  for (std::size_t i = 2; i + 9 < jpeg.size(); ++i) {
    const auto b0 = std::to_integer<unsigned>(jpeg[i]);
    const auto b1 = std::to_integer<unsigned>(jpeg[i + 1]);
    if (b0 == 0xFF && (b1 == 0xC0 || b1 == 0xC2)) return i;
  }
  return 0;
}

TEST(ImageFormat, SniffsByMagicBytes) {
  EXPECT_EQ(sniff_format(make_jpeg(8, 8)), ImageFormat::kJpeg);
  const auto px = synthetic_rgb(4, 4);
  EXPECT_EQ(sniff_format(encode_png(px.data(), 4, 4, 3)), ImageFormat::kPng);
  const std::string gif = "GIF89a....";
  EXPECT_EQ(sniff_format(std::as_bytes(std::span(gif))), ImageFormat::kUnknown);
  EXPECT_EQ(sniff_format({}), ImageFormat::kUnknown);
  const std::byte two[] = {std::byte{0xFF}, std::byte{0xD8}};
  EXPECT_EQ(sniff_format(two), ImageFormat::kUnknown);  // too short to be sure
}

TEST(ImageProbe, ReportsSizeAndChannels) {
  const ImageInfo rgb = probe_image(make_jpeg(37, 21));
  EXPECT_EQ(rgb.format, ImageFormat::kJpeg);
  EXPECT_EQ(rgb.width, 37);
  EXPECT_EQ(rgb.height, 21);
  EXPECT_EQ(rgb.channels, 3);
  EXPECT_EQ(probe_image(make_jpeg(5, 6, 1)).channels, 1);

  const auto rgba = synthetic_rgb(9, 7, 4);
  const ImageInfo png = probe_image(encode_png(rgba.data(), 9, 7, 4));
  EXPECT_EQ(png.format, ImageFormat::kPng);
  EXPECT_EQ(png.width, 9);
  EXPECT_EQ(png.height, 7);
  EXPECT_EQ(png.channels, 4);
  const auto gray = synthetic_rgb(3, 2, 1);
  EXPECT_EQ(probe_image(encode_png(gray.data(), 3, 2, 1)).channels, 1);
}

TEST(ImageDecode, JpegRoundTripIsClose) {
  const auto px = synthetic_rgb(64, 48);
  const Image img = decode_image(encode_jpeg(px.data(), 64, 48, 3, 95));
  EXPECT_EQ(img.width, 64);
  EXPECT_EQ(img.height, 48);
  EXPECT_EQ(img.channels, 3);
  EXPECT_LT(mean_abs_diff(img.pixels, px), 4.0);
}

TEST(ImageDecode, GrayJpegReplicatesToRgb) {
  const auto jpeg = make_jpeg(30, 20, 1);
  const Image gray = decode_image(jpeg, 1);
  const Image rgb = decode_image(jpeg, 3);
  ASSERT_EQ(gray.pixels.size(), 30u * 20u);
  ASSERT_EQ(rgb.pixels.size(), 30u * 20u * 3u);
  for (std::size_t i = 0; i < gray.pixels.size(); ++i) {
    ASSERT_EQ(rgb.pixels[3 * i], gray.pixels[i]);
    ASSERT_EQ(rgb.pixels[3 * i + 1], gray.pixels[i]);
    ASSERT_EQ(rgb.pixels[3 * i + 2], gray.pixels[i]);
  }
}

TEST(ImageDecode, PngRoundTripIsExact) {
  const auto rgb = synthetic_rgb(13, 11);
  EXPECT_EQ(decode_image(encode_png(rgb.data(), 13, 11, 3)).pixels, rgb);

  // Alpha is dropped without compositing, like PIL's convert("RGB").
  const auto rgba = synthetic_rgb(13, 11, 4);
  const Image no_alpha = decode_image(encode_png(rgba.data(), 13, 11, 4));
  for (std::size_t i = 0; i < 13u * 11u; ++i) {
    for (int c = 0; c < 3; ++c) ASSERT_EQ(no_alpha.pixels[3 * i + c], rgba[4 * i + c]);
  }

  // Gray replicates to RGB.
  const auto gray = synthetic_rgb(13, 11, 1);
  const Image replicated = decode_image(encode_png(gray.data(), 13, 11, 1));
  for (std::size_t i = 0; i < gray.size(); ++i) ASSERT_EQ(replicated.pixels[3 * i + 1], gray[i]);
}

TEST(ImageDecode, RgbToGrayUsesPilLuma) {
  const auto rgb = synthetic_rgb(10, 10);
  const Image gray = decode_image(encode_png(rgb.data(), 10, 10, 3), 1);
  ASSERT_EQ(gray.channels, 1);
  for (std::size_t i = 0; i < 100; ++i) {
    const int expected = (rgb[3 * i] * 19595 + rgb[3 * i + 1] * 38470 + rgb[3 * i + 2] * 7471 + 0x8000) >> 16;
    ASSERT_EQ(gray.pixels[i], expected);
  }
}

// Without DCT scaling, the crop-during-decode path must give exactly what decoding everything and
// resampling the box gives: same pixels from libjpeg (crop margins absorb the fancy-upsampling
// edge effect), same filter footprint.
void expect_box_decode_equals_full(const std::vector<std::byte>& bytes, int channels, int trials) {
  const Image full = decode_image(bytes, channels);
  std::mt19937 gen(1234);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  DecodeScratch scratch;
  ResampleScratch resample;
  for (int t = 0; t < trials; ++t) {
    const double x = unit(gen) * full.width * 0.8;
    const double y = unit(gen) * full.height * 0.8;
    Box box{x, y, std::max(0.5, unit(gen) * (full.width - x)), std::max(0.5, unit(gen) * (full.height - y)),
            t % 2 == 0};
    if (t % 3 == 0) box = {std::floor(x), std::floor(y), std::floor(box.w) + 1, std::floor(box.h) + 1, t % 2 == 0};
    box.w = std::min(box.w, full.width - box.x);
    box.h = std::min(box.h, full.height - box.y);
    const int out_w = 1 + static_cast<int>(gen() % 120);
    const int out_h = 1 + static_cast<int>(gen() % 120);
    std::vector<std::uint8_t> expected(static_cast<std::size_t>(out_w) * out_h * channels);
    std::vector<std::uint8_t> actual(expected.size());
    resample_bilinear(full.pixels.data(), full.width, full.height, static_cast<std::ptrdiff_t>(full.width) * channels,
                      channels, box, expected.data(), out_w, out_h, resample);
    decode_box_resized(bytes, box, out_w, out_h, {.channels = channels, .allow_dct_scaling = false}, actual.data(),
                       scratch);
    ASSERT_EQ(scratch.dct_denominator, 1);
    ASSERT_EQ(actual, expected) << "trial " << t << " box (" << box.x << ", " << box.y << ", " << box.w << ", "
                                << box.h << ") crop_first=" << box.crop_first << " -> " << out_w << "x" << out_h;
  }
}

TEST(DecodeBoxResized, EqualsFullDecodePlusResample) {
  expect_box_decode_equals_full(make_jpeg(333, 251), 3, 150);  // 4:2:0, sizes not multiples of the MCU
  expect_box_decode_equals_full(make_jpeg(200, 120), 1, 40);
  expect_box_decode_equals_full(make_jpeg(121, 77, 1), 3, 40);  // gray file, RGB output
  const auto px = synthetic_rgb(90, 70);
  expect_box_decode_equals_full(encode_png(px.data(), 90, 70, 3), 3, 30);
}

TEST(DecodeBoxResized, DctScalingStaysCloseToFullResolution) {
  const auto jpeg = make_jpeg(960, 720);
  DecodeScratch scratch;
  std::vector<std::uint8_t> scaled(224 * 224 * 3);
  std::vector<std::uint8_t> exact(scaled.size());
  const Box boxes[] = {{0, 0, 960, 720}, {100, 50, 700, 600}, {333.5, 111.25, 480.5, 460}};
  const int expected_denominators[] = {2, 2, 2};
  for (int i = 0; i < 3; ++i) {
    decode_box_resized(jpeg, boxes[i], 224, 224, {}, scaled.data(), scratch);
    EXPECT_EQ(scratch.dct_denominator, expected_denominators[i]);
    decode_box_resized(jpeg, boxes[i], 224, 224, {.allow_dct_scaling = false}, exact.data(), scratch);
    EXPECT_EQ(scratch.dct_denominator, 1);
    EXPECT_LT(mean_abs_diff(scaled, exact), 1.5) << "box " << i;
  }
  // 1/8 when the box is 8× the output.
  decode_box_resized(jpeg, {0, 0, 960, 720}, 100, 80, {}, scaled.data(), scratch);
  EXPECT_EQ(scratch.dct_denominator, 8);
}

TEST(DecodeBoxResized, RejectsBoxOutsideImage) {
  const auto jpeg = make_jpeg(50, 40);
  DecodeScratch scratch;
  std::vector<std::uint8_t> out(10 * 10 * 3);
  expect_error([&] { decode_box_resized(jpeg, {30, 0, 30, 10}, 10, 10, {}, out.data(), scratch); }, "inside");
  expect_error([&] { decode_box_resized(jpeg, {0, 0, 0, 10}, 10, 10, {}, out.data(), scratch); }, "positive size");
  expect_error([&] { decode_box_resized(jpeg, {0, 0, 10, 10}, 0, 10, {}, out.data(), scratch); }, "output size");
}

TEST(ImageBadInput, TruncatedJpegIsRejected) {
  auto jpeg = make_jpeg(120, 90);
  jpeg.resize(jpeg.size() * 6 / 10);
  expect_error([&] { decode_image(jpeg); }, "Premature end of JPEG file");
  DecodeScratch scratch;
  std::vector<std::uint8_t> out(16 * 16 * 3);
  // Even a box near the top, whose rows are all present, is refused: the file is broken.
  expect_error([&] { decode_box_resized(jpeg, {0, 0, 20, 20}, 16, 16, {}, out.data(), scratch); }, "truncated");
  // Cut inside the headers.
  jpeg.resize(40);
  expect_error([&] { probe_image(jpeg); }, "JPEG");
}

TEST(ImageBadInput, TruncatedPngIsRejected) {
  const auto px = synthetic_rgb(60, 40);
  auto png = encode_png(px.data(), 60, 40, 3);
  png.resize(png.size() - 30);
  expect_error([&] { decode_image(png); }, "truncated");
  png.resize(20);
  expect_error([&] { probe_image(png); }, "truncated");
}

TEST(ImageBadInput, RandomBytesAreRejected) {
  std::mt19937 gen(9);
  std::vector<std::byte> noise(500);
  for (auto& b : noise) b = static_cast<std::byte>(gen());
  noise[0] = std::byte{0x00};
  expect_error([&] { decode_image(noise); }, "unknown image format (500 bytes");
  // Noise behind a JPEG or PNG signature reaches the codec, which refuses it too.
  noise[0] = std::byte{0xFF};
  noise[1] = std::byte{0xD8};
  noise[2] = std::byte{0xFF};
  EXPECT_THROW(decode_image(noise), Error);
  const unsigned char png_magic[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  for (int i = 0; i < 8; ++i) noise[i] = static_cast<std::byte>(png_magic[i]);
  EXPECT_THROW(decode_image(noise), Error);
}

TEST(ImageBadInput, PngWithCorruptIdatIsRejected) {
  const auto px = synthetic_rgb(40, 30);
  const auto png = encode_png(px.data(), 40, 30, 3);
  // IHDR is 8 + 25 bytes; the IDAT chunk follows. Flip a byte inside its data: its CRC no longer matches.
  std::size_t idat = 0;
  for (std::size_t i = 8; i + 4 < png.size(); ++i) {
    if (std::memcmp(png.data() + i, "IDAT", 4) == 0) {
      idat = i;
      break;
    }
  }
  ASSERT_GT(idat, 0u);
  // A damaged CRC: libpng checks it when the chunk ends.
  const std::size_t length = (std::to_integer<std::size_t>(png[idat - 4]) << 24) |
                             (std::to_integer<std::size_t>(png[idat - 3]) << 16) |
                             (std::to_integer<std::size_t>(png[idat - 2]) << 8) | std::to_integer<std::size_t>(png[idat - 1]);
  auto bad_crc = png;
  bad_crc[idat + 4 + length] ^= std::byte{0x01};
  expect_error([&] { decode_image(bad_crc); }, "IDAT: CRC error");
  // Damaged compressed data: zlib notices before the CRC does.
  auto bad_data = png;
  bad_data[idat + 10] ^= std::byte{0x5A};
  expect_error([&] { decode_image(bad_data); }, "PNG decode: IDAT");
}

TEST(ImageBadInput, JpegDecompressionBombIsRejectedBeforeAllocating) {
  auto jpeg = make_jpeg(16, 16);
  const std::size_t sof = find_sof(jpeg);
  ASSERT_GT(sof, 0u);
  put_be16(jpeg, sof + 5, 60000);  // height
  put_be16(jpeg, sof + 7, 60000);  // width
  expect_error([&] { probe_image(jpeg); }, "60000x60000 = 3600000000 pixels");
  expect_error([&] { decode_image(jpeg); }, "decompression bomb");
  DecodeScratch scratch;
  std::vector<std::uint8_t> out(8 * 8 * 3);
  expect_error([&] { decode_box_resized(jpeg, {0, 0, 100, 100}, 8, 8, {}, out.data(), scratch); },
               "decompression bomb");
  // The limit is configurable.
  const auto small = make_jpeg(100, 100);
  expect_error([&] { decode_image(small, 3, {.max_pixels = 9999}); }, "limit of 9999");
  EXPECT_NO_THROW(decode_image(small, 3, {.max_pixels = 10000}));
}

TEST(ImageBadInput, EmptyInputIsRejected) {
  expect_error([] { decode_image({}); }, "unknown image format (0 bytes)");
  expect_error([] { probe_image({}); }, "0 bytes");
}

TEST(ImageBadInput, WrongChannelCountsAreRejected) {
  const auto jpeg = make_jpeg(8, 8);
  expect_error([&] { decode_image(jpeg, 2); }, "channels 2");
  const auto px = synthetic_rgb(8, 8);
  expect_error([&] { encode_jpeg(px.data(), 8, 8, 4, 90); }, "channels 4");
  expect_error([&] { encode_jpeg(px.data(), 8, 8, 3, 0); }, "quality 0");
}

}  // namespace
}  // namespace hotpath::data
