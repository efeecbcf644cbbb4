// CUDA settings and staging for training (cuda_training.h). ATen only: builds and links without CUDA.
#include "cuda_training.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "hotpath/core/error.h"
#include "hotpath/ops/attention.h"

namespace hotpath::train {

bool cuda_has_bf16(const at::Device& device) {
  // ATen's own test for bf16 cuDNN convolutions: the current device's major compute capability >= 8.
  return device.is_cuda() && at::detail::getCUDAHooks().supportsBFloat16ConvolutionWithCuDNNv8();
}

std::string configure_cuda_training(const at::Device& device, const std::string& precision, const std::string& where) {
  if (!device.is_cuda()) return "";
  HOTPATH_CHECK(precision != "bf16" || cuda_has_bf16(device), where, ": train.precision: bf16 needs a GPU with "
                "native bf16 (compute capability 8.0+, Ampere or newer); ", device.str(), " has none: use fp16");
  at::Context& context = at::globalContext();
  // Deterministic algorithms asked for (at::globalContext().setDeterministicAlgorithms, e.g. by a test of
  // exact resume): benchmark mode could pick another algorithm after a resume, so it stays off.
  if (context.deterministicAlgorithms()) {
    context.setBenchmarkCuDNN(false);
    context.setDeterministicCuDNN(true);
    return "deterministic algorithms, cuDNN benchmark off";
  }
  context.setBenchmarkCuDNN(true);
  return "cuDNN benchmark on";
}

at::Tensor to_device(const at::Tensor& host, const at::Device& device) {
  if (!device.is_cuda()) return host;
  at::Tensor pinned = at::empty(host.sizes(), host.options().pinned_memory(true));
  pinned.copy_(host);
  return pinned.to(device, /*non_blocking=*/true);
}

std::string sdpa_choice(const at::Device& device, std::int64_t heads, std::int64_t length, std::int64_t head_dim,
                        std::optional<at::ScalarType> dtype) {
  if (!device.is_cuda()) return "";
  const at::Tensor q = at::zeros({1, heads, length, head_dim}, at::TensorOptions(device).dtype(dtype.value_or(at::kFloat)));
  const at::Tensor mask = at::ones({1, length}, at::TensorOptions(device).dtype(at::kLong));
  return std::string("SDPA ") + ops::sdpa_backend_name(q, q, q, mask);
}

}  // namespace hotpath::train
