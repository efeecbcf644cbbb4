// hotpath/train/trainer.h — the one training loop a recipe drives, for every task (task.h): data,
// model, AMP, accumulation, clipping, schedule, EMA, eval, checkpoints, metrics and the step-time profile.
//
//   Recipe recipe = load_recipe("configs/fashion_mnist.yaml", {"train.epochs=3"});
//   TrainResult r = train(recipe, {.resume = true});
//   std::cout << r.breakdown.summary() << "\n";       // "data 2% · forward 31% · ... bottleneck: backward"
//
// data.kind picks the task: image (ImageTask: registry models on image shards) or text (TextTask: a
// Hugging Face BERT-family classifier, full or LoRA, on text shards). The run directory
// (recipe.output_dir) gets config.yaml (the resolved recipe), metrics.jsonl, TensorBoard event files,
// checkpoints/step-NNNNNNNN/ (atomic; keep-last-N), best/ (the model at the best eval, swapped in whole),
// the trained model (image: model.safetensors + model.json, what `hotpath eval|predict --model-dir`
// read; text: model/ as a Hugging Face directory + adapter/ for LoRA), profile.json (step-time
// breakdown) and, with a trace path, a Chrome trace of a few steps.
// Resume is bit-exact: the same metrics and weights as an uninterrupted run for the same seed and threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/infer/evaluate.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"

namespace hotpath::train {

struct TrainOptions {
  bool resume = false;                      // continue from the latest checkpoint in the run directory
  bool overwrite = false;                   // the run directory holds another run: clear it first
  std::string trace_path;                   // Chrome-trace JSON of `trace_steps` steps ("" = off)
  std::int64_t trace_steps = 5;
  const std::atomic<bool>* stop = nullptr;  // set asynchronously (SIGINT): checkpoint and return
  std::ostream* out = nullptr;              // progress and messages (nullptr: std::cerr)
  bool is_tty = false;                      // progress bar redraws in place
  bool quiet = false;                       // no progress, only the final summary
  // Called with each metrics.jsonl line (compact JSON: {"split": "train"|"eval", "step", ...}) right after it
  // is written, on the main rank only (hotpath.train's callback). An exception from it ends train() as any
  // error does; to stop cleanly, set *stop instead.
  std::function<void(const std::string& json_line)> on_metrics;
  // Benchmark mode (>= 0): no checkpoints, no eval, no model package; throughput is also measured
  // from this many optimizer steps on (TrainResult::steady_samples_per_s). Stop with train.max_steps.
  std::int64_t benchmark_warmup_steps = -1;
};

// Where step time went. Fractions of the summed phases; on CUDA the phases are timed with a
// device synchronisation every 10th step (the others run asynchronously and are not split).
struct StepBreakdown {
  double data_s = 0;       // waiting for the loader + host-to-device copy
  double forward_s = 0;    // forward + loss
  double backward_s = 0;
  double optimizer_s = 0;  // unscale, clip, step, scaler update, zero_grad, EMA
  double allreduce_s = 0;  // distributed: waiting for the gradient all-reduce after backward (not overlapped)
  std::int64_t steps = 0;
  Remedies remedies;  // the task's hints for each bottleneck
  [[nodiscard]] double total_s() const { return data_s + forward_s + backward_s + optimizer_s + allreduce_s; }
  // "step 212.4 ms: data 2.1% · forward 30.8% · backward 55.6% · optimizer 11.5% — bottleneck: backward
  //  (compute-bound: a smaller model, bf16 or more threads help)".
  [[nodiscard]] std::string summary() const;
  [[nodiscard]] std::string to_json() const;
};

struct TrainResult {
  std::string run_dir;
  std::int64_t steps = 0;             // optimizer steps done in total (resumed ones included)
  std::int64_t epochs_completed = 0;
  bool interrupted = false;           // stopped by TrainOptions::stop; the last checkpoint is resumable
  std::optional<infer::EvalResult> eval;     // the last evaluation
  double seconds = 0;                 // wall time of this invocation
  double samples_per_s = 0;           // training throughput of this invocation
  double steady_samples_per_s = 0;    // benchmark mode: after the warm-up steps
  std::int64_t steady_steps = 0;
  StepBreakdown breakdown;
};

// train.precision "auto" made concrete for the device the run takes (train.device; auto = CUDA when present):
// bf16 where that device computes bf16 natively — a CPU where ops::bf16_math() is native (the avx512_bf16 dispatch
// level: AVX512_BF16, which AMX CPUs have too; HOTPATH_MAX_ISA caps it, HOTPATH_BF16_MATH forces it) or a GPU with
// bf16 — else fp32. Other values pass unchanged.
// train() resolves it itself; a caller that hands the recipe to a peer (bench train) resolves it first.
Recipe with_precision_resolved(Recipe recipe);

// Runs the recipe's task through the loop (see the top of this file), train.precision resolved as above.
TrainResult train(const Recipe& recipe, const TrainOptions& options = {});

}  // namespace hotpath::train
