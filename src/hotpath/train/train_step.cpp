// The training loop's step level (train_step.h).
#include "train_step.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "hotpath/ops/autocast_ops.h"
#include "ema.h"
#include "run_setup.h"

namespace hotpath::train {

// One optimizer step: its micro-batches (the last group of an epoch may be shorter; bad samples may end an epoch
// early), forward and backward of each, the gradient sync, then clipping, the schedule, the (scaled) step and EMA.
std::optional<StepDone> run_step(const StepParts& p, std::int64_t step, std::int64_t micro_in_epoch) {
  p.clock.start();
  std::vector<MicroBatch> micro;
  std::int64_t samples = 0;
  const std::int64_t wanted = std::min(p.train.accum_steps, micro_in_epoch - p.task.position().batch);
  {
    TraceScope s(&p.trace, "data", "train");
    for (std::int64_t a = 0; a < wanted; ++a) {
      std::optional<MicroBatch> mb = p.task.next();
      if (!mb) break;
      samples += mb->samples;
      micro.push_back(std::move(*mb));
    }
    p.clock.lap(StepPhase::kData);
  }
  if (micro.empty()) return std::nullopt;

  // Each micro-batch's mean loss weighted by its share of the step's samples, so the gradients are those of
  // the mean over their union whatever the micro-batch sizes.
  const std::optional<at::ScalarType> precision = autocast_dtype(p.train.precision);
  at::Tensor step_loss;
  for (const MicroBatch& mb : micro) {
    at::Tensor loss;
    {
      TraceScope s(&p.trace, "forward", "train");
      ops::AutocastGuard autocast(p.device.type(), precision);
      loss = p.task.loss(mb, p.train.label_smoothing);
      p.clock.lap(StepPhase::kForward);
    }
    const double weight = static_cast<double>(mb.samples) / static_cast<double>(samples);
    {
      TraceScope s(&p.trace, "backward", "train");
      p.parallel.set_sync(&mb == &micro.back());  // several ranks: synchronised on the last micro-batch only
      p.scaler.scale(micro.size() == 1 ? loss : loss * weight).backward();
      p.clock.lap(StepPhase::kBackward);
    }
    const at::Tensor l = micro.size() == 1 ? loss.detach() : loss.detach() * weight;
    step_loss = step_loss.defined() ? step_loss + l : l;
  }
  if (p.parallel.world_size() > 1) {
    TraceScope s(&p.trace, "allreduce_wait", "train");
    p.parallel.finish();
    p.clock.lap(StepPhase::kAllreduce);
  }

  StepDone done;
  {
    TraceScope s(&p.trace, "optimizer", "train");
    torch::optim::Optimizer& opt = p.parallel.optimizer();
    if (p.train.clip_grad_norm > 0) {
      p.scaler.unscale_(opt);
      done.grad_norm = p.parallel.clip_grad_norm(p.train.clip_grad_norm);
    }
    p.schedule.apply(opt, step);
    p.parallel.before_step(p.scaler);
    done.stepped = p.scaler.step(opt);
    p.scaler.update();
    p.parallel.after_step(done.stepped);
    p.parallel.zero_grad();
    if (p.ema && done.stepped) p.ema->update();
    p.clock.lap(StepPhase::kOptimizer);
  }
  p.clock.finish_step(p.breakdown);  // CPU: now; CUDA: the steps whose events have completed, no waiting
  // Several ranks: the global batch's loss and samples; a stop on any rank stops every rank at this step.
  done.totals = p.parallel.agree({.loss = step_loss.item<double>(),
                                  .samples = samples,
                                  .stop = p.stop != nullptr && p.stop->load()});
  done.short_of_micro_batches = static_cast<std::int64_t>(micro.size()) < wanted;
  return done;
}

}  // namespace hotpath::train
