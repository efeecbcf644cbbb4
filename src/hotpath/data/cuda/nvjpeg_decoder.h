// data/cuda/nvjpeg_decoder.h (private to hotpath_data) — whole JPEGs to [H, W, C] uint8 images on a CUDA
// device with nvJPEG: the hardware decoder (batched) for what it supports, else nvJPEG's hybrid decoder one
// image at a time, else libjpeg-turbo/libpng on this thread (PNG, CMYK, what nvJPEG rejects). An image all
// of them reject gets its reason and no tensor, like a bad sample on the CPU path.
//
//   NvjpegDecoder decoder(NvjpegLibrary::open(NvjpegLibrary::default_candidates()), 3, limits);
//   auto images = decoder.decode(encoded, stream, errors);   // on `stream`; errors[i] non-empty = rejected
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hotpath/data/kernels/image.h"
#include "hotpath/data/nvjpeg_library.h"

namespace hotpath::data {

struct NvjpegDecoderState;  // handles and states, released in order by its destructor

class NvjpegDecoder {
 public:
  NvjpegDecoder(std::shared_ptr<const NvjpegLibrary> library, int channels, DecodeLimits limits);
  ~NvjpegDecoder();
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  // Decodes `encoded` on `stream` (its device); result i is undefined where errors[i] says why.
  std::vector<at::Tensor> decode(std::span<const std::span<const std::byte>> encoded, const c10::Stream& stream,
                                 std::vector<std::string>& errors);

  // "hardware backend" or "hybrid backend (no hardware JPEG decoder)", and how many images went each way.
  [[nodiscard]] std::string describe() const;

 private:
  std::shared_ptr<const NvjpegLibrary> library_;
  int channels_;
  DecodeLimits limits_;
  std::unique_ptr<NvjpegDecoderState> state_;
};

}  // namespace hotpath::data
