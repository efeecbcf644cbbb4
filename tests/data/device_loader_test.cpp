// The loader's CUDA ("mixed") mode, everything of it that runs without a GPU: the ATen twin of the device
// augmentation against the CPU loader's rows (same seed, same crops), the normalisation the pinned-uint8 path
// uses, the refusals (decode nvjpeg without a CUDA device, the recipe keys), and nvJPEG's dlopen table.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/data/device_augment.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/data/loader.h"
#include "hotpath/data/nvjpeg_library.h"
#include "hotpath/formats/tar_writer.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"
#include "data/jpeg_fixture.h"
#include "support/test_support.h"

namespace hotpath::data {
namespace {

using test::TempDir;
using fixture::Fixture;
using fixture::make_jpeg_shards;

LoaderOptions train_options(const Fixture& f) {
  LoaderOptions o;
  o.shards = f.shards;
  o.batch_size = 8;
  o.workers = 2;
  o.size = 32;
  o.shuffle_buffer = 24;
  o.seed = 7;
  return o;
}

struct Diff {
  double mean = 0;  // mean |a - b| over the batch
  double worst_row = 0;  // the largest per-row mean |a - b|
};

// Every batch of one epoch of the CPU loader against the ATen twin of the nvJPEG path (full libjpeg-turbo
// decode standing in for nvJPEG, then crop_resize_batch + normalize_batch with the same draws).
Diff twin_diff(const LoaderOptions& o, const Fixture& f) {
  Loader loader(o);
  Diff d;
  std::int64_t rows = 0;
  for (const Batch& b : loader.epoch(1)) {
    std::vector<at::Tensor> decoded;
    std::vector<SampleAugment> augments;
    for (std::int64_t r = 0; r < b.labels.size(0); ++r) {
      const auto& bytes = f.jpegs.at(b.labels[r].item<std::int64_t>());
      const Image image = decode_image(bytes, o.channels);
      decoded.push_back(at::from_blob(const_cast<std::uint8_t*>(image.pixels.data()),
                                      {image.height, image.width, image.channels}, at::kByte)
                            .clone());
      augments.push_back(draw_sample_augment(o, image.width, image.height, b.epoch, b.index * o.batch_size + r));
    }
    const at::Tensor twin = normalize_batch(crop_resize_batch(decoded, augments, o.size, o.normalization), o.normalization, o.format);
    const at::Tensor err = (twin - b.images).abs().reshape({b.labels.size(0), -1}).mean(1);
    d.mean += err.sum().item<double>();
    d.worst_row = std::max(d.worst_row, err.max().item<double>());
    rows += b.labels.size(0);
  }
  d.mean /= static_cast<double>(rows);
  return d;
}

// The twin against the CPU loader, in normalised units (one uint8 level is 1/(255·0.225) ≈ 0.017): the resize
// filters agree to under a level (measured: mean 0.009, worst row 0.015); what differs is PIL's uint8 rounding
// per pass and the CPU path's DCT-domain downscale. nvJPEG's own decode adds to this (cuda_loader_test.cpp).
constexpr double kMeanTolerance = 0.03;
constexpr double kRowTolerance = 0.05;

TEST(DeviceAugment, TwinMatchesTheCpuLoaderRowsForTheSameSeed) {
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 40);
  LoaderOptions o = train_options(f);  // RandomResizedCrop + flip 0.5, shuffled, 2 threads
  const Diff d = twin_diff(o, f);
  std::cout << "[ measured ] RandomResizedCrop+flip: mean " << d.mean << ", worst row " << d.worst_row << "\n";
  EXPECT_LT(d.mean, kMeanTolerance);
  EXPECT_LT(d.worst_row, kRowTolerance);
  o.allow_dct_scaling = false;
  const Diff full = twin_diff(o, f);
  std::cout << "[ measured ] without DCT scaling: mean " << full.mean << ", worst row " << full.worst_row << "\n";
  EXPECT_LT(full.mean, kMeanTolerance);
  EXPECT_LT(full.worst_row, kRowTolerance);
}

TEST(DeviceAugment, TwinFollowsResizeTranslateErasingAndChannelsLast) {
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 24);
  LoaderOptions o = train_options(f);
  o.crop = CropMode::kResize;
  o.translate = 4;
  o.format.layout = PixelLayout::kHWC;
  const Diff d = twin_diff(o, f);
  std::cout << "[ measured ] resize+translate: mean " << d.mean << ", worst row " << d.worst_row << "\n";
  EXPECT_LT(d.mean, kMeanTolerance);
  EXPECT_LT(d.worst_row, kRowTolerance);
  // RandomErasing on top: the twin fills the uint8 level nearest the mean (what the CPU path stores for a device
  // that normalises later), the CPU loader writes 0 after normalisation: under 0.01 apart in these units.
  o.erasing.probability = 0.5;
  const Diff e = twin_diff(o, f);
  std::cout << "[ measured ] resize+translate+erasing: mean " << e.mean << ", worst row " << e.worst_row << "\n";
  EXPECT_LT(e.mean, kMeanTolerance);
  EXPECT_LT(e.worst_row, kRowTolerance);
  o.erasing.probability = 0.0;
  o.crop = CropMode::kResizeCenterCrop;
  o.translate = 0;
  o.resize_shorter = 40;
  const Diff c = twin_diff(o, f);
  std::cout << "[ measured ] resize+center crop: mean " << c.mean << ", worst row " << c.worst_row << "\n";
  EXPECT_LT(c.mean, kMeanTolerance);
  EXPECT_LT(c.worst_row, kRowTolerance);
}

