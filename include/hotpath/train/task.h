// hotpath/train/task.h — what the one training loop (trainer.cpp) asks of a task: the module, the
// trainable parameters, a resumable batch stream, forward, evaluation, export and resume checks.
//
//   std::unique_ptr<Task> task = make_task(recipe, {.device = device, .out = &std::cerr});
//   task->seek({epoch, 0});
//   while (auto mb = task->next()) loss = task->loss(*mb, label_smoothing);
//
// The loop owns everything that is the same for every task — accumulation, autocast and the loss
// scaler, clipping, the schedule, EMA, metrics, progress, eval cadence, best/, checkpoints and exact
// resume, the profile, the trace, SIGINT, benchmark mode — so a fix or a new feature (gradient
// synchronisation between backward and the optimizer step, rank-aware loaders) is written once.
// ImageTask (data.kind: image) and TextTask (data.kind: text) are the two tasks.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/data/loader.h"
#include "hotpath/infer/evaluate.h"
#include "hotpath/infer/preprocess.h"
#include "hotpath/ops/dropout.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/train/recipe.h"

namespace torch::nn {
class Module;
}

namespace hotpath::train {

// One micro-batch, on the task's device.
struct MicroBatch {
  std::vector<at::Tensor> inputs;  // the model's inputs (image: images; text: ids, mask, type ids)
  at::Tensor labels;               // int64 [samples]
  std::int64_t samples = 0;
  // Keyed per sample (the run seed, the epoch and each row's global index: text, its corpus index; image, its
  // place in the epoch's global batch order), so every dropout mask is the same on any rank and in any batch
  // the sample lands in. Not keyed: the default generator's draws.
  ops::DropoutSource dropout{};
};

// What the step-time summary suggests for each bottleneck, in the task's terms.
struct Remedies {
  std::string input;      // data-bound
  std::string optimizer;  // optimizer-bound
  std::string compute;    // forward/backward-bound
  std::string allreduce =  // distributed: waiting for gradients
      "communication-bound: a larger train.batch_size per rank or train.accum_steps hides the all-reduce";
};

// Samples the training loader skipped as bad (unreadable image, missing or out-of-range label) in this
// invocation, and one of their reasons ("shard:offset:member: label -100 outside [0, 10)").
struct SkippedSamples {
  std::int64_t count = 0;
  std::string example;
};

// The two places a task's trained model goes: the run directory at the end, best/ at the best eval.
enum class ExportPlace { kRunDir, kBest };

class Task {
 public:
  virtual ~Task() = default;
  Task() = default;
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  // "resnet18, 10 classes" / "bert 6×384 classifier, 4 classes, attention fused": the run's header line.
  [[nodiscard]] virtual std::string describe() const = 0;
  [[nodiscard]] virtual torch::nn::Module& module() = 0;
  // The tensors the optimizer updates, by parameter name (after freezing / LoRA).
  [[nodiscard]] virtual NamedParameters trainable() const = 0;
  [[nodiscard]] virtual std::int64_t train_samples() const = 0;
  [[nodiscard]] virtual const char* sample_unit() const = 0;  // "img/s", "samples/s"

  // The batch stream: planned micro-batches of an epoch, seek/position for exact resume, next() = the
  // next micro-batch of the current epoch or nullopt at its end (which may come early: bad samples).
  [[nodiscard]] virtual std::int64_t micro_batches_in_epoch(std::int64_t epoch) const = 0;
  virtual void seek(BatchPosition position) = 0;
  [[nodiscard]] virtual BatchPosition position() const = 0;
  virtual std::optional<MicroBatch> next() = 0;

  // Mean cross-entropy (label smoothing as given) of the model on `batch`; runs under the loop's autocast.
  virtual at::Tensor loss(const MicroBatch& batch, double label_smoothing) = 0;

  // Evaluation on the recipe's data.eval (nullopt when it has none). Puts the module in eval mode; the
  // loop puts it back in training mode.
  [[nodiscard]] virtual bool has_eval() const = 0;
  virtual infer::EvalResult evaluate(std::optional<at::ScalarType> autocast) = 0;

