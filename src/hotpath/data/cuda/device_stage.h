// data/cuda/device_stage.h (private to hotpath_data) — the loader's CUDA ("mixed") mode: finishes each batch
// on the GPU, on a stream of its own, from the loader's stage thread; the consumer's stream waits on an
// event instead of the host synchronising it.
//
//   DeviceStage stage(options);                                  // opens nvJPEG for decode = kNvjpeg
//   at::Tensor x = stage.from_host(pinned_u8_hwc);               // cpu decode: copy non_blocking + normalise
//   at::Tensor y = stage.decode(host_rows, jpegs, augments, errors);  // nvjpeg: the host rows (CPU-decoded) then
//                                                                //   the JPEGs decoded + crop/resize/flip, normalised
//   c10::Event done = stage.finish();                            // stage thread: no wait; host buffers reusable
//                                                                //   once done.synchronize() (at the slot's refill)
//   DeviceStage::hand_over(done, {x, labels});                   // consumer: its current stream waits on `done`
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hotpath/data/loader.h"

namespace hotpath::data {

class NvjpegDecoder;

class DeviceStage {
 public:
  // options.device must be a CUDA device that is present; decode = kNvjpeg opens nvJPEG. One line otherwise.
  explicit DeviceStage(const LoaderOptions& options);
  ~DeviceStage();
  DeviceStage(const DeviceStage&) = delete;
  DeviceStage& operator=(const DeviceStage&) = delete;

  // Host [B, S, S, C] uint8 (pinned), already cropped, resized, flipped and shifted on the CPU: copied
  // non_blocking to the device and normalised there into options.format.
  at::Tensor from_host(const at::Tensor& host_u8_hwc);
  // One batch of the split nvjpeg mode: `host_u8_hwc` ([N, S, S, C] pinned uint8, finished on the CPU; may be
  // undefined or empty) first, then the whole encoded images decoded on the device (nvJPEG) and crop_resize_batch'ed;
  // normalize_batch over all of them. Image i that no decoder accepts gets its reason in errors[i] and is left out
  // of the batch (the rows keep their order).
  at::Tensor decode(const at::Tensor& host_u8_hwc, std::span<const std::span<const std::byte>> encoded,
                    std::span<const SampleAugment> augments, std::vector<std::string>& errors);
  // Host labels to the device (non_blocking from pinned memory).
  at::Tensor labels(const at::Tensor& host_labels);
  // Records an event after the work so far on the stage's stream, without waiting: the batch's host memory
  // (pinned pixels, labels) may be reused once it has completed, and the compute stream waits on it (hand_over).
  // The stage thread goes on to the next batch while the GPU still runs this one.
  c10::Event finish();
  // Seconds this stage spent inside nvJPEG (header parsing and decode calls), host time, all batches so far.
  [[nodiscard]] double decode_seconds() const { return decode_seconds_; }
  // Consumer thread: the current stream of the tensors' device waits for `done`; the caching allocator learns
  // that the tensors are used on that stream (they were allocated on the stage's).
  static void hand_over(const c10::Event& done, std::initializer_list<at::Tensor> tensors);

  [[nodiscard]] std::string describe() const;

 private:
  LoaderOptions options_;
  c10::Stream stream_;
  std::unique_ptr<NvjpegDecoder> decoder_;
  double decode_seconds_ = 0;
};

}  // namespace hotpath::data
