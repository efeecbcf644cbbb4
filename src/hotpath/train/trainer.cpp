// The one training loop (trainer.h): everything that is the same for every task — accumulation,
// autocast + loss scaler, clipping, schedule, EMA, metrics, progress, eval cadence, best/, checkpoints
// and exact resume, the profile, the trace, SIGINT, benchmark mode. A task (task.h) supplies the rest.
#include "hotpath/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <system_error>
#include <thread>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/json.h"
#include "hotpath/core/progress.h"
#include "hotpath/core/tensorboard.h"
#include "hotpath/core/trace.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/train/distributed.h"
#include "hotpath/train/grad_scaler.h"
#include "hotpath/train/optimizer.h"
#include "hotpath/train/schedule.h"
#include "hotpath/train/step_clock.h"
#include "hotpath/train/zero.h"
#include "hotpath/core/remove_tree.h"
#include "cuda/cuda_training.h"
#include "run_util.h"
#include "tasks.h"

namespace hotpath::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::optional<at::ScalarType> autocast_dtype(const std::string& precision) {
  if (precision == "bf16") return at::kBFloat16;
  if (precision == "fp16") return at::kHalf;
  return std::nullopt;
}

at::Device pick_device(const std::string& name) {
  if (name == "cuda") {
    HOTPATH_CHECK(at::hasCUDA(), "train.device: cuda was asked for but no CUDA device is available");
    return at::Device(at::kCUDA, 0);
  }
  if (name == "auto" && at::hasCUDA()) return at::Device(at::kCUDA, 0);
  return at::Device(at::kCPU);
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// Exponential moving average of the trained parameters and the floating-point buffers (BatchNorm's
// running statistics: timm's ModelEmaV2 averages them too). Frozen parameters never change, so they are
// not kept; integer buffers (num_batches_tracked) are the live ones. Eval, best/ and the exported model
// see the averages by swapping them into the module for a scope (EmaSwap).
class Ema {
 public:
  Ema(torch::nn::Module& module, const NamedParameters& trainable, double decay) : decay_(decay) {
    at::NoGradGuard no_grad;
    for (const auto& [name, p] : trainable) add(name, p);
    for (const auto& item : module.named_buffers()) {
      if (item.value().is_floating_point()) add(item.key(), item.value());
    }
  }
  // average += (1 - decay) · (live - average), after each optimizer step that was taken.
  void update() {
    at::NoGradGuard no_grad;
    at::_foreach_lerp_(averages_, live_, 1.0 - decay_);
  }
  // name → average (aliases: restoring a checkpoint copies into them).
  [[nodiscard]] TensorMap state() const {
    TensorMap out;
    for (std::size_t i = 0; i < names_.size(); ++i) out[names_[i]] = averages_[i];
    return out;
  }
  // Swaps averages and live values (twice = back).
  void swap() {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < live_.size(); ++i) {
      const at::Tensor live = live_[i].detach().clone();
      live_[i].copy_(averages_[i]);
      averages_[i].copy_(live);
    }
  }

 private:
  void add(const std::string& name, const at::Tensor& t) {
    names_.push_back(name);
    live_.push_back(t);
    averages_.push_back(t.detach().clone());
  }
  double decay_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> live_, averages_;
};

// The EMA weights in the module for a scope (no EMA: nothing happens).
class EmaSwap {
 public:
  explicit EmaSwap(Ema* ema) : ema_(ema) {
    if (ema_) ema_->swap();
  }
  // Runs while an eval's exception unwinds too: a failing swap (out of memory) must not terminate;
  // the run is ending with the first error then, and the model it leaves is not saved.
  ~EmaSwap() {
    try {
      if (ema_) ema_->swap();
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
  }
  EmaSwap(const EmaSwap&) = delete;
  EmaSwap& operator=(const EmaSwap&) = delete;

 private:
  Ema* ema_;
};

// Copies `saved` into the live tensors `expected` (the same names and shapes, all of them). Names in
// `saved` that are not expected are an error unless `extra_ok` says they may be skipped.
void restore_tensors(const TensorMap& expected, const TensorMap& saved, const std::string& where,
                     const std::function<bool(const std::string&)>& extra_ok = {}) {
  for (const auto& [name, t] : saved) {
    const auto it = expected.find(name);
    if (it == expected.end()) {
      HOTPATH_CHECK(extra_ok && extra_ok(name), where, ": ", name,
                    ": not a trained tensor of this model (was the checkpoint made with other model.* keys?)");
      continue;
    }
    HOTPATH_CHECK(it->second.sizes() == t.sizes(), where, ": ", name, ": shape ", t.sizes(),
                  " does not match the model's ", it->second.sizes());
  }
  for (const auto& [name, t] : expected) HOTPATH_CHECK(saved.contains(name), where, ": ", name, ": missing");
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : expected) t.copy_(saved.at(name));
}

// trainer.json: where the run stands (step, the task's batch position), the best metric, the running
// sums behind the next metrics line (so a resumed run logs exactly the lines an uninterrupted one
// would), the loss scaler, the task's own state and the resume key. Format 2; format 1 (the two loops
// before they became one: image without "kind", text with its keys at the top level) still resumes.
struct TrainerState {
  std::int64_t step = 0;
  BatchPosition position;  // of the next micro-batch
  std::optional<double> best_metric;
  std::int64_t best_step = -1;
  double loss_window = 0;  // summed step losses since the last metrics line
  std::int64_t window = 0;
  GradScalerState scaler;
  nlohmann::json task_state = nlohmann::json::object();
};

constexpr int kTrainerStateFormat = 2;

