// Crop boxes with torchvision semantics and store_sample (flip, normalise, dtype, layout).
// The distribution of RandomResizedCrop boxes against torchvision's own sampler is checked in
// image_parity_test.cpp (it runs python).
#include "hotpath/data/transforms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"

namespace hotpath::data {
namespace {

bool is_whole(double v) { return v == std::floor(v); }

TEST(RandomResizedCrop, BoxesStayInsideTheImage) {
  for (auto [w, h] : {std::pair{500, 375}, std::pair{375, 500}, std::pair{1, 1}, std::pair{7, 3000}, std::pair{64, 64}}) {
    Rng rng(17);
    for (int i = 0; i < 5000; ++i) {
      const Box b = random_resized_crop_box(w, h, {}, rng);
      ASSERT_TRUE(is_whole(b.x) && is_whole(b.y) && is_whole(b.w) && is_whole(b.h));
      ASSERT_GE(b.x, 0);
      ASSERT_GE(b.y, 0);
      ASSERT_GE(b.w, 1);
      ASSERT_GE(b.h, 1);
      ASSERT_LE(b.x + b.w, w);
      ASSERT_LE(b.y + b.h, h);
      ASSERT_TRUE(b.crop_first);
    }
  }
}

TEST(RandomResizedCrop, AreaAndRatioStayWithinBounds) {
  const RandomResizedCropParams params{.scale_min = 0.2, .scale_max = 0.6, .ratio_min = 0.5, .ratio_max = 2.0};
  Rng rng(5);
  const double area = 640.0 * 480.0;
  for (int i = 0; i < 20000; ++i) {
    const Box b = random_resized_crop_box(640, 480, params, rng);
    // w and h are rounded from sqrt(area * ratio) and sqrt(area / ratio): allow half a pixel each.
    EXPECT_GE((b.w + 0.5) * (b.h + 0.5), params.scale_min * area);
    EXPECT_LE((b.w - 0.5) * (b.h - 0.5), params.scale_max * area);
    EXPECT_GE((b.w + 0.5) / (b.h - 0.5), params.ratio_min);
    EXPECT_LE((b.w - 0.5) / (b.h + 0.5), params.ratio_max);
  }
}

TEST(RandomResizedCrop, FallsBackToTheCentreForExtremeAspectRatios) {
  // No attempt fits a 10-pixel side (the smallest crop is sqrt(0.08 * 10000 * 3/4) = 24.5 tall),
  // so every call takes the fallback: the ratio clamped to 4/3, centred.
  Rng rng(1);
  for (int i = 0; i < 100; ++i) {
    const Box wide = random_resized_crop_box(1000, 10, {}, rng);
    EXPECT_EQ(wide.x, 493);  // (1000 - 13) // 2
    EXPECT_EQ(wide.y, 0);
    EXPECT_EQ(wide.w, 13);  // round(10 * 4/3)
    EXPECT_EQ(wide.h, 10);
    const Box tall = random_resized_crop_box(10, 1000, {}, rng);
    EXPECT_EQ(tall.x, 0);
    EXPECT_EQ(tall.y, 493);
    EXPECT_EQ(tall.w, 10);
    EXPECT_EQ(tall.h, 13);  // round(10 / (3/4))
  }
  // Inside the ratio range the fallback is the whole image.
  const RandomResizedCropParams impossible{.scale_min = 2.0, .scale_max = 3.0};
  const Box whole = random_resized_crop_box(400, 300, impossible, rng);
  EXPECT_EQ(whole.x, 0);
  EXPECT_EQ(whole.y, 0);
  EXPECT_EQ(whole.w, 400);
  EXPECT_EQ(whole.h, 300);
}

TEST(RandomResizedCrop, IsAPureFunctionOfTheStream) {
  Rng a = Rng::for_stream(99, {3, 4});
  Rng b = Rng::for_stream(99, {3, 4});
  Rng c = Rng::for_stream(99, {3, 5});
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const Box ba = random_resized_crop_box(500, 375, {}, a);
    const Box bb = random_resized_crop_box(500, 375, {}, b);
    const Box bc = random_resized_crop_box(500, 375, {}, c);
    EXPECT_TRUE(ba.x == bb.x && ba.y == bb.y && ba.w == bb.w && ba.h == bb.h);
    differ += ba.x != bc.x || ba.w != bc.w;
  }
  EXPECT_GT(differ, 90);
}

TEST(RandomResizedCrop, RejectsBadParameters) {
  Rng rng(1);
  EXPECT_THROW(random_resized_crop_box(0, 10, {}, rng), Error);
  EXPECT_THROW(random_resized_crop_box(10, 10, {.scale_min = 0.5, .scale_max = 0.1}, rng), Error);
  EXPECT_THROW(random_resized_crop_box(10, 10, {.ratio_min = 0}, rng), Error);
}

TEST(ResizeCenterCrop, MatchesTorchvisionSizesAndRounding) {
  // 500x375: Resize(256) -> 341x256 (int(256 * 500 / 375) = 341); CenterCrop(224): top = 16,
  // left = round(58.5) = 58 (Python rounds half to even).
  const Box b = resize_center_crop_box(500, 375, 256, 224);
  EXPECT_DOUBLE_EQ(b.x, 58 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(b.y, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(b.w, 224 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(b.h, 224 * 375.0 / 256);
  EXPECT_FALSE(b.crop_first);
  // Portrait: the width is the short side.
  const Box p = resize_center_crop_box(375, 500, 256, 224);
  EXPECT_DOUBLE_EQ(p.x, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(p.y, 58 * 500.0 / 341);
  // Already at the target size: a plain centre crop.
  const Box same = resize_center_crop_box(256, 300, 256, 224);
  EXPECT_EQ(same.x, 16);
  EXPECT_EQ(same.y, 38);
  EXPECT_EQ(same.w, 224);
  EXPECT_EQ(same.h, 224);
  EXPECT_THROW(resize_center_crop_box(100, 100, 200, 224), Error);
}

// --- RandomErasing ---------------------------------------------------------------------------

TEST(RandomErasing, RectsFitStrictlyInsideWithinScaleAndRatio) {
  const RandomErasingParams params{.probability = 1.0};
  for (auto [w, h] : {std::pair{28, 28}, std::pair{224, 160}, std::pair{5, 40}}) {
    Rng rng(3);
    const double area = static_cast<double>(w) * h;
    for (int i = 0; i < 5000; ++i) {
      const PixelRect r = random_erasing_rect(w, h, params, rng);
      if (r.width() == 0 && r.height() == 0) continue;  // no attempt fitted: torchvision leaves the image
      ASSERT_GE(r.x0, 0);
      ASSERT_GE(r.y0, 0);
      ASSERT_LT(r.width(), w);  // torchvision's condition is strict: h < H and w < W
      ASSERT_LT(r.height(), h);
      ASSERT_LE(r.x1, w);
      ASSERT_LE(r.y1, h);
      if (r.width() == 0 || r.height() == 0) continue;  // a side rounded to 0: nothing erased, as in torchvision
      // Rounded from sqrt(area * ratio) (height) and sqrt(area / ratio) (width): half a pixel each way.
      EXPECT_GE((r.width() + 0.5) * (r.height() + 0.5), params.scale_min * area);
      EXPECT_LE((r.width() - 0.5) * (r.height() - 0.5), params.scale_max * area);
      EXPECT_GE((r.height() + 0.5) / (r.width() - 0.5), params.ratio_min);
      EXPECT_LE((r.height() - 0.5) / (r.width() + 0.5), params.ratio_max);
    }
  }
}

TEST(RandomErasing, ErasesWithTheGivenProbabilityAndDrawsNothingWhenOff) {
  Rng rng(9);
  int erased = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) erased += random_erasing_rect(28, 28, {.probability = 0.25}, rng).width() > 0 ? 1 : 0;
  // Binomial(20000, ~0.25): sd ~61; 28x28 always fits within 10 attempts.
  EXPECT_NEAR(erased, 0.25 * n, 300);
  Rng a(4), b(4);
  EXPECT_EQ(random_erasing_rect(28, 28, {.probability = 0.0}, a).width(), 0);
  EXPECT_EQ(a.next_u64(), b.next_u64());  // probability 0 consumed no draw: the stream is the same
}

TEST(RandomErasing, RejectsBadParameters) {
  Rng rng(1);
  EXPECT_THROW(random_erasing_rect(28, 28, {.probability = 1.5}, rng), Error);
  EXPECT_THROW(random_erasing_rect(28, 28, {.probability = 1, .scale_min = 0.5, .scale_max = 0.2}, rng), Error);
  EXPECT_THROW(random_erasing_rect(28, 28, {.probability = 1, .ratio_min = 0}, rng), Error);
  EXPECT_THROW(random_erasing_rect(0, 28, {.probability = 1}, rng), Error);
}

// --- store_sample ---------------------------------------------------------------------------

// 3x2 RGB image, pixel (x, y) channel c = 10 * (3 * y + x) + c.
std::vector<std::uint8_t> tiny_image() {
  std::vector<std::uint8_t> px(3 * 2 * 3);
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 3; ++x) {
      for (int c = 0; c < 3; ++c) px[(y * 3 + x) * 3 + c] = static_cast<std::uint8_t>(10 * (3 * y + x) + c);
    }
  }
  return px;
}

int source_value(int x, int y, int c, bool flip) { return 10 * (3 * y + (flip ? 2 - x : x)) + c; }

TEST(StoreSample, Uint8LayoutsAndFlip) {
  const auto img = tiny_image();
  for (bool flip : {false, true}) {
    std::vector<std::uint8_t> chw(18), hwc(18);
    store_sample(img.data(), 3, 2, 3, flip, {}, {.type = PixelType::kUInt8, .layout = PixelLayout::kCHW}, chw.data());
    store_sample(img.data(), 3, 2, 3, flip, {}, {.type = PixelType::kUInt8, .layout = PixelLayout::kHWC}, hwc.data());
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 3; ++x) {
        for (int c = 0; c < 3; ++c) {
          EXPECT_EQ(chw[c * 6 + y * 3 + x], source_value(x, y, c, flip));
          EXPECT_EQ(hwc[(y * 3 + x) * 3 + c], source_value(x, y, c, flip));
        }
      }
    }
  }
}

