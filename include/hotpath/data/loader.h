// hotpath/data/loader.h — WebDataset shards → decoded, augmented batches of tensors.
//
// One planner thread walks the shards (shard shuffle, sample shuffle buffer, rank split) and
// lays out batches; N decode threads crop/scale during JPEG decode, augment and normalise each
// sample straight into its row of a preallocated batch in a ring of `prefetch` batches (pinned
// when CUDA is present). The trainer takes batches in order, wrapped as at::Tensor without a copy.
//
//   Loader loader({.shards = resolve_shards({"train-{000000..000009}.tar"}), .batch_size = 256});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (const Batch& batch : loader.epoch(epoch)) train_step(batch.images, batch.labels);
//
// Every random choice is a function of (seed, epoch, sample position), so batches are identical
// for any number of decode threads, and seek(position) resumes exactly where a run stopped.
//
// CUDA ("mixed") mode, LoaderOptions::device = cuda: a stage thread finishes each batch on the GPU on
// its own stream and hands out device tensors. decode = kCpu: the decode threads crop, resize and flip
// into pinned uint8 batches, copied non_blocking and normalised on the device. decode = kNvjpeg: each
// batch is split: its first rows are decoded by the decode threads as in kCpu (into pinned uint8), the
// rest go whole to nvJPEG (loaded with dlopen, nvjpeg_library.h; its hardware decoder where the GPU has
// one), then crop/resize/flip run as ATen ops (device_augment.h) and the batch is normalised on the GPU.
// The split (nvjpeg_cpu_share) follows the two sides' speed unless fixed. The crops come from the same
// draws as on the CPU (draw_sample_augment); nvJPEG's pixels differ within the tolerance docs/gpu.md gives.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/core/position.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/data/transforms.h"