std::string trainer_state_json(const TrainerState& s, const Recipe& recipe, const Task& task, int world_size) {
  json j;
  j["format"] = kTrainerStateFormat;
  j["kind"] = recipe.data.kind;
  j["world_size"] = world_size;  // the global batch and the data split depend on it
  j["step"] = s.step;
  j["epoch"] = s.position.epoch;
  j["batch"] = s.position.batch;
  if (s.best_metric) j["best_metric"] = *s.best_metric;
  j["best_step"] = s.best_step;
  j["loss_window"] = s.loss_window;  // nlohmann writes doubles so that they read back bit-exact
  j["window"] = s.window;
  j["scaler"] = json::parse(to_json(s.scaler));
  j["recipe"] = recipe.name;
  j["resume_key"] = task.resume_key();
  j["task"] = task.state();
  return j.dump(2) + "\n";
}

// Format 1 kept the resume key at the top level under short names.
std::string format1_key(const std::string& key) {
  if (key == "the number of samples in data.train") return "train_samples";
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

TrainerState trainer_state_from_json(const std::string& text, const std::string& where, const Recipe& recipe,
                                     const Task& task, int world_size) {
  TrainerState s;
  try {
    const auto j = parse_json(text, where);
    HOTPATH_CHECK(j.is_object(), where, ": expected a JSON object");
    // Integers strictly typed and in range: an edited or overflowing field is named, never wrapped.
    constexpr std::int64_t kMax = std::int64_t{1} << 40;
    const auto integer = [&](const char* key, std::int64_t lo, std::int64_t hi) -> std::int64_t {
      HOTPATH_CHECK(j.contains(key), where, ": ", key, ": missing");
      const auto& v = j.at(key);
      HOTPATH_CHECK(v.is_number_integer(), where, ": ", key, ": expected an integer, got ", v.type_name());
      HOTPATH_CHECK(!v.is_number_unsigned() || v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi), where, ": ",
                    key, ": expected an integer in [", lo, ", ", hi, "], got ", v.get<std::uint64_t>());
      const auto n = v.get<std::int64_t>();
      check_int_in(n, lo, hi, where + ": " + key);
      return n;
    };
    const auto number = [&](const char* key) {
      const auto& v = j.at(key);
      HOTPATH_CHECK(v.is_number(), where, ": ", key, ": expected a number, got ", v.type_name());
      const double d = v.get<double>();
      HOTPATH_CHECK(std::isfinite(d), where, ": ", key, ": expected a finite number");
      return d;
    };
    const int format = j.contains("format") ? static_cast<int>(integer("format", 1, kTrainerStateFormat)) : 1;
    HOTPATH_CHECK(format == 1 || format == kTrainerStateFormat, where, ": format ", format,
                  " is not one this hotpath reads (1 or 2)");
    const std::string kind = j.value("kind", std::string("image"));
    HOTPATH_CHECK(kind == recipe.data.kind, where, ": a checkpoint of a ", kind, " run, but the recipe has data.kind ",
                  recipe.data.kind);
    const std::int64_t saved_world = j.contains("world_size") ? integer("world_size", 1, 1 << 20) : 1;
    const bool world_changed = saved_world != world_size;
    if (world_changed) {
      // Another world size resumes exactly when each step takes the same samples: the task plans global
      // batches independently of the world size, and world × train.batch_size (the global batch) is unchanged.
      const std::string made = where + ": the checkpoint was made by " + std::to_string(saved_world) +
                               " rank(s), this run has " + std::to_string(world_size);
      const std::string refusal = task.world_size_change_refusal();
      HOTPATH_CHECK(refusal.empty(), made, ": ", refusal, "; resume with ", saved_world, " rank(s)");
      const nlohmann::json* saved_batch =
          format >= 2 && j.contains("resume_key") ? &j["resume_key"]["train.batch_size"] : nullptr;
      HOTPATH_CHECK(saved_batch != nullptr && saved_batch->is_number_integer(), made,
                    ": its trainer.json does not record train.batch_size; resume with ", saved_world, " rank(s)");
      const std::int64_t saved_global = saved_world * saved_batch->get<std::int64_t>();
      const std::int64_t global = world_size * recipe.train.batch_size;
      const bool fits = saved_global % world_size == 0 && (saved_global / world_size) % recipe.train.accum_steps == 0;
      HOTPATH_CHECK(saved_global == global, made, ": global batch ", saved_global, " (", saved_world,
                    " × train.batch_size=", saved_batch->get<std::int64_t>(), ") then, ", global, " (", world_size,
                    " × train.batch_size=", recipe.train.batch_size, ") now, so each step would take other samples; ",
                    fits ? "set train.batch_size=" + std::to_string(saved_global / world_size) +
                               " (the same global batch) or resume with "
                         : std::string("resume with "),
                    saved_world, " rank(s)");
    }
    s.step = integer("step", 0, kMax);
    s.position = {integer("epoch", 0, kMax), integer("batch", 0, kMax)};
    if (j.contains("best_metric")) s.best_metric = number("best_metric");
    s.best_step = j.contains("best_step") ? integer("best_step", -1, s.step) : -1;
    s.loss_window = j.contains("loss_window") ? number("loss_window") : 0.0;
    s.window = j.contains("window") ? integer("window", 0, std::max<std::int64_t>(s.step, 0) + 1) : 0;
    if (j.contains("scaler")) s.scaler = grad_scaler_state_from_json(j.at("scaler").dump());
    const json key = task.resume_key();
    for (const auto& [name, now] : key.items()) {
      if (world_changed && name == "train.batch_size") continue;  // per rank: the global batch was checked above
      const nlohmann::json* then = nullptr;
      if (format >= 2) {
        HOTPATH_CHECK(j.contains("resume_key") && j["resume_key"].contains(name), where, ": resume_key.", name,
                      ": missing");
        then = &j["resume_key"][name];
      } else if (j.contains(format1_key(name))) {
        then = &j[format1_key(name)];
      }
      if (then == nullptr) continue;  // format 1 did not record it
      HOTPATH_CHECK(*then == now, where, ": the checkpoint was made with ", name, "=", then->dump(),
                    "; the recipe now says ", now.dump(), " (resume needs the same batches and model layout)");
    }
    s.task_state = format >= 2 ? j.at("task") : j;  // format 1 kept the task's state at the top level
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, where, ": invalid trainer state: ", e.what());
  }
  return s;
}