TEST(StoreSample, Float32NormalisesLikeTorchvision) {
  const auto img = tiny_image();
  const Normalization norm;  // ImageNet mean/std
  for (bool flip : {false, true}) {
    for (PixelLayout layout : {PixelLayout::kCHW, PixelLayout::kHWC}) {
      std::vector<float> out(18);
      store_sample(img.data(), 3, 2, 3, flip, norm, {.type = PixelType::kFloat32, .layout = layout}, out.data());
      for (int y = 0; y < 2; ++y) {
        for (int x = 0; x < 3; ++x) {
          for (int c = 0; c < 3; ++c) {
            // torchvision: ToTensor divides by 255, Normalize subtracts the mean and divides by std.
            const float expected = (static_cast<float>(source_value(x, y, c, flip)) / 255.0f - norm.mean[c]) / norm.std[c];
            const float got = layout == PixelLayout::kCHW ? out[c * 6 + y * 3 + x] : out[(y * 3 + x) * 3 + c];
            EXPECT_NEAR(got, expected, 1e-6) << x << "," << y << "," << c;
          }
        }
      }
    }
  }
  std::vector<float> raw(18);
  store_sample(img.data(), 3, 2, 3, false, norm, {.type = PixelType::kFloat32, .normalize = false}, raw.data());
  EXPECT_FLOAT_EQ(raw[6 + 4], 41.0f / 255.0f);  // without normalize: x/255 (channel 1 of pixel (1, 1) is 41)
}

