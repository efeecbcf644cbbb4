// NvjpegDecoder (nvjpeg_decoder.h). Compiled in full only with nvjpeg.h (HOTPATH_HAVE_NVJPEG_H); without
// it NvjpegLibrary::open() already refused, so no decoder is ever built and the constructor says so.
#include "nvjpeg_decoder.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cstring>

#include "hotpath/core/error.h"
#include "nvjpeg_table.h"

namespace hotpath::data {

#ifdef HOTPATH_HAVE_NVJPEG_H
namespace {

const char* status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
  }
  return "unknown status";
}

}  // namespace

// Handles in creation order; the destructor releases them in reverse.
struct NvjpegDecoderState {
  const NvjpegTable* t = nullptr;
  nvjpegHandle_t hybrid = nullptr;          // NVJPEG_BACKEND_DEFAULT: one image at a time
  nvjpegJpegState_t hybrid_state = nullptr;
  nvjpegHandle_t hardware = nullptr;        // NVJPEG_BACKEND_HARDWARE, null where the GPU has no JPEG engine
  nvjpegJpegState_t hardware_state = nullptr;
  nvjpegJpegStream_t hardware_stream = nullptr;  // header parser for nvjpegDecodeBatchedSupported
  std::string hardware_absent;              // why there is no hardware decoder
  std::atomic<std::int64_t> on_hardware{0}, on_hybrid{0}, on_cpu{0};

  ~NvjpegDecoderState() {
    if (hardware_stream) t->nvjpegJpegStreamDestroy(hardware_stream);
    if (hardware_state) t->nvjpegJpegStateDestroy(hardware_state);
    if (hardware) t->nvjpegDestroy(hardware);
    if (hybrid_state) t->nvjpegJpegStateDestroy(hybrid_state);
    if (hybrid) t->nvjpegDestroy(hybrid);
  }
};

NvjpegDecoder::NvjpegDecoder(std::shared_ptr<const NvjpegLibrary> library, int channels, DecodeLimits limits)
    : library_(std::move(library)), channels_(channels), limits_(limits), state_(std::make_unique<NvjpegDecoderState>()) {
  HOTPATH_CHECK(library_ != nullptr, "nvjpeg: no library");
  HOTPATH_CHECK(channels_ == 1 || channels_ == 3, "nvjpeg: channels must be 1 or 3, got ", channels_);
  NvjpegDecoderState& s = *state_;
  s.t = &library_->table();
  const NvjpegTable& t = *s.t;
  nvjpegStatus_t st = t.nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &s.hybrid);
  HOTPATH_CHECK(st == NVJPEG_STATUS_SUCCESS, "nvjpeg: nvjpegCreateEx(default backend) failed with ", status_name(st),
                " (", library_->describe(), ")");
  st = t.nvjpegJpegStateCreate(s.hybrid, &s.hybrid_state);
  HOTPATH_CHECK(st == NVJPEG_STATUS_SUCCESS, "nvjpeg: nvjpegJpegStateCreate failed with ", status_name(st));
  // The hardware decoder (A100, H100, H200 ...) decodes baseline JPEGs in batches on dedicated engines.
  st = t.nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &s.hardware);
  if (st != NVJPEG_STATUS_SUCCESS) {
    s.hardware = nullptr;
    s.hardware_absent = status_name(st);
    return;
  }
  if (t.nvjpegJpegStateCreate(s.hardware, &s.hardware_state) != NVJPEG_STATUS_SUCCESS ||
      t.nvjpegJpegStreamCreate(s.hardware, &s.hardware_stream) != NVJPEG_STATUS_SUCCESS) {
    s.hardware_absent = "its state could not be created";
    if (s.hardware_state) t.nvjpegJpegStateDestroy(s.hardware_state);
    t.nvjpegDestroy(s.hardware);
    s.hardware = nullptr;
    s.hardware_state = nullptr;
  }
}

NvjpegDecoder::~NvjpegDecoder() = default;

