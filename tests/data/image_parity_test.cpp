// Parity of the image kernels with the python peers: JPEG/PNG decode vs PIL, resampling vs PIL's
// resize(box=...), the eval transform vs torchvision (Resize 256 + CenterCrop 224), the train crop
// vs PIL crop + resize, and the box distributions of RandomResizedCrop and RandomErasing vs torchvision's
// get_params.
// Photos come from Debian's wallpaper packages, cut down by tests/oracles/ref_image.py so the test stays fast.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hotpath/data/kernels/image.h"
#include "hotpath/data/kernels/resample.h"
#include "hotpath/data/transforms.h"
#include "support/test_support.h"

namespace hotpath::data {
namespace {

using nlohmann::json;
using test::TempDir;

struct Photo {
  std::string name;
  std::string path;
  int width;
  int height;
};

std::string ref_script() { return test::source_path("tests/oracles/ref_image.py"); }

std::vector<Photo> make_photos(const TempDir& dir) {
  const json manifest = json::parse(test::run_python(ref_script(), {"photos", dir.path().string()}));
  std::vector<Photo> photos;
  for (const auto& p : manifest) photos.push_back({p["name"], p["path"], p["width"], p["height"]});
  return photos;
}

json run_jobs(const TempDir& dir, const json& jobs) {
  const std::string path = dir.file("jobs.json");
  test::write_file(path, jobs.dump());
  return json::parse(test::run_python(ref_script(), {"run", path}));
}

std::vector<std::uint8_t> read_raw(const std::string& path) {
  const auto bytes = test::read_bytes(path);
  std::vector<std::uint8_t> out(bytes.size());
  std::transform(bytes.begin(), bytes.end(), out.begin(), [](std::byte b) { return std::to_integer<std::uint8_t>(b); });
  return out;
}

struct Diff {
  double mean = 0;
  int max = 0;
};

Diff compare(const std::vector<std::uint8_t>& ours, const std::vector<std::uint8_t>& theirs) {
  EXPECT_EQ(ours.size(), theirs.size());
  Diff d;
  const std::size_t n = std::min(ours.size(), theirs.size());
  for (std::size_t i = 0; i < n; ++i) {
    const int e = std::abs(int{ours[i]} - int{theirs[i]});
    d.mean += e;
    d.max = std::max(d.max, e);
  }
  d.mean = n == 0 ? 0 : d.mean / static_cast<double>(n);
  return d;
}

std::vector<std::uint8_t> decode_box(const std::string& path, const Box& box, int w, int h, bool dct_scaling,
                                     int channels = 3) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(w) * h * channels);
  DecodeScratch scratch;
  decode_box_resized(test::read_bytes(path), box, w, h, {.channels = channels, .allow_dct_scaling = dct_scaling},
                     out.data(), scratch);
  return out;
}

TEST(ImageParity, JpegDecodeMatchesPil) {
  TempDir dir;
  const auto photos = make_photos(dir);
  json jobs = json::array();
  for (const auto& p : photos) jobs.push_back({{"op", "decode"}, {"src", p.path}, {"out", p.path + ".pil"}, {"mode", "RGB"}});
  jobs.push_back({{"op", "decode"}, {"src", photos[2].path}, {"out", photos[2].path + ".pil_l"}, {"mode", "L"}});
  run_jobs(dir, jobs);
  for (const auto& p : photos) {
    const Image ours = decode_image(test::read_bytes(p.path));
    ASSERT_EQ(ours.width, p.width) << p.name;
    ASSERT_EQ(ours.height, p.height) << p.name;
    const Diff d = compare(ours.pixels, read_raw(p.path + ".pil"));
    std::printf("decode %-14s %4dx%-4d mean abs diff %.4f, max %d\n", p.name.c_str(), p.width, p.height, d.mean, d.max);
    EXPECT_LE(d.mean, 1.0) << p.name;
  }
  ASSERT_EQ(photos[2].name, "c_gray.jpg");
  const Diff gray = compare(decode_image(test::read_bytes(photos[2].path), 1).pixels, read_raw(photos[2].path + ".pil_l"));
  EXPECT_LE(gray.mean, 1.0);
}

