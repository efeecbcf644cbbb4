// The loader's CUDA ("mixed") mode on a GPU (label gpu; each test skips with one line without a CUDA device):
// nvJPEG-decoded, device-augmented batches against the CPU loader for the same seed, the pinned-uint8 path,
// corrupt samples skipped and counted like the CPU path, and the decode throughput side by side.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <iostream>
#include <string>
#include <vector>

#include "data/jpeg_fixture.h"
#include "hotpath/core/error.h"
#include "hotpath/data/loader.h"
#include "hotpath/formats/tar_writer.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"
#include "support/cuda_test_support.h"
#include "support/test_support.h"

namespace hotpath::data {
namespace {

using fixture::Fixture;
using fixture::make_jpeg_shards;
using hotpath::test::as_bytes;
using hotpath::test::TempDir;

// docs/gpu.md: nvJPEG against libjpeg-turbo, in normalised units (one uint8 level ≈ 0.017). The CPU twin
// (data_device_tests, DeviceAugment.*) measures the resize/rounding part; nvJPEG's IDCT and chroma upsampling
// add a few levels on top.
constexpr double kNvjpegMeanTolerance = 0.08;
constexpr double kNvjpegRowTolerance = 0.25;

LoaderOptions options_for(const Fixture& f) {
  LoaderOptions o;
  o.shards = f.shards;
  o.batch_size = 16;
  o.workers = 2;
  o.size = 48;
  o.shuffle_buffer = 32;
  o.seed = 3;
  o.format.layout = PixelLayout::kHWC;  // the channels-last batches training uses
  return o;
}

struct Comparison {
  int batches = 0;
  double mean = 0;
  double worst_row = 0;
  double worst_leading_row = 0;  // of each batch's first `leading_rows` rows
};

// Two epochs of `device_o` against the CPU loader of the same options: labels in the same order, images close.
Comparison compare_with_cpu(const LoaderOptions& cpu_o, const LoaderOptions& device_o, std::int64_t leading_rows = 0) {
  Loader cpu(cpu_o);
  Loader gpu(device_o);
  Comparison c;
  std::int64_t rows = 0;
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    cpu.seek({epoch, 0});
    gpu.seek({epoch, 0});
    while (auto want = cpu.next()) {
      auto got = gpu.next();
      EXPECT_TRUE(got.has_value());
      if (!got) break;
      EXPECT_TRUE(got->images.is_cuda());
      EXPECT_TRUE(got->labels.is_cuda());
      EXPECT_EQ(got->images.sizes(), want->images.sizes());
      EXPECT_EQ(got->images.is_contiguous(at::MemoryFormat::ChannelsLast),
                want->images.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_TRUE(at::equal(got->labels.cpu(), want->labels)) << "epoch " << epoch << " batch " << want->index;
      const at::Tensor err =
          (got->images.cpu().to(at::kFloat) - want->images).abs().reshape({want->labels.size(0), -1}).mean(1);
      c.mean += err.sum().item<double>();
      c.worst_row = std::max(c.worst_row, err.max().item<double>());
      if (leading_rows > 0) {
        c.worst_leading_row = std::max(c.worst_leading_row, err.narrow(0, 0, std::min(leading_rows, err.size(0))).max().item<double>());
      }
      rows += want->labels.size(0);
      ++c.batches;
    }
    EXPECT_FALSE(gpu.next().has_value());
  }
  c.mean /= static_cast<double>(std::max<std::int64_t>(rows, 1));
  return c;
}

// `o` in the CUDA mode with decode nvjpeg, `share` of each batch on the decode threads (< 0: adapted).
LoaderOptions nvjpeg_options(LoaderOptions o, double share) {
  o.device = at::Device(at::kCUDA, 0);
  o.decode = DecodeBackend::kNvjpeg;
  o.nvjpeg_cpu_share = share;
  return o;
}

TEST(CudaLoader, NvjpegBatchesMatchTheCpuLoaderForTheSameSeed) {
  HOTPATH_REQUIRE_CUDA();
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 96);
  const LoaderOptions cpu_o = options_for(f);
  const LoaderOptions gpu_o = nvjpeg_options(cpu_o, 0);  // every image through nvJPEG
  const Comparison c = compare_with_cpu(cpu_o, gpu_o);
  std::cout << "[ measured ] nvjpeg vs cpu: " << c.batches << " batches, mean |diff| " << c.mean << ", worst row "
            << c.worst_row << "\n";
  EXPECT_EQ(c.batches, 12);
  EXPECT_LT(c.mean, kNvjpegMeanTolerance);
  EXPECT_LT(c.worst_row, kNvjpegRowTolerance);
  Loader gpu(gpu_o);
  gpu.next();
  std::cout << "[ describe ] " << gpu.describe() << "\n";
  EXPECT_NE(gpu.describe().find("decode nvjpeg ("), std::string::npos) << gpu.describe();
  EXPECT_NE(gpu.describe().find("augment cuda:0"), std::string::npos) << gpu.describe();
}

// The split nvjpeg mode: a fixed share puts each batch's first rows on the decode threads (the CPU path's exact
// pixels) and the rest on nvJPEG (within its tolerance); the adapted split (the default) keeps order and labels.
TEST(CudaLoader, SplitBatchesTakeTheCpuPathsPixelsForTheirFirstRows) {
  HOTPATH_REQUIRE_CUDA();
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 96);
  const LoaderOptions cpu_o = options_for(f);
  LoaderOptions gpu_o = nvjpeg_options(cpu_o, 0.5);
  const Comparison half = compare_with_cpu(cpu_o, gpu_o, /*leading_rows=*/8);
  EXPECT_EQ(half.batches, 12);
  EXPECT_LT(half.worst_leading_row, 1e-5) << "rows 0..7 of each batch come from the decode threads";
  EXPECT_LT(half.worst_row, kNvjpegRowTolerance);
  gpu_o.nvjpeg_cpu_share = -1;
  const Comparison adapted = compare_with_cpu(cpu_o, gpu_o);
  EXPECT_EQ(adapted.batches, 12);
  EXPECT_LT(adapted.worst_row, kNvjpegRowTolerance);
  Loader gpu(gpu_o);
  for (int i = 0; i < 3; ++i) gpu.next();
  std::cout << "[ describe ] " << gpu.describe() << "\n";
  EXPECT_NE(gpu.describe().find("for each batch's first rows (adapted"), std::string::npos) << gpu.describe();
  gpu_o.nvjpeg_cpu_share = 1.5;
  EXPECT_THROW(Loader{gpu_o}, Error);
}

