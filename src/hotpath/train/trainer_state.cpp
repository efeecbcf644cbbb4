// trainer.json and resuming from a checkpoint (trainer_state.h).
#include "trainer_state.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/json.h"
#include "hotpath/models/weights.h"
#include "ema.h"
#include "run_dir.h"

namespace hotpath::train {
namespace {

using json = nlohmann::ordered_json;

constexpr int kTrainerStateFormat = 2;

// Format 1 kept the resume key at the top level under short names.
std::string format1_key(const std::string& key) {
  if (key == "the number of samples in data.train") return "train_samples";
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

}  // namespace

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

void restore_tensors(const TensorMap& expected, const TensorMap& saved, const std::string& where,
                     const std::function<bool(const std::string&)>& extra_ok) {
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

void save_run_checkpoint(const std::filesystem::path& root, TrainerState& state, const CheckpointSource& source) {
  CheckpointData data;
  source.parallel.save_optimizer(data, (root / checkpoint_name(state.step)).string(), state.step, source.is_main);
  if (!source.is_main) return;
  if (source.scaler.is_enabled()) state.scaler = source.scaler.state();
  data.model = source.task.checkpoint_tensors();
  if (source.ema != nullptr) data.ema = source.ema->state();
  data.rng = rng_state(source.device);
  data.trainer_json = trainer_state_json(state, source.recipe, source.task, source.world_size);
  save_checkpoint_and_prune(root, state.step, data, source.recipe.checkpoint.keep_last);
}

Resumed resume_from_checkpoint(const std::string& dir, const ResumeTarget& t) {
  const CheckpointData data = load_checkpoint(dir);
  Resumed r;
  TrainerState& state = r.state;
  state = trainer_state_from_json(data.trainer_json, dir + "/trainer.json", t.recipe, t.task, t.world_size);
  const auto& tr = t.recipe.train;
  HOTPATH_CHECK(state.step < t.total_steps, dir, ": the run already finished (step ", state.step, " of ",
                t.total_steps, "); raise train.epochs or train.max_steps to train on, or start a new run");
  HOTPATH_CHECK(state.position.epoch < tr.epochs &&
                    state.position.batch <= t.task.micro_batches_in_epoch(state.position.epoch),
                dir, "/trainer.json: position epoch ", state.position.epoch, " batch ", state.position.batch,
                " is outside this recipe's ", tr.epochs, " epochs and their batches");
  restore_tensors(t.task.checkpoint_tensors(), data.model, dir + "/model.safetensors");
  r.optimizer = data.optimizer;
  if (t.ema != nullptr) {
    HOTPATH_CHECK(!data.ema.empty(), dir, ": train.ema_decay is on but the checkpoint has no ema.safetensors");
    // Format 1 image checkpoints kept a whole averaged model: its frozen and integer tensors are skipped.
    const TensorMap model_tensors = models::named_state(t.task.module());
    restore_tensors(t.ema->state(), data.ema, dir + "/ema.safetensors",
                    [&](const std::string& name) { return model_tensors.contains(name); });
  }
  load_rng_state(data.rng, t.device);
  t.task.load_state(state.task_state, dir + "/trainer.json");
  if (t.scaler.is_enabled()) t.scaler.load_state(state.scaler);
  return r;
}

}  // namespace hotpath::train
