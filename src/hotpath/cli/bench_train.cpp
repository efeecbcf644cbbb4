// `hotpath bench train CONFIG --steps N [--compare torch] --json FILE`: training throughput of a
// recipe in hotpath and (--compare torch) in eager PyTorch on the same resolved recipe, side by side
// in one invocation: same model, batch, optimizer, schedule, precision, memory format, threads and
// shards. hotpath runs in-process in the trainer's benchmark mode (no checkpoints, eval or model
// files); the peer is bench/torch_train_peer.py in the venv, given the recipe hotpath ran.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/malloc_policy.h"
#include "hotpath/core/process.h"
#include "hotpath/data/loader.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"

namespace hotpath::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct BenchTrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::int64_t steps = 20;
  std::int64_t warmup = 3;
  int repeats = 1;
  std::int64_t threads = 0;
  std::string compare;
  std::string json_path;
  std::string python;
  bool keep = false;
};

// A fresh directory under $TMPDIR (or /tmp) for the run directory and the resolved recipe, removed
// on exit unless --keep.
class ScratchDir {
 public:
  explicit ScratchDir(bool keep) : keep_(keep) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/hotpath-bench-train-XXXXXX";
    HOTPATH_CHECK(::mkdtemp(templ.data()) != nullptr, "bench train: cannot create a directory like ", templ);
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!keep_) fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool keep_;
};


json breakdown_json(const train::StepBreakdown& b) {
  const double total = std::max(b.total_s(), 1e-12);
  return {{"steps", b.steps},
          {"step_ms", b.steps ? 1000.0 * b.total_s() / static_cast<double>(b.steps) : 0.0},
          {"fractions",
           {{"data", b.data_s / total},
            {"forward", b.forward_s / total},
            {"backward", b.backward_s / total},
            {"optimizer", b.optimizer_s / total}}},
          {"summary", b.summary()}};
}

// Fixed-point text without touching std::cerr's format state.
std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

