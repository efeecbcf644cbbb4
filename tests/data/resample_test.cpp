// PIL-compatible bilinear resampling: identities, hand-computed results, an independent
// floating-point reference, windows, crop-first boxes and the AVX2 / reference twins.
#include "hotpath/data/kernels/resample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"

namespace hotpath::data {
namespace {

std::vector<std::uint8_t> noise_image(int w, int h, int channels, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * channels);
  for (auto& v : px) v = static_cast<std::uint8_t>(gen());
  return px;
}

std::vector<std::uint8_t> resample(const std::vector<std::uint8_t>& src, int w, int h, int channels, const Box& box,
                                   int out_w, int out_h) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * channels);
  ResampleScratch scratch;
  resample_bilinear(src.data(), w, h, static_cast<std::ptrdiff_t>(w) * channels, channels, box, out.data(), out_w,
                    out_h, scratch);
  return out;
}

// An independent, plain floating-point version of PIL's algorithm (triangle filter widened by
// the downscale factor, weights normalised per output pixel, clamped to the image, horizontal
// then vertical with rounding to uint8 in between). Differs from the fixed-point one by rounding.
std::vector<std::uint8_t> float_reference(const std::vector<std::uint8_t>& src, int w, int h, int channels,
                                          const Box& box, int out_w, int out_h) {
  auto weights = [](double in0, double len, int in_size, int out_size) {
    std::vector<std::vector<std::pair<int, double>>> taps(out_size);
    const double scale = len / out_size;
    const double support = std::max(scale, 1.0);
    for (int i = 0; i < out_size; ++i) {
      const double center = in0 + (i + 0.5) * scale;
      double total = 0;
      for (int x = std::max(0, static_cast<int>(std::floor(center - support)));
           x < std::min(in_size, static_cast<int>(std::ceil(center + support)) + 1); ++x) {
        const double wgt = std::max(0.0, 1.0 - std::abs((x + 0.5 - center) / support));
        if (wgt > 0) taps[i].push_back({x, wgt}), total += wgt;
      }
      for (auto& t : taps[i]) t.second /= total;
    }
    return taps;
  };
  const auto hx = weights(box.x, box.w, w, out_w);
  const auto vy = weights(box.y, box.h, h, out_h);
  std::vector<std::uint8_t> tmp(static_cast<std::size_t>(out_w) * h * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      for (int c = 0; c < channels; ++c) {
        double s = 0;
        for (auto [sx, wgt] : hx[x]) s += wgt * src[(static_cast<std::size_t>(y) * w + sx) * channels + c];
        tmp[(static_cast<std::size_t>(y) * out_w + x) * channels + c] = static_cast<std::uint8_t>(std::clamp(std::lround(s), 0L, 255L));
      }
    }
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * channels);
  for (int y = 0; y < out_h; ++y) {
    for (int i = 0; i < out_w * channels; ++i) {
      double s = 0;
      for (auto [sy, wgt] : vy[y]) s += wgt * tmp[static_cast<std::size_t>(sy) * out_w * channels + i];
      out[static_cast<std::size_t>(y) * out_w * channels + i] = static_cast<std::uint8_t>(std::clamp(std::lround(s), 0L, 255L));
    }
  }
  return out;
}

int max_abs_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  int worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(int{a[i]} - int{b[i]}));
  return worst;
}

TEST(Resample, IdentityBoxReturnsInput) {
  for (int channels : {1, 3}) {
    const auto src = noise_image(37, 23, channels, 1);
    EXPECT_EQ(resample(src, 37, 23, channels, {0, 0, 37, 23}, 37, 23), src);
    // A whole-pixel box at scale 1 is an exact crop.
    const auto crop = resample(src, 37, 23, channels, {5, 3, 20, 10}, 20, 10);
    for (int y = 0; y < 10; ++y) {
      for (int i = 0; i < 20 * channels; ++i) {
        ASSERT_EQ(crop[static_cast<std::size_t>(y) * 20 * channels + i],
                  src[static_cast<std::size_t>(y + 3) * 37 * channels + 5 * channels + i]);
      }
    }
  }
}

