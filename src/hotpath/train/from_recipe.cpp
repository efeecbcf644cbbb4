// Recipe → the training layers' typed options (from_recipe.h).
#include "hotpath/train/from_recipe.h"

#include <algorithm>
#include <string>
#include <utility>

#include "hotpath/core/bounded.h"

namespace hotpath::train {

OptimizerConfig optimizer_config_for(const Recipe& recipe) {
  const auto& oc = recipe.optimizer;
  return OptimizerConfig{.kind = parse_optimizer_kind(oc.name),
                         .lr = oc.lr,
                         .weight_decay = oc.weight_decay,
                         .no_decay_norm_bias = oc.no_decay_norm_bias,
                         .momentum = oc.momentum,
                         .dampening = oc.dampening,
                         .nesterov = oc.nesterov,
                         .beta1 = oc.beta1,
                         .beta2 = oc.beta2,
                         .eps = oc.eps};
}

ScheduleConfig schedule_config_for(const Recipe& recipe, std::int64_t steps_per_epoch, std::int64_t total_steps) {
  const auto& sc = recipe.schedule;
  const auto epochs_to_steps = [&](double e) {  // checked: 1e19 epochs must not wrap to a negative count
    return double_to_int(e * static_cast<double>(steps_per_epoch), 0, std::int64_t{1} << 62,
                         recipe.source + ": schedule epochs × " + std::to_string(steps_per_epoch) + " steps/epoch");
  };
  return ScheduleConfig{.kind = parse_schedule_kind(sc.name),
                        .base_lr = recipe.optimizer.lr,
                        .total_steps = total_steps,
                        .warmup_steps = std::min(epochs_to_steps(sc.warmup_epochs), total_steps),
                        .warmup_start_factor = sc.warmup_start_factor,
                        .min_lr = sc.min_lr,
                        .step_size = std::max<std::int64_t>(1, epochs_to_steps(sc.step_epochs)),
                        .gamma = sc.gamma,
                        .pct_start = sc.pct_start,
                        .div_factor = sc.div_factor,
                        .final_div_factor = sc.final_div_factor,
                        .cycle_momentum = sc.cycle_momentum,
                        .base_momentum = sc.base_momentum,
                        .max_momentum = sc.max_momentum};
}

GradSyncOptions grad_sync_options_for(const Recipe& recipe) {
  return grad_sync_options_with_environment(
      {.bucket_bytes = recipe.train.ddp_bucket_mb << 20, .overlap = recipe.train.ddp_overlap});
}

std::chrono::milliseconds dist_timeout_for(const Recipe& recipe) { return dist_timeout(recipe.train.dist_timeout_s); }

AgreementKeys recipe_agreement_keys(const Recipe& recipe, const LaunchFlags& flags) {
  AgreementKeys keys{{"--resume", flags.resume ? "true" : "false"}, {"--overwrite", flags.overwrite ? "true" : "false"}};
  for (auto& kv : shared_recipe_values(recipe)) keys.push_back(std::move(kv));
  // The values in effect: an environment override on one rank only is a difference like any other.
  const GradSyncOptions sync = grad_sync_options_for(recipe);
  for (auto& [k, v] : keys) {
    if (k == "train.dist_timeout_s") v = std::to_string(static_cast<double>(dist_timeout_for(recipe).count()) / 1000.0);
    if (k == "train.ddp_overlap") v = sync.overlap ? "true" : "false";
    if (k == "train.ddp_bucket_mb") v = std::to_string(sync.bucket_bytes >> 20);
  }
  return keys;
}

}  // namespace hotpath::train
