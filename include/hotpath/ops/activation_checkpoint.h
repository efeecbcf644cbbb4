// hotpath/ops/activation_checkpoint.h — recompute a block in backward instead of keeping its
// activations (torch.utils.checkpoint, reentrant variant, for LibTorch C++), and a CPU peak-memory meter.
//
//   at::Tensor h = checkpoint([&](const std::vector<at::Tensor>& in) { return layer->forward(in[0], in[1]); },
//                             {hidden, mask});
//   PeakMemory meter;  ...train step...;  std::int64_t bytes = meter.peak_bytes();
//
// checkpoint() runs the block under no_grad, keeping only its inputs, the CPU (and the inputs' CUDA
// device's) RNG state and the autocast state. Backward restores those, re-runs the block with grad on
// detached inputs and back-propagates through it (torch::autograd::backward inside the outer backward,
// as PyTorch's reentrant checkpoint does): parameter .grad accumulate, input grads are returned. Same
// seed, same dropout masks, so gradients equal the plain run's. With grad mode off it just calls the
// block. When no input requires grad (frozen embeddings), a dummy input that does keeps the block in
// the graph, so its parameters still get gradients (PyTorch's reentrant variant would silently drop them).
//
// Limits: one tensor output; the block must not change its inputs in place or depend on state that
// changes between forward and backward other than the RNG.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace hotpath::ops {

using CheckpointFn = std::function<at::Tensor(const std::vector<at::Tensor>& inputs)>;

// fn(inputs) with its activations recomputed in backward. Undefined inputs are passed through as
// undefined tensors; integer/bool inputs (masks) get no gradient.
at::Tensor checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs);
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input);

// Bytes of CPU tensor memory in use, and the most in use since construction or reset(), counted by a
// wrapper around c10's CPU allocator that the first PeakMemory installs for the rest of the process.
// Only allocations made after that are counted (earlier tensors are neither added nor subtracted), so
// peak_bytes() is relative: the highest (in use − in use at reset()). Counts what ATen allocates on
// the CPU (tensors and their storage), not oneDNN scratch or malloc outside ATen. Process-wide: other
// threads' tensors count too; once installed, each CPU allocation and free takes a mutex. One meter at a
// time (reset() moves the shared peak). Not for CUDA (use c10::cuda::CUDACachingAllocator's stats).
class PeakMemory {
 public:
  PeakMemory();
  void reset();
  [[nodiscard]] std::int64_t peak_bytes() const;     // max over time of (current − current at reset)
  [[nodiscard]] std::int64_t current_bytes() const;  // current − current at reset
  // Total counted bytes in use (all allocations since the wrapper was installed).
  [[nodiscard]] static std::int64_t allocated_bytes();

 private:
  std::int64_t base_ = 0;
};

}  // namespace hotpath::ops