// Reference bf16 rounding: the nearer of the two bf16 neighbours, ties to the even one.
std::uint16_t reference_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const std::uint32_t down = bits & 0xFFFF0000u;
  const std::uint32_t up = down + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &down, 4);
  std::memcpy(&hi, &up, 4);
  const double dlo = std::abs(static_cast<double>(f) - lo);
  const double dhi = std::abs(static_cast<double>(hi) - f);
  if (dlo < dhi) return static_cast<std::uint16_t>(down >> 16);
  if (dhi < dlo) return static_cast<std::uint16_t>(up >> 16);
  return static_cast<std::uint16_t>(((down >> 16) & 1u) == 0 ? down >> 16 : up >> 16);
}

TEST(StoreSample, BFloat16RoundsToNearestEven) {
  // std = 256/255 makes the scale exactly 2^-8; mean = -std makes the bias exactly 1. Then
  // x = 1 gives 1 + 2^-8 (bf16 tie, rounds down to the even 1.0) and x = 3 gives 1 + 3 * 2^-8
  // (tie, rounds up to the even 1 + 2^-6).
  Normalization norm;
  for (int c = 0; c < 3; ++c) {
    norm.std[c] = 256.0f / 255.0f;
    norm.mean[c] = -norm.std[c];
  }
  ASSERT_EQ(255.0f * norm.std[0], 256.0f);
  const std::uint8_t px[] = {1, 3, 200};
  std::uint16_t out[3];
  store_sample(px, 1, 1, 3, false, norm, {.type = PixelType::kBFloat16, .layout = PixelLayout::kHWC}, out);
  EXPECT_EQ(out[0], 0x3F80);
  EXPECT_EQ(out[1], 0x3F82);
  // And against the reference rounding on every byte value with ImageNet normalisation.
  std::vector<std::uint8_t> all(256 * 3);
  for (int i = 0; i < 256 * 3; ++i) all[i] = static_cast<std::uint8_t>(i / 3);
  std::vector<std::uint16_t> bf(all.size());
  std::vector<float> f32(all.size());
  const Normalization imagenet;
  store_sample(all.data(), 256, 1, 3, false, imagenet, {.type = PixelType::kBFloat16, .layout = PixelLayout::kHWC}, bf.data());
  store_sample(all.data(), 256, 1, 3, false, imagenet, {.type = PixelType::kFloat32, .layout = PixelLayout::kHWC}, f32.data());
  for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(bf[i], reference_bf16(f32[i])) << i;
}

