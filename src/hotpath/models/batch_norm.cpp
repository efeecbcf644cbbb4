// BatchNorm2d with optional cross-rank statistics (models/batch_norm.h). The synchronised op is its own
// autograd node (SyncBatchNormBackward) so that its backward can run the group's all-reduce.
#include "hotpath/models/batch_norm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/nn/modules/batchnorm.h>

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/ops/fused_bn_relu.h"

namespace hotpath::models {
namespace {

using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

// Every dimension but the channels (1): what the statistics reduce over.
std::vector<std::int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A custom autograd node in the pointer type this LibTorch holds nodes in: std::shared_ptr<Node> up to torch 2.11
// (the GPU machine's), c10::intrusive_ptr<Node> in later releases. Decided from Edge::function's type, not from a
// version number, so a release that changes it again fails to compile here instead of at a guessed version.
template <class T>
auto make_autograd_node() {
  using NodePtr = decltype(torch::autograd::Edge{}.function);
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>();
  } else {
    return c10::make_intrusive<T>();
  }
}

// [C] → [1, C, 1, ...] to broadcast against x.
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

// Statistics math in float32 at least (bf16 activations under autocast are upcast, as ATen's batch_norm does).
at::Tensor compute_dtype(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? t.to(at::kFloat) : t;
}

struct SyncBatchNormBackward final : torch::autograd::Node {
  variable_list apply(variable_list&& grads) override {
    const at::Tensor x_in = x_.unpack();
    const at::Tensor x = compute_dtype(x_in);
    const at::Tensor w = compute_dtype(weight_.unpack());
    const auto dims = reduced_dims(x);
    const at::Tensor mean = per_channel(mean_.to(x.scalar_type()), x);
    const at::Tensor invstd = invstd_.to(x.scalar_type());
    at::Tensor g = grads[0].defined() ? compute_dtype(grads[0]) : at::zeros_like(x);
    const at::Tensor xmu = x - mean;
    if (relu_) {  // the ReLU's mask, recomputed from the saved input: y = xmu·invstd·w + b > 0
      const at::Tensor b = compute_dtype(bias_.unpack());
      const at::Tensor y = xmu * per_channel(invstd * w, x) + per_channel(b, x);
      g = g.masked_fill(y <= 0, 0);
    }
    // Local per-channel reductions (float64): weight and bias get these (DDP averages them over ranks).
    const at::Tensor sum_dy = g.sum(dims, false, at::kDouble);
    const at::Tensor sum_dy_xmu = (g * xmu).sum(dims, false, at::kDouble);
    variable_list out(3);
    if (task_should_compute_output(1)) out[1] = (sum_dy_xmu * invstd_).to(weight_dtype_);
    if (task_should_compute_output(2)) out[2] = sum_dy.to(weight_dtype_);
    if (task_should_compute_output(0)) {
      // The gradient through the global mean and variance needs the global sums: one collective.
      const std::int64_t channels = sum_dy.size(0);
      at::Tensor global = at::cat({sum_dy, sum_dy_xmu});
      group_->all_reduce_sum(global, what_ + " (backward)");
      const at::Tensor mean_dy = (global.slice(0, 0, channels) / count_).to(x.scalar_type());
      const at::Tensor mean_dy_xmu = (global.slice(0, channels) / count_).to(x.scalar_type());
      const at::Tensor grad_x = (g - per_channel(mean_dy, x) - xmu * per_channel(invstd * invstd * mean_dy_xmu, x)) *
                                per_channel(invstd * w, x);
      out[0] = grad_x.to(x_in.scalar_type());
    }
    return out;
  }
  [[nodiscard]] std::string name() const override { return "SyncBatchNormBackward"; }
  void release_variables() override {
    x_.reset_data();
    weight_.reset_data();
    bias_.reset_data();
  }

  SavedVariable x_, weight_, bias_;
  at::Tensor mean_, invstd_;  // float64 [C], the global batch's
  double count_ = 0;          // values per channel in the global batch
  bool relu_ = false;
  at::ScalarType weight_dtype_ = at::kFloat;
  std::shared_ptr<BatchNormGroup> group_;
  std::string what_;
};

SyncBatchNorm2dImpl* synchronised(torch::nn::BatchNorm2dImpl& bn) {
  if (!bn.is_training()) return nullptr;  // eval: running statistics, no collective
  auto* sync = dynamic_cast<SyncBatchNorm2dImpl*>(&bn);
  return sync != nullptr && sync->group && sync->group->world_size() > 1 ? sync : nullptr;
}

// BatchNormImplBase::forward's bookkeeping: count the batch; momentum=None means a cumulative average.
at::Tensor sync_forward(SyncBatchNorm2dImpl& bn, const at::Tensor& x, bool relu) {
  double momentum = bn.options.momentum().value_or(0.0);
  bn.num_batches_tracked += 1;
  if (!bn.options.momentum().has_value()) momentum = 1.0 / bn.num_batches_tracked.item<double>();
  return sync_batch_norm(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, momentum, bn.options.eps(), relu,
                         bn.group, "sync_batchnorm statistics of " + (bn.path.empty() ? "a BatchNorm layer" : bn.path));
}

}  // namespace