// A wrong draw (another position's crop, or no flip) is far outside the tolerance: the check above can fail.
TEST(DeviceAugment, AnotherSamplesDrawsAreFarOutsideTheTolerance) {
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 16);
  const LoaderOptions o = train_options(f);
  Loader loader(o);
  const Batch b = *loader.next();
  std::vector<at::Tensor> decoded;
  std::vector<SampleAugment> wrong;
  for (std::int64_t r = 0; r < b.labels.size(0); ++r) {
    const Image image = decode_image(f.jpegs.at(b.labels[r].item<std::int64_t>()), 3);
    decoded.push_back(
        at::from_blob(const_cast<std::uint8_t*>(image.pixels.data()), {image.height, image.width, 3}, at::kByte).clone());
    wrong.push_back(draw_sample_augment(o, image.width, image.height, b.epoch, b.index * o.batch_size + r + 1));
  }
  const at::Tensor twin = normalize_batch(crop_resize_batch(decoded, wrong, o.size, o.normalization), o.normalization, o.format);
  EXPECT_GT((twin - b.images).abs().mean().item<double>(), 4 * kMeanTolerance);
}

// The pinned-uint8 path (decode cpu, augment on the device): the decode threads' uint8 HWC rows normalised by
// normalize_batch equal the CPU loader's float rows.
TEST(DeviceAugment, NormalizingUint8RowsEqualsTheCpuLoadersFloatRows) {
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 24);
  LoaderOptions float_o = train_options(f);
  LoaderOptions u8_o = float_o;
  u8_o.format = {.type = PixelType::kUInt8, .layout = PixelLayout::kHWC, .normalize = false};
  Loader floats(float_o);
  Loader bytes(u8_o);
  int batches = 0;
  while (auto fb = floats.next()) {
    auto ub = bytes.next();
    ASSERT_TRUE(ub.has_value());
    ASSERT_TRUE(at::equal(fb->labels, ub->labels));
    for (const StoreFormat fmt : {float_o.format, StoreFormat{.layout = PixelLayout::kHWC},
                                  StoreFormat{.type = PixelType::kBFloat16}}) {
      const at::Tensor x = normalize_batch(ub->images, float_o.normalization, fmt);  // ub->images: NCHW view of HWC
      EXPECT_EQ(x.sizes(), fb->images.sizes());
      EXPECT_EQ(x.is_contiguous(at::MemoryFormat::ChannelsLast), fmt.layout == PixelLayout::kHWC);
      const double tol = fmt.type == PixelType::kBFloat16 ? 2e-2 : 1e-5;
      EXPECT_LT((x.to(at::kFloat) - fb->images).abs().max().item<double>(), tol);
    }
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  const at::Tensor u8 = at::randint(0, 256, {2, 3, 4, 4}, at::kByte);
  EXPECT_TRUE(at::equal(normalize_batch(u8, {}, {.type = PixelType::kUInt8}), u8));
}