TEST(ImageParity, PngDecodeMatchesPilExactly) {
  TempDir dir;
  const json pngs = json::parse(test::run_python(ref_script(), {"pngs", dir.path().string()}));
  json jobs = json::array();
  for (const auto& p : pngs) {
    jobs.push_back({{"op", "decode"}, {"src", p["path"]}, {"out", p["path"].get<std::string>() + ".ref"}, {"mode", p["expect"]}});
  }
  run_jobs(dir, jobs);
  for (const auto& p : pngs) {
    const std::string path = p["path"];
    const Diff d = compare(decode_image(test::read_bytes(path)).pixels, read_raw(path + ".ref"));
    EXPECT_EQ(d.max, 0) << p["name"] << " (mean abs diff " << d.mean << ")";
  }
}

TEST(ImageParity, ResampleMatchesPilResizeWithBox) {
  TempDir dir;
  const auto photos = make_photos(dir);
  struct Case {
    int photo;
    Box box;
    int w, h;
    const char* mode;
  };
  const std::vector<Case> cases = {
      {0, {0, 0, 640, 480}, 224, 224, "RGB"},          {0, {10.5, 20.25, 300.7, 200.1}, 224, 224, "RGB"},
      {0, {100, 100, 50, 40}, 224, 168, "RGB"},        {0, {0, 0, 640, 480}, 213, 160, "RGB"},
      {4, {3.3, 4.4, 480.5, 300.3}, 97, 61, "RGB"},    {4, {0.7, 0, 500.3, 333}, 501, 333, "RGB"},
      {2, {17.25, 33.5, 400.5, 500.75}, 224, 224, "L"}, {6, {100, 80, 1400, 1000}, 224, 224, "RGB"},
      // Pillow runs the vertical pass first here (it removes many more rows than columns).
      {4, {0.5, 3.2, 499.5, 320.7}, 510, 100, "RGB"},   {3, {0, 0, 500, 375}, 480, 120, "RGB"},
  };
  json jobs = json::array();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    jobs.push_back({{"op", "resize"},
                    {"src", photos[c.photo].path},
                    {"out", dir.file("resize" + std::to_string(i))},
                    {"size", {c.w, c.h}},
                    {"box", {c.box.x, c.box.y, c.box.x + c.box.w, c.box.y + c.box.h}},
                    {"mode", c.mode}});
  }
  run_jobs(dir, jobs);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int channels = std::string(c.mode) == "L" ? 1 : 3;
    const Image src = decode_image(test::read_bytes(photos[c.photo].path), channels);
    std::vector<std::uint8_t> ours(static_cast<std::size_t>(c.w) * c.h * channels);
    ResampleScratch scratch;
    resample_bilinear(src.pixels.data(), src.width, src.height, static_cast<std::ptrdiff_t>(src.width) * channels,
                      channels, c.box, ours.data(), c.w, c.h, scratch);
    const Diff d = compare(ours, read_raw(dir.file("resize" + std::to_string(i))));
    std::printf("resize case %zu: mean abs diff %.5f, max %d\n", i, d.mean, d.max);
    EXPECT_LE(d.max, 1) << "case " << i;
    EXPECT_LE(d.mean, 0.01) << "case " << i;
  }
}

TEST(ImageParity, TrainCropMatchesPilCropThenResize) {
  TempDir dir;
  const auto photos = make_photos(dir);
  std::vector<std::pair<int, Box>> cases;
  Rng rng(2024);
  for (int photo : {0, 1, 3, 4, 6, 7}) {
    for (int i = 0; i < 4; ++i) cases.push_back({photo, random_resized_crop_box(photos[photo].width, photos[photo].height, {}, rng)});
  }
  json jobs = json::array();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Box& b = cases[i].second;
    jobs.push_back({{"op", "crop_resize"},
                    {"src", photos[cases[i].first].path},
                    {"out", dir.file("crop" + std::to_string(i))},
                    {"size", {224, 224}},
                    {"crop", {b.x, b.y, b.x + b.w, b.y + b.h}}});
  }
  run_jobs(dir, jobs);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [photo, box] = cases[i];
    const auto theirs = read_raw(dir.file("crop" + std::to_string(i)));
    const Diff exact = compare(decode_box(photos[photo].path, box, 224, 224, false), theirs);
    const Diff scaled = compare(decode_box(photos[photo].path, box, 224, 224, true), theirs);
    std::printf("crop %2zu %-14s box %4.0f %4.0f %4.0f %4.0f: mean abs diff %.4f (max %d), with DCT scaling %.4f\n", i,
                photos[photo].name.c_str(), box.x, box.y, box.w, box.h, exact.mean, exact.max, scaled.mean);
    EXPECT_LE(exact.max, 1) << "case " << i;
    EXPECT_LE(exact.mean, 0.01) << "case " << i;
    // DCT scaling trades exactness for speed; it must stay a close approximation.
    EXPECT_LE(scaled.mean, 3.0) << "case " << i;
  }
}