TEST(CudaLoader, PinnedUint8BatchesNormalisedOnTheDeviceEqualTheCpuLoader) {
  HOTPATH_REQUIRE_CUDA();
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 64);
  for (const PixelLayout layout : {PixelLayout::kCHW, PixelLayout::kHWC}) {
    LoaderOptions cpu_o = options_for(f);
    cpu_o.format.layout = layout;
    LoaderOptions gpu_o = cpu_o;
    gpu_o.device = at::Device(at::kCUDA, 0);  // decode stays on the CPU threads
    const Comparison c = compare_with_cpu(cpu_o, gpu_o);
    EXPECT_EQ(c.batches, 8);
    EXPECT_LT(c.worst_row, 1e-5);  // the same uint8 pixels, the same float formula
  }
}

// Garbage named .jpg, a truncated JPEG and one with its header cut: skipped and counted on both paths, with
// the same reasons, and the same good samples delivered.
TEST(CudaLoader, CorruptSamplesAreSkippedAndCountedLikeTheCpuPath) {
  HOTPATH_REQUIRE_CUDA();
  TempDir dir;
  const fixture::CorruptFixture f = fixture::make_corrupt_jpeg_shards(dir, 40);
  LoaderOptions cpu_o;
  cpu_o.shards = f.shards;
  cpu_o.batch_size = 8;
  cpu_o.size = 32;
  cpu_o.shuffle = false;
  cpu_o.drop_last = false;
  // nvJPEG's own rejections (the decode threads' are the CPU path's by construction).
  const LoaderOptions gpu_o = nvjpeg_options(cpu_o, 0);
  const auto run = [](const LoaderOptions& o, std::vector<std::int64_t>& labels, std::vector<std::string>& bad) {
    Loader loader(o);
    for (const Batch& b : loader.epoch(0)) {
      const at::Tensor l = b.labels.cpu();
      labels.insert(labels.end(), l.data_ptr<std::int64_t>(), l.data_ptr<std::int64_t>() + l.numel());
    }
    bad = loader.bad_samples();
    return loader.stats().bad_samples;
  };
  std::vector<std::int64_t> cpu_labels, gpu_labels;
  std::vector<std::string> cpu_bad, gpu_bad;
  EXPECT_EQ(run(cpu_o, cpu_labels, cpu_bad), 12);
  EXPECT_EQ(run(gpu_o, gpu_labels, gpu_bad), 12);
  EXPECT_EQ(gpu_labels, cpu_labels);
  EXPECT_EQ(gpu_bad, cpu_bad);
}

