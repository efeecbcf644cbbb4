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
  auto optimizer = std::make_unique<torch::optim::AdamW>(build(defaults), defaults);
  restore_weight_decay(optimizer, static_cast<torch::optim::AdamWOptions*>(nullptr));
  return optimizer;
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
