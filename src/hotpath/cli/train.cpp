// `hotpath train CONFIG [--set key=value ...] [--resume] [--trace FILE]`: runs a YAML recipe.
// SIGINT (Ctrl-C) or SIGTERM (torchrun forwards it to every rank) finishes the current step, writes a
// checkpoint and exits with code 130; a second one kills the process the usual way (the previous
// checkpoint stays intact: atomic). Under torchrun every rank stops at the same step.
#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/error.h"
#include "hotpath/core/progress.h"
#include "hotpath/train/distributed.h"
#include "hotpath/train/launch.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"

namespace hotpath::cli {
namespace {

// A signal handler can only set a lock-free atomic: this one flag is the hand-off to the trainer.
std::atomic<bool> g_stop_requested{false};

extern "C" void on_sigint(int signal) {
  g_stop_requested.store(true);
  std::signal(signal, SIG_DFL);  // a second one ends the process at once
}

// Installs the SIGINT/SIGTERM handler for the lifetime of a training run and restores the old ones after.
class StopOnSigint {
 public:
  StopOnSigint() : previous_(std::signal(SIGINT, on_sigint)), previous_term_(std::signal(SIGTERM, on_sigint)) {
    g_stop_requested.store(false);
  }
  ~StopOnSigint() {
    std::signal(SIGINT, previous_);
    std::signal(SIGTERM, previous_term_);
  }
  StopOnSigint(const StopOnSigint&) = delete;
  StopOnSigint& operator=(const StopOnSigint&) = delete;
  [[nodiscard]] const std::atomic<bool>* flag() const { return &g_stop_requested; }

 private:
  void (*previous_)(int);
  void (*previous_term_)(int);
};

struct TrainArgs {
  int nproc = 1;
  std::string config;
  std::vector<std::string> overrides;
  bool print_config = false;
  train::TrainOptions options;  // --resume, --overwrite, --trace, --trace-steps, --quiet; the library's defaults
};

void train_this_rank(const TrainArgs& a);

void run(const TrainArgs& a) {
  if (a.nproc > 1) train::launch_local(a.nproc);
  try {
    train_this_rank(a);
  } catch (const std::exception& e) {
    train::report_this_rank_error(e);  // data parallel: the other ranks stop at once naming this one
    throw;
  }
}

void train_this_rank(const TrainArgs& a) {
  const train::Recipe recipe = train::load_recipe(a.config, a.overrides);
  if (a.print_config) {
    std::cout << train::to_yaml(recipe);
    return;
  }
  StopOnSigint sigint;
  train::TrainOptions options = a.options;
  options.stop = sigint.flag();
  options.out = &std::cerr;
  options.is_tty = stream_is_tty(stderr);
  const train::TrainResult r = train::train(recipe, options);

  // One write per line (std::cerr is unbuffered): ranks sharing a stderr under torchrun must not interleave.
  std::cerr << r.breakdown.summary() + "\n";
  if (r.interrupted) {
    std::cerr << "interrupted at step " + std::to_string(r.steps) + "; checkpoint saved. Resume with: hotpath train " +
                     a.config + " --resume" + (a.overrides.empty() ? "" : " --set ...") + "\n";
    std::exit(130);
  }
  // One result line on stdout (the trainer's progress and its own details went to stderr).
  const bool text = recipe.data.kind == "text";
  std::cout << "trained " << recipe.model.name;
  if (text && recipe.model.lora_r > 0) std::cout << " (LoRA r " << recipe.model.lora_r << ")";
  std::cout << ": " << r.steps << " steps, " << r.epochs_completed << " epochs in " << format_duration(r.seconds)
            << " (" << std::fixed << std::setprecision(0) << r.samples_per_s << " samples/s)";
  if (r.eval && text) {
    std::cout << std::setprecision(2) << "; eval accuracy " << r.eval->top1 << "%, loss " << std::setprecision(4)
              << r.eval->loss << " on " << r.eval->samples << " samples";
  } else if (r.eval) {
    std::cout << std::setprecision(2) << "; test top-1 " << r.eval->top1 << "%, top-5 " << r.eval->top5 << "% on "
              << r.eval->samples << " samples";
  }
  std::cout << "\nrun directory: " << r.run_dir << "\n";
}

}  // namespace

void add_train(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train an image classifier or fine-tune a text classifier from a YAML recipe (configs/*.yaml)");
  // Before `config` is required: prints the recipe table (every key, its type, default, bounds, task kinds,
  // whether resume must match it, one line of doc) and exits 0, as --help does.
  cmd->add_flag_callback(
         "--help-recipe", [] { throw CLI::CallForVersion(train::recipe_help(), 0); },
         "Print every recipe key (type, default, range or choices, task, resume, what) as a Markdown table and exit")
      ->trigger_on_parse();
  cmd->add_option("config", args->config, "Recipe file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", args->overrides, "Override a recipe key: --set train.epochs=5 (repeatable)");
  cmd->add_flag("--resume", args->options.resume, "Continue from the latest checkpoint in the run directory");
  cmd->add_flag("--overwrite", args->options.overwrite,
                "The run directory holds another run: delete its outputs (checkpoints, metrics, model) first");
  cmd->add_option("--trace", args->options.trace_path, "Write a Chrome-trace JSON of a few steps (chrome://tracing, Perfetto)");
  cmd->add_option("--trace-steps", args->options.trace_steps, "Steps to trace")->check(CLI::Range(1, 1000));
  cmd->add_flag("--print-config", args->print_config, "Print the resolved recipe and exit");
  cmd->add_flag("--quiet", args->options.quiet, "No progress lines");
  cmd->add_option("--nproc", args->nproc,
                  "Data-parallel ranks on this host, launched here (as torchrun --nproc-per-node N --no-python would)")
      ->check(CLI::Range(1, 256));
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