TEST(Resample, ConstantImageStaysConstant) {
  std::vector<std::uint8_t> src(64 * 48 * 3, 173);
  const Box boxes[] = {{0, 0, 64, 48}, {3.3, 7.7, 40.1, 20.2}, {10, 10, 5, 5}, {0.5, 0.25, 63.5, 47.75, true}};
  for (const Box& box : boxes) {
    for (auto [w, h] : {std::pair{224, 224}, std::pair{7, 3}, std::pair{64, 1}}) {
      const auto out = resample(src, 64, 48, 3, box, w, h);
      ASSERT_TRUE(std::all_of(out.begin(), out.end(), [](std::uint8_t v) { return v == 173; }))
          << box.x << "," << box.y << " -> " << w << "x" << h;
    }
  }
}

TEST(Resample, DownscaleByTwoUsesTheWidenedTriangle) {
  // Columns alternate 0, 200. At scale 2 the filter covers 4 input pixels with weights 1,3,3,1 / 8,
  // so interior pixels are 100; at the edges the clamped weights renormalise: left 3,3,1 / 7 over
  // (0, 200, 0) = 85.7 -> 86; right 1,3,3 / 7 over (200, 0, 200) = 114.3 -> 114.
  const int w = 16;
  std::vector<std::uint8_t> src(static_cast<std::size_t>(w) * 2);
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < w; ++x) src[static_cast<std::size_t>(y) * w + x] = x % 2 == 0 ? 0 : 200;
  }
  const auto out = resample(src, w, 2, 1, {0, 0, 16, 2}, 8, 2);
  const std::vector<std::uint8_t> row = {86, 100, 100, 100, 100, 100, 100, 114};
  EXPECT_EQ(std::vector<std::uint8_t>(out.begin(), out.begin() + 8), row);
  EXPECT_EQ(std::vector<std::uint8_t>(out.begin() + 8, out.end()), row);
}

TEST(Resample, AgreesWithFloatingPointReference) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int t = 0; t < 60; ++t) {
    const int w = 5 + static_cast<int>(gen() % 120);
    const int h = 5 + static_cast<int>(gen() % 120);
    const auto src = noise_image(w, h, 3, static_cast<unsigned>(t));
    const double x = unit(gen) * w * 0.5;
    const double y = unit(gen) * h * 0.5;
    const Box box{x, y, std::max(1.0, unit(gen) * (w - x)), std::max(1.0, unit(gen) * (h - y))};
    const int out_w = 1 + static_cast<int>(gen() % 100);
    const int out_h = 1 + static_cast<int>(gen() % 100);
    // Fixed point vs double, and the rounded intermediate rows, allow a couple of levels.
    EXPECT_LE(max_abs_diff(resample(src, w, h, 3, box, out_w, out_h), float_reference(src, w, h, 3, box, out_w, out_h)),
              2)
        << "trial " << t;
  }
}

TEST(Resample, WindowGivesTheSameResultAsTheWholeImage) {
  const int w = 120, h = 90;
  const auto src = noise_image(w, h, 3, 7);
  const Box box{30.5, 20.25, 50.5, 40.75};
  const PixelRect need = resample_footprint(w, h, box, 33, 27);
  EXPECT_LE(need.x0, 30);
  EXPECT_GE(need.x1, 81);
  // Copy just a window around the footprint, as the JPEG crop decode does.
  const PixelRect win{need.x0 - 2, need.y0 - 1, need.x1 + 3, need.y1};
  std::vector<std::uint8_t> window(static_cast<std::size_t>(win.width()) * win.height() * 3);
  for (int y = 0; y < win.height(); ++y) {
    std::copy_n(src.begin() + (static_cast<std::ptrdiff_t>(y + win.y0) * w + win.x0) * 3, win.width() * 3,
                window.begin() + static_cast<std::ptrdiff_t>(y) * win.width() * 3);
  }
  std::vector<std::uint8_t> out(33 * 27 * 3);
  ResampleScratch scratch;
  resample_bilinear_window(window.data(), win.width() * 3, win, w, h, 3, box, out.data(), 33, 27, scratch);
  EXPECT_EQ(out, resample(src, w, h, 3, box, 33, 27));
  // A window that misses part of the footprint is refused.
  const PixelRect short_win{need.x0 + 1, need.y0, need.x1, need.y1};
  EXPECT_THROW(resample_bilinear_window(window.data(), win.width() * 3, short_win, w, h, 3, box, out.data(), 33, 27,
                                        scratch),
               Error);
}