torch::nn::BatchNorm2d batch_norm2d(const torch::nn::BatchNormOptions& options) {
  return torch::nn::BatchNorm2d(std::shared_ptr<torch::nn::BatchNorm2dImpl>(std::make_shared<SyncBatchNorm2dImpl>(options)));
}

torch::nn::BatchNorm2d batch_norm2d(std::int64_t channels) {
  return batch_norm2d(torch::nn::BatchNormOptions(channels));
}

at::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x) {
  if (auto* sync = synchronised(bn)) return sync_forward(*sync, x, /*relu=*/false);
  return bn.forward(x);
}

at::Tensor batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x) {
  if (auto* sync = synchronised(bn)) return sync_forward(*sync, x, /*relu=*/true);
  return ops::fused_bn_relu(bn, x);
}

at::Tensor sync_batch_norm(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var, double momentum, double eps,
                           bool relu, const std::shared_ptr<BatchNormGroup>& group, const std::string& what) {
  HOTPATH_CHECK(group != nullptr, what, ": no group to synchronise over");
  HOTPATH_CHECK(x_in.dim() >= 2, what, ": expected input [N, C, ...], got ", x_in.sizes());
  const std::int64_t channels = x_in.size(1);
  HOTPATH_CHECK(weight.defined() && bias.defined() && weight.numel() == channels && bias.numel() == channels, what,
                ": expected weight and bias of ", channels, " channels");
  at::Tensor y;
  at::Tensor mean, invstd;
  double count = 0;
  {
    at::NoGradGuard no_grad;
    const at::Tensor x = compute_dtype(x_in);
    const auto dims = reduced_dims(x);
    // One collective: [per-channel sum, per-channel sum of squares, count] in float64.
    at::Tensor stats = at::cat({x.sum(dims, false, at::kDouble), x.square().sum(dims, false, at::kDouble),
                                at::full({1}, static_cast<double>(x.numel() / channels),
                                         x.options().dtype(at::kDouble))});
    group->all_reduce_sum(stats, what);
    count = stats[2 * channels].item<double>();
    HOTPATH_CHECK(count > 1, what, ": expected more than 1 value per channel in the global batch, got ", count);
    mean = stats.slice(0, 0, channels) / count;
    const at::Tensor var = (stats.slice(0, channels, 2 * channels) / count - mean * mean).clamp_min(0);
    invstd = (var + eps).rsqrt();
    if (running_mean.defined()) {
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
      running_var.mul_(1 - momentum).add_((var * (count / (count - 1))).to(running_var.scalar_type()), momentum);
    }
    const at::Tensor scale = invstd * compute_dtype(weight).to(at::kDouble);
    const at::Tensor shift = compute_dtype(bias).to(at::kDouble) - mean * scale;
    y = x * per_channel(scale.to(x.scalar_type()), x) + per_channel(shift.to(x.scalar_type()), x);
    if (relu) y.relu_();
    y = y.to(x_in.scalar_type());
  }
  if (torch::autograd::compute_requires_grad(x_in, weight, bias)) {
    auto node = make_autograd_node<SyncBatchNormBackward>();
    node->set_next_edges(torch::autograd::collect_next_edges(x_in, weight, bias));
    node->x_ = SavedVariable(x_in, false);
    node->weight_ = SavedVariable(weight, false);
    node->bias_ = SavedVariable(bias, false);
    node->mean_ = mean;
    node->invstd_ = invstd;
    node->count_ = count;
    node->relu_ = relu;
    node->weight_dtype_ = weight.scalar_type();
    node->group_ = group;
    node->what_ = what;
    torch::autograd::set_history(y, node);
  }
  return y;
}

std::int64_t attach_batchnorm_group(torch::nn::Module& model, const std::shared_ptr<BatchNormGroup>& group) {
  std::int64_t layers = 0;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string& name = item.key();
    torch::nn::Module* m = item.value().get();
    HOTPATH_CHECK(dynamic_cast<torch::nn::BatchNorm1dImpl*>(m) == nullptr &&
                      dynamic_cast<torch::nn::BatchNorm3dImpl*>(m) == nullptr,
                  "model.sync_batchnorm: ", name, " is a ", m->name(), "; only BatchNorm2d layers synchronise");
    auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m);
    if (bn == nullptr) continue;
    auto* sync = dynamic_cast<SyncBatchNorm2dImpl*>(bn);
    HOTPATH_CHECK(sync != nullptr, "model.sync_batchnorm: ", name,
                  " is a plain torch::nn::BatchNorm2d (not built by models::batch_norm2d); it cannot synchronise");
    HOTPATH_CHECK(sync->options.affine() && sync->options.track_running_stats(), "model.sync_batchnorm: ", name,
                  " has affine=false or no running statistics; synchronised BatchNorm needs both");
    sync->group = group;
    sync->path = name;
    ++layers;
  }
  return layers;
}

}  // namespace hotpath::models
