// hotpath/train/trainer.h — the training loop a recipe drives: data, model, AMP, accumulation,
// clipping, EMA, eval, checkpoints, metrics and the step-time profile.
//
//   Recipe recipe = load_recipe("configs/fashion_mnist.yaml", {"train.epochs=3"});
//   TrainResult r = train(recipe, {.resume = true});
//   std::cout << r.breakdown.summary() << "\n";       // "data 2% · forward 31% · ... bottleneck: backward"
//
// The run directory (recipe.output_dir) gets config.yaml (the resolved recipe), metrics.jsonl,
// TensorBoard event files, checkpoints/step-NNNNNNNN/ (atomic; keep-last-N), best/ (best eval metric),
// model.safetensors + model.json (the trained model package `hotpath eval|predict --model-dir` read),
// profile.json (step-time breakdown) and, with a trace path, a Chrome trace of a few steps.
// Resume is bit-exact: the same losses as an uninterrupted run for the same seed and threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/data/loader.h"
#include "hotpath/models/classifier.h"
#include "hotpath/train/optimizer.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/schedule.h"

namespace hotpath::train {

struct TrainOptions {
  bool resume = false;                      // continue from the latest checkpoint in the run directory
  std::string trace_path;                   // Chrome-trace JSON of `trace_steps` steps ("" = off)
  std::int64_t trace_steps = 5;
  const std::atomic<bool>* stop = nullptr;  // set asynchronously (SIGINT): checkpoint and return
  std::ostream* out = nullptr;              // progress and messages (nullptr: std::cerr)
  bool is_tty = false;                      // progress bar redraws in place
  bool quiet = false;                       // no progress, only the final summary
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
  std::int64_t steps = 0;
  bool text = false;  // a text run: the hints name text remedies (tokenize ahead, LoRA) not image ones
  [[nodiscard]] double total_s() const { return data_s + forward_s + backward_s + optimizer_s; }
  // "step 212.4 ms: data 2.1% · forward 30.8% · backward 55.6% · optimizer 11.5% — bottleneck: backward
  //  (compute-bound: a smaller model, bf16 or more threads help)".
  [[nodiscard]] std::string summary() const;
  [[nodiscard]] std::string to_json() const;
};

struct EvalResult {
  double top1 = 0;  // percent
  double top5 = 0;  // percent (top-k with k = min(5, classes))
  double loss = 0;  // mean cross-entropy (no label smoothing)
  std::int64_t samples = 0;
};

struct TrainResult {
  std::string run_dir;
  std::int64_t steps = 0;             // optimizer steps done in total (resumed ones included)
  std::int64_t epochs_completed = 0;
  bool interrupted = false;           // stopped by TrainOptions::stop; the last checkpoint is resumable
  std::optional<EvalResult> eval;     // the last evaluation
  double seconds = 0;                 // wall time of this invocation
  double samples_per_s = 0;           // training throughput of this invocation
  double steady_samples_per_s = 0;    // benchmark mode: after the warm-up steps
  std::int64_t steady_steps = 0;
  StepBreakdown breakdown;
};

// Image recipes (data.kind: image) run the loop above; text recipes go to train_text.
TrainResult train(const Recipe& recipe, const TrainOptions& options = {});

// Fine-tunes a Hugging Face BERT-family classifier (model.pretrained) on text shards (text_trainer.cpp):
// full or LoRA (model.lora_r), bf16 autocast, gradient accumulation (train.accum_steps micro-batches of
// batch_size / accum_steps, each micro-batch's mean loss weighted by its share of the step's samples, so
// a step equals one over their union also for token-budget batches), clipping, schedules, activation
// checkpointing, eval accuracy (next to the majority class), metrics.jsonl, TensorBoard (run/tensorboard:
// train/loss, train/lr, train/samples_per_s, eval/top1, eval/top5, eval/loss), and at the end a Hugging
// Face model directory (run/model: config.json + model.safetensors with LoRA merged + tokenizer files;
// run/adapter: the PEFT adapter).
// Checkpoints (run/checkpoints/step-NNNNNNNN, the image trainer's format and checkpoint.* keys) hold the
// trained tensors (LoRA: adapters + head; full: every parameter and buffer), the optimizer state, the CPU
// RNG and trainer.json (step, loader epoch/micro-batch, best metric, the pending metrics window); resume is
// bit-exact. best/ is run/model (+ adapter/) as of the best epoch-end eval, with metrics.json.
// train.ema_decay keeps an EMA of the trained tensors (in the checkpoint as ema.safetensors); eval, best/
// and run/model then use the averaged weights. A stop request checkpoints and returns interrupted (no
// run/model). Not yet: CUDA (an error says so).
TrainResult train_text(const Recipe& recipe, const TrainOptions& options = {});

// The shard paths of a recipe key's patterns (data.train / data.eval); errors name the recipe file
// and the key (no pattern, nothing matches, a bad pattern).
std::vector<std::string> resolve_recipe_shards(const std::vector<std::string>& patterns, const char* key,
                                               const Recipe& recipe);

// The optimizer and schedule settings a recipe implies (shared by both loops).
OptimizerConfig optimizer_config_for(const Recipe& recipe);
ScheduleConfig schedule_config_for(const Recipe& recipe, std::int64_t steps_per_epoch, std::int64_t total_steps);

// The loader settings a recipe implies (train: augmentation + shuffle; eval: deterministic crop).
data::LoaderOptions train_loader_options(const Recipe& recipe);
data::LoaderOptions eval_loader_options(const Recipe& recipe, const std::vector<std::string>& shard_patterns);

struct EvalOptions {
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (autocast)
  std::int64_t max_batches = 0;    // 0 = all
};
// Top-1/top-5/loss over one pass of `loader` (epoch 0). The model is put in eval mode and left so.
EvalResult evaluate(models::ImageClassifier& model, data::Loader& loader, const EvalOptions& options = {});

// Class names for a recipe: data.class_names, else the "classes" of the pack report next to the
// first train shard ("train-000000.tar" → "train.json"), else empty.
std::vector<std::string> class_names_for(const Recipe& recipe);

}  // namespace hotpath::train
