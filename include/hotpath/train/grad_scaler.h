// hotpath/train/grad_scaler.h — dynamic loss scaling for fp16 training, a port of torch.amp.GradScaler.
//
//   GradScaler scaler({.growth_interval = 2000});
//   scaler.scale(loss).backward();  scaler.unscale_(opt);  clip_grad_norm(params, 1.0);
//   scaler.step(opt);  scaler.update();   // step skipped when a gradient is inf/NaN
//
// Same state machine and the same ATen kernels as torch (_amp_foreach_non_finite_check_and_unscale_,
// _amp_update_scale_), so the scale sequence equals GradScaler's: ×backoff on an overflow step,
// ×growth after growth_interval clean steps in a row. The scale lives on the loss's device (CPU or
// CUDA) and is created by the first scale(); unscale_ is optional and at most once per step.
//
// Host waits: scale(), unscale_() and update() queue device work only. step() reads the inf flag once: after
// the optimizer's launches for the fused AdamW (optimizer.h; CUDA), which skips on the device, so the wait
// comes at the end of the step; before optimizer.step() for any other optimizer, as torch does.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace hotpath::train {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // < 1
  int64_t growth_interval = 2000;
  bool enabled = true;  // off: scale() is identity, step() always steps, update() does nothing
};

// What a checkpoint keeps; the keys of to_json() are torch's state_dict() keys.
struct GradScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t growth_tracker = 0;  // consecutive clean steps since the last change of scale
};
std::string to_json(const GradScalerState& state);
// Throws hotpath::Error naming the missing or mistyped key.
GradScalerState grad_scaler_state_from_json(std::string_view json);

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (a new tensor); identity when disabled.
  [[nodiscard]] at::Tensor scale(const at::Tensor& loss);
  // Divides the optimizer's gradients by the scale in place and records whether any is inf/NaN.
  // Throws if called twice for this optimizer before update(), or after step().
  void unscale_(torch::optim::Optimizer& optimizer);
  // Data parallel with sharded gradients (ZeRO): unscale_() if not done yet, then sums this optimizer's
  // inf/NaN findings over the ranks with `sum_over_ranks` (an all-reduce), so that every rank skips or takes
  // the same steps and backs off the scale alike.
  void agree_on_inf(torch::optim::Optimizer& optimizer, const std::function<void(at::Tensor&)>& sum_over_ranks);
  // unscale_() if not done yet, then optimizer.step() unless a gradient was inf/NaN (the fused AdamW:
  // step_unless_found_inf). Returns whether the optimizer stepped.
  bool step(torch::optim::Optimizer& optimizer);
  // Adjusts the scale from this iteration's inf checks (all optimizers) and resets per-step state.
  void update();
  // Sets the scale by hand (torch's update(new_scale)); the growth tracker is left as is.
  void update(double new_scale);

  [[nodiscard]] double get_scale() const;  // 1.0 when disabled; syncs with the device
  [[nodiscard]] int64_t growth_tracker() const;
  [[nodiscard]] bool is_enabled() const { return options_.enabled; }

  [[nodiscard]] GradScalerState state() const;
  void load_state(const GradScalerState& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    std::vector<at::Tensor> found_inf;  // one 0-dim float per device holding gradients
  };
  void lazy_init(const at::Tensor& like);
  void check_initialized(const char* caller) const;

  GradScalerOptions options_;
  int64_t init_growth_tracker_ = 0;
  at::Tensor scale_;           // float32, 0-dim; undefined until the first scale()
  at::Tensor growth_tracker_;  // int32, 0-dim
  std::map<const torch::optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace hotpath::train