std::vector<at::Tensor> NvjpegDecoder::decode(std::span<const std::span<const std::byte>> encoded,
                                              const c10::Stream& stream, std::vector<std::string>& errors) {
  NvjpegDecoderState& s = *state_;
  const NvjpegTable& t = *s.t;
  const std::size_t n = encoded.size();
  errors.assign(n, std::string());
  std::vector<at::Tensor> out(n);
  auto* cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
  const nvjpegOutputFormat_t format = channels_ == 3 ? NVJPEG_OUTPUT_RGBI : NVJPEG_OUTPUT_Y;
  const auto options = at::TensorOptions().dtype(at::kByte).device(stream.device());
  auto data = [&](std::size_t i) { return reinterpret_cast<const unsigned char*>(encoded[i].data()); };
  auto destination = [&](std::size_t i) {
    nvjpegImage_t image{};
    image.channel[0] = out[i].data_ptr<std::uint8_t>();
    image.pitch[0] = static_cast<std::size_t>(out[i].size(1)) * static_cast<std::size_t>(channels_);
    return image;
  };

  // 1. Headers: the size of each output (what nvJPEG cannot parse goes to the CPU).
  std::vector<std::size_t> gpu, cpu;
  for (std::size_t i = 0; i < n; ++i) {
    int components = 0;
    nvjpegChromaSubsampling_t subsampling{};
    int widths[NVJPEG_MAX_COMPONENT] = {};
    int heights[NVJPEG_MAX_COMPONENT] = {};
    const bool jpeg = sniff_format(encoded[i]) == ImageFormat::kJpeg;
    if (!jpeg || t.nvjpegGetImageInfo(s.hybrid, data(i), encoded[i].size(), &components, &subsampling, widths,
                                      heights) != NVJPEG_STATUS_SUCCESS ||
        widths[0] <= 0 || heights[0] <= 0 ||
        static_cast<std::int64_t>(widths[0]) * heights[0] > limits_.max_pixels) {
      cpu.push_back(i);
      continue;
    }
    out[i] = at::empty({heights[0], widths[0], channels_}, options);
    gpu.push_back(i);
  }

  // 2. The hardware decoder, batched, for the images it supports.
  std::vector<std::size_t> single;
  if (s.hardware != nullptr) {
    std::vector<std::size_t> batched;
    for (std::size_t i : gpu) {
      int unsupported = 1;
      if (t.nvjpegJpegStreamParseHeader(s.hardware, data(i), encoded[i].size(), s.hardware_stream) ==
              NVJPEG_STATUS_SUCCESS &&
          t.nvjpegDecodeBatchedSupported(s.hardware, s.hardware_stream, &unsupported) == NVJPEG_STATUS_SUCCESS &&
          unsupported == 0) {
        batched.push_back(i);
      } else {
        single.push_back(i);
      }
    }
    if (!batched.empty()) {
      std::vector<const unsigned char*> ptrs;
      std::vector<std::size_t> lengths;
      std::vector<nvjpegImage_t> images;
      for (std::size_t i : batched) {
        ptrs.push_back(data(i));
        lengths.push_back(encoded[i].size());
        images.push_back(destination(i));
      }
      const bool ok =
          t.nvjpegDecodeBatchedInitialize(s.hardware, s.hardware_state, static_cast<int>(batched.size()), 1, format) ==
              NVJPEG_STATUS_SUCCESS &&
          t.nvjpegDecodeBatched(s.hardware, s.hardware_state, ptrs.data(), lengths.data(), images.data(),
                                cuda_stream) == NVJPEG_STATUS_SUCCESS;
      if (ok) {
        s.on_hardware += static_cast<std::int64_t>(batched.size());
      } else {  // one bad image fails the whole call: find it one at a time
        single.insert(single.end(), batched.begin(), batched.end());
      }
    }
  } else {
    single = gpu;
  }

  // 3. nvJPEG's hybrid decoder, one image at a time.
  for (std::size_t i : single) {
    nvjpegImage_t image = destination(i);
    if (t.nvjpegDecode(s.hybrid, s.hybrid_state, data(i), encoded[i].size(), format, &image, cuda_stream) ==
        NVJPEG_STATUS_SUCCESS) {
      ++s.on_hybrid;
    } else {
      out[i] = at::Tensor();
      cpu.push_back(i);
    }
  }

  // 4. The CPU decoders (libjpeg-turbo, libpng): their error is the sample's reason, as on the CPU path.
  for (std::size_t i : cpu) {
    try {
      Image image = decode_image(encoded[i], channels_, limits_);
      const at::Tensor host = at::from_blob(image.pixels.data(), {image.height, image.width, channels_}, at::kByte);
      out[i] = host.to(stream.device());  // pageable memory: a synchronous copy, this rare path only
      ++s.on_cpu;
    } catch (const std::exception& e) {
      out[i] = at::Tensor();
      errors[i] = e.what();
    }
  }
  return out;
}

std::string NvjpegDecoder::describe() const {
  const NvjpegDecoderState& s = *state_;
  std::string backend = s.hardware != nullptr ? "hardware decoder, batched"
                                              : "hybrid decoder (no hardware JPEG decoder: " + s.hardware_absent + ")";
  return library_->describe() + ", " + backend + "; images so far: " + std::to_string(s.on_hardware.load()) +
         " hardware, " + std::to_string(s.on_hybrid.load()) + " hybrid, " + std::to_string(s.on_cpu.load()) +
         " CPU fallback";
}

#else  // built without nvjpeg.h

struct NvjpegDecoderState {};

NvjpegDecoder::NvjpegDecoder(std::shared_ptr<const NvjpegLibrary> library, int channels, DecodeLimits limits)
    : library_(std::move(library)), channels_(channels), limits_(limits) {
  HOTPATH_CHECK(false, "nvjpeg: this hotpath was built without nvjpeg.h");
}
NvjpegDecoder::~NvjpegDecoder() = default;
std::vector<at::Tensor> NvjpegDecoder::decode(std::span<const std::span<const std::byte>>, const c10::Stream&,
                                              std::vector<std::string>&) {
  return {};
}
std::string NvjpegDecoder::describe() const { return "nvjpeg: not built"; }

#endif

}  // namespace hotpath::data