TEST(ImageParity, EvalTransformMatchesTorchvision) {
  TempDir dir;
  const auto photos = make_photos(dir);
  json jobs = json::array();
  for (const auto& p : photos) {
    jobs.push_back({{"op", "eval"}, {"src", p.path}, {"out", p.path + ".eval"}, {"resize", 256}, {"crop", 224}});
  }
  run_jobs(dir, jobs);
  for (const auto& p : photos) {
    const Box box = resize_center_crop_box(p.width, p.height, 256, 224);
    const auto theirs = read_raw(p.path + ".eval");
    const Diff exact = compare(decode_box(p.path, box, 224, 224, false), theirs);
    const Diff scaled = compare(decode_box(p.path, box, 224, 224, true), theirs);
    std::printf("eval %-14s %4dx%-4d mean abs diff %.4f (max %d), with DCT scaling %.4f (max %d)\n", p.name.c_str(),
                p.width, p.height, exact.mean, exact.max, scaled.mean, scaled.max);
    EXPECT_LE(exact.mean, 1.0) << p.name;
    EXPECT_LE(scaled.mean, 2.0) << p.name;
  }
}

// Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs.
double ks_statistic(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::size_t i = 0, j = 0;
  double d = 0;
  while (i < a.size() && j < b.size()) {
    const double v = std::min(a[i], b[j]);
    while (i < a.size() && a[i] == v) ++i;
    while (j < b.size() && b[j] == v) ++j;
    d = std::max(d, std::abs(static_cast<double>(i) / a.size() - static_cast<double>(j) / b.size()));
  }
  return d;
}

// Critical value of the two-sample KS test at alpha = 0.001 for samples of a and b draws: 1.95 sqrt((a + b) / (a b)).
double critical(std::size_t a, std::size_t b) {
  return 1.95 * std::sqrt(static_cast<double>(a + b) / (static_cast<double>(a) * b));
}

TEST(ImageParity, RandomResizedCropBoxesFollowTorchvisionDistribution) {
  TempDir dir;
  // 500x375 is ImageNet-like; 300x60 sends about a fifth of the draws to the centre fallback.
  const std::vector<std::array<int, 3>> sizes = {{500, 375, 20000}, {300, 60, 10000}};
  json jobs = json::array();
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    jobs.push_back({{"op", "rrc"}, {"width", sizes[s][0]}, {"height", sizes[s][1]}, {"n", sizes[s][2]}, {"seed", 7},
                    {"out", dir.file("rrc" + std::to_string(s) + ".json")}});
  }
  run_jobs(dir, jobs);
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const auto [width, height, n] = sizes[s];
    std::ifstream in(dir.file("rrc" + std::to_string(s) + ".json"));
    const json ref = json::parse(in);
    std::vector<double> tw, th, tx, ty, ow, oh, ox, oy;
    for (int k = 0; k < n; ++k) {
      const int w = ref["w"][k], h = ref["h"][k], i = ref["i"][k], j = ref["j"][k];
      tw.push_back(w);
      th.push_back(h);
      if (w < width) tx.push_back(static_cast<double>(j) / (width - w));
      if (h < height) ty.push_back(static_cast<double>(i) / (height - h));
    }
    Rng rng(11);
    for (int k = 0; k < n; ++k) {
      const Box b = random_resized_crop_box(width, height, {}, rng);
      ow.push_back(b.w);
      oh.push_back(b.h);
      if (b.w < width) ox.push_back(b.x / (width - b.w));
      if (b.h < height) oy.push_back(b.y / (height - b.h));
    }
    const double dw = ks_statistic(ow, tw), dh = ks_statistic(oh, th), dx = ks_statistic(ox, tx), dy = ks_statistic(oy, ty);
    std::printf("%dx%d, %d draws: KS w %.4f, h %.4f, x/(W-w) %.4f, y/(H-h) %.4f (critical %.4f)\n", width, height, n, dw,
                dh, dx, dy, critical(ow.size(), tw.size()));
    EXPECT_LT(dw, critical(ow.size(), tw.size()));
    EXPECT_LT(dh, critical(oh.size(), th.size()));
    EXPECT_LT(dx, critical(ox.size(), tx.size()));
    EXPECT_LT(dy, critical(oy.size(), ty.size()));
  }
}

