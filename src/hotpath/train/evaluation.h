// evaluation.h (private to hotpath_train) — the training loop's evaluations: the task's eval on the EMA
// weights when EMA is on, its metrics line, TensorBoard scalars and console line, and best/
// (checkpoint.keep_best: the model at the best checkpoint.metric so far, swapped in whole with its metrics.json).
//
//   RunEvaluator eval({recipe, task, ema, precision, log, out, run_dir});
//   eval.run(step, epoch + 1, /*best_candidate=*/true, state);   // main rank only
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <utility>

#include "hotpath/infer/evaluate.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"
#include "run_dir.h"
#include "trainer_state.h"

namespace hotpath::train {

class Ema;

struct EvalSetting {
  const Recipe& recipe;
  Task& task;
  Ema* ema = nullptr;                          // evaluate the averages
  std::optional<at::ScalarType> precision;     // the training autocast
  RunLog& log;
  std::ostream* out = nullptr;                 // the console line (nullptr: quiet)
  std::filesystem::path run_dir;
};

class RunEvaluator {
 public:
  explicit RunEvaluator(EvalSetting setting) : s_(std::move(setting)) {}
  // Evaluates after `step` optimizer steps (labelled `epoch`), leaving the module in training mode. A best
  // candidate (an epoch's end, not a run stopped mid-epoch: a resumed run would not see that eval) replaces
  // best/ when it beats state.best_metric, which it updates.
  infer::EvalResult run(std::int64_t step, std::int64_t epoch, bool best_candidate, TrainerState& state);

 private:
  EvalSetting s_;
};

}  // namespace hotpath::train