TEST(LoaderCudaMode, RefusalsAreOneLine) {
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 8);
  LoaderOptions o = train_options(f);
  o.decode = DecodeBackend::kNvjpeg;
  try {
    Loader loader(o);
    FAIL() << "decode nvjpeg on the CPU was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "loader: decode nvjpeg needs a CUDA device (LoaderOptions::device), got cpu");
  }
  if (at::globalContext().hasCUDA()) GTEST_SKIP() << "a CUDA device is present: the no-device refusal is not reachable";
  for (const DecodeBackend decode : {DecodeBackend::kCpu, DecodeBackend::kNvjpeg}) {
    o.decode = decode;
    o.device = at::Device(at::kCUDA, 0);
    try {
      Loader loader(o);
      FAIL() << "the CUDA mode was accepted without a CUDA device";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("needs a CUDA device (cuda:0) but none is available"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  Loader cpu(train_options(f));
  EXPECT_EQ(cpu.describe(), "decode cpu (libjpeg-turbo, 2 decode thread(s)), augment cpu");
}

// decode nvjpeg reads every header on the decode threads with probe_image_complete: it must reject exactly the
// samples the CPU path's decode rejects, with the same reason, so both paths skip and count the same samples
// (CudaLoader.CorruptSamplesAreSkippedAndCountedLikeTheCpuPath checks the GPU side on the same fixture).
TEST(LoaderCudaMode, TheDecodeThreadsRejectWhatTheCpuDecoderRejects) {
  TempDir dir;
  const fixture::CorruptFixture f = fixture::make_corrupt_jpeg_shards(dir, 40);
  LoaderOptions o;
  o.shards = f.shards;
  o.batch_size = 8;
  o.size = 32;
  o.drop_last = false;
  Loader loader(o);
  std::int64_t good = 0;
  for (const Batch& b : loader.epoch(0)) good += b.labels.size(0);
  EXPECT_EQ(good, 28);
  EXPECT_EQ(loader.stats().bad_samples, 12);
  std::map<std::string, std::string> reasons;  // key → the CPU path's message
  for (const std::string& m : loader.bad_samples()) {
    const auto key_at = m.find(":3000");
    ASSERT_NE(key_at, std::string::npos) << m;
    reasons[m.substr(key_at + 1, 6)] = m;
  }
  for (const auto& [id, bytes] : f.files) {
    const std::string key = std::to_string(300000 + id);
    try {
      probe_image_complete(bytes);
      EXPECT_EQ(reasons.count(key), 0u) << "the CPU path rejected " << key << " but the header check passes it";
    } catch (const Error& e) {
      ASSERT_EQ(reasons.count(key), 1u) << key << " rejected by the header check only: " << e.what();
      const std::string& cpu = reasons[key];
      EXPECT_EQ(cpu.substr(cpu.size() - std::string(e.what()).size()), e.what()) << cpu;
    }
  }
}

TEST(NvjpegLibrary, AMissingLibraryIsOneLineNamingWhatWasTried) {
  try {
    NvjpegLibrary::open({"/nonexistent/libnvjpeg.so.13", "libnvjpeg-not-there.so.12"});
    FAIL() << "opened a library that does not exist";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    if (!NvjpegLibrary::compiled_in()) {
      EXPECT_NE(what.find("built without nvjpeg.h"), std::string::npos) << what;
      return;
    }
    EXPECT_NE(what.find("no usable nvJPEG library"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/libnvjpeg.so.13: "), std::string::npos) << what;
    EXPECT_NE(what.find("libnvjpeg-not-there.so.12: "), std::string::npos) << what;
  }
}

TEST(NvjpegLibrary, ALibraryWithoutTheFunctionsNamesTheFirstMissingOne) {
  if (!NvjpegLibrary::compiled_in()) GTEST_SKIP() << "built without nvjpeg.h: open() refuses before any dlopen";
  try {
    NvjpegLibrary::open({"libc.so.6"});
    FAIL() << "libc was taken for nvJPEG";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("libc.so.6: has no nvjpegGetProperty"), std::string::npos) << e.what();
  }
}

// The wheels scripts/setup unpacks (nvidia-nvjpeg for CUDA 13, nvidia-nvjpeg-cu12): every function of the table
// resolves in both, so either major works with the one nvjpeg.h hotpath compiles against.
TEST(NvjpegLibrary, ResolvesEveryFunctionInTheSetupWheels) {
  if (!NvjpegLibrary::compiled_in()) GTEST_SKIP() << "built without nvjpeg.h";
  const std::filesystem::path root = HOTPATH_TEST_NVJPEG_CACHE;
  const std::vector<std::pair<std::string, std::string>> wheels{
      {(root / "cu13/nvidia/cu13/lib/libnvjpeg.so.13").string(), "(nvJPEG 13."},
      {(root / "cu12/nvidia/nvjpeg/lib/libnvjpeg.so.12").string(), "(nvJPEG 12."}};
  int found = 0;
  for (const auto& [path, version] : wheels) {
    if (!std::filesystem::exists(path)) continue;
    ++found;
    const auto lib = NvjpegLibrary::open({path});
    EXPECT_EQ(lib->path(), path);
    EXPECT_NE(lib->describe().find(version), std::string::npos) << lib->describe();
  }
  if (found == 0) GTEST_SKIP() << "no nvJPEG wheel under " << root.string() << " (scripts/setup unpacks them)";
}

TEST(NvjpegLibrary, CandidatesStartWithTheOverrideThenTheWheelsBesideTorch) {
  ::setenv("HOTPATH_NVJPEG_LIBRARY", "/opt/x/libnvjpeg.so.13", 1);
  const std::vector<std::string> c = NvjpegLibrary::default_candidates();
  ::unsetenv("HOTPATH_NVJPEG_LIBRARY");
  ASSERT_GE(c.size(), 5u);
  EXPECT_EQ(c[0], "/opt/x/libnvjpeg.so.13");
  const auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  int wheels = 0;
  for (std::size_t i = 1; i < 3; ++i) {
    wheels += ends_with(c[i], "/nvidia/cu13/lib/libnvjpeg.so.13") || ends_with(c[i], "/nvidia/nvjpeg/lib/libnvjpeg.so.12");
  }
  EXPECT_EQ(wheels, 2);
  EXPECT_EQ(c[c.size() - 1].rfind("libnvjpeg.so.1", 0), 0u);
  EXPECT_EQ(c[c.size() - 2].rfind("libnvjpeg.so.1", 0), 0u);
  EXPECT_EQ(NvjpegLibrary::default_candidates().front().find("/opt/x"), std::string::npos);
}

}  // namespace
}  // namespace hotpath::data

namespace hotpath::train {
namespace {

TEST(RecipeDataDecode, KeysParseAndContradictionsAreRefused) {
  Recipe r = parse_recipe("", {"data.decode=nvjpeg"}, "t.yaml");
  EXPECT_EQ(r.data.decode, "nvjpeg");
  EXPECT_EQ(r.data.augment, "auto");
  EXPECT_EQ(parse_recipe(to_yaml(r), {}, "t.yaml").data.decode, "nvjpeg");
  EXPECT_EQ(parse_recipe("", {"data.augment=device"}, "t.yaml").data.augment, "device");
  const auto refusal = [](const std::vector<std::string>& overrides) {
    try {
      parse_recipe("", overrides, "t.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({"data.decode=nvjpeg", "data.augment=cpu"}),
            "t.yaml: data.augment: expected auto or device with data.decode: nvjpeg (the images are decoded on the GPU)");
  EXPECT_NE(refusal({"data.decode=gpu"}).find("data.decode"), std::string::npos);
  EXPECT_EQ(refusal({"data.kind=text", "model.pretrained=/m", "data.decode=nvjpeg"}),
            "t.yaml: data.decode: expected left out for data.kind: text (images only)");
}

TEST(ImageTaskCudaMode, TheCudaModeOnACpuRunIsOneLine) {
  test::TempDir dir;
  const data::fixture::Fixture f = data::fixture::make_jpeg_shards(dir, 16);
  for (const std::string key : {"data.decode=nvjpeg", "data.augment=device"}) {
    const Recipe r = parse_recipe("", {"model.name=cnn_small", "model.num_classes=16", "data.train=" + dir.file("j-*.tar"),
                                       "data.image_size=32", "train.batch_size=8", "train.device=cpu", key}, "t.yaml");
    try {
      make_task(r, {.device = at::Device(at::kCPU)});
      FAIL() << key << " was accepted on the CPU";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "t.yaml: " + key.substr(0, key.find('=')) + ": " + key.substr(key.find('=') + 1) +
                                           " needs train.device: cuda (this run is on cpu)");
    }
  }
}

}  // namespace
}  // namespace hotpath::train
