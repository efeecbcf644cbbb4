#include "hotpath/train/optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::train {
namespace {

void validate(const OptimizerConfig& c) {
  HOTPATH_CHECK(c.lr > 0.0, "optimizer: lr must be > 0, got ", c.lr);
  HOTPATH_CHECK(c.weight_decay >= 0.0, "optimizer: weight_decay must be >= 0, got ", c.weight_decay);
  if (c.kind == OptimizerKind::kSgd) {
    HOTPATH_CHECK(c.momentum >= 0.0 && c.momentum < 1.0, "optimizer: momentum must be in [0, 1), got ",
                  c.momentum);
    HOTPATH_CHECK(!c.nesterov || (c.momentum > 0.0 && c.dampening == 0.0),
                  "optimizer: nesterov needs momentum > 0 and dampening 0, got momentum ", c.momentum,
                  " and dampening ", c.dampening);
  } else {
    HOTPATH_CHECK(c.beta1 >= 0.0 && c.beta1 < 1.0, "optimizer: beta1 must be in [0, 1), got ", c.beta1);
    HOTPATH_CHECK(c.beta2 >= 0.0 && c.beta2 < 1.0, "optimizer: beta2 must be in [0, 1), got ", c.beta2);
    HOTPATH_CHECK(c.eps > 0.0, "optimizer: eps must be > 0, got ", c.eps);
  }
}

// Whether the fused kernel takes `t` beside parameter `p`: same device, dtype, sizes and strides, dense
// (ATen's fast-path restrictions, checked here first so that a step the kernel would refuse runs the loop).
bool fused_takes(const at::Tensor& t, const at::Tensor& p) {
  return t.defined() && t.layout() == at::kStrided && t.device() == p.device() && t.scalar_type() == p.scalar_type() &&
         t.sizes() == p.sizes() && t.strides() == p.strides() && t.is_non_overlapping_and_dense();
}

// torch::optim::AdamW whose step runs at::_fused_adamw_. The state is LibTorch's AdamWParamState (step
// count on the host, moments beside the parameters), created as LibTorch creates it (zeros_like, preserve
// format) the first time a parameter has a gradient.
class FusedAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  at::Tensor step(LossClosure closure = nullptr) override {
    at::Tensor loss;
    if (closure != nullptr) {
      const at::AutoGradMode enable_grad(true);
      loss = closure();
    }
    if (!fused_step(std::nullopt)) (void)torch::optim::AdamW::step(nullptr);
    return loss;
  }

  // One step; with found_inf, skipped on the device when it is nonzero and read back after the launches.
  // Returns whether it stepped, or nullopt (nothing done) when the kernel cannot take these tensors.
  std::optional<bool> fused_step(const std::optional<at::Tensor>& found_inf) {
    const at::NoGradGuard no_grad;
    struct Item {
      at::Tensor param;
      at::Tensor grad;
      void* key = nullptr;
    };
    // Checks first, changing nothing: a refusal leaves the step to LibTorch's loop.
    std::vector<std::vector<Item>> groups(param_groups_.size());
    std::optional<at::Device> device;
    for (std::size_t g = 0; g < param_groups_.size(); ++g) {
      if (static_cast<const torch::optim::AdamWOptions&>(param_groups_[g].options()).amsgrad()) return std::nullopt;
      for (const at::Tensor& p : param_groups_[g].params()) {
        const at::Tensor& grad = p.grad();
        if (!grad.defined()) continue;
        const auto t = p.scalar_type();
        if (!(t == at::kFloat || t == at::kHalf || t == at::kBFloat16) || !fused_takes(p, p) || !fused_takes(grad, p)) {
          return std::nullopt;
        }
        if (device && *device != p.device()) return std::nullopt;
        device = p.device();
        void* key = p.unsafeGetTensorImpl();
        if (const auto it = state_.find(key); it != state_.end()) {
          const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get());
          if (s == nullptr || !fused_takes(s->exp_avg(), p) || !fused_takes(s->exp_avg_sq(), p)) return std::nullopt;
        }
        groups[g].push_back({p, grad, key});
      }
    }
    if (!device) return true;  // no gradient anywhere: nothing to do, as LibTorch's step
    if (found_inf && (!found_inf->defined() || found_inf->device() != *device || found_inf->numel() != 1 ||
                      found_inf->scalar_type() != at::kFloat)) {
      return std::nullopt;
    }
    // The kernel skips only when the flag is exactly 1 (a sum over ranks may be more): 0 or 1 from here.
    std::optional<at::Tensor> flag;
    if (found_inf) flag = at::clamp_max(found_inf->reshape({}), 1.0);

