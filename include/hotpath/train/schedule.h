// hotpath/train/schedule.h — learning-rate schedules as pure functions of the step.
//
//   Schedule s({.kind = ScheduleKind::kWarmupCosine, .base_lr = 0.1, .total_steps = 1000,
//               .warmup_steps = 50});
//   for (int64_t step = 0; step < 1000; ++step) { s.apply(*optimizer, step); train_step(); }
//
// lr_at(step) is the lr the optimizer uses for its step number `step` (0-based), i.e. the value
// torch.optim.lr_scheduler gives after `step` calls to scheduler.step(). A pure function (no
// recursive update as in torch) so resuming at any step gives the same lr. Semantics:
//   kWarmupCosine: SequentialLR(LinearLR(warmup_start_factor → 1 over warmup_steps),
//                  CosineAnnealingLR(T_max = total_steps - warmup_steps, eta_min = min_lr)),
//                  held at min_lr from total_steps on (torch's cosine would rise again).
//   kStep:         StepLR(step_size, gamma).
//   kOneCycle:     OneCycleLR(max_lr = base_lr, total_steps, pct_start, div_factor,
//                  final_div_factor, anneal 'cos', two phases), momentum cycled like torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

namespace torch::optim {
class Optimizer;
}

namespace hotpath::train {

enum class ScheduleKind { kConstant, kWarmupCosine, kStep, kOneCycle };

// "constant", "warmup_cosine", "step", "one_cycle"; throws naming the allowed values.
ScheduleKind parse_schedule_kind(std::string_view name);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::kConstant;
  double base_lr = 0.1;     // the peak lr (max_lr for one-cycle)
  int64_t total_steps = 0;  // cosine and one-cycle
  // warmup + cosine
  int64_t warmup_steps = 0;
  double warmup_start_factor = 0.1;  // lr at step 0 = base_lr * warmup_start_factor
  double min_lr = 0.0;
  // step decay
  int64_t step_size = 30;
  double gamma = 0.1;
  // one-cycle
  double pct_start = 0.3;
  double div_factor = 25.0;         // initial lr = base_lr / div_factor
  double final_div_factor = 1e4;    // final lr = initial lr / final_div_factor
  bool cycle_momentum = true;       // SGD momentum / AdamW beta1 from max_momentum to base and back
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

class Schedule {
 public:
  // Validates the config; throws hotpath::Error naming the field and the allowed range.
  explicit Schedule(ScheduleConfig config);

  [[nodiscard]] double lr_at(int64_t step) const;
  // The momentum (SGD) or beta1 (AdamW) for `step`; nullopt when the schedule leaves it alone.
  [[nodiscard]] std::optional<double> momentum_at(int64_t step) const;
  // Sets every param group's lr (and momentum, when cycled) for `step`.
  void apply(torch::optim::Optimizer& optimizer, int64_t step) const;

  [[nodiscard]] const ScheduleConfig& config() const { return config_; }

 private:
  // One-cycle: position inside the phase holding `step` → (phase index, pct in [0, 1]).
  [[nodiscard]] std::pair<int, double> one_cycle_phase(int64_t step) const;

  ScheduleConfig config_;
};

}  // namespace hotpath::train