// RandomErasing(p=1) draws against torchvision's get_params: the erased rectangle's height, width and where it
// sits, over the draws where an attempt fitted (the fraction that did not is compared too).
TEST(ImageParity, RandomErasingRectsFollowTorchvisionDistribution) {
  TempDir dir;
  const std::vector<std::array<int, 3>> sizes = {{28, 28, 20000}, {224, 160, 20000}};
  json jobs = json::array();
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    jobs.push_back({{"op", "erase"}, {"width", sizes[s][0]}, {"height", sizes[s][1]}, {"n", sizes[s][2]}, {"seed", 3},
                    {"out", dir.file("erase" + std::to_string(s) + ".json")}});
  }
  run_jobs(dir, jobs);
  const RandomErasingParams params{.probability = 1.0};
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const auto [width, height, n] = sizes[s];
    std::ifstream in(dir.file("erase" + std::to_string(s) + ".json"));
    const json ref = json::parse(in);
    std::vector<double> tw, th, tx, ty, ow, oh, ox, oy;
    int t_none = 0, o_none = 0;
    for (int k = 0; k < n; ++k) {
      const int w = ref["w"][k], h = ref["h"][k], i = ref["i"][k], j = ref["j"][k];
      if (w == 0 || h == 0) {
        ++t_none;
        continue;
      }
      tw.push_back(w);
      th.push_back(h);
      tx.push_back(static_cast<double>(j) / (width - w));
      ty.push_back(static_cast<double>(i) / (height - h));
    }
    Rng rng(13);
    for (int k = 0; k < n; ++k) {
      const PixelRect r = random_erasing_rect(width, height, params, rng);
      if (r.width() <= 0 || r.height() <= 0) {
        ++o_none;
        continue;
      }
      ASSERT_TRUE(r.x0 >= 0 && r.y0 >= 0 && r.x1 < width + 1 && r.y1 < height + 1 && r.width() < width &&
                  r.height() < height);
      ow.push_back(r.width());
      oh.push_back(r.height());
      ox.push_back(static_cast<double>(r.x0) / (width - r.width()));
      oy.push_back(static_cast<double>(r.y0) / (height - r.height()));
    }
    const double dw = ks_statistic(ow, tw), dh = ks_statistic(oh, th), dx = ks_statistic(ox, tx), dy = ks_statistic(oy, ty);
    std::printf("%dx%d, %d draws: none %d vs %d; KS w %.4f, h %.4f, x/(W-w) %.4f, y/(H-h) %.4f (critical %.4f)\n",
                width, height, n, o_none, t_none, dw, dh, dx, dy, critical(ow.size(), tw.size()));
    EXPECT_LT(dw, critical(ow.size(), tw.size()));
    EXPECT_LT(dh, critical(oh.size(), th.size()));
    EXPECT_LT(dx, critical(ox.size(), tx.size()));
    EXPECT_LT(dy, critical(oy.size(), ty.size()));
    // Both counts of failed draws are binomial with the same p: within 4 standard deviations of each other.
    const double sd = std::sqrt(2.0 * std::max(1, t_none) * (1.0 - static_cast<double>(t_none) / n));
    EXPECT_LT(std::abs(o_none - t_none), 4 * sd + 1);
  }
}

}  // namespace
}  // namespace hotpath::data