TEST(Resample, CropFirstReadsOnlyInsideTheBox) {
  const int w = 64, h = 48;
  auto src = noise_image(w, h, 3, 11);
  const Box box{10, 8, 30, 20, /*crop_first=*/true};
  const auto before = resample(src, w, h, 3, box, 17, 13);
  // Equals resizing the cropped image as a whole (PIL: img.crop(box).resize(size)).
  std::vector<std::uint8_t> crop(30 * 20 * 3);
  for (int y = 0; y < 20; ++y) {
    std::copy_n(src.begin() + (static_cast<std::ptrdiff_t>(y + 8) * w + 10) * 3, 30 * 3,
                crop.begin() + static_cast<std::ptrdiff_t>(y) * 30 * 3);
  }
  EXPECT_EQ(before, resample(crop, 30, 20, 3, {0, 0, 30, 20}, 17, 13));
  // Pixels outside the box do not matter; without crop_first they do.
  for (int x = 0; x < w; ++x) {
    for (int c = 0; c < 3; ++c) src[(7 * static_cast<std::size_t>(w) + x) * 3 + c] ^= 0xFF;  // the row above
  }
  EXPECT_EQ(resample(src, w, h, 3, box, 17, 13), before);
  Box outside = box;
  outside.crop_first = false;
  EXPECT_NE(resample(src, w, h, 3, outside, 17, 13), resample(noise_image(w, h, 3, 11), w, h, 3, outside, 17, 13));
}

TEST(Resample, RejectsBadArguments) {
  const auto src = noise_image(10, 10, 3, 1);
  std::vector<std::uint8_t> out(5 * 5 * 3);
  ResampleScratch scratch;
  EXPECT_THROW(resample_bilinear(src.data(), 10, 10, 30, 3, {5, 5, 6, 2}, out.data(), 5, 5, scratch), Error);
  EXPECT_THROW(resample_bilinear(src.data(), 10, 10, 30, 3, {0, 0, -1, 2}, out.data(), 5, 5, scratch), Error);
  EXPECT_THROW(resample_bilinear(src.data(), 10, 10, 30, 3, {0, 0, NAN, 2}, out.data(), 5, 5, scratch), Error);
  EXPECT_THROW(resample_bilinear(src.data(), 10, 10, 30, 5, {0, 0, 2, 2}, out.data(), 5, 5, scratch), Error);
  EXPECT_THROW(resample_bilinear(src.data(), 10, 10, 30, 3, {0, 0, 2, 2}, out.data(), 0, 5, scratch), Error);
}

// The AVX2 loops (3 channels: both passes; others: the vertical pass) against the reference loops,
// each chosen through the dispatch cap (core/cpu.h).
TEST(Resample, Avx2MatchesReference) {
  cpu::reset_max_isa();
  if (const std::string why = cpu::isa_skip_reason(cpu::Isa::kAvx2); !why.empty()) GTEST_SKIP() << why;
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int t = 0; t < 400; ++t) {
    const int channels = t % 4 == 3 ? 1 + t / 4 % 4 : 3;
    const int w = 1 + static_cast<int>(gen() % 300);
    const int h = 1 + static_cast<int>(gen() % 200);
    const auto src = noise_image(w, h, channels, static_cast<unsigned>(t));
    const double x = unit(gen) * w * 0.9;
    const double y = unit(gen) * h * 0.9;
    const Box box{x, y, std::max(0.01, unit(gen) * (w - x)), std::max(0.01, unit(gen) * (h - y)), t % 2 == 1};
    const int out_w = 1 + static_cast<int>(gen() % 260);
    const int out_h = 1 + static_cast<int>(gen() % 100);
    std::vector<std::uint8_t> fast, reference;
    {
      const cpu::ScopedMaxIsa cap(cpu::Isa::kAvx2);
      fast = resample(src, w, h, channels, box, out_w, out_h);
    }
    {
      const cpu::ScopedMaxIsa cap(cpu::Isa::kScalar);
      reference = resample(src, w, h, channels, box, out_w, out_h);
    }
    ASSERT_EQ(fast, reference) << "trial " << t << ": " << w << "x" << h << "x" << channels << " box (" << x << ", "
                               << y << ", " << box.w << ", " << box.h << ") -> " << out_w << "x" << out_h;
  }
}

}  // namespace
}  // namespace hotpath::data