  // model.safetensors of a checkpoint: name → live tensor (restored in place on resume). A task whose frozen
  // weights come from elsewhere (LoRA on a pretrained encoder) keeps only what training changes.
  [[nodiscard]] virtual TensorMap checkpoint_tensors() = 0;
  // Values a checkpoint must share with the recipe to resume exactly (batch layout, data plan, model
  // shape): {"train.batch_size": 32, ...}: the recipe table's resume rows (resume_values) and what the task
  // adds from its data. A difference is refused naming the key.
  [[nodiscard]] virtual nlohmann::ordered_json resume_key() const = 0;
  // Why a checkpoint of another world size (at the same global batch) would not see the same samples at each
  // step, or "" when it would (the batches are planned globally; each rank takes its rows): the trainer then
  // resumes it on this world size.
  [[nodiscard]] virtual std::string world_size_change_refusal() const = 0;
  // The task's own running state (e.g. padding counters), saved in trainer.json and restored on resume.
  [[nodiscard]] virtual nlohmann::ordered_json state() const { return nlohmann::ordered_json::object(); }
  virtual void load_state(const nlohmann::json& state, const std::string& where) {
    (void)state;
    (void)where;
  }
  // Extra fields of a train metrics line / of profile.json (deterministic ones only in metrics lines:
  // a resumed run's metrics.jsonl equals an uninterrupted run's byte for byte).
  virtual void add_metrics(nlohmann::ordered_json& line) const { (void)line; }
  virtual void add_profile(nlohmann::ordered_json& profile) const { (void)profile; }
  // The loop prints a console line at the end of each epoch in which this count grew (a task whose loader
  // refuses bad data instead of skipping it keeps the default).
  [[nodiscard]] virtual SkippedSamples skipped_samples() const { return {}; }
  [[nodiscard]] virtual Remedies remedies() const = 0;

  // Writes the trained model (the module's current weights) where `place` says under `dir`.
  virtual void export_model(const std::filesystem::path& dir, ExportPlace place) = 0;
};

struct TaskOptions {
  at::Device device = at::Device(at::kCPU);
  std::ostream* out = nullptr;  // messages (weights report, LoRA summary); nullptr: none
  // Data-parallel place: the batch stream is this rank's share of global batches of world_size ×
  // train.batch_size samples (positions are global: every rank seeks to the same one).
  int rank = 0;
  int world_size = 1;
};

// The shard paths of a recipe key's patterns (data.train / data.eval); errors name the recipe file
// and the key (no pattern, nothing matches, a bad pattern).
std::vector<std::string> resolve_recipe_shards(const std::vector<std::string>& patterns, const char* key,
                                               const Recipe& recipe);

// Class names for a recipe: data.class_names, else the "classes" of the pack report next to the
// first train shard ("train-000000.tar" → "train.json"), else empty.
std::vector<std::string> class_names_for(const Recipe& recipe);

// Image recipes: the training loader's settings (augmentation + shuffle, micro-batches of
// batch_size / accum_steps; rank `rank` of `world_size`: its rows of each global batch) and the eval
// transform (stored in the model package).
data::LoaderOptions train_loader_options(const Recipe& recipe, int rank = 0, int world_size = 1);
infer::EvalPreprocess eval_preprocess_for(const Recipe& recipe);
// data.decode / data.augment: the loader's CUDA ("mixed") mode, batches finished on `device` (nvJPEG decode, or
// the normalisation on the GPU). Either on a device that is not CUDA is an error naming the key; neither leaves
// `o` a CPU loader (the caller copies its batches to the device).
void configure_loader_device(data::LoaderOptions& o, const Recipe& recipe, const at::Device& device);

// model.freeze: every parameter whose name starts with a prefix stops requiring gradients; a prefix
// that matches nothing is an error naming it.
void freeze_prefixes(torch::nn::Module& module, const Recipe& recipe);
// The parameters that still require gradients, by name; an error when there is none.
NamedParameters trainable_parameters(const torch::nn::Module& module, const Recipe& recipe);

// ImageTask for data.kind image, TextTask for data.kind text. The recipe is validated for the task:
// an option the task cannot honour is refused naming the key.
std::unique_ptr<Task> make_task(const Recipe& recipe, const TaskOptions& options);

}  // namespace hotpath::train
