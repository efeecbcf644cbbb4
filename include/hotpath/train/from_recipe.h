// hotpath/train/from_recipe.h — the typed options each training layer takes, read from a recipe: the
// optimizer, the schedule, and data parallelism (gradient buckets, the timeout, the values every rank must
// share). The layers themselves (optimizer.h, schedule.h, distributed.h, zero.h) never see a recipe.
//
//   auto opt = make_optimizer(optimizer_config_for(recipe), trainable);
//   auto dist = DistContext::connect(env, dist_timeout_for(recipe), recipe_agreement_keys(recipe, {}));
#pragma once

#include <chrono>
#include <cstdint>

#include "hotpath/train/distributed.h"
#include "hotpath/train/optimizer.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/schedule.h"

namespace hotpath::train {

OptimizerConfig optimizer_config_for(const Recipe& recipe);
// schedule.*'s epochs become steps of `steps_per_epoch` (checked: no overflow); the schedule ends at total_steps.
ScheduleConfig schedule_config_for(const Recipe& recipe, std::int64_t steps_per_epoch, std::int64_t total_steps);

// train.ddp_overlap and train.ddp_bucket_mb, with the environment's overrides (grad_sync_options_with_environment).
GradSyncOptions grad_sync_options_for(const Recipe& recipe);
// train.dist_timeout_s, with $HOTPATH_DIST_TIMEOUT_S's override (dist_timeout).
std::chrono::milliseconds dist_timeout_for(const Recipe& recipe);

// `hotpath train` options every rank must share as well: a rank resuming alone would restore a checkpoint
// the others do not (and wait for them at its first collective until the timeout).
struct LaunchFlags {
  bool resume = false;     // --resume
  bool overwrite = false;  // --overwrite
};
// Every key of the resolved recipe but those that may differ between ranks without changing the training
// (the recipe table's per_rank rows: data.workers, data.prefetch, train.threads); train.dist_timeout_s,
// train.ddp_overlap and train.ddp_bucket_mb with the values in effect (after the environment's overrides); and
// "--resume", "--overwrite" from `flags` (a difference there is named as the command line's).
AgreementKeys recipe_agreement_keys(const Recipe& recipe, const LaunchFlags& flags);

}  // namespace hotpath::train