namespace hotpath::data {

enum class CropMode {
  kRandomResizedCrop,  // train: torchvision RandomResizedCrop(size, scale, ratio)
  kResizeCenterCrop,   // eval: Resize(resize_shorter) + CenterCrop(size)
  kResize,             // whole image resized to size × size (small fixed-size data)
};

// Where JPEGs are decoded (PNG always decodes on the CPU threads).
enum class DecodeBackend {
  kCpu,     // libjpeg-turbo on the decode threads (crop and DCT downscale during decode)
  kNvjpeg,  // nvJPEG on the GPU (needs device = cuda); what nvJPEG rejects is decoded on the CPU
};

struct LoaderOptions {
  std::vector<std::string> shards;     // resolved shard paths (see shard_list.h)
  int batch_size = 256;
  int workers = 2;                     // decode threads
  int prefetch = 4;                    // batches prepared ahead (ring size)
  int size = 224;                      // output height = width
  int channels = 3;                    // 3 = RGB, 1 = gray
  CropMode crop = CropMode::kRandomResizedCrop;
  RandomResizedCropParams rrc{};
  int resize_shorter = 256;            // kResizeCenterCrop only
  double flip_probability = 0.5;       // horizontal flip
  int translate = 0;                   // torchvision RandomCrop(size, padding=translate): shift by up to
                                       // ±translate pixels in x and y, uncovered pixels black (0)
  RandomErasingParams erasing{};       // RandomErasing after the flip (probability 0: off); erased = mean pixel
  bool allow_dct_scaling = true;       // JPEG: decode at 1/2, 1/4, 1/8 when the crop allows
  StoreFormat format{};                // dtype + layout (kHWC = channels-last)
  Normalization normalization{};
  bool shuffle = true;                 // shard order and sample shuffle buffer
  std::size_t shuffle_buffer = 2000;
  bool drop_last = true;               // drop the last partial batch of an epoch
  std::uint64_t seed = 0;
  int rank = 0;                        // data-parallel rank and world size: shard split
  int world_size = 1;
  bool split_batches = false;          // instead: every rank plans the global batches of batch_size ×
                                       // world_size samples from all shards and decodes rows
                                       // [rank·batch_size, (rank+1)·batch_size) of each (needs drop_last);
                                       // augmentation draws use the global position, so the union of the
                                       // ranks' batches is the one-rank batch of batch_size × world_size
  std::int64_t max_bad_samples = 100;  // stop with an error past this many skipped samples (-1: no limit)
  std::int64_t num_classes = 0;        // > 0: a label outside [0, num_classes) is a bad sample (negative: always)
  DecodeLimits limits{};
  bool pin_memory = true;              // only takes effect when a CUDA device is present
  at::Device device = at::kCPU;        // cuda: batches are finished on this GPU (the mode above)
  DecodeBackend decode = DecodeBackend::kCpu;
  // decode = kNvjpeg: the fraction of each batch the decode threads decode on the CPU while nvJPEG decodes the
  // rest. < 0 (the default): adapted batch by batch so that neither side waits for the other (the GPU decoder and
  // the CPU threads add up); which rows go where then depends on timing. 0..1: fixed, a function of the row only
  // (0: nvJPEG alone).
  double nvjpeg_cpu_share = -1;
};

// The random choices of one sample's train transform, in source pixels.
struct SampleAugment {
  Box box;             // the crop (or the whole image), as random_resized_crop_box / resize_center_crop_box give it
  bool flip = false;   // mirrored left-right
  int shift_x = 0;     // translate: the resized image moves by (shift_x, shift_y), uncovered pixels 0
  int shift_y = 0;
  PixelRect erase;     // random erasing, in output pixels after shift and flip (zero width: none)
};

// The draws of sample `position` (its place in the epoch's global batch order) of `epoch` for an image of
// width × height: crop box, flip, translate, erasing, in that order from the sample's own stream. The CPU and the
// CUDA paths both call this, so the crops of a seed are the same whichever decodes.
SampleAugment draw_sample_augment(const LoaderOptions& options, int width, int height, std::int64_t epoch,
                                  std::int64_t position);

struct Batch {
  at::Tensor images;  // [n, C, H, W] (channels-last strides when format.layout == kHWC), or uint8
  at::Tensor labels;  // [n] int64
  std::int64_t epoch = 0;
  std::int64_t index = 0;  // batch index within the epoch
  // [n] int64, CPU: each row's place in the epoch's global batch order (index × batch_size × world_size with
  // split_batches, + rank × batch_size + row; rows of bad samples left out), what its augmentation draws are keyed
  // by — and the trainer keys its dropout masks by (train/image_task.cpp).
  at::Tensor positions;
};

// Cumulative counters (seconds are summed over threads).
struct LoaderStats {
  std::int64_t samples = 0;         // decoded into batches
  std::int64_t bad_samples = 0;     // skipped
  std::int64_t batches = 0;
  double plan_seconds = 0;          // planner: shard indexing, shuffle
  double decode_seconds = 0;        // workers: decode + crop + resize
  double store_seconds = 0;         // workers: flip + normalise + write to the batch
  double wait_seconds = 0;          // consumer: blocked waiting for the next batch
  double device_seconds = 0;        // CUDA mode: the stage thread (nvJPEG decode, copies, augment launches)
  double device_decode_seconds = 0; // CUDA mode, decode nvjpeg: of device_seconds, inside nvJPEG (headers + decode)
};

// Samples one epoch of `options` yields before batching (this rank's shards, all with split_batches; samples without an
// image or a label are not counted). Reads only the shard headers; steps per epoch for schedules.
std::int64_t count_samples(const LoaderOptions& options);

// Shards of `rank` among `world_size` ranks (round robin over the given order).
std::vector<std::string> shards_for_rank(const std::vector<std::string>& shards, int rank, int world_size);

class Loader {
 public:
  explicit Loader(LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Positions the loader at `position`; the next batch is that one. Replays only the plan
  // (shard headers), no decoding. Also how a new epoch starts: seek({epoch, 0}).
  void seek(BatchPosition position);
  // The next batch of the current epoch, or nullopt at its end (then seek to the next epoch).
  // Throws hotpath::Error when the bad-sample budget is exceeded or a shard cannot be opened.
  std::optional<Batch> next();
  [[nodiscard]] BatchPosition position() const;
  [[nodiscard]] LoaderStats stats() const;
  // "shard:offset:member: reason" of every skipped sample so far (capped at 1000 entries).
  [[nodiscard]] std::vector<std::string> bad_samples() const;
  [[nodiscard]] const LoaderOptions& options() const;
  // Which path decodes and where batches are finished, for the run's header line: "decode cpu (libjpeg-turbo,
  // 4 threads), augment cpu" or "decode nvjpeg (/path/libnvjpeg.so.13, hardware backend), augment cuda:0".
  [[nodiscard]] std::string describe() const;

  // Range over the batches of one epoch: `for (const Batch& b : loader.epoch(e))`.
  class EpochRange;
  EpochRange epoch(std::int64_t epoch);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

class Loader::EpochRange {
 public:
  class Iterator {
   public:
    Iterator() = default;
    explicit Iterator(Loader* loader) : loader_(loader) { advance(); }
    const Batch& operator*() const { return *current_; }
    const Batch* operator->() const { return &*current_; }
    Iterator& operator++() {
      advance();
      return *this;
    }
    bool operator==(const Iterator& other) const { return !current_ && !other.current_; }

   private:
    void advance() { current_ = loader_->next(); }
    Loader* loader_ = nullptr;
    std::optional<Batch> current_;
  };

  explicit EpochRange(Loader* loader) : loader_(loader) {}
  Iterator begin() { return Iterator(loader_); }
  Iterator end() { return {}; }

 private:
  Loader* loader_;
};

}  // namespace hotpath::data
