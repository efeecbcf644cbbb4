// train_step.h (private to hotpath_train) — the training loop's step level: one optimizer step from the task's
// next micro-batches. Forward under autocast, backward through the loss scaler (accumulated over the step's
// micro-batches), the gradient sync, clipping, the schedule, the (scaled) optimizer step and EMA; each phase
// timed (StepClock) and traced.
//
//   std::optional<StepDone> done = run_step(parts, state.step, task.micro_batches_in_epoch(epoch));
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <optional>

#include "hotpath/core/trace.h"
#include "hotpath/train/grad_scaler.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/schedule.h"
#include "hotpath/train/step_clock.h"
#include "hotpath/train/task.h"
#include "data_parallel.h"

namespace hotpath::train {

class Ema;

// What a step works with; the epoch level owns them.
struct StepParts {
  const TrainSection& train;
  at::Device device;
  Task& task;
  DataParallel& parallel;
  GradScaler& scaler;
  const Schedule& schedule;
  Ema* ema = nullptr;
  StepClock& clock;
  TraceRecorder& trace;
  StepBreakdown& breakdown;
  const std::atomic<bool>* stop = nullptr;  // a stop request, read once the step is done
};

struct StepDone {
  StepTotals totals;                     // loss (the mean), samples, stop request: over every rank
  double grad_norm = -1;                 // train.clip_grad_norm on: the norm before clipping
  bool stepped = true;                   // false: the fp16 loss scaler skipped the step
  bool short_of_micro_batches = false;   // the epoch ended early (decode-time bad samples)
};

// Step number `step` (the schedule's), taking at most train.accum_steps of the epoch's `micro_in_epoch`
// micro-batches. Nothing when the epoch ended before a micro-batch came.
std::optional<StepDone> run_step(const StepParts& parts, std::int64_t step, std::int64_t micro_in_epoch);

}  // namespace hotpath::train