    // State for parameters stepped for the first time (kept only if this step happens).
    std::vector<void*> created;
    for (const auto& items : groups) {
      for (const Item& item : items) {
        auto& slot = state_[item.key];
        if (slot) continue;
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(at::zeros_like(item.param, at::MemoryFormat::Preserve));
        s->exp_avg_sq(at::zeros_like(item.param, at::MemoryFormat::Preserve));
        slot = std::move(s);
        created.push_back(item.key);
      }
    }
    // One launch per (group, dtype, step count): the kernel takes the options as scalars and the step
    // count from a float32 tensor per parameter (read only: one tensor serves a whole list).
    const auto state_of = [&](void* key) -> torch::optim::AdamWParamState& {
      return static_cast<torch::optim::AdamWParamState&>(*state_.at(key));
    };
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].empty()) continue;
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(param_groups_[g].options());
      std::map<std::pair<at::ScalarType, std::int64_t>, std::vector<const Item*>> lists;
      for (const Item& item : groups[g]) lists[{item.param.scalar_type(), state_of(item.key).step() + 1}].push_back(&item);
      for (const auto& [what, items] : lists) {
        std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
        for (const Item* item : items) {
          auto& s = state_of(item->key);
          params.push_back(item->param);
          grads.push_back(item->grad);
          exp_avgs.push_back(s.exp_avg());
          exp_avg_sqs.push_back(s.exp_avg_sq());
        }
        const at::Tensor step = at::full({}, static_cast<double>(what.second), at::TensorOptions(*device).dtype(at::kFloat));
        const std::vector<at::Tensor> steps(params.size(), step);
        at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, at::TensorList{}, steps, o.lr(), std::get<0>(o.betas()),
                          std::get<1>(o.betas()), o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false,
                          /*grad_scale=*/std::nullopt, flag);
      }
    }
    // The one host read, after every launch of the step (the caller would otherwise wait before them).
    const bool stepped = !flag || flag->item<float>() == 0.0F;
    if (stepped) {
      for (const auto& items : groups) {
        for (const Item& item : items) state_of(item.key).step(state_of(item.key).step() + 1);
      }
    } else {
      for (void* key : created) state_.erase(key);
    }
    return stepped;
  }
};

}  // namespace

OptimizerKind parse_optimizer_kind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adamw") return OptimizerKind::kAdamW;
  HOTPATH_CHECK(false, "optimizer: unknown kind '", name, "', expected one of sgd, adamw");
  return OptimizerKind::kSgd;  // unreachable
}

bool is_no_decay_param(const std::string& name, const at::Tensor& param) {
  constexpr std::string_view kBias = ".bias";
  return param.dim() <= 1 || (name.size() >= kBias.size() && name.ends_with(kBias));
}