// best/ replaced as a whole: written to best.tmp, the old one steps aside (best.old) until the new one is
// in, so there is never a moment without a best/.
void swap_in_best(const fs::path& run_dir, const std::function<void(const fs::path&)>& write) {
  const fs::path best = run_dir / "best", tmp = run_dir / "best.tmp", old_best = run_dir / "best.old";
  hotpath::remove_tree(tmp);
  write(tmp);
  std::error_code ec;
  hotpath::remove_tree(old_best);
  if (fs::exists(best)) fs::rename(best, old_best, ec);
  HOTPATH_CHECK(!ec, best.string(), ": cannot rename it to ", old_best.string(), ": ", ec.message());
  fs::rename(tmp, best, ec);
  HOTPATH_CHECK(!ec, best.string(), ": cannot rename ", tmp.string(), " to it: ", ec.message());
  sync_directory(run_dir.string());
  hotpath::remove_tree(old_best);
}

}  // namespace

// ---- breakdown --------------------------------------------------------------------------------

std::string StepBreakdown::summary() const {
  const double total = total_s();
  if (steps == 0 || total <= 0) return "no steps timed";
  struct Part {
    const char* name;
    double s;
  };
  const Part parts[] = {{"data", data_s},
                        {"forward", forward_s},
                        {"backward", backward_s},
                        {"optimizer", optimizer_s},
                        {"all-reduce wait", allreduce_s}};
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << "step " << 1000.0 * total / static_cast<double>(steps) << " ms: ";
  const Part* top = &parts[0];
  for (const Part& p : parts) {
    if (&p == &parts[4] && allreduce_s == 0) break;  // one process: no all-reduce phase
    out << (&p == &parts[0] ? "" : " · ") << p.name << " " << 100.0 * p.s / total << "%";
    if (p.s > top->s) top = &p;
  }
  out << " — bottleneck: " << top->name;
  const std::string& hint = top == &parts[0] || data_s / total > 0.2 ? remedies.input
                            : top == &parts[3]                       ? remedies.optimizer
                            : top == &parts[4]                       ? remedies.allreduce
                                                                     : remedies.compute;
  if (!hint.empty()) out << " (" << hint << ")";
  return out.str();
}

std::string StepBreakdown::to_json() const {
  const double total = std::max(total_s(), 1e-12);
  json j;
  j["steps"] = steps;
  j["step_ms"] = steps ? 1000.0 * total_s() / static_cast<double>(steps) : 0.0;
  j["seconds"] = {{"data", data_s}, {"forward", forward_s}, {"backward", backward_s}, {"optimizer", optimizer_s},
                  {"allreduce_wait", allreduce_s}};
  j["fractions"] = {{"data", data_s / total},
                    {"forward", forward_s / total},
                    {"backward", backward_s / total},
                    {"optimizer", optimizer_s / total},
                    {"allreduce_wait", allreduce_s / total}};
  j["summary"] = summary();
  return j.dump(2) + "\n";
}

// ---- optimizer, schedule and task from the recipe --------------------------------------------

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

std::unique_ptr<Task> make_task(const Recipe& recipe, const TaskOptions& options) {
  check_task_keys(recipe);
  if (recipe.data.kind == "text") return make_text_task(recipe, options);
  HOTPATH_CHECK(recipe.data.kind == "image", recipe.source, ": data.kind: expected image or text, got '",
                recipe.data.kind, "'");
  return make_image_task(recipe, options);
}

// ---- the loop ----------------------------------------------------------------------------------

