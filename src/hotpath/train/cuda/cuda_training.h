// train/cuda/cuda_training.h (private to hotpath_train) — what the training loop and the tasks do
// differently on a CUDA device: cuDNN benchmark mode, host batches staged through pinned memory and
// copied non_blocking, the SDPA kernel choice for the run's header line.
//
//   configure_cuda_training(device, "fp16", recipe.source);  // once, before the first step
//   at::Tensor ids = to_device(host_ids, device);           // pinned staging + non_blocking copy
//   out << sdpa_choice(device, heads, length, head_dim, at::kHalf);  // "SDPA flash" / "memory-efficient"
//
// Plain ATen calls: everything here builds without CUDA, and is a no-op (or "CPU") for a CPU device.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>

namespace hotpath::train {

// cuDNN benchmark mode (the fastest convolution algorithm per input shape, found on first use) for a
// CUDA device, or deterministic cuDNN when deterministic algorithms were asked for (exact resume on
// CUDA needs them); nothing for the CPU. Returns what was set, for the run's header line ("" on the CPU).
// bf16 on a GPU without native bf16 (compute capability < 8.0) is refused naming `where` (the recipe).
std::string configure_cuda_training(const at::Device& device, const std::string& precision, const std::string& where);

// True when `device` is a CUDA GPU with native bf16 math (compute capability 8.0+: Ampere and newer).
bool cuda_has_bf16(const at::Device& device);

// `host` on `device`: unchanged for the CPU; for CUDA copied into pinned memory, then to the device with
// a non_blocking copy (the caching host allocator keeps the pinned block until the copy has run).
at::Tensor to_device(const at::Tensor& host, const at::Device& device);

// The attention kernel ATen's SDPA picks on `device` for a [1, heads, length, head_dim] batch with a key
// padding mask in `dtype` (fp32 when nullopt): "SDPA memory-efficient" etc.; "" for the CPU.
std::string sdpa_choice(const at::Device& device, std::int64_t heads, std::int64_t length, std::int64_t head_dim,
                        std::optional<at::ScalarType> dtype);

}  // namespace hotpath::train
