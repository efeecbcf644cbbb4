// The train transform's pixel work as ATen ops (device_augment.h). No CUDA API here: the same code runs on
// CUDA tensors in the loader's CUDA mode and on CPU tensors in the tests.
#include "hotpath/data/device_augment.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "hotpath/core/error.h"

namespace hotpath::data {
namespace {

// One image [H, W, C] uint8 → [C, size, size] float 0..255, resized from its box.
at::Tensor crop_resize(const at::Tensor& hwc, const Box& box, int size) {
  const std::int64_t height = hwc.size(0);
  const std::int64_t width = hwc.size(1);
  if (box.crop_first) {
    // RandomResizedCrop boxes are whole pixels (transforms.cpp); cut, then resize the cut.
    const auto x0 = static_cast<std::int64_t>(std::floor(box.x));
    const auto y0 = static_cast<std::int64_t>(std::floor(box.y));
    const auto x1 = static_cast<std::int64_t>(std::ceil(box.x + box.w));
    const auto y1 = static_cast<std::int64_t>(std::ceil(box.y + box.h));
    HOTPATH_CHECK(x0 >= 0 && y0 >= 0 && x1 <= width && y1 <= height && x1 > x0 && y1 > y0, "crop_resize_batch: box (",
                  box.x, ", ", box.y, ", ", box.w, ", ", box.h, ") is not inside the ", width, "x", height, " image");
    const at::Tensor crop = hwc.slice(0, y0, y1).slice(1, x0, x1).permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
    return at::_upsample_bilinear2d_aa(crop, at::IntArrayRef{size, size}, /*align_corners=*/false, std::nullopt)[0];
  }
  // Resize the whole image so the box becomes size × size, then cut the box out (torchvision's order).
  const double sx = size / box.w;
  const double sy = size / box.h;
  const auto new_w = static_cast<std::int64_t>(std::llround(static_cast<double>(width) * sx));
  const auto new_h = static_cast<std::int64_t>(std::llround(static_cast<double>(height) * sy));
  const auto left = std::clamp<std::int64_t>(std::llround(box.x * sx), 0, std::max<std::int64_t>(new_w - size, 0));
  const auto top = std::clamp<std::int64_t>(std::llround(box.y * sy), 0, std::max<std::int64_t>(new_h - size, 0));
  HOTPATH_CHECK(new_w >= size && new_h >= size, "crop_resize_batch: box (", box.x, ", ", box.y, ", ", box.w, ", ",
                box.h, ") asks for more than the ", width, "x", height, " image holds");
  const at::Tensor whole = hwc.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
  const at::Tensor resized =
      at::_upsample_bilinear2d_aa(whole, at::IntArrayRef{new_h, new_w}, /*align_corners=*/false, std::nullopt)[0];
  return resized.slice(1, top, top + size).slice(2, left, left + size);
}

// Moves `chw` by (dx, dy) pixels into `dst`, uncovered pixels 0 (the CPU path's shift_image).
void shift_into(const at::Tensor& chw, int dx, int dy, at::Tensor dst) {
  const std::int64_t h = chw.size(1);
  const std::int64_t w = chw.size(2);
  dst.zero_();
  if (std::abs(dx) >= w || std::abs(dy) >= h) return;
  const std::int64_t src_x0 = std::max(0, -dx), dst_x0 = std::max(0, dx);
  const std::int64_t src_y0 = std::max(0, -dy), dst_y0 = std::max(0, dy);
  const std::int64_t cw = w - std::abs(dx), ch = h - std::abs(dy);
  dst.slice(1, dst_y0, dst_y0 + ch).slice(2, dst_x0, dst_x0 + cw)
      .copy_(chw.slice(1, src_y0, src_y0 + ch).slice(2, src_x0, src_x0 + cw));
}

}  // namespace

at::Tensor crop_resize_batch(const std::vector<at::Tensor>& images_hwc, std::span<const SampleAugment> augments,
                             int size, const Normalization& norm) {
  HOTPATH_CHECK(images_hwc.size() == augments.size(), "crop_resize_batch: ", images_hwc.size(), " images but ",
                augments.size(), " augments");
  HOTPATH_CHECK(!images_hwc.empty(), "crop_resize_batch: no images");
  HOTPATH_CHECK(size >= 1, "crop_resize_batch: size must be >= 1, got ", size);
  const std::int64_t channels = images_hwc.front().size(2);
  at::Tensor out = at::empty({static_cast<std::int64_t>(images_hwc.size()), channels, size, size},
                             images_hwc.front().options().dtype(at::kFloat));
  for (std::size_t i = 0; i < images_hwc.size(); ++i) {
    const at::Tensor& image = images_hwc[i];
    HOTPATH_CHECK(image.dim() == 3 && image.scalar_type() == at::kByte && image.size(2) == channels,
                  "crop_resize_batch: image ", i, " must be [H, W, ", channels, "] uint8, got ", image.sizes(), " ",
                  image.scalar_type());
    const SampleAugment& a = augments[i];
    const at::Tensor resized = crop_resize(image, a.box, size);
    at::Tensor row = out[static_cast<std::int64_t>(i)];
    // The CPU path's order: shift the resized image, then mirror it (they do not commute).
    if (a.shift_x != 0 || a.shift_y != 0) {
      shift_into(resized, a.shift_x, a.shift_y, row);
    } else {
      row.copy_(resized);
    }
    if (a.flip) row.copy_(row.flip({2}));
    if (a.erase.width() > 0 && a.erase.height() > 0) {
      HOTPATH_CHECK(a.erase.x0 >= 0 && a.erase.y0 >= 0 && a.erase.x1 <= size && a.erase.y1 <= size,
                    "crop_resize_batch: erase rectangle of image ", i, " is not inside ", size, "x", size);
      for (std::int64_t c = 0; c < channels; ++c) {
        // The CPU path's uint8 store for a device that normalises later (erase_sample): the level nearest the mean.
        const float level = mean_pixel_level(norm, static_cast<int>(c));
        row[c].slice(0, a.erase.y0, a.erase.y1).slice(1, a.erase.x0, a.erase.x1).fill_(level);
      }
    }
  }
  return out;
}

at::Tensor normalize_batch(const at::Tensor& x, const Normalization& norm, const StoreFormat& format) {
  HOTPATH_CHECK(x.dim() == 4 && (x.size(1) == 1 || x.size(1) == 3), "normalize_batch: expected [B, 1 or 3, H, W], got ",
                x.sizes());
  at::Tensor out;
  if (format.type == PixelType::kUInt8) {
    out = x.scalar_type() == at::kByte ? x : x.round().clamp(0, 255).to(at::kByte);
  } else {
    const std::int64_t c = x.size(1);
    std::vector<float> scale(static_cast<std::size_t>(c)), bias(static_cast<std::size_t>(c));
    for (std::int64_t i = 0; i < c; ++i) {
      const auto k = static_cast<std::size_t>(i);
      // The CPU path's store_sample: x * (1/(255 std)) + (-mean/std), or x/255 without normalize.
      scale[k] = format.normalize ? 1.0f / (255.0f * norm.std[k]) : 1.0f / 255.0f;
      bias[k] = format.normalize ? -norm.mean[k] / norm.std[k] : 0.0f;
    }
    // To a CUDA device through pinned memory, non_blocking: a pageable copy would make the stage thread wait for
    // everything queued on its stream (the batch's decode and resize) before going on.
    const auto to_device = [&](const std::vector<float>& v) {
      at::Tensor host = at::tensor(v, at::TensorOptions().dtype(at::kFloat));
      if (!x.is_cuda()) return host;
      return host.pin_memory().to(x.device(), /*non_blocking=*/true);
    };
    const at::Tensor s = to_device(scale).view({1, c, 1, 1});
    const at::Tensor b = to_device(bias).view({1, c, 1, 1});
    out = at::addcmul(b, x.to(at::kFloat), s);
    if (format.type == PixelType::kBFloat16) out = out.to(at::kBFloat16);
  }
  return format.layout == PixelLayout::kHWC ? out.contiguous(at::MemoryFormat::ChannelsLast) : out.contiguous();
}

}  // namespace hotpath::data