TEST(StoreSample, GrayUsesTheFirstChannelStatistics) {
  const std::uint8_t px[] = {0, 255};
  float out[2];
  const Normalization norm;
  store_sample(px, 2, 1, 1, true, norm, {}, out);
  EXPECT_NEAR(out[0], (1.0f - norm.mean[0]) / norm.std[0], 1e-6);  // flipped
  EXPECT_NEAR(out[1], (0.0f - norm.mean[0]) / norm.std[0], 1e-6);
}

TEST(StoreSample, Avx2MatchesReference) {
  cpu::reset_max_isa();
  if (const std::string why = cpu::isa_skip_reason(cpu::Isa::kAvx2); !why.empty()) GTEST_SKIP() << why;
  std::mt19937 gen(8);
  for (int t = 0; t < 60; ++t) {
    const int w = 1 + static_cast<int>(gen() % 300);
    const int h = 1 + static_cast<int>(gen() % 5);
    std::vector<std::uint8_t> img(static_cast<std::size_t>(w) * h * 3);
    for (auto& v : img) v = static_cast<std::uint8_t>(gen());
    for (PixelType type : {PixelType::kUInt8, PixelType::kFloat32, PixelType::kBFloat16}) {
      for (PixelLayout layout : {PixelLayout::kCHW, PixelLayout::kHWC}) {
        for (bool flip : {false, true}) {
          std::vector<std::uint8_t> fast(img.size() * 4), reference(img.size() * 4);
          const StoreFormat format{.type = type, .layout = layout};
          {
            const cpu::ScopedMaxIsa cap(cpu::Isa::kAvx2);
            store_sample(img.data(), w, h, 3, flip, {}, format, fast.data());
          }
          {
            const cpu::ScopedMaxIsa cap(cpu::Isa::kScalar);
            store_sample(img.data(), w, h, 3, flip, {}, format, reference.data());
          }
          ASSERT_EQ(fast, reference) << w << "x" << h << " type " << static_cast<int>(type) << " layout "
                                     << static_cast<int>(layout) << " flip " << flip;
        }
      }
    }
  }
}

