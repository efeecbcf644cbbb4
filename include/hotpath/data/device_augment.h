// hotpath/data/device_augment.h — the train transform's pixel work as ATen ops, on whatever device the
// images are: the loader's CUDA mode runs it on the GPU after nvJPEG (or after a pinned uint8 copy);
// on the CPU it is the twin the tests hold against the libjpeg-turbo path.
//
//   std::vector<at::Tensor> decoded = ...;                         // [H, W, C] uint8 each, on the device
//   at::Tensor x = crop_resize_batch(decoded, augments, 224, norm); // [B, C, 224, 224] float, 0..255
//   at::Tensor batch = normalize_batch(x, norm, format);          // float/bf16 NCHW (channels-last strides for kHWC)
//
// Resize is ATen's antialiased bilinear (_upsample_bilinear2d_aa, PIL's filter in float): the crops are the
// CPU path's exactly, the pixels within the tolerance docs/gpu.md gives (PIL rounds to uint8 per pass, the
// CPU path may decode at 1/2..1/8 in the DCT domain).
#pragma once

#include <ATen/core/Tensor.h>

#include <span>
#include <vector>

#include "hotpath/data/loader.h"

namespace hotpath::data {

// Each image [H, W, C] uint8 (any strides) cropped and resized as its SampleAugment says, shifted, mirrored, then
// erased (the CPU path's order; erased pixels are the uint8 nearest norm's mean, as the CPU path stores them for a
// device that normalises later), into one [B, C, size, size] float tensor of 0..255 values on the images' device.
// A crop_first box (RandomResizedCrop) is cut at whole pixels, then resized; any other box is torchvision's
// Resize + CenterCrop: the whole image resized to width·size/box.w × height·size/box.h, then cut.
at::Tensor crop_resize_batch(const std::vector<at::Tensor>& images_hwc, std::span<const SampleAugment> augments,
                             int size, const Normalization& norm);

// x ([B, C, H, W], uint8 or float 0..255) to `format`: float/bf16 as (x/255 - mean)/std (or x/255 without
// normalize), uint8 rounded and clamped; kHWC gives channels-last strides. Gray (C = 1) uses mean[0]/std[0].
at::Tensor normalize_batch(const at::Tensor& x, const Normalization& norm, const StoreFormat& format);

}  // namespace hotpath::data
