// run_util.h (private to hotpath_train) — the run-directory pieces of the training loop (trainer.cpp):
// checkpoints, metrics.jsonl, TensorBoard scalars, generator states.
//
//   std::ofstream metrics = open_metrics(run_dir / "metrics.jsonl", resumed_step);  // rewound on resume
//   write_metrics_line(metrics, {{"split", "train"}, {"step", 10}, {"loss", 0.5}});
//   add_eval_scalars(tb, eval_result, step);
//   save_checkpoint_and_prune(run_dir / "checkpoints", step, data, recipe.checkpoint.keep_last);
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/core/tensorboard.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/infer/evaluate.h"

namespace hotpath::train {

// What a resume drops at exactly the checkpoint's step, besides every line after it: lines a run logs
// only because it stopped there (the loop logs the last step and evaluates where train.max_steps ends it
// mid-epoch; an uninterrupted run has neither).
struct MetricsRewind {
  bool drop_train_at_step = false;
  bool drop_eval_at_step = false;
};
// metrics.jsonl opened for appending: emptied for a fresh run; on a resume at `resume_step`, the
// lines the interrupted run logged after that step are dropped so the file reads as one run.
std::ofstream open_metrics(const std::filesystem::path& path, std::optional<std::int64_t> resume_step,
                           MetricsRewind rewind = {});
// One JSON object per line, flushed (a crash loses at most the line being written).
void write_metrics_line(std::ostream& metrics, const nlohmann::ordered_json& line);

// TensorBoard scalars, the same tags for both loops: train/loss, train/lr, train/samples_per_s;
// eval/top1, eval/top5, eval/loss.
void add_train_scalars(TensorBoardWriter& tb, double loss, double lr, double samples_per_s, std::int64_t step);
void add_eval_scalars(TensorBoardWriter& tb, const infer::EvalResult& eval, std::int64_t step);

// checkpoint.metric (top1 | top5 | loss) of an eval, and whether `candidate` beats `best` (loss: lower).
double metric_value(const infer::EvalResult& eval, const std::string& metric);
bool metric_better(const std::string& metric, double candidate, double best);

// The generator states a checkpoint carries: "cpu" (dropout, stochastic depth) and "cuda" on CUDA.
TensorMap rng_state(const at::Device& device);
void load_rng_state(const TensorMap& state, const at::Device& device);

// root/step-NNNNNNNN written atomically, then all but the newest keep_last removed.
void save_checkpoint_and_prune(const std::filesystem::path& root, std::int64_t step, const CheckpointData& data,
                               std::int64_t keep_last);

// An exclusive flock(2) on <run_dir>/.lock for the object's life (created with the directory): a second
// `hotpath train` on the same directory is refused at once with one line naming the holder's pid. The
// kernel drops the lock when the process dies, kill -9 included.
class RunDirLock {
 public:
  explicit RunDirLock(const std::filesystem::path& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

// What a run leaves behind that a new run must not mix with: a non-empty metrics.jsonl, checkpoints,
// best/, the exported model. Empty when the directory holds no run (a config.yaml alone is a run that
// failed before its first step).
std::vector<std::string> run_outputs(const std::filesystem::path& run_dir);
// Removes every file and directory a run writes (run_outputs() plus config.yaml, tensorboard/,
// profile.json, leftovers of an interrupted swap); anything else in the directory is kept.
void clear_run_outputs(const std::filesystem::path& run_dir);

}  // namespace hotpath::train
