// DeviceStage (device_stage.h): device-generic c10 streams and events and ATen ops only, so it builds and
// links without the CUDA toolkit; nvJPEG comes in through NvjpegDecoder (dlopen).
#include "device_stage.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <chrono>

#include "hotpath/core/error.h"
#include "hotpath/data/device_augment.h"
#include "nvjpeg_decoder.h"

namespace hotpath::data {
namespace {

c10::Stream stage_stream(const LoaderOptions& o) {
  HOTPATH_CHECK(o.device.is_cuda(), "loader: the CUDA mode needs a CUDA device, got ", o.device.str());
  HOTPATH_CHECK(at::globalContext().hasCUDA(), "loader: ",
                o.decode == DecodeBackend::kNvjpeg ? "decode nvjpeg" : "augment on the device", " needs a CUDA device (",
                o.device.str(), ") but none is available");
  const c10::Device device(c10::DeviceType::CUDA, o.device.has_index() ? o.device.index() : 0);
  // A pooled stream of its own: the stage's copies and kernels overlap the compute stream's.
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStreamFromGlobalPool(device, /*isHighPriority=*/false);
}

}  // namespace

DeviceStage::DeviceStage(const LoaderOptions& options) : options_(options), stream_(stage_stream(options)) {
  if (options_.decode == DecodeBackend::kNvjpeg) {
    decoder_ = std::make_unique<NvjpegDecoder>(NvjpegLibrary::open(NvjpegLibrary::default_candidates()),
                                               options_.channels, options_.limits);
  }
}

DeviceStage::~DeviceStage() = default;

at::Tensor DeviceStage::from_host(const at::Tensor& host_u8_hwc) {
  const c10::StreamGuard guard(stream_);
  const at::Tensor device_u8 = host_u8_hwc.to(stream_.device(), /*non_blocking=*/true);
  return normalize_batch(device_u8.permute({0, 3, 1, 2}), options_.normalization, options_.format);
}

at::Tensor DeviceStage::decode(const at::Tensor& host_u8_hwc, std::span<const std::span<const std::byte>> encoded,
                               std::span<const SampleAugment> augments, std::vector<std::string>& errors) {
  HOTPATH_ASSERT(decoder_ != nullptr);
  const c10::StreamGuard guard(stream_);
  std::vector<at::Tensor> parts;  // float 0..255 [n, C, S, S]: the CPU rows, then nvJPEG's
  if (host_u8_hwc.defined() && host_u8_hwc.size(0) > 0) {
    parts.push_back(host_u8_hwc.to(stream_.device(), /*non_blocking=*/true).permute({0, 3, 1, 2}).to(at::kFloat));
  }
  errors.clear();
  if (!encoded.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<at::Tensor> decoded = decoder_->decode(encoded, stream_, errors);
    decode_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<at::Tensor> good;
    std::vector<SampleAugment> good_augments;
    for (std::size_t i = 0; i < decoded.size(); ++i) {
      if (!decoded[i].defined()) continue;
      good.push_back(std::move(decoded[i]));
      good_augments.push_back(augments[i]);
    }
    if (!good.empty()) parts.push_back(crop_resize_batch(good, good_augments, options_.size, options_.normalization));
  }
  if (parts.empty()) return {};
  return normalize_batch(parts.size() == 1 ? parts.front() : at::cat(parts), options_.normalization, options_.format);
}

at::Tensor DeviceStage::labels(const at::Tensor& host_labels) {
  const c10::StreamGuard guard(stream_);
  return host_labels.to(stream_.device(), /*non_blocking=*/true);
}

c10::Event DeviceStage::finish() {
  c10::Event done(c10::DeviceType::CUDA);
  done.record(stream_);
  return done;
}

void DeviceStage::hand_over(const c10::Event& done, std::initializer_list<at::Tensor> tensors) {
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    const c10::Stream current = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device());
    done.block(current);
    t.record_stream(current);
  }
}

std::string DeviceStage::describe() const {
  const std::string where = stream_.device().str();
  if (decoder_) return "decode nvjpeg (" + decoder_->describe() + "), augment " + where + " (own stream)";
  return "decode cpu (libjpeg-turbo) into pinned uint8, augment " + where + " (own stream)";
}

}  // namespace hotpath::data