// The decode throughput stage in miniature: both paths on the same shards, side by side, images/s printed (the
// figures gpu-check reports come from `hotpath data bench --device cuda --decode nvjpeg`); no bound on time.
TEST(CudaLoader, DecodeThroughputBothPathsSideBySide) {
  HOTPATH_REQUIRE_CUDA();
  TempDir dir;
  const Fixture f = make_jpeg_shards(dir, 256);
  LoaderOptions o = options_for(f);
  o.batch_size = 64;
  o.workers = 4;
  o.size = 64;
  const auto images_per_s = [](const LoaderOptions& opts) {
    Loader loader(opts);
    loader.next();  // warm-up: threads, nvJPEG handles, allocator
    std::int64_t images = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      while (auto b = loader.next()) images += b->labels.size(0);
    }
    return static_cast<double>(images) /
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  LoaderOptions gpu_o = o;
  gpu_o.device = at::Device(at::kCUDA, 0);
  gpu_o.decode = DecodeBackend::kNvjpeg;
  const double cpu = images_per_s(o);
  const double gpu = images_per_s(gpu_o);
  std::cout << "[ measured ] images/s: cpu decode " << cpu << ", nvjpeg " << gpu << " (4 threads, 64 px)\n";
  EXPECT_GT(cpu, 0);
  EXPECT_GT(gpu, 0);
}

// 4 classes told apart by colour (red, green, blue, grey on noise): any crop or flip keeps the class. 64×48 JPEGs.
std::string write_colour_shards(const TempDir& dir, int count) {
  formats::ShardWriter writer(dir.file("k-%06d.tar"), {.max_samples = 32});
  std::uint32_t noise = 99;
  for (int i = 0; i < count; ++i) {
    const int label = i % 4;
    std::vector<std::uint8_t> px(64 * 48 * 3);
    for (std::size_t p = 0; p < px.size(); ++p) {
      noise = noise * 1664525u + 1013904223u;
      const int c = static_cast<int>(p % 3);
      const int base = label == 3 ? 120 : (c == label ? 200 : 50);
      px[p] = static_cast<std::uint8_t>(base + static_cast<int>(noise >> 27) - 16);
    }
    const std::string cls = std::to_string(label);
    writer.write({std::to_string(400000 + i), {{"jpg", encode_jpeg(px.data(), 64, 48, 3, 90)}, {"cls", as_bytes(cls)}}});
  }
  writer.close();
  return dir.file("k-*.tar");
}

// Through the trainer: RandomResizedCrop + flip on the GPU (nvJPEG, and the pinned-uint8 mode) in fp16 learn the
// task as the CPU run does: here (checked on the CPU) 4 epochs reach 75-100 % top-1 depending on the seed, chance
// is 25 %, so >= 70 % says crops, labels and normalisation arrive intact. The header line names the decode path.
TEST(CudaLoader, TrainingWithTheCudaModeLearnsTheTask) {
  HOTPATH_REQUIRE_CUDA();
  TempDir dir;
  const std::string shards = write_colour_shards(dir, 128);
  const auto recipe = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> o = {"model.name=cnn_small", "model.num_classes=4",   "data.train=" + shards,
                                  "data.eval=" + shards,  "data.image_size=32",    "data.resize_shorter=36",
                                  "data.workers=2",       "data.shuffle_buffer=32", "train.batch_size=16",
                                  "train.epochs=4",       "train.threads=1",       "optimizer.lr=0.02",
                                  "schedule.name=one_cycle", "output_dir=" + dir.file(out)};
    o.insert(o.end(), extra.begin(), extra.end());
    return train::parse_recipe("", o, "cuda-loader-test.yaml");
  };
  std::ostringstream log;
  train::TrainOptions options;
  options.out = &log;
  const train::TrainResult cpu = train::train(recipe("cpu", {"train.device=cpu"}), options);
  ASSERT_TRUE(cpu.eval) << log.str();
  EXPECT_GE(cpu.eval->top1, 70.0) << log.str();
  for (const auto& [mode, out] : {std::pair{"data.decode=nvjpeg", "gpu-nvjpeg"}, {"data.augment=device", "gpu-uint8"}}) {
    const train::TrainResult gpu =
        train::train(recipe(out, {"train.device=cuda", "train.precision=fp16", mode}), options);
    ASSERT_TRUE(gpu.eval) << log.str();
    EXPECT_GE(gpu.eval->top1, 70.0) << mode << "\n" << log.str();
  }
  EXPECT_NE(log.str().find("; data: decode nvjpeg ("), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("; data: decode cpu (libjpeg-turbo) into pinned uint8, augment cuda:0"), std::string::npos)
      << log.str();
}

}  // namespace
}  // namespace hotpath::data
