// hotpath/ops/fused_bn_relu.h — BatchNorm2d followed by ReLU as one CPU op (fp32, NHWC or NCHW).
//
//   torch::nn::BatchNorm2d bn(32);
//   at::Tensor y = fused_bn_relu(*bn, conv->forward(x));   // == bn->forward(conv->forward(x)).relu_()
//   const char* why = fused_bn_relu_skip_reason(*bn, x);    // nullptr when the fused kernels run
//
// Why: on a 2-core CPU, ATen's batch_norm + relu (forward and backward) cost a third of a small
// CNN's training step — five full passes over the activation plus the threshold_backward pass.
// Fused, training takes two passes forward (statistics; normalise + ReLU) and two backward
// (per-channel sums; grad_input), with the ReLU mask recomputed from the saved input.
//
// Semantics are torch's: training normalises with the batch mean and biased variance, updates
// running_mean/running_var with `momentum` and the unbiased variance, and the module form bumps
// num_batches_tracked; eval uses the running statistics. Sums are taken over fixed-size blocks
// combined in a fixed order, so results are bit-identical run to run, whatever the thread count.
// Anything else (CUDA, bf16 under autocast, strided layouts, affine=false, no running stats, one
// value per channel) goes to ATen's batch_norm + relu: the reference, with the reason above.
// The fused loops are compiled for baseline x86-64 and for AVX2, bit-identical; which one runs is
// op "batch_norm_relu" of the CPU dispatch (core/cpu.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/batchnorm.h>

namespace hotpath::ops {

// relu(batch_norm(input, ...)) with at::batch_norm's arguments; differentiable in input, weight, bias.
// running_mean/running_var are updated in place when `training`.
at::Tensor batch_norm_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                           double momentum, double eps);

// Why batch_norm_relu would run ATen's ops instead of the fused kernels, or nullptr.
const char* batch_norm_relu_skip_reason(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                        const at::Tensor& running_mean, const at::Tensor& running_var, bool training);

// bn->forward(input).relu_() with the module's own tensors and options (momentum, eps, training,
// num_batches_tracked), so state dicts, checkpoints and EMA see exactly what the module would do.
at::Tensor fused_bn_relu(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& input);

// Why fused_bn_relu would take the module's own forward + relu_, or nullptr.
const char* fused_bn_relu_skip_reason(const torch::nn::BatchNorm2dImpl& bn, const at::Tensor& input);

}  // namespace hotpath::ops
