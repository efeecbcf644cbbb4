// hotpath/models/batch_norm.h — the BatchNorm2d every image model builds, with optional synchronised
// statistics across data-parallel ranks (PyTorch's SyncBatchNorm semantics; recipe key model.sync_batchnorm).
//
//   torch::nn::BatchNorm2d bn = batch_norm2d(torch::nn::BatchNormOptions(64));   // in a model's constructor
//   at::Tensor y = batch_norm_relu(*bn, conv2d(*conv, x));                       // in its forward
//   attach_batchnorm_group(*model, group);   // trainer: every BatchNorm layer's statistics span the group
//
// Without a group (or a group of one rank, or in eval) a layer is exactly torch::nn::BatchNorm2d (and the
// fused BN+ReLU op of ops/fused_bn_relu.h). With a group of several ranks, training normalises with the
// mean and biased variance of the GLOBAL batch: one all-reduce of [per-channel sum, sum of squares, count]
// per layer in forward; running_var takes the unbiased variance with the global count. Backward is the
// gradient of the global statistics: one all-reduce of the per-channel sums of dy and dy·(x−mean) per layer,
// while weight/bias get their local gradients (the DDP gradient average then makes them global), exactly
// as torch.nn.SyncBatchNorm. Statistics are accumulated in float64. Every rank must run every layer in the
// same order (the collectives pair up by order).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>

#include <cstdint>
#include <memory>
#include <string>

namespace hotpath::models {

// The ranks whose batches one set of statistics covers. The trainer implements it on its process group.
class BatchNormGroup {
 public:
  virtual ~BatchNormGroup() = default;
  [[nodiscard]] virtual int world_size() const = 0;
  // Sums `tensor` over the ranks in place (blocking). `what` names the layer in an error.
  virtual void all_reduce_sum(at::Tensor& tensor, const std::string& what) = 0;
};

// torch::nn::BatchNorm2dImpl plus the group its statistics span (none by default). Same parameters,
// buffers and state-dict names; `as<torch::nn::BatchNorm2d>()` finds it.
class SyncBatchNorm2dImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;
  std::shared_ptr<BatchNormGroup> group;
  std::string path;  // the layer's name in the model ("layer1.0.bn1"), for messages
};

// A torch::nn::BatchNorm2d holder around a SyncBatchNorm2dImpl: what models build.
torch::nn::BatchNorm2d batch_norm2d(const torch::nn::BatchNormOptions& options);
torch::nn::BatchNorm2d batch_norm2d(std::int64_t channels);

// bn->forward(x), synchronised when bn has a group of more than one rank and is training.
at::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x);
// relu(batch_norm(bn, x)): ops::fused_bn_relu when not synchronised, else the synchronised op with the ReLU
// fused into its forward and backward.
at::Tensor batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x);

// The synchronised training forward on explicit tensors (the module forms call it): normalises x [N, C, ...]
// with the group's global statistics, updates running_mean/running_var (momentum; unbiased variance with the
// global count), optionally applies ReLU. Differentiable in x, weight and bias. `what` names it in errors.
at::Tensor sync_batch_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var, double momentum, double eps,
                           bool relu, const std::shared_ptr<BatchNormGroup>& group, const std::string& what);

// Sets (or with nullptr clears) the group of every BatchNorm layer of `model`; returns how many there are.
// A BatchNorm layer that cannot synchronise (not built by batch_norm2d, affine=false, no running statistics)
// is an error naming it.
std::int64_t attach_batchnorm_group(torch::nn::Module& model, const std::shared_ptr<BatchNormGroup>& group);

}  // namespace hotpath::models
