// trainer_state.h (private to hotpath_train) — the training loop's part of a checkpoint, trainer.json, and
// resuming from a checkpoint: where the run stands (step, the task's batch position), the best metric, the
// running sums behind the next metrics line (so a resumed run logs exactly the lines an uninterrupted one
// would), the loss scaler, the task's own state and the resume key. Format 2; format 1 (the two loops
// before they became one: image without "kind", text with its keys at the top level) still resumes.
//
//   save_run_checkpoint(run_dir / "checkpoints", state, {recipe, task, parallel, scaler, ema, device, world, main});
//   Resumed r = resume_from_checkpoint(dir, {recipe, task, ema, scaler, device, world_size, total_steps});
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "hotpath/core/position.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/train/grad_scaler.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"
#include "data_parallel.h"

namespace hotpath::train {

class Ema;

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

std::string trainer_state_json(const TrainerState& s, const Recipe& recipe, const Task& task, int world_size);
// Reads and checks trainer.json (`where` names it in errors): the kind, the world size (another one only at
// the same global batch, where the task allows it) and every resume key against the recipe's.
TrainerState trainer_state_from_json(const std::string& text, const std::string& where, const Recipe& recipe,
                                     const Task& task, int world_size);

// Copies `saved` into the live tensors `expected` (the same names and shapes, all of them). Names in
// `saved` that are not expected are an error unless `extra_ok` says they may be skipped.
void restore_tensors(const TensorMap& expected, const TensorMap& saved, const std::string& where,
                     const std::function<bool(const std::string&)>& extra_ok = {});

// What resuming touches. Everything else the run built exactly as the first run built it.
struct ResumeTarget {
  const Recipe& recipe;
  Task& task;
  Ema* ema = nullptr;  // train.ema_decay on
  GradScaler& scaler;
  at::Device device;
  int world_size = 1;
  std::int64_t total_steps = 0;
};
struct Resumed {
  TrainerState state;
  TensorMap optimizer;  // the whole per-parameter state (a sharded checkpoint's, assembled): for the optimizer
};
// What a checkpoint is taken from.
struct CheckpointSource {
  const Recipe& recipe;
  Task& task;
  DataParallel& parallel;
  const GradScaler& scaler;
  const Ema* ema = nullptr;
  at::Device device;
  int world_size = 1;
  bool is_main = true;
};
// root/step-NNNNNNNN for state.step (its scaler state taken first), then all but checkpoint.keep_last removed.
// Call on every rank that parallel.writes_checkpoint: the optimizer's part is the strategy's (ZeRO: each rank
// writes its shard into the directory); the main rank writes the rest.
void save_run_checkpoint(const std::filesystem::path& root, TrainerState& state, const CheckpointSource& source);

// Restores the checkpoint at `dir`: the trained tensors, the EMA, the generators, the task's state and the loss
// scaler. Refuses a run that already finished and a position outside the recipe's epochs.
Resumed resume_from_checkpoint(const std::string& dir, const ResumeTarget& target);

}  // namespace hotpath::train
