// The one training loop (trainer.h) in three levels, as ggml-opt's fit/epoch/eval: the run (set-up, the epochs,
// the end), the epoch (its steps, then eval, best/ and checkpoints) and the step (micro-batches, forward and
// backward, gradient sync, the optimizer step). Everything that is the same for every task — accumulation,
// autocast + loss scaler, clipping, schedule, EMA, metrics, progress, eval cadence, exact resume, the profile,
// the trace, SIGINT, benchmark mode — is written once here or in the pieces it calls: the run directory
// (run_dir.h), checkpoints and resume (trainer_state.h), evaluation and best/ (evaluation.h), the gradient
// synchronisation of one rank or many (data_parallel.h). A task (task.h) supplies the rest.
#include "hotpath/train/trainer.h"

#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/progress.h"
#include "hotpath/core/trace.h"
#include "hotpath/train/distributed.h"
#include "hotpath/train/from_recipe.h"
#include "hotpath/train/grad_scaler.h"
#include "hotpath/train/step_clock.h"
#include "data_parallel.h"
#include "ema.h"
#include "evaluation.h"
#include "run_setup.h"
#include "run_dir.h"
#include "train_step.h"
#include "trainer_state.h"

namespace hotpath::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds_since(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

class Run {
 public:
  Run(const Recipe& recipe, const TrainOptions& options);
  TrainResult go();

 private:
  bool run_epoch(std::int64_t epoch);
  void log_step(const StepDone& done, double lr, double rate, std::int64_t epoch, bool epoch_done);
  void save();
  void finish();
  void write_profile();
  [[nodiscard]] std::int64_t steps_in_epoch(std::int64_t epoch) const {
    return (task_->micro_batches_in_epoch(epoch) + tr_.accum_steps - 1) / tr_.accum_steps;
  }
  [[nodiscard]] bool is_main() const { return setup_.is_main; }

  const Recipe& recipe_;
  const TrainOptions& options_;
  const TrainSection& tr_;
  std::ostream& out_;
  const Clock::time_point t_start_ = Clock::now();
  const bool benchmark_;
  RunSetup setup_;  // device, ranks, the claimed run directory (run_setup.h)
  std::unique_ptr<Task> task_;
  NamedParameters trainable_;
  std::int64_t total_steps_ = 0;
  std::optional<Schedule> schedule_;
  GradScaler scaler_;
  std::unique_ptr<Ema> ema_;
  TrainerState state_;
  std::unique_ptr<DataParallel> parallel_;
  std::optional<RunLog> log_;
  std::optional<RunEvaluator> evaluator_;
  TrainResult result_;
  StepClock clock_;
  TraceRecorder trace_;
  std::int64_t trace_begin_ = 0, steady_from_ = 0, steady_samples_base_ = 0, samples_done_ = 0;
  std::optional<Clock::time_point> steady_start_;
  double train_seconds_ = 0;
  std::int64_t skipped_reported_ = 0;  // bad samples already named on the console
  bool stop_ = false;
};

Run::Run(const Recipe& recipe, const TrainOptions& options)
    : recipe_(recipe),
      options_(options),
      tr_(recipe.train),
      out_(options.out ? *options.out : std::cerr),
      benchmark_(options.benchmark_warmup_steps >= 0),
      setup_(set_up_run(recipe, {.resume = options.resume, .overwrite = options.overwrite, .benchmark = benchmark_},
                        options.quiet)),
      scaler_({.init_scale = recipe.train.scaler_init_scale,
               .growth_interval = recipe.train.scaler_growth_interval,
               .enabled = recipe.train.precision == "fp16"}),
      clock_(setup_.device),  // wall time on the CPU, CUDA events (no synchronisation) on a GPU
      trace_(!options.trace_path.empty()) {
  DistContext* dist = setup_.dist.get();
  task_ = make_task(recipe_, {.device = setup_.device,
                              .out = setup_.quiet ? nullptr : &out_,
                              .rank = dist ? dist->rank() : 0,
                              .world_size = setup_.world_size});
  torch::nn::Module& model = task_->module();
  // model.sync_batchnorm: BatchNorm statistics of the global batch (models/batch_norm.h); one rank: plain BatchNorm.
  if (recipe_.model.sync_batchnorm) {
    HOTPATH_CHECK(models::attach_batchnorm_group(model, dist ? batchnorm_group(*dist) : nullptr) > 0, recipe_.source,
                  ": model.sync_batchnorm: model ", recipe_.model.name, " has no BatchNorm layer");
  }
  trainable_ = task_->trainable();
  // Steps: an epoch's micro-batches in groups of accum_steps, the last group possibly shorter (token-budget
  // plans differ in length from epoch to epoch, so each epoch is counted).
  const std::int64_t steps_per_epoch = steps_in_epoch(0);
  HOTPATH_CHECK(steps_per_epoch >= 1, recipe_.source, ": data.train yields no batch");
  std::int64_t planned_steps = 0;
  for (std::int64_t e = 0; e < tr_.epochs; ++e) planned_steps += steps_in_epoch(e);
  total_steps_ = tr_.max_steps > 0 ? std::min(planned_steps, tr_.max_steps) : planned_steps;
  schedule_.emplace(schedule_config_for(recipe_, steps_per_epoch, planned_steps));
  if (tr_.ema_decay > 0) ema_ = std::make_unique<Ema>(model, trainable_, tr_.ema_decay);

  // Resume: trained tensors, EMA, RNG, scaler, the batch position, then the optimizer's state below; everything
  // else was built above exactly as the first run built it.
  std::optional<TensorMap> optimizer_state;
  if (setup_.claim.latest) {
    Resumed r = resume_from_checkpoint(*setup_.claim.latest,
                                       {.recipe = recipe_, .task = *task_, .ema = ema_.get(), .scaler = scaler_,
                                        .device = setup_.device, .world_size = setup_.world_size, .total_steps = total_steps_});
    state_ = std::move(r.state);
    optimizer_state = std::move(r.optimizer);
  }
  // Several ranks: every rank starts from rank 0's parameters and buffers.
  parallel_ = make_data_parallel(dist, model, trainable_,
                                 {.optimizer = optimizer_config_for(recipe_),
                                  .zero_stage = dist ? static_cast<int>(tr_.zero) : 0,
                                  .buckets = grad_sync_options_for(recipe_)},
                                 optimizer_state);
  // Said once every part of the checkpoint is restored.
  if (optimizer_state && !setup_.quiet) out_ << "resuming from " << *setup_.claim.latest << " at step " << state_.step << "\n";

  const fs::path& run_dir = setup_.run_dir;
  if (setup_.claim.clear_first) {  // --overwrite: only now that the new run has been built and checked
    clear_run_outputs(run_dir);
    if (!setup_.quiet) out_ << "--overwrite: cleared the previous run in " << run_dir.string() << "\n";
  }
  if (is_main()) fs::create_directories(run_dir / "checkpoints");
  if (!benchmark_ && is_main()) write_file_atomic((run_dir / "config.yaml").string(), to_yaml(recipe_));
  // A metrics line is "regular" at every log_every-th step and at the end of an epoch; a line at a checkpoint's
  // step that is not regular, or an eval there mid-epoch, was logged because the run stopped there (max_steps):
  // the resumed run goes on as if it had not.
  const bool resumed = setup_.claim.latest.has_value();
  log_.emplace(run_dir, is_main(), resumed ? std::optional<std::int64_t>(state_.step) : std::nullopt,
               MetricsRewind{.drop_train_at_step = state_.step % tr_.log_every != 0 && state_.position.batch != 0,
                             .drop_eval_at_step = state_.position.batch != 0},
               options_.on_metrics);
  evaluator_.emplace(EvalSetting{.recipe = recipe_, .task = *task_, .ema = ema_.get(),
                                 .precision = autocast_dtype(tr_.precision), .log = *log_,
                                 .out = setup_.quiet ? nullptr : &out_, .run_dir = run_dir});
  if (!setup_.quiet) {
    out_ << run_banner(recipe_, setup_, *task_, model, trainable_, steps_per_epoch, parallel_->describe()) << "\n";
  }
  result_.run_dir = run_dir.string();
  result_.epochs_completed = state_.position.epoch;
  result_.breakdown.remedies = task_->remedies();
  trace_.set_enabled(false);
  trace_begin_ = state_.step + std::min<std::int64_t>(3, total_steps_ / 4);
  steady_from_ = state_.step + std::max<std::int64_t>(options_.benchmark_warmup_steps, 0);
  if (benchmark_ && options_.benchmark_warmup_steps == 0) steady_start_ = Clock::now();
}

TrainResult Run::go() {
  task_->module().train();
  for (std::int64_t epoch = state_.position.epoch; epoch < tr_.epochs && !stop_ && state_.step < total_steps_;
       ++epoch) {
    if (!run_epoch(epoch)) break;
  }
  if (steady_start_) {
    result_.steady_steps = state_.step - steady_from_;
    const double s = seconds_since(*steady_start_);
    result_.steady_samples_per_s = s > 0 ? static_cast<double>(samples_done_ - steady_samples_base_) / s : 0;
  }
  clock_.flush(result_.breakdown);  // the last steps' events (one wait, after the loop)
  write_profile();
  if (!options_.trace_path.empty() && is_main()) trace_.write(options_.trace_path);
  log_->flush();
  result_.steps = state_.step;
  result_.seconds = seconds_since(t_start_);
  result_.samples_per_s = train_seconds_ > 0 ? static_cast<double>(samples_done_) / train_seconds_ : 0;
  return result_;
}

// One epoch from the task's position: its steps, then at its end eval, best/ and a checkpoint (or the run's
// end). False when the run stops inside it (a stop request, or train.max_steps mid-epoch).
bool Run::run_epoch(std::int64_t epoch) {
  const std::int64_t micro_in_epoch = task_->micro_batches_in_epoch(epoch);
  task_->seek({epoch, epoch == state_.position.epoch ? state_.position.batch : 0});
  std::int64_t step_in_epoch = task_->position().batch / tr_.accum_steps;
  std::optional<Progress> progress;
  if (!setup_.quiet) {
    progress.emplace(steps_in_epoch(epoch), out_, options_.is_tty,
                     ProgressOptions{.prefix = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(tr_.epochs),
                                     .initial_step = step_in_epoch});
  }
  const auto epoch_start = Clock::now();
  std::int64_t epoch_samples = 0;
  bool epoch_done = task_->position().batch >= micro_in_epoch;
  const auto& ck = recipe_.checkpoint;
  while (!epoch_done && state_.step < total_steps_) {
    trace_.set_enabled(!options_.trace_path.empty() && state_.step >= trace_begin_ &&
                       state_.step < trace_begin_ + options_.trace_steps);
    TraceScope step_scope(&trace_, "step", "train", {{"step", state_.step}});
    const std::optional<StepDone> done =
        run_step({.train = tr_, .device = setup_.device, .task = *task_, .parallel = *parallel_, .scaler = scaler_,
                  .schedule = *schedule_, .ema = ema_.get(), .clock = clock_, .trace = trace_,
                  .breakdown = result_.breakdown, .stop = options_.stop},
                 state_.step, micro_in_epoch);
    if (!done) break;  // the epoch ended early (decode-time bad samples)
    const double lr = schedule_->lr_at(state_.step);
    ++state_.step;
    ++step_in_epoch;
    samples_done_ += done->totals.samples;
    epoch_samples += done->totals.samples;
    const BatchPosition next = task_->position();
    epoch_done = next.batch >= micro_in_epoch || done->short_of_micro_batches;
    state_.position = epoch_done ? BatchPosition{epoch + 1, 0} : next;
    const double rate = static_cast<double>(epoch_samples) / std::max(seconds_since(epoch_start), 1e-9);
    if (benchmark_ && state_.step == steady_from_) {
      steady_start_ = Clock::now();
      steady_samples_base_ = samples_done_;
      // The breakdown covers the steps samples/s counts: without this the warm-up (cuDNN autotuning, lazy
      // kernel loads) was averaged into the timed steps' "step N ms".
      clock_.restart(result_.breakdown);
    }
    const double loss = done->totals.loss;
    if (!std::isfinite(loss) && !(scaler_.is_enabled() && !done->stepped)) {
      if (progress) progress->finish();
      const auto last = latest_checkpoint((setup_.run_dir / "checkpoints").string());
      HOTPATH_CHECK(false, "train: the loss became ", std::isnan(loss) ? "NaN" : "infinite", " at step ", state_.step,
                    " (epoch ", epoch + 1, ", lr ", lr, "); stopping. Lower optimizer.lr, set "
                    "train.clip_grad_norm, or use fp32. Last checkpoint: ", last ? *last : std::string("none"));
    }
    log_step(*done, lr, rate, epoch, epoch_done);
    if (progress) progress->update(step_in_epoch, train_fields(loss, lr, rate, task_->sample_unit()));
    // Mid-epoch checkpoints: every checkpoint.every_steps and on a stop request. The end of an epoch
    // checkpoints below, after its eval (best_metric included); so does the end of the run.
    const bool interrupted = done->totals.stop && state_.step < total_steps_;
    const bool periodic = ck.every_steps > 0 && state_.step % ck.every_steps == 0;
    if (!epoch_done && (periodic || interrupted) && state_.step < total_steps_) save();
    if (interrupted) {
      result_.interrupted = true;
      stop_ = true;
      break;
    }
  }
  train_seconds_ += seconds_since(epoch_start);
  if (progress) progress->finish();
  const SkippedSamples skipped = task_->skipped_samples();
  if (!setup_.quiet && skipped.count > skipped_reported_) {
    const std::int64_t n = skipped.count - skipped_reported_;
    out_ << "epoch " << epoch + 1 << ": " << n << " bad sample" << (n == 1 ? "" : "s") << " skipped (" << skipped.count
         << " in this run, data.max_bad_samples " << recipe_.data.max_bad_samples << "), e.g. " << skipped.example
         << '\n';
    skipped_reported_ = skipped.count;
  }
  const bool evaluates = task_->has_eval() && !benchmark_ && is_main();
  if (!epoch_done) {
    // Stopped mid-epoch. By a stop request: the checkpoint above is all. By max_steps: evaluate what was
    // trained (logged, not a best/ candidate: a resumed run would not see this eval), then finish.
    if (!result_.interrupted) {
      clock_.pause();  // evaluation is no step's data phase
      if (evaluates) result_.eval = evaluator_->run(state_.step, epoch + 1, /*best_candidate=*/false, state_);
      finish();
    }
    return false;
  }
  result_.epochs_completed = epoch + 1;
  const bool last = epoch + 1 == tr_.epochs || state_.step >= total_steps_;
  if (evaluates && (last || (tr_.eval_every > 0 && (epoch + 1) % tr_.eval_every == 0))) {
    clock_.pause();
    result_.eval = evaluator_->run(state_.step, epoch + 1, /*best_candidate=*/true, state_);
  }
  const bool periodic = ck.every_steps > 0 && state_.step % ck.every_steps == 0;
  if (last) {
    finish();
  } else if (stop_ || periodic || (ck.every_epochs > 0 && (epoch + 1) % ck.every_epochs == 0)) {
    save();
  }
  log_->flush();
  return true;
}

// The train metrics line (metrics.jsonl, TensorBoard) at every log_every-th step, an epoch's end and the run's.
void Run::log_step(const StepDone& done, double lr, double rate, std::int64_t epoch, bool epoch_done) {
  if (std::isfinite(done.totals.loss)) {
    state_.loss_window += done.totals.loss;
    state_.window += 1;
  }
  const bool regular = state_.step % tr_.log_every == 0 || epoch_done;
  if ((!regular && state_.step != total_steps_) || state_.window == 0) return;
  const double loss = state_.loss_window / static_cast<double>(state_.window);
  json j{{"split", "train"}, {"step", state_.step}, {"epoch", epoch}, {"loss", loss}, {"lr", lr}};
  if (scaler_.is_enabled()) j["loss_scale"] = scaler_.get_scale();
  if (done.grad_norm >= 0) j["grad_norm"] = done.grad_norm;
  if (!done.stepped) j["skipped"] = true;
  task_->add_metrics(j);
  log_->line(j);
  log_->train_scalars(loss, lr, rate, state_.step);
  // A line the run logs only because it stops here leaves the window to the checkpoint: resumed, it goes on.
  if (regular) {
    state_.loss_window = 0;
    state_.window = 0;
  }
}

// A checkpoint at the current step (benchmark mode: none). One process and DDP: rank 0 writes it; ZeRO: every
// rank its optimizer shard, then rank 0 the rest.
void Run::save() {
  if (benchmark_ || !parallel_->writes_checkpoint(is_main())) return;
  clock_.pause();  // a checkpoint is no step's data phase
  save_run_checkpoint(setup_.run_dir / "checkpoints", state_,
                      {.recipe = recipe_, .task = *task_, .parallel = *parallel_, .scaler = scaler_, .ema = ema_.get(),
                       .device = setup_.device, .world_size = setup_.world_size, .is_main = is_main()});
}

// The end of the run: the trained model (the EMA weights when EMA is on: that is what EMA is for), then the last
// checkpoint. In that order, so that a run killed in between resumes and writes the model again, and one that has
// its last checkpoint has its model. An interrupted run leaves only its checkpoint: resume finishes the run.
void Run::finish() {
  if (benchmark_ || !parallel_->writes_checkpoint(is_main())) return;
  if (is_main()) {
    const EmaSwap ema_in(ema_.get());
    task_->export_model(setup_.run_dir, ExportPlace::kRunDir);
  }
  save();
}

// profile.json: the step-time breakdown, the task's and the data-parallel figures.
void Run::write_profile() {
  json profile = json::parse(result_.breakdown.to_json());
  task_->add_profile(profile);
  parallel_->add_profile(profile);
  if (is_main()) write_file_atomic((setup_.run_dir / "profile.json").string(), profile.dump(2) + "\n");
}

}  // namespace

TrainResult train(const Recipe& recipe, const TrainOptions& options) {
  const Recipe resolved = with_precision_resolved(recipe);
  return Run(resolved, options).go();
}

}  // namespace hotpath::train
