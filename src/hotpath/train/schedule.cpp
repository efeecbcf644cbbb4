#include "hotpath/train/schedule.h"

#include <cmath>
#include <numbers>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/train/optimizer.h"

namespace hotpath::train {
namespace {

// torch.optim.lr_scheduler.OneCycleLR._annealing_cos, same operation order.
double anneal_cos(double start, double end, double pct) {
  const double cos_out = std::cos(std::numbers::pi * pct) + 1.0;
  return end + (start - end) / 2.0 * cos_out;
}

}  // namespace

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "constant") return ScheduleKind::kConstant;
  if (name == "warmup_cosine") return ScheduleKind::kWarmupCosine;
  if (name == "step") return ScheduleKind::kStep;
  if (name == "one_cycle") return ScheduleKind::kOneCycle;
  HOTPATH_CHECK(false, "schedule: unknown kind '", name,
                "', expected one of constant, warmup_cosine, step, one_cycle");
  return ScheduleKind::kConstant;  // unreachable
}

Schedule::Schedule(ScheduleConfig config) : config_(config) {
  const ScheduleConfig& c = config_;
  HOTPATH_CHECK(c.base_lr > 0.0, "schedule: base_lr must be > 0, got ", c.base_lr);
  switch (c.kind) {
    case ScheduleKind::kConstant:
      break;
    case ScheduleKind::kWarmupCosine:
      HOTPATH_CHECK(c.warmup_steps >= 0, "schedule: warmup_steps must be >= 0, got ", c.warmup_steps);
      HOTPATH_CHECK(c.total_steps > c.warmup_steps, "schedule: total_steps (", c.total_steps,
                    ") must be greater than warmup_steps (", c.warmup_steps, ")");
      HOTPATH_CHECK(c.warmup_start_factor > 0.0 && c.warmup_start_factor <= 1.0,
                    "schedule: warmup_start_factor must be in (0, 1], got ", c.warmup_start_factor);
      HOTPATH_CHECK(c.min_lr >= 0.0 && c.min_lr <= c.base_lr, "schedule: min_lr must be in [0, base_lr=",
                    c.base_lr, "], got ", c.min_lr);
      break;
    case ScheduleKind::kStep:
      HOTPATH_CHECK(c.step_size > 0, "schedule: step_size must be > 0, got ", c.step_size);
      HOTPATH_CHECK(c.gamma > 0.0, "schedule: gamma must be > 0, got ", c.gamma);
      break;
    case ScheduleKind::kOneCycle:
      HOTPATH_CHECK(c.total_steps > 0, "schedule: total_steps must be > 0 for one_cycle, got ",
                    c.total_steps);
      HOTPATH_CHECK(c.pct_start > 0.0 && c.pct_start < 1.0, "schedule: pct_start must be in (0, 1), got ",
                    c.pct_start);
      // Phase 1 must span at least one step, or torch divides by zero.
      HOTPATH_CHECK(c.pct_start * static_cast<double>(c.total_steps) > 1.0,
                    "schedule: pct_start * total_steps must be > 1, got ",
                    c.pct_start * static_cast<double>(c.total_steps));
      HOTPATH_CHECK(c.div_factor > 0.0, "schedule: div_factor must be > 0, got ", c.div_factor);
      HOTPATH_CHECK(c.final_div_factor > 0.0, "schedule: final_div_factor must be > 0, got ",
                    c.final_div_factor);
      break;
  }
}

std::pair<int, double> Schedule::one_cycle_phase(int64_t step) const {
  const ScheduleConfig& c = config_;
  HOTPATH_CHECK(step >= 0 && step <= c.total_steps, "schedule: one_cycle step ", step,
                " is outside [0, total_steps=", c.total_steps, "]");
  // OneCycleLR.get_lr: phase ends at float(pct_start * total) - 1 and total - 1.
  const double end1 = c.pct_start * static_cast<double>(c.total_steps) - 1.0;
  const double end2 = static_cast<double>(c.total_steps - 1);
  const auto s = static_cast<double>(step);
  if (s <= end1) return {0, s / end1};
  return {1, (s - end1) / (end2 - end1)};
}

double Schedule::lr_at(int64_t step) const {
  const ScheduleConfig& c = config_;
  HOTPATH_CHECK(step >= 0, "schedule: step must be >= 0, got ", step);
  switch (c.kind) {
    case ScheduleKind::kConstant:
      return c.base_lr;
    case ScheduleKind::kWarmupCosine: {
      if (step < c.warmup_steps) {
        const double t = static_cast<double>(step) / static_cast<double>(c.warmup_steps);
        return c.base_lr * (c.warmup_start_factor + (1.0 - c.warmup_start_factor) * t);
      }
      if (step >= c.total_steps) return c.min_lr;
      const auto t = static_cast<double>(step - c.warmup_steps);
      const auto period = static_cast<double>(c.total_steps - c.warmup_steps);
      return c.min_lr + (c.base_lr - c.min_lr) * (1.0 + std::cos(std::numbers::pi * t / period)) / 2.0;
    }
    case ScheduleKind::kStep:
      return c.base_lr * std::pow(c.gamma, static_cast<double>(step / c.step_size));
    case ScheduleKind::kOneCycle: {
      const double initial_lr = c.base_lr / c.div_factor;
      const double min_lr = initial_lr / c.final_div_factor;
      const auto [phase, pct] = one_cycle_phase(step);
      return phase == 0 ? anneal_cos(initial_lr, c.base_lr, pct) : anneal_cos(c.base_lr, min_lr, pct);
    }
  }
  HOTPATH_ASSERT(false);
  return 0.0;
}

std::optional<double> Schedule::momentum_at(int64_t step) const {
  const ScheduleConfig& c = config_;
  if (c.kind != ScheduleKind::kOneCycle || !c.cycle_momentum) return std::nullopt;
  const auto [phase, pct] = one_cycle_phase(step);
  return phase == 0 ? anneal_cos(c.max_momentum, c.base_momentum, pct)
                    : anneal_cos(c.base_momentum, c.max_momentum, pct);
}

void Schedule::apply(torch::optim::Optimizer& optimizer, int64_t step) const {
  set_lr(optimizer, lr_at(step));
  if (const std::optional<double> momentum = momentum_at(step)) set_momentum(optimizer, *momentum);
}

}  // namespace hotpath::train