ParamSplit split_weight_decay(const OptimizerConfig& config, const NamedParameters& named_params) {
  ParamSplit split;
  for (const auto& [name, param] : named_params) {
    if (!param.requires_grad()) continue;  // frozen: nothing for the optimizer to do
    const bool exempt = config.no_decay_norm_bias && config.weight_decay > 0.0 && is_no_decay_param(name, param);
    (exempt ? split.no_decay : split.decay).push_back(name);
  }
  return split;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        const NamedParameters& named_params) {
  validate(config);
  const ParamSplit split = split_weight_decay(config, named_params);
  HOTPATH_CHECK(!split.decay.empty() || !split.no_decay.empty(),
                "optimizer: no trainable parameters (", named_params.size(),
                " given, all with requires_grad false)");
  return make_optimizer(config, named_params, split);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        const NamedParameters& named_params, const ParamSplit& given) {
  validate(config);
  std::map<std::string, at::Tensor> by_name(named_params.begin(), named_params.end());
  HOTPATH_CHECK(by_name.size() == named_params.size(), "optimizer: duplicate parameter names");
  // The split's names that are here, in the split's order (tensors the split lacks are frozen: left out).
  ParamSplit split;
  for (const bool decayed : {true, false}) {
    for (const std::string& name : decayed ? given.decay : given.no_decay) {
      if (by_name.contains(name)) (decayed ? split.decay : split.no_decay).push_back(name);
    }
  }
  HOTPATH_CHECK(!split.decay.empty() || !split.no_decay.empty(), "optimizer: none of the ", named_params.size(),
                " given parameters is in a weight-decay group of the split (frozen, or a split of other parameters)");
  const auto tensors = [&](const std::vector<std::string>& names) {
    std::vector<at::Tensor> out;
    out.reserve(names.size());
    for (const std::string& name : names) out.push_back(by_name.at(name));
    return out;
  };

  // Each group carries complete options; only weight_decay differs between them.
  const auto build = [&](auto defaults) {
    using Options = decltype(defaults);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (const bool decayed : {true, false}) {
      const std::vector<std::string>& names = decayed ? split.decay : split.no_decay;
      if (names.empty()) continue;
      auto options = std::make_unique<Options>(defaults);
      options->weight_decay(decayed ? config.weight_decay : 0.0);
      groups.emplace_back(tensors(names), std::move(options));
    }
    return groups;
  };

  // LibTorch's add_param_group treats a group option equal to the *class* default as unset and
  // overwrites it with the optimizer's default: SGD's class default weight_decay is 0, so the
  // no-decay group would silently get config.weight_decay. Set the groups' values again afterwards.
  const auto restore_weight_decay = [&](auto& optimizer, auto* options_type) {
    using Options = std::remove_pointer_t<decltype(options_type)>;
    size_t index = 0;
    for (const bool decayed : {true, false}) {
      if ((decayed ? split.decay : split.no_decay).empty()) continue;
      auto& options = static_cast<Options&>(optimizer->param_groups()[index++].options());
      options.weight_decay(decayed ? config.weight_decay : 0.0);
    }
  };
  if (config.kind == OptimizerKind::kSgd) {
    torch::optim::SGDOptions defaults(config.lr);
    defaults.momentum(config.momentum).dampening(config.dampening).nesterov(config.nesterov)
        .weight_decay(config.weight_decay);
    auto optimizer = std::make_unique<torch::optim::SGD>(build(defaults), defaults);
    restore_weight_decay(optimizer, static_cast<torch::optim::SGDOptions*>(nullptr));
    return optimizer;
  }
  torch::optim::AdamWOptions defaults(config.lr);
  defaults.betas(std::make_tuple(config.beta1, config.beta2)).eps(config.eps)
      .weight_decay(config.weight_decay);
  bool all_cuda = true;  // the optimizer's tensors, frozen ones left out
  for (const auto* names : {&split.decay, &split.no_decay}) {
    for (const std::string& name : *names) all_cuda = all_cuda && by_name.at(name).is_cuda();
  }
  const bool fused = config.adamw_kernel == AdamWKernel::kFused || (config.adamw_kernel == AdamWKernel::kAuto && all_cuda);
  if (fused) {
    auto optimizer = std::make_unique<FusedAdamW>(build(defaults), defaults);
    restore_weight_decay(optimizer, static_cast<torch::optim::AdamWOptions*>(nullptr));
    return optimizer;
  }
  auto optimizer = std::make_unique<torch::optim::AdamW>(build(defaults), defaults);
  restore_weight_decay(optimizer, static_cast<torch::optim::AdamWOptions*>(nullptr));
  return optimizer;
}

bool is_fused_adamw(const torch::optim::Optimizer& optimizer) {
  return dynamic_cast<const FusedAdamW*>(&optimizer) != nullptr;
}

std::optional<bool> step_unless_found_inf(torch::optim::Optimizer& optimizer, const at::Tensor& found_inf) {
  auto* fused = dynamic_cast<FusedAdamW*>(&optimizer);
  if (fused == nullptr) return std::nullopt;
  return fused->fused_step(found_inf);
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

void set_momentum(torch::optim::Optimizer& optimizer, double momentum) {
  for (auto& group : optimizer.param_groups()) {
    auto& options = group.options();
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
      sgd->momentum(momentum);
    } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
      adamw->betas(std::make_tuple(momentum, std::get<1>(adamw->betas())));
    } else {
      HOTPATH_CHECK(false, "set_momentum: only SGD (momentum) and AdamW (beta1) are supported");
    }
  }
}

double get_lr(const torch::optim::Optimizer& optimizer, size_t group) {
  HOTPATH_CHECK(group < optimizer.param_groups().size(), "get_lr: group ", group, " out of range (",
                optimizer.param_groups().size(), " groups)");
  return optimizer.param_groups()[group].options().get_lr();
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type) {
  c10::NoGradGuard no_grad;
  // Group by (device, dtype) like torch so each _foreach_ call sees uniform tensors.
  std::map<std::pair<std::string, at::ScalarType>, std::vector<at::Tensor>> grouped;
  std::optional<at::Device> first_device;  // where torch puts the total: the first gradient's device
  for (const at::Tensor& p : params) {
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (!first_device) first_device = g.device();
    grouped[{g.device().str(), g.scalar_type()}].push_back(g);
  }
  if (grouped.empty()) return 0.0;
  std::vector<at::Tensor> norms;
  for (auto& [key, grads] : grouped) {
    for (const at::Tensor& n : at::_foreach_norm(grads, norm_type)) norms.push_back(n.to(*first_device));
  }
  const at::Tensor total = at::linalg_vector_norm(at::stack(norms), norm_type);
  const at::Tensor coef = at::clamp((total + 1e-6).reciprocal() * max_norm, std::nullopt, 1.0);
  for (auto& [key, grads] : grouped) at::_foreach_mul_(grads, coef.to(grads.front().device()));
  return total.item<double>();
}

}  // namespace hotpath::train