TrainResult train(const Recipe& recipe, const TrainOptions& options) {
  const auto t_start = Clock::now();
  std::ostream& out = options.out ? *options.out : std::cerr;
  const auto& tr = recipe.train;
  // Data parallel on CUDA: rank r of a host takes GPU LOCAL_RANK (NCCL needs one GPU per rank).
  const DistEnv dist_env = dist_env_from_environment();
  at::Device device = pick_device(tr.device);
  if (device.is_cuda() && dist_env.distributed()) {
    const int gpus = static_cast<int>(at::getNumGPUs());
    HOTPATH_CHECK(dist_env.local_world_size <= gpus, recipe.source, ": train.device: cuda with ",
                  dist_env.local_world_size, " ranks on this host but ", gpus,
                  " GPU(s): NCCL needs one GPU per rank (fewer ranks per host, or train.device: cpu for Gloo)");
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(dist_env.local_rank));
  }
  HOTPATH_CHECK(tr.precision != "fp16" || device.is_cuda(), recipe.source,
                ": train.precision: fp16 needs a CUDA device; use bf16 on CPU");
  // cuDNN benchmark, bf16 only where the GPU has it (cuda/cuda_training.h).
  const std::string cuda_settings = configure_cuda_training(device, tr.precision, recipe.source);
  // Data parallel when torchrun (or Slurm) says so: one process group for the run, checked at start
  // (every rank the same recipe keys and world size); rank 0 alone writes the run directory.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Default intra-op threads: this host's cores shared by its ranks.
  at::set_num_threads(tr.threads > 0 ? static_cast<int>(tr.threads)
                                     : std::max(1, cores / std::max(1, dist_env.local_world_size)));
  std::unique_ptr<DistContext> dist;
  // Gloo on the CPU, NCCL on this rank's GPU (train.device cuda: pick_device gave it LOCAL_RANK's).
  if (dist_env.distributed()) {
    const AgreementKeys keys =
        recipe_agreement_keys(recipe, {.resume = options.resume, .overwrite = options.overwrite});
    dist = DistContext::connect(dist_env, dist_timeout(recipe), keys, device);
  }
  const bool is_main = !dist || dist->rank() == 0;
  const int world_size = dist ? dist->world_size() : 1;
  const bool quiet = options.quiet || !is_main;
  // Initial weights (a new head, LoRA's A) and dropout until a checkpoint restores its state.
  at::manual_seed(tr.seed);
  const bool benchmark = options.benchmark_warmup_steps >= 0;

  const fs::path run_dir(recipe.output_dir);
  const fs::path ckpt_root = run_dir / "checkpoints";
  // The run directory is this run's alone: locked for the whole run; one holding another run is only
  // continued (--resume) or cleared (--overwrite), never mixed into (docs/bad-input.md).
  HOTPATH_CHECK(!(options.resume && options.overwrite), "--resume and --overwrite exclude each other");
  std::optional<RunDirLock> run_lock;
  if (is_main) run_lock.emplace(run_dir);
  bool clear_first = false;
  if (!options.resume && !benchmark && is_main) {
    std::string held;
    for (const auto& name : run_outputs(run_dir)) held += (held.empty() ? "" : ", ") + name;
    HOTPATH_CHECK(held.empty() || options.overwrite, run_dir.string(), ": holds another run (", held,
                  "); pass --resume to continue it or --overwrite to clear it, or choose another output_dir");
    clear_first = !held.empty();
  }
  std::optional<std::string> latest;
  if (options.resume) {
    latest = latest_checkpoint(ckpt_root.string());
    if (dist) {  // rank 0's choice (the directory is shared; rank 0 alone writes it)
      const std::string chosen = dist->broadcast_string("resume_checkpoint", latest.value_or(""));
      latest = chosen.empty() ? std::nullopt : std::optional<std::string>(chosen);
    }
    HOTPATH_CHECK(latest.has_value(), ckpt_root.string(), ": no checkpoint to resume from");
  }

  std::unique_ptr<Task> task = make_task(recipe, {.device = device,
                                                 .out = quiet ? nullptr : &out,
                                                 .rank = dist ? dist->rank() : 0,
                                                 .world_size = world_size});
  torch::nn::Module& model = task->module();
  // model.sync_batchnorm: BatchNorm statistics of the global batch (models/batch_norm.h); one rank: plain BatchNorm.
  if (recipe.model.sync_batchnorm) {
    HOTPATH_CHECK(models::attach_batchnorm_group(model, dist ? batchnorm_group(*dist) : nullptr) > 0, recipe.source,
                  ": model.sync_batchnorm: model ", recipe.model.name, " has no BatchNorm layer");
  }
  const NamedParameters trainable = task->trainable();
  std::vector<at::Tensor> trainable_tensors;
  std::int64_t n_trainable = 0, n_params = 0;
  for (const auto& [name, p] : trainable) {
    trainable_tensors.push_back(p);
    n_trainable += p.numel();
  }
  for (const auto& p : model.parameters()) n_params += p.numel();

  // Steps: an epoch's micro-batches in groups of accum_steps, the last group possibly shorter (token-
  // budget plans differ in length from epoch to epoch, so each epoch is counted).
  const std::int64_t accum = tr.accum_steps;
  const auto steps_in_epoch = [&](std::int64_t epoch) { return (task->micro_batches_in_epoch(epoch) + accum - 1) / accum; };
  const std::int64_t steps_per_epoch = steps_in_epoch(0);
  HOTPATH_CHECK(steps_per_epoch >= 1, recipe.source, ": data.train yields no batch");
  std::int64_t planned_steps = 0;
  for (std::int64_t e = 0; e < tr.epochs; ++e) planned_steps += steps_in_epoch(e);
  const std::int64_t total_steps = tr.max_steps > 0 ? std::min(planned_steps, tr.max_steps) : planned_steps;

  // ZeRO (train.zero 1|2, several ranks): the optimizer is built over this rank's slice once the weights are
  // broadcast (zero.h); its state is restored then.
  const int zero_stage = dist ? static_cast<int>(tr.zero) : 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (zero_stage == 0) optimizer = make_optimizer(optimizer_config_for(recipe), trainable);
  std::optional<TensorMap> zero_resume_state;
  const Schedule schedule(schedule_config_for(recipe, steps_per_epoch, planned_steps));
  GradScaler scaler({.init_scale = tr.scaler_init_scale,
                     .growth_interval = tr.scaler_growth_interval,
                     .enabled = tr.precision == "fp16"});
  const auto precision = autocast_dtype(tr.precision);
  std::unique_ptr<Ema> ema;
  if (tr.ema_decay > 0) ema = std::make_unique<Ema>(model, trainable, tr.ema_decay);

  // Resume: trained tensors, optimizer state, EMA, RNG, scaler and the batch position; everything else
  // was rebuilt above exactly as the first run built it.
  TrainerState state;
  if (latest) {
    const CheckpointData data = load_checkpoint(*latest);
    state = trainer_state_from_json(data.trainer_json, *latest + "/trainer.json", recipe, *task, world_size);
    HOTPATH_CHECK(state.step < total_steps, *latest, ": the run already finished (step ", state.step, " of ",
                  total_steps, "); raise train.epochs or train.max_steps to train on, or start a new run");
    HOTPATH_CHECK(state.position.epoch < tr.epochs &&
                      state.position.batch <= task->micro_batches_in_epoch(state.position.epoch),
                  *latest, "/trainer.json: position epoch ", state.position.epoch, " batch ", state.position.batch,
                  " is outside this recipe's ", tr.epochs, " epochs and their batches");
    restore_tensors(task->checkpoint_tensors(), data.model, *latest + "/model.safetensors");
    if (zero_stage == 0) {  // a sharded checkpoint's state comes assembled (any world size or stage)
      load_optimizer_state(*optimizer, trainable, data.optimizer);
    } else {
      zero_resume_state = data.optimizer;
    }
    if (ema) {
      HOTPATH_CHECK(!data.ema.empty(), *latest, ": train.ema_decay is on but the checkpoint has no ema.safetensors");
      // Format 1 image checkpoints kept a whole averaged model: its frozen and integer tensors are skipped.
      const TensorMap model_tensors = models::named_state(model);
      restore_tensors(ema->state(), data.ema, *latest + "/ema.safetensors",
                      [&](const std::string& name) { return model_tensors.contains(name); });
    }
    load_rng_state(data.rng, device);
    task->load_state(state.task_state, *latest + "/trainer.json");
    if (scaler.is_enabled()) scaler.load_state(state.scaler);
    if (!quiet) out << "resuming from " << *latest << " at step " << state.step << "\n";
  }

  // DDP: every rank starts from rank 0's parameters and buffers; gradients are synchronised in buckets.
  std::unique_ptr<GradSync> grad_sync;
  std::unique_ptr<ZeroSync> zero;
  if (dist) {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> tensors;
    for (const auto& t : model.parameters()) tensors.push_back(t);
    for (const auto& t : model.buffers()) tensors.push_back(t);
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t.contiguous()};
      dist->broadcast(one, 0, "the initial broadcast of the model from rank 0");
      if (!one[0].is_same(t)) t.copy_(one[0]);
    }
    if (zero_stage == 0) {
      grad_sync = std::make_unique<GradSync>(*dist, trainable, grad_sync_options(recipe));
    } else {
      zero = std::make_unique<ZeroSync>(*dist, trainable, optimizer_config_for(recipe),
                                        ZeroOptions{.stage = zero_stage, .buckets = grad_sync_options(recipe)});
      if (zero_resume_state) zero->load_state(*zero_resume_state);
    }
  }
  torch::optim::Optimizer& opt = zero ? zero->optimizer() : *optimizer;

  if (clear_first) {  // --overwrite: only now that the new run has been built and checked
    clear_run_outputs(run_dir);
    if (!quiet) out << "--overwrite: cleared the previous run in " << run_dir.string() << "\n";
  }
  if (is_main) fs::create_directories(ckpt_root);
  if (!benchmark && is_main) write_file_atomic((run_dir / "config.yaml").string(), to_yaml(recipe));
  // A metrics line is "regular" at every log_every-th step and at the end of an epoch; a line at a
  // checkpoint's step that is not regular, or an eval there mid-epoch, was logged because the run
  // stopped there (max_steps): the resumed run goes on as if it had not.
  const auto regular_line = [&](std::int64_t step, bool epoch_end) { return step % tr.log_every == 0 || epoch_end; };
  std::ofstream metrics;
  std::optional<TensorBoardWriter> tb;
  if (is_main) {
    metrics = open_metrics(run_dir / "metrics.jsonl", latest ? std::optional<std::int64_t>(state.step) : std::nullopt,
                           {.drop_train_at_step = !regular_line(state.step, state.position.batch == 0),
                            .drop_eval_at_step = state.position.batch != 0});
    tb.emplace((run_dir / "tensorboard").string());
  }
  const auto log_line = [&](const json& line) {
    if (!is_main) return;
    write_metrics_line(metrics, line);
    if (options.on_metrics) options.on_metrics(line.dump());
  };

  if (!quiet) {
    out << "train: " << task->describe() << " (" << n_trainable << " of " << n_params << " parameters trainable, "
        << fixed(100.0 * static_cast<double>(n_trainable) / static_cast<double>(std::max<std::int64_t>(n_params, 1)), 2)
        << "%) on " << device.str() << (cuda_settings.empty() ? "" : " (" + cuda_settings + ")") << ", " << at::get_num_threads() << " threads, " << tr.precision
        << (tr.precision == "bf16" && device.is_cpu() ? std::string(" (") + ops::bf16_math_name() + ")" : "") << "; "
        << task->train_samples() << " samples, " << steps_per_epoch << " steps/epoch × " << tr.epochs
        << " epochs, batch " << tr.batch_size
        << (accum > 1 ? " (" + std::to_string(accum) + " micro-batches a step)" : "")
        << (dist ? " on each of " + std::to_string(world_size) + " ranks (" + dist->backend_name() + ", " +
                       std::to_string(zero ? zero->stats().buckets : grad_sync->stats().buckets) + " gradient buckets" +
                       (zero ? ", ZeRO-" + std::to_string(zero_stage) : std::string()) + ")"
                 : "")
        << "\n";
  }

  TrainResult result;
  result.run_dir = run_dir.string();
  result.epochs_completed = state.position.epoch;
  StepBreakdown& bd = result.breakdown;
  bd.remedies = task->remedies();
  StepClock step_clock(device);  // wall time on the CPU, CUDA events (no synchronisation) on a GPU

  TraceRecorder trace(!options.trace_path.empty());
  trace.set_enabled(false);
  const std::int64_t trace_begin = state.step + std::min<std::int64_t>(3, total_steps / 4);
  const std::int64_t trace_end = trace_begin + options.trace_steps;
  const std::int64_t steady_from = state.step + std::max<std::int64_t>(options.benchmark_warmup_steps, 0);
  std::optional<Clock::time_point> steady_start;
  std::int64_t steady_samples_base = 0;
  if (benchmark && options.benchmark_warmup_steps == 0) steady_start = Clock::now();

  const auto save = [&] {
    if (benchmark || (!is_main && !zero)) return;  // DDP: every rank holds the same state; rank 0 writes it
    step_clock.pause();  // a checkpoint is no step's data phase
    CheckpointData data;
    if (zero) {  // each rank its optimizer shard into DIR.tmp/, then rank 0 the rest and the manifest
      const std::string dir = (ckpt_root / checkpoint_name(state.step)).string();
      if (is_main) begin_checkpoint(dir);
      dist->barrier("checkpoint " + dir + ": the directory for the optimizer shards");
      write_optimizer_shard(dir, dist->rank(), zero->layout(), zero->shard_state());
      dist->barrier("checkpoint " + dir + ": every rank's optimizer shard written");
      if (!is_main) return;
      data.optimizer_manifest = optimizer_manifest_json(zero->layout(), zero_stage, state.step);
    } else {
      data.optimizer = optimizer_state(opt, trainable);
    }
    if (scaler.is_enabled()) state.scaler = scaler.state();
    data.model = task->checkpoint_tensors();
    if (ema) data.ema = ema->state();
    data.rng = rng_state(device);
    data.trainer_json = trainer_state_json(state, recipe, *task, world_size);
    save_checkpoint_and_prune(ckpt_root, state.step, data, recipe.checkpoint.keep_last);
  };
  // The end of the run: the trained model (the EMA weights when EMA is on: that is what EMA is for), then
  // the last checkpoint. In that order, so that a run killed in between resumes and writes the model
  // again, and one that has its last checkpoint has its model. An interrupted run leaves only its
  // checkpoint: resume finishes the run.
  const auto finish = [&] {
    if (benchmark || (!is_main && !zero)) return;
    if (is_main) {
      const EmaSwap ema_in(ema.get());
      task->export_model(run_dir, ExportPlace::kRunDir);
    }
    save();
  };
  // Call with the EMA weights in the module (EmaSwap) when EMA is on.
  const auto run_eval = [&](std::int64_t epoch_label) {
    step_clock.pause();  // evaluation is no step's data phase
    const infer::EvalResult r = task->evaluate(precision);
    model.train();
    result.eval = r;
    log_line({{"split", "eval"}, {"step", state.step}, {"epoch", epoch_label}, {"top1", r.top1}, {"top5", r.top5},
              {"loss", r.loss}, {"majority_top1", r.majority_top1}, {"samples", r.samples}});
    add_eval_scalars(*tb, r, state.step);
    tb->flush();
    if (!quiet) {
      out << "eval epoch " << epoch_label << ": top-1 " << fixed(r.top1, 2) << "% (majority class "
          << fixed(r.majority_top1, 2) << "%)  top-5 " << fixed(r.top5, 2) << "%  loss " << format_number(r.loss)
          << " on " << r.samples << " samples" << (ema ? " (EMA weights)" : "") << "\n";
    }
    return r;
  };

  std::int64_t samples_done = 0;  // this invocation's
  double train_seconds = 0;
  bool stop = false;
  model.train();
  std::int64_t skipped_reported = 0;  // bad samples already named on the console
  const auto report_skipped = [&](std::int64_t epoch_label) {
    const SkippedSamples skipped = task->skipped_samples();
    if (quiet || skipped.count <= skipped_reported) return;
    out << "epoch " << epoch_label << ": " << skipped.count - skipped_reported << " bad sample"
        << (skipped.count - skipped_reported == 1 ? "" : "s") << " skipped (" << skipped.count
        << " in this run, data.max_bad_samples " << recipe.data.max_bad_samples << "), e.g. " << skipped.example
        << '\n';
    skipped_reported = skipped.count;
  };
  for (std::int64_t epoch = state.position.epoch; epoch < tr.epochs && !stop && state.step < total_steps; ++epoch) {
    const std::int64_t micro_in_epoch = task->micro_batches_in_epoch(epoch);
    const std::int64_t epoch_steps = steps_in_epoch(epoch);
    task->seek({epoch, epoch == state.position.epoch ? state.position.batch : 0});
    std::int64_t step_in_epoch = task->position().batch / accum;
    std::optional<Progress> progress;
    if (!quiet) {
      ProgressOptions po;
      po.prefix = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(tr.epochs);
      po.initial_step = step_in_epoch;
      progress.emplace(epoch_steps, out, options.is_tty, po);
    }
    const auto epoch_start = Clock::now();
    std::int64_t epoch_samples = 0;
    bool epoch_done = task->position().batch >= micro_in_epoch;
    while (!epoch_done && state.step < total_steps) {
      trace.set_enabled(!options.trace_path.empty() && state.step >= trace_begin && state.step < trace_end);
      TraceScope step_scope(&trace, "step", "train", {{"step", state.step}});

      // Data: the step's micro-batches (the last group of an epoch may be shorter; bad samples may end
      // an epoch early).
      step_clock.start();
      std::vector<MicroBatch> micro;
      std::int64_t step_samples = 0;
      const std::int64_t wanted = std::min(accum, micro_in_epoch - task->position().batch);
      {
        TraceScope s(&trace, "data", "train");
        for (std::int64_t a = 0; a < wanted; ++a) {
          std::optional<MicroBatch> mb = task->next();
          if (!mb) break;
          step_samples += mb->samples;
          micro.push_back(std::move(*mb));
        }
        step_clock.lap(StepPhase::kData);
      }
      if (micro.empty()) break;  // the epoch ended early (decode-time bad samples)

      // Forward + backward of each micro-batch; each one's mean loss weighted by its share of the step's
      // samples, so the gradients are those of the mean over their union whatever the micro-batch sizes.
      at::Tensor step_loss_t;
      for (const MicroBatch& mb : micro) {
        at::Tensor loss;
        {
          TraceScope s(&trace, "forward", "train");
          ops::AutocastGuard autocast(device.type(), precision);
          loss = task->loss(mb, tr.label_smoothing);
          step_clock.lap(StepPhase::kForward);
        }
        const double weight = static_cast<double>(mb.samples) / static_cast<double>(step_samples);
        {
          TraceScope s(&trace, "backward", "train");
          // DDP: buckets all-reduced as backward fills them, on the last micro-batch only (no-sync before).
          if (grad_sync) grad_sync->set_sync(&mb == &micro.back());
          if (zero) zero->set_sync(&mb == &micro.back());
          scaler.scale(micro.size() == 1 ? loss : loss * weight).backward();
          step_clock.lap(StepPhase::kBackward);
        }
        const at::Tensor l = micro.size() == 1 ? loss.detach() : loss.detach() * weight;
        step_loss_t = step_loss_t.defined() ? step_loss_t + l : l;
      }

      if (grad_sync || zero) {
        TraceScope s(&trace, "allreduce_wait", "train");
        (void)(zero ? zero->finish() : grad_sync->finish());
        step_clock.lap(StepPhase::kAllreduce);
      }

      double grad_norm = -1;
      bool stepped = true;
      {
        TraceScope s(&trace, "optimizer", "train");
        if (tr.clip_grad_norm > 0) {
          scaler.unscale_(opt);
          // ZeRO: the global norm of the slices (an all-reduce of their squared norms).
          grad_norm = zero ? zero->clip_grad_norm(tr.clip_grad_norm) : clip_grad_norm(trainable_tensors, tr.clip_grad_norm);
        }
        schedule.apply(opt, state.step);
        if (zero && scaler.is_enabled()) zero->agree_on_inf(scaler);  // each rank saw only its slice
        stepped = scaler.step(opt);
        scaler.update();
        if (zero && stepped) zero->refresh_parameters();  // every rank's slice all-gathered into the model
        if (zero) {
          zero->zero_grad();
        } else if (grad_sync) {
          grad_sync->zero_grad();  // the gradients stay views into the buckets
        } else {
          optimizer->zero_grad(/*set_to_none=*/true);
        }
        if (ema && stepped) ema->update();
        step_clock.lap(StepPhase::kOptimizer);
      }
      step_clock.finish_step(bd);  // CPU: now; CUDA: the steps whose events have completed, without waiting
      double step_loss = step_loss_t.item<double>();
      bool stop_requested = options.stop != nullptr && options.stop->load();
      if (dist) {  // the global batch's loss and samples; a stop on any rank stops every rank at this step
        at::Tensor v = at::tensor({step_loss * static_cast<double>(step_samples), static_cast<double>(step_samples),
                                   stop_requested ? 1.0 : 0.0},
                                  at::kDouble);
        dist->all_reduce_sum(v, "the step's loss");
        step_loss = v[0].item<double>() / v[1].item<double>();
        step_samples = static_cast<std::int64_t>(v[1].item<double>());
        stop_requested = v[2].item<double>() > 0;
      }
      const double lr = schedule.lr_at(state.step);
      ++state.step;
      ++step_in_epoch;
      samples_done += step_samples;
      epoch_samples += step_samples;
      const BatchPosition next = task->position();
      epoch_done = next.batch >= micro_in_epoch || static_cast<std::int64_t>(micro.size()) < wanted;
      state.position = epoch_done ? BatchPosition{epoch + 1, 0} : next;
      const double rate = static_cast<double>(epoch_samples) / std::max(seconds(epoch_start, Clock::now()), 1e-9);
      if (benchmark && state.step == steady_from) {
        steady_start = Clock::now();
        steady_samples_base = samples_done;
        // The breakdown covers the steps samples/s counts: without this the warm-up (cuDNN autotuning, lazy
        // kernel loads) was averaged into the timed steps' "step N ms".
        step_clock.restart(bd);
      }

      if (!std::isfinite(step_loss) && !(scaler.is_enabled() && !stepped)) {
        if (progress) progress->finish();
        const auto last = latest_checkpoint(ckpt_root.string());
        HOTPATH_CHECK(false, "train: the loss became ", std::isnan(step_loss) ? "NaN" : "infinite", " at step ",
                      state.step, " (epoch ", epoch + 1, ", lr ", lr, "); stopping. Lower optimizer.lr, set "
                      "train.clip_grad_norm, or use fp32. Last checkpoint: ",
                      last ? *last : std::string("none"));
      }
      if (std::isfinite(step_loss)) {
        state.loss_window += step_loss;
        state.window += 1;
      }
      const bool regular = regular_line(state.step, epoch_done);
      if ((regular || state.step == total_steps) && state.window > 0) {
        const double loss = state.loss_window / static_cast<double>(state.window);
        json j{{"split", "train"}, {"step", state.step}, {"epoch", epoch}, {"loss", loss}, {"lr", lr}};
        if (scaler.is_enabled()) j["loss_scale"] = scaler.get_scale();
        if (grad_norm >= 0) j["grad_norm"] = grad_norm;
        if (!stepped) j["skipped"] = true;
        task->add_metrics(j);
        if (is_main) {
          log_line(j);
          add_train_scalars(*tb, loss, lr, rate, state.step);
        }
        // A line the run logs only because it stops here leaves the window to the checkpoint: resumed,
        // it goes on.
        if (regular) {
          state.loss_window = 0;
          state.window = 0;
        }
      }
      if (progress) progress->update(step_in_epoch, train_fields(step_loss, lr, rate, task->sample_unit()));

      // Mid-epoch checkpoints: every checkpoint.every_steps and on a stop request. The end of an epoch
      // checkpoints below, after its eval (best_metric included); so does the end of the run.
      const bool interrupted = stop_requested && state.step < total_steps;
      const bool periodic = recipe.checkpoint.every_steps > 0 && state.step % recipe.checkpoint.every_steps == 0;
      if (!epoch_done && (periodic || interrupted) && state.step < total_steps) save();
      if (interrupted) {
        result.interrupted = true;
        stop = true;
        break;
      }
    }
    train_seconds += seconds(epoch_start, Clock::now());
    if (progress) progress->finish();
    report_skipped(epoch + 1);
    if (!epoch_done) {
      // Stopped mid-epoch. By a stop request: the checkpoint above is all. By max_steps: evaluate what was
      // trained (logged, not a best/ candidate: a resumed run would not see this eval), then finish.
      if (!result.interrupted) {
        if (task->has_eval() && !benchmark && is_main) {
          const EmaSwap ema_in(ema.get());
          run_eval(epoch + 1);
        }
        finish();
      }
      break;
    }
    result.epochs_completed = epoch + 1;
    const bool last = epoch + 1 == tr.epochs || state.step >= total_steps;
    if (task->has_eval() && !benchmark && is_main && (last || (tr.eval_every > 0 && (epoch + 1) % tr.eval_every == 0))) {
      const EmaSwap ema_in(ema.get());
      const infer::EvalResult r = run_eval(epoch + 1);
      const double metric = metric_value(r, recipe.checkpoint.metric);
      if (recipe.checkpoint.keep_best &&
          (!state.best_metric || metric_better(recipe.checkpoint.metric, metric, *state.best_metric))) {
        state.best_metric = metric;
        state.best_step = state.step;
        swap_in_best(run_dir, [&](const fs::path& dir) {
          task->export_model(dir, ExportPlace::kBest);
          write_file_atomic((dir / "metrics.json").string(),
                            json{{"step", state.step}, {"epoch", epoch + 1}, {"top1", r.top1}, {"top5", r.top5},
                                 {"loss", r.loss}, {"majority_top1", r.majority_top1}}.dump(2) + "\n");
        });
      }
    }
    const bool periodic = recipe.checkpoint.every_steps > 0 && state.step % recipe.checkpoint.every_steps == 0;
    if (last) {
      finish();
    } else if (stop || periodic ||
               (recipe.checkpoint.every_epochs > 0 && (epoch + 1) % recipe.checkpoint.every_epochs == 0)) {
      save();
    }
    if (tb) tb->flush();
  }

  if (steady_start) {
    result.steady_steps = state.step - steady_from;
    const double s = seconds(*steady_start, Clock::now());
    result.steady_samples_per_s = s > 0 ? static_cast<double>(samples_done - steady_samples_base) / s : 0;
  }
  step_clock.flush(bd);  // the last steps' events (one wait, after the loop)
  json profile = json::parse(bd.to_json());
  task->add_profile(profile);
  if (grad_sync) {
    const GradSyncStats& gs = grad_sync->stats();
    profile["distributed"] = {{"world_size", world_size},
                              {"buckets", gs.buckets},
                              {"allreduce_bytes_per_step", gs.bucket_bytes_total},
                              {"buckets_launched_in_backward", gs.launched_in_backward},
                              {"allreduce_wait_s", gs.wait_s}};
    std::int64_t state_bytes = 0;  // every rank holds all of it (ZeRO: its slice; below)
    for (const auto& [key, t] : optimizer_state(opt, trainable)) state_bytes += static_cast<std::int64_t>(t.nbytes());
    profile["distributed"]["optimizer_state_bytes"] = state_bytes;
  }
  if (zero) {
    const ZeroStats zs = zero->stats();
    profile["distributed"] = {{"world_size", world_size},
                              {"zero", zs.stage},
                              {"buckets", zs.buckets},
                              {"flat_numel", zs.flat_numel},
                              {"shard_numel", zs.shard_numel},
                              {"allreduce_bytes_per_step", zs.reduce_bytes},
                              {"allgather_bytes_per_step", zs.allgather_bytes},
                              {"optimizer_state_bytes", zs.optimizer_state_bytes},
                              {"gradient_bytes_kept", zs.gradient_bytes_kept},
                              {"buckets_launched_in_backward", zs.launched_in_backward},
                              {"allreduce_wait_s", zs.wait_s}};
  }
  if (is_main) write_file_atomic((run_dir / "profile.json").string(), profile.dump(2) + "\n");
  if (!options.trace_path.empty() && is_main) trace.write(options.trace_path);
  if (tb) tb->flush();

  result.steps = state.step;
  result.seconds = seconds(t_start, Clock::now());
  result.samples_per_s = train_seconds > 0 ? static_cast<double>(samples_done) / train_seconds : 0;
  return result;
}

}  // namespace hotpath::train
