#include "hotpath/train/grad_scaler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/core/json.h"
#include "hotpath/train/optimizer.h"

namespace hotpath::train {

std::string to_json(const GradScalerState& state) {
  // torch's GradScaler.state_dict() keys, so a python checkpoint's entry reads the same.
  const nlohmann::json j = {{"scale", state.scale},
                            {"growth_factor", state.growth_factor},
                            {"backoff_factor", state.backoff_factor},
                            {"growth_interval", state.growth_interval},
                            {"_growth_tracker", state.growth_tracker}};
  return j.dump();
}

GradScalerState grad_scaler_state_from_json(std::string_view json) {
  const nlohmann::json j = parse_json(json, "grad scaler state");
  HOTPATH_CHECK(j.is_object(), "grad scaler state: expected a JSON object, got ", j.type_name());
  const auto number = [&](const char* key) {
    HOTPATH_CHECK(j.contains(key), "grad scaler state: missing key '", key, "'");
    HOTPATH_CHECK(j[key].is_number(), "grad scaler state: key '", key, "' must be a number, got ",
                  j[key].type_name());
    return j[key];
  };
  GradScalerState s;
  s.scale = number("scale").get<double>();
  s.growth_factor = number("growth_factor").get<double>();
  s.backoff_factor = number("backoff_factor").get<double>();
  HOTPATH_CHECK(number("growth_interval").is_number_integer(), "grad scaler state: key 'growth_interval' must be an integer");
  s.growth_interval = j["growth_interval"].get<int64_t>();
  HOTPATH_CHECK(number("_growth_tracker").is_number_integer(), "grad scaler state: key '_growth_tracker' must be an integer");
  s.growth_tracker = j["_growth_tracker"].get<int64_t>();
  return s;
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  if (!options_.enabled) return;
  HOTPATH_CHECK(options_.growth_factor > 1.0, "grad scaler: growth_factor must be > 1, got ",
                options_.growth_factor);
  HOTPATH_CHECK(options_.backoff_factor < 1.0 && options_.backoff_factor > 0.0,
                "grad scaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor);
  HOTPATH_CHECK(options_.growth_interval > 0, "grad scaler: growth_interval must be > 0, got ",
                options_.growth_interval);
  HOTPATH_CHECK(options_.init_scale > 0.0, "grad scaler: init_scale must be > 0, got ", options_.init_scale);
}

void GradScaler::lazy_init(const at::Tensor& like) {
  const auto on = at::TensorOptions().device(like.device());
  scale_ = at::full({}, options_.init_scale, on.dtype(at::kFloat));
  growth_tracker_ = at::full({}, init_growth_tracker_, on.dtype(at::kInt));
}

void GradScaler::check_initialized(const char* caller) const {
  HOTPATH_CHECK(scale_.defined(), "grad scaler: ", caller,
                " called before scale(loss); the scale is created by the first scale() of the iteration");
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!options_.enabled) return loss;
  if (!scale_.defined()) lazy_init(loss);
  return loss * scale_.to(loss.device(), /*non_blocking=*/true);
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_initialized("unscale_()");
  PerOptimizer& state = per_optimizer_[&optimizer];
  HOTPATH_CHECK(state.stage != Stage::kUnscaled,
                "grad scaler: unscale_() has already been called on this optimizer since the last update()");
  HOTPATH_CHECK(state.stage != Stage::kStepped, "grad scaler: unscale_() is being called after step()");

  c10::NoGradGuard no_grad;
  // Reciprocal in double then rounded to float, as torch does, so the unscaled gradients match bit for bit.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  // One found_inf per device; the kernel wants each list on one device and of one dtype. Devices in the
  // order their first gradient comes (a linear search: one or two devices, no per-parameter string).
  std::vector<std::pair<at::Device, std::map<at::ScalarType, std::vector<at::Tensor>>>> grads;
  for (auto& group : optimizer.param_groups()) {
    for (const at::Tensor& param : group.params()) {
      const at::Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      HOTPATH_CHECK(grad.scalar_type() != at::kHalf,
                    "grad scaler: attempting to unscale FP16 gradients; keep fp32 master parameters");
      HOTPATH_CHECK(!grad.is_sparse(), "grad scaler: sparse gradients are not supported");
      auto it = std::find_if(grads.begin(), grads.end(), [&](const auto& d) { return d.first == grad.device(); });
      if (it == grads.end()) it = grads.insert(grads.end(), {grad.device(), {}});
      it->second[grad.scalar_type()].push_back(grad);
    }
  }
  state.found_inf.clear();
  for (auto& [device, by_dtype] : grads) {
    at::Tensor found_inf = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
    const at::Tensor device_inv_scale = inv_scale.to(device, /*non_blocking=*/true);
    for (const auto& [dtype, list] : by_dtype) {
      at::_amp_foreach_non_finite_check_and_unscale_(list, found_inf, device_inv_scale);
    }
    state.found_inf.push_back(found_inf);
  }
  state.stage = Stage::kUnscaled;
}

void GradScaler::agree_on_inf(torch::optim::Optimizer& optimizer,
                              const std::function<void(at::Tensor&)>& sum_over_ranks) {
  if (!options_.enabled) return;
  check_initialized("agree_on_inf()");
  if (per_optimizer_[&optimizer].stage == Stage::kReady) unscale_(optimizer);
  PerOptimizer& state = per_optimizer_[&optimizer];
  HOTPATH_CHECK(state.stage == Stage::kUnscaled, "grad scaler: agree_on_inf() is being called after step()");
  // One float on the scale's device, summed over the ranks (a rank without gradients contributes 0).
  at::Tensor found = at::zeros({}, scale_.options().dtype(at::kFloat));
  for (const at::Tensor& f : state.found_inf) found += f.to(found.device());
  sum_over_ranks(found);
  state.found_inf = {found};
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  check_initialized("step()");
  HOTPATH_CHECK(per_optimizer_[&optimizer].stage != Stage::kStepped,
                "grad scaler: step() has already been called since the last update()");
  if (per_optimizer_[&optimizer].stage == Stage::kReady) unscale_(optimizer);
  PerOptimizer& state = per_optimizer_[&optimizer];
  // torch asserts here; an optimizer with no gradient at all has nothing to check or step.
  HOTPATH_CHECK(!state.found_inf.empty(), "grad scaler: no inf checks were recorded for this optimizer ",
                "(no parameter has a gradient)");
  // The fused AdamW (CUDA) skips on the device: its step is queued with the inf flag and the flag is read
  // after it, so the host waits once at the end of the step instead of before the optimizer's launches.
  std::optional<bool> on_device;
  if (state.found_inf.size() == 1) on_device = step_unless_found_inf(optimizer, state.found_inf.front());
  bool stepped = false;
  if (on_device) {
    stepped = *on_device;
  } else {
    double found = 0.0;
    for (const at::Tensor& f : state.found_inf) found += f.item<double>();  // the one host sync
    stepped = found == 0.0;
    if (stepped) optimizer.step();
  }
  state.stage = Stage::kStepped;
  return stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_initialized("update()");
  at::Tensor found_inf_combined;
  for (auto& [optimizer, state] : per_optimizer_) {
    for (const at::Tensor& f : state.found_inf) {
      const at::Tensor here = f.to(scale_.device(), /*non_blocking=*/true);
      found_inf_combined = found_inf_combined.defined() ? found_inf_combined + here : here;
    }
  }
  HOTPATH_CHECK(found_inf_combined.defined(), "grad scaler: no inf checks were recorded prior to update() ",
                "(call step() or unscale_() first)");
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_combined, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_initialized("update(new_scale)");
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

int64_t GradScaler::growth_tracker() const {
  if (!options_.enabled) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : init_growth_tracker_;
}

GradScalerState GradScaler::state() const {
  HOTPATH_CHECK(options_.enabled, "grad scaler: state() of a disabled scaler (torch returns an empty dict)");
  return {.scale = get_scale(),
          .growth_factor = options_.growth_factor,
          .backoff_factor = options_.backoff_factor,
          .growth_interval = options_.growth_interval,
          .growth_tracker = growth_tracker()};
}

void GradScaler::load_state(const GradScalerState& state) {
  HOTPATH_CHECK(options_.enabled, "grad scaler: load_state() on a disabled scaler");
  HOTPATH_CHECK(state.scale > 0.0, "grad scaler state: scale must be > 0, got ", state.scale);
  HOTPATH_CHECK(state.growth_tracker >= 0, "grad scaler state: _growth_tracker must be >= 0, got ",
                state.growth_tracker);
  options_.init_scale = state.scale;
  options_.growth_factor = state.growth_factor;
  options_.backoff_factor = state.backoff_factor;
  options_.growth_interval = state.growth_interval;
  init_growth_tracker_ = state.growth_tracker;
  if (scale_.defined()) scale_.fill_(state.scale);
  if (growth_tracker_.defined()) growth_tracker_.fill_(state.growth_tracker);
}

}  // namespace hotpath::train
