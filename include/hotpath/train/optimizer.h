// hotpath/train/optimizer.h — SGD / AdamW with no-weight-decay groups, lr setters, grad clipping.
//
//   auto opt = make_optimizer({.kind = OptimizerKind::kAdamW, .lr = 1e-3, .weight_decay = 0.05},
//                             model->named_parameters().pairs());
//   double norm = clip_grad_norm(model->parameters(), /*max_norm=*/1.0);  opt->step();
//
// The no-decay rule is timm's: a parameter with dim() <= 1 (biases, BatchNorm/LayerNorm scales and
// shifts) or a name ending in ".bias" gets weight_decay 0. Group 0 holds the decayed parameters,
// group 1 the rest (an empty group is left out). Frozen parameters (requires_grad false) are skipped.
//
// AdamW on CUDA: ATen's fused multi-tensor kernel (at::_fused_adamw_, what torch.optim.AdamW(fused=True)
// runs): one launch per group and dtype (chunked by ATen), not LibTorch's ~9 launches per parameter. Same
// update rule (decoupled decay, bias-corrected moments, eps outside the square root) and the same state
// (torch::optim::AdamWParamState: step count, exp_avg, exp_avg_sq), so checkpoints read and write as before.
// AdamW over CPU parameters stays LibTorch's torch::optim::AdamW, bit for bit (what the parity tests pin).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace hotpath::train {

enum class OptimizerKind { kSgd, kAdamW };

// AdamW's kernel. kAuto: fused when every parameter is on a CUDA device, LibTorch's per-parameter loop
// otherwise (the CPU). kFused: the fused kernel wherever the tensors are (ATen has a CPU one too: what the
// CPU tests compare it with); a step whose tensors it cannot take (sparse or non-dense gradients, mixed
// devices) runs LibTorch's loop instead. kPerParameter: LibTorch's loop everywhere.
enum class AdamWKernel { kAuto, kFused, kPerParameter };

// "sgd", "adamw"; throws naming the allowed values.
OptimizerKind parse_optimizer_kind(std::string_view name);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.1;
  double weight_decay = 0.0;
  bool no_decay_norm_bias = true;  // false: one group, every parameter decayed
  // SGD
  double momentum = 0.9;
  double dampening = 0.0;
  bool nesterov = false;
  // AdamW
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  AdamWKernel adamw_kernel = AdamWKernel::kAuto;
};

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

// Whether the no-decay rule exempts this parameter (see the header comment).
[[nodiscard]] bool is_no_decay_param(const std::string& name, const at::Tensor& param);

struct ParamSplit {
  std::vector<std::string> decay;
  std::vector<std::string> no_decay;
};
// The names in each group, in the order make_optimizer puts them.
[[nodiscard]] ParamSplit split_weight_decay(const OptimizerConfig& config,
                                            const NamedParameters& named_params);

// Validates the config (lr > 0, 0 <= momentum < 1, nesterov needs momentum and no dampening,
// betas in [0, 1), eps > 0, weight_decay >= 0) and builds the optimizer.
[[nodiscard]] std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerConfig& config, const NamedParameters& named_params);
// The same with the groups decided beforehand: `split` names the decayed and exempt parameters (from the
// whole parameters), `named_params` may hold any subset of them under those names, e.g. ZeRO's 1-D slices of
// them (zero.h) — the no-decay rule must see the whole parameter, not its slice. Names in `split` that are
// absent are skipped, tensors the split lacks are left out (frozen).
[[nodiscard]] std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerConfig& config, const NamedParameters& named_params, const ParamSplit& split);

// Whether `optimizer` is make_optimizer's fused AdamW (kAuto over CUDA parameters, or kFused).
[[nodiscard]] bool is_fused_adamw(const torch::optim::Optimizer& optimizer);

// The loss scaler's step (grad_scaler.h) for the fused AdamW: queues the update with `found_inf` (float32,
// 0-dim, on the parameters' device; nonzero: a gradient was inf/NaN and the kernel leaves every parameter
// and moment as it was), and only then reads found_inf on the host — one wait at the end of the step, after
// the optimizer's work is queued, instead of one before it. Returns whether it stepped; step counts (and the
// state of parameters stepped for the first time) are kept only then, as if step() had not been called.
// nullopt: this optimizer cannot (not the fused AdamW, found_inf on another device, tensors the kernel does
// not take); nothing was done, and the caller reads found_inf and calls step() itself.
[[nodiscard]] std::optional<bool> step_unless_found_inf(torch::optim::Optimizer& optimizer,
                                                        const at::Tensor& found_inf);

// Every param group's lr.
void set_lr(torch::optim::Optimizer& optimizer, double lr);
// SGD: momentum; AdamW: beta1. Throws for another optimizer type.
void set_momentum(torch::optim::Optimizer& optimizer, double momentum);
[[nodiscard]] double get_lr(const torch::optim::Optimizer& optimizer, size_t group = 0);

// torch.nn.utils.clip_grad_norm_: scales all gradients by min(1, max_norm / (total + 1e-6)) where
// total is the norm (of order norm_type) of the per-parameter gradient norms. Returns total
// (inf/NaN when a gradient is). Parameters without a gradient are ignored; none at all → 0.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace hotpath::train
