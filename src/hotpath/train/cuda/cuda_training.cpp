// CUDA settings and staging for training (cuda_training.h). ATen only: builds and links without CUDA.
#include "cuda_training.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "hotpath/ops/attention.h"

namespace hotpath::train {

std::string configure_cuda_training(const at::Device& device) {
  if (!device.is_cuda()) return "";
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
