// run_dir.h (private to hotpath_train) — the training loop's run directory (trainer.cpp): claiming it (a lock,
// no mixing with another run, the checkpoint to resume), metrics.jsonl and TensorBoard (RunLog), checkpoints,
// best/, generator states.
//
//   RunDirClaim claim = claim_run_dir(run_dir, {.resume = true, .is_main = rank == 0});
//   RunLog log(run_dir, is_main, resumed_step, rewind, on_metrics);   // metrics.jsonl rewound on resume
//   log.line({{"split", "train"}, {"step", 10}, {"loss", 0.5}});
//   save_checkpoint_and_prune(run_dir / "checkpoints", step, data, recipe.checkpoint.keep_last);
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
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

// The start of a run on its directory. The directory is this run's alone: locked (by the main rank) for the
// whole run; one holding another run is only continued (--resume) or cleared (--overwrite), never mixed into.
struct RunDirFlags {
  bool resume = false;
  bool overwrite = false;
  bool benchmark = false;  // benchmark mode writes no run: nothing to refuse
  bool is_main = true;     // data parallel: rank 0 alone locks and writes the directory
};
struct RunDirClaim {
  std::unique_ptr<RunDirLock> lock;        // the main rank's
  bool clear_first = false;                // --overwrite over another run: clear it once the new one is built
  std::optional<std::string> latest;       // --resume: this rank's newest checkpoint (data parallel: rank 0's counts)
};
RunDirClaim claim_run_dir(const std::filesystem::path& run_dir, const RunDirFlags& flags);

// best/ replaced as a whole: `write` fills best.tmp, the old one steps aside (best.old) until the new one is
// in, so there is never a moment without a best/.
void swap_in_best(const std::filesystem::path& run_dir, const std::function<void(const std::filesystem::path&)>& write);

// metrics.jsonl, TensorBoard and the caller's metrics callback, on the main rank; nothing on the others.
class RunLog {
 public:
  RunLog(const std::filesystem::path& run_dir, bool is_main, std::optional<std::int64_t> resume_step,
         MetricsRewind rewind, std::function<void(const std::string&)> on_metrics);
  // A metrics.jsonl line (then the callback with it, compact).
  void line(const nlohmann::ordered_json& line);
  void train_scalars(double loss, double lr, double samples_per_s, std::int64_t step);
  void eval_scalars(const infer::EvalResult& eval, std::int64_t step);
  void flush();

 private:
  std::ofstream metrics_;
  std::optional<TensorBoardWriter> tb_;
  std::function<void(const std::string&)> on_metrics_;
};

}  // namespace hotpath::train