TEST(StoreSample, RejectsBadArguments) {
  const std::uint8_t px[3] = {};
  float out[3];
  EXPECT_THROW(store_sample(px, 1, 1, 2, false, {}, {}, out), Error);
  EXPECT_THROW(store_sample(px, 0, 1, 3, false, {}, {}, out), Error);
  Normalization zero_std;
  zero_std.std[1] = 0;
  EXPECT_THROW(store_sample(px, 1, 1, 3, false, zero_std, {}, out), Error);
}

// erase_sample: the rectangle becomes the mean pixel in every format and layout, nothing else changes.
TEST(EraseSample, FillsTheRectangleWithTheMeanPixelInEveryFormat) {
  const auto img = tiny_image();  // 3x2 RGB
  const Normalization norm;       // ImageNet statistics
  const PixelRect rect{1, 0, 3, 1};  // columns 1-2 of row 0
  auto inside = [&](int x, int y) { return x >= rect.x0 && x < rect.x1 && y >= rect.y0 && y < rect.y1; };
  for (PixelLayout layout : {PixelLayout::kCHW, PixelLayout::kHWC}) {
    auto at = [&](int x, int y, int c) { return layout == PixelLayout::kHWC ? (y * 3 + x) * 3 + c : c * 6 + y * 3 + x; };
    {
      const StoreFormat f{.type = PixelType::kFloat32, .layout = layout};
      std::vector<float> plain(18), erased(18);
      store_sample(img.data(), 3, 2, 3, false, norm, f, plain.data());
      store_sample(img.data(), 3, 2, 3, false, norm, f, erased.data());
      erase_sample(rect, 3, 2, 3, norm, f, erased.data());
      for (int y = 0; y < 2; ++y) {
        for (int x = 0; x < 3; ++x) {
          for (int c = 0; c < 3; ++c) EXPECT_EQ(erased[at(x, y, c)], inside(x, y) ? 0.0f : plain[at(x, y, c)]);
        }
      }
      const StoreFormat raw{.type = PixelType::kFloat32, .layout = layout, .normalize = false};
      erase_sample(rect, 3, 2, 3, norm, raw, erased.data());
      EXPECT_EQ(erased[at(2, 0, 1)], norm.mean[1]);  // unnormalised float: the mean on the [0, 1] scale
    }
    {
      const StoreFormat f{.type = PixelType::kBFloat16, .layout = layout};
      std::vector<std::uint16_t> out(18, 0xFFFF);
      erase_sample(rect, 3, 2, 3, norm, f, out.data());
      EXPECT_EQ(out[at(1, 0, 2)], 0);       // bf16 zero
      EXPECT_EQ(out[at(0, 0, 2)], 0xFFFF);  // outside: untouched
    }
    {
      const StoreFormat f{.type = PixelType::kUInt8, .layout = layout};
      std::vector<std::uint8_t> out(18, 255);
      erase_sample(rect, 3, 2, 3, norm, f, out.data());
      // uint8 (a device normalises later): the level nearest mean·255 — 124, 116, 104 for ImageNet's mean.
      EXPECT_EQ(out[at(1, 0, 0)], 124);
      EXPECT_EQ(out[at(2, 0, 1)], 116);
      EXPECT_EQ(out[at(2, 0, 2)], 104);
      EXPECT_EQ(out[at(1, 1, 0)], 255);
    }
  }
  float out[18] = {};
  EXPECT_THROW(erase_sample(PixelRect{2, 0, 4, 1}, 3, 2, 3, norm, {}, out), Error);  // past the right edge
  EXPECT_NO_THROW(erase_sample(PixelRect{}, 3, 2, 3, norm, {}, out));                 // empty: nothing to do
}

}  // namespace
}  // namespace hotpath::data