void run(const BenchTrainArgs& a) {
  HOTPATH_CHECK(a.compare.empty() || a.compare == "torch", "bench train: --compare accepts 'torch', got '",
                a.compare, "'");
  std::vector<std::string> overrides = a.overrides;
  if (a.threads > 0) overrides.push_back("train.threads=" + std::to_string(a.threads));
  train::Recipe recipe = train::load_recipe(a.config, overrides);
  // Both sides get the same explicit thread count (the trainer's default: every core).
  if (recipe.train.threads == 0) {
    recipe.train.threads = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  }
  const std::int64_t total_steps = a.warmup + a.steps;
  recipe.train.max_steps = total_steps;
  // The run must not end at the last epoch before max_steps: add epochs if the data is short.
  const data::LoaderOptions lo = train::train_loader_options(recipe);
  const std::int64_t steps_per_epoch = data::count_samples(lo) / lo.batch_size / recipe.train.accum_steps;
  HOTPATH_CHECK(steps_per_epoch >= 1, recipe.source, ": data.train holds fewer samples than one batch of ",
                recipe.train.batch_size);
  if (recipe.train.epochs * steps_per_epoch < total_steps) {
    recipe.train.epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;
  }
  const std::int64_t schedule_steps = recipe.train.epochs * steps_per_epoch;

  ScratchDir scratch(a.keep);
  recipe.output_dir = (scratch.path() / "run").string();
  const std::string recipe_path = (scratch.path() / "recipe.yaml").string();
  write_file_atomic(recipe_path, train::to_yaml(recipe));

  std::vector<std::string> peer_argv;
  if (!a.compare.empty()) {
    const std::string script = std::string(HOTPATH_SOURCE_DIR) + "/bench/torch_train_peer.py";
    HOTPATH_CHECK(fs::exists(script), "bench train --compare torch: peer script not found at ", script);
    peer_argv = {peer_python(a.python, "bench train --compare torch"), script,  "--recipe", recipe_path,
                 "--steps", std::to_string(a.steps), "--warmup", std::to_string(a.warmup),
                 "--schedule-steps", std::to_string(schedule_steps), "--steps-per-epoch",
                 std::to_string(steps_per_epoch)};
  }

  const auto& tr = recipe.train;
  std::cerr << "hotpath bench train: " << recipe.model.name << ", batch " << tr.batch_size
            << (tr.accum_steps > 1 ? " (" + std::to_string(tr.accum_steps) + " micro-batches)" : "") << ", "
            << tr.precision << (tr.precision == "bf16" ? std::string(" (hotpath bf16 math: ") + ops::bf16_math_name() + ")" : "")
            << (recipe.model.channels_last ? ", channels-last" : "") << ", " << tr.threads
            << " thread(s), " << recipe.data.workers << " data worker(s); " << a.warmup << " warm-up + " << a.steps
            << " timed steps, " << a.repeats << " repeat(s)" << (a.compare.empty() ? "" : ", vs PyTorch") << "\n";

  const double load_before = load_average();
  // Other processes only ever slow a run down: interleave hotpath and the peer, keep the best of each.
  train::TrainResult best;
  json peer_best;
  double torch_best = 0;
  json hp_runs = json::array();
  json torch_runs = json::array();
  for (int r = 0; r < a.repeats; ++r) {
    std::error_code ignored;
    fs::remove_all(recipe.output_dir, ignored);
    train::TrainOptions options;
    options.quiet = true;
    options.out = &std::cerr;
    options.benchmark_warmup_steps = a.warmup;
    const train::TrainResult result = train::train(recipe, options);
    HOTPATH_CHECK(result.steady_steps == a.steps, "bench train: hotpath ran ", result.steady_steps,
                  " timed steps, expected ", a.steps);
    std::cerr << "  run " << r + 1 << ": hotpath " << rate_text(result.steady_samples_per_s) << " samples/s";
    hp_runs.push_back(result.steady_samples_per_s);
    if (result.steady_samples_per_s > best.steady_samples_per_s) best = result;
    if (!peer_argv.empty()) {
      const CommandResult c = run_command(peer_argv);
      HOTPATH_CHECK(c.exit_code == 0, "bench train: the PyTorch peer failed (exit ", c.exit_code, "): ",
                    peer_argv[1]);
      const json peer = parse_peer_report(c.output, "bench train", "samples_per_s");
      const double rate = peer["samples_per_s"].get<double>();
      std::cerr << ", PyTorch " << rate_text(rate) << " samples/s";
      torch_runs.push_back(rate);
      if (rate > torch_best) {
        torch_best = rate;
        peer_best = peer;
      }
    }
    std::cerr << "\n";
  }

  const train::StepBreakdown& bd = best.breakdown;
  const double data_wait = bd.total_s() > 0 ? bd.data_s / bd.total_s() : 0;
  json report{
      {"config", a.config},
      {"model", recipe.model.name},
      {"precision", tr.precision},
      // How hotpath computes bf16 autocast's convs/matmuls here (native kernels or fp32 math on
      // bf16-rounded operands); the peer always runs torch.autocast's own kernels.
      {"bf16_math", tr.precision == "bf16" ? json(ops::bf16_math_name()) : json(nullptr)},
      {"malloc", malloc_policy_name()},
      {"batch_size", tr.batch_size},
      {"accum_steps", tr.accum_steps},
      {"image_size", recipe.data.image_size},
      {"channels_last", recipe.model.channels_last},
      {"optimizer", recipe.optimizer.name},
      {"threads", tr.threads},
      {"workers", recipe.data.workers},
      {"steps", a.steps},
      {"warmup", a.warmup},
      {"repeats", a.repeats},
      {"hotpath_samples_per_s", best.steady_samples_per_s},
      {"torch_samples_per_s", nullptr},
      {"ratio", nullptr},
      {"data_wait_fraction", data_wait},
      {"torch_data_wait_fraction", nullptr},
      {"breakdown", bd.summary()},
      {"hotpath_breakdown", breakdown_json(bd)},
      {"hotpath_runs_samples_per_s", hp_runs},
      {"load_average_before", load_before},
      {"load_average_after", load_average()},
  };
  std::cerr << "  hotpath:  " << rate_text(best.steady_samples_per_s) << " samples/s; " << bd.summary() << "\n";
  if (!peer_argv.empty()) {
    report["torch_samples_per_s"] = torch_best;
    report["ratio"] = best.steady_samples_per_s / torch_best;
    report["torch_data_wait_fraction"] = peer_best.value("data_wait_fraction", 0.0);
    report["torch_breakdown"] = peer_best.value("breakdown", json::object());
    report["torch_runs_samples_per_s"] = torch_runs;
    report["torch_version"] = peer_best.value("torch", "");
    std::string peer_summary;
    const json breakdown = peer_best.value("breakdown", json::object());
    if (const json f = breakdown.value("fractions", json::object()); !f.empty()) {
      peer_summary = "step " + fixed(breakdown.value("step_ms", 0.0), 1) + " ms: data " +
                     fixed(100 * f.value("data", 0.0), 1) + "% · forward " + fixed(100 * f.value("forward", 0.0), 1) +
                     "% · backward " + fixed(100 * f.value("backward", 0.0), 1) + "% · optimizer " +
                     fixed(100 * f.value("optimizer", 0.0), 1) + "%";
    }
    std::cerr << "  PyTorch:  " << rate_text(torch_best) << " samples/s; " << peer_summary << "\n";
    std::cerr << "  ratio:    " << fixed(best.steady_samples_per_s / torch_best, 2) << "x\n";
  }
  write_report(report, a.json_path);
}

}  // namespace

void add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Side-by-side benchmarks against the PyTorch peers");
  bench->require_subcommand(1);
  auto args = std::make_shared<BenchTrainArgs>();
  CLI::App* cmd = bench->add_subcommand(
      "train", "Training samples/s of a recipe (benchmark mode: no checkpoints or eval) and, with --compare torch, "
               "of the same recipe in eager PyTorch");
  cmd->add_option("config", args->config, "Recipe file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", args->overrides, "Override a recipe key: --set train.batch_size=128 (repeatable)");
  cmd->add_option("--steps", args->steps, "Timed optimizer steps")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", args->warmup, "Untimed optimizer steps first")->check(CLI::Range(0, 1000000));
  cmd->add_option("--repeats", args->repeats, "Runs of each side, interleaved; the best counts")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--threads", args->threads, "Intra-op threads for both sides (sets train.threads)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--compare", args->compare, "Also run the peer in this invocation")->check(CLI::IsMember({"torch"}));
  cmd->add_option("--json", args->json_path, "Write the JSON report here ('-' = stdout)");
  cmd->add_option("--python", args->python, "Python of the venv for --compare (default: the setup venv)");
  cmd->add_flag("--keep", args->keep, "Keep the scratch directory (run directory + resolved recipe)");
  cmd->callback([args] { run(*args); });
  add_bench_text(*bench);
}

}  // namespace hotpath::cli
