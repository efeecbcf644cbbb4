#include "hotpath/bench/train_bench.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <system_error>
#include <thread>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/malloc_policy.h"
#include "hotpath/core/process.h"
#include "hotpath/data/loader.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"
#include "hotpath/core/remove_tree.h"

namespace hotpath::bench {
namespace {

namespace fs = std::filesystem;

// The step time samples/s implies: a step is batch_size samples (the global batch, one process).
double wall_step_ms(std::int64_t batch_size, double samples_per_s) {
  return samples_per_s > 0 ? 1000.0 * static_cast<double>(batch_size) / samples_per_s : 0.0;
}

// step_ms is the breakdown's own (its phases over its steps: the timed ones, the trainer drops the
// warm-up); wall_step_ms the one samples/s implies. The trainer chains its steps, so the two agree up to
// the host work after the last step; `clock` says which timeline the phases were measured on.
Json breakdown_json(const train::StepBreakdown& b, double wall_ms, const char* clock) {
  const double total = std::max(b.total_s(), 1e-12);
  return {{"steps", b.steps},
          {"step_ms", b.steps ? 1000.0 * b.total_s() / static_cast<double>(b.steps) : 0.0},
          {"wall_step_ms", wall_ms},
          {"clock", clock},
          {"fractions",
           {{"data", b.data_s / total},
            {"forward", b.forward_s / total},
            {"backward", b.backward_s / total},
            {"optimizer", b.optimizer_s / total}}},
          {"summary", b.summary()}};
}

// Fixed-point text without touching the log stream's format state.
std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

}  // namespace

BenchReport run_train_bench(const TrainBenchOptions& a, std::ostream* log) {
  HOTPATH_CHECK(a.compare.empty() || a.compare == "torch", "bench train: --compare accepts 'torch', got '",
                a.compare, "'");
  std::vector<std::string> overrides = a.overrides;
  if (a.threads > 0) overrides.push_back("train.threads=" + std::to_string(a.threads));
  // "auto" precision resolved here: the peer gets the same concrete precision as hotpath.
  train::Recipe recipe = train::with_precision_resolved(train::load_recipe(a.config, overrides));
  HOTPATH_CHECK(recipe.data.kind == "image", a.config, ": bench train measures image recipes; for text recipes use "
                "`hotpath bench text --part finetune`");
  // Both sides get the same explicit thread count (the trainer's default: every core).
  if (recipe.train.threads == 0) {
    recipe.train.threads = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  }
  // Benchmark mode never evaluates: the eval shards need not exist.
  recipe.data.eval.clear();
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

  const ScratchDir scratch("bench-train", a.keep);
  recipe.output_dir = (scratch.path() / "run").string();
  const std::string recipe_path = scratch.file("recipe.yaml");
  write_file_atomic(recipe_path, train::to_yaml(recipe));

  const auto& tr = recipe.train;
  // The trainer's device choice (train.device auto: CUDA when present), for naming the breakdown's clock.
  const bool on_cuda = tr.device == "cuda" || (tr.device == "auto" && at::hasCUDA());
  const char* clock = on_cuda ? "cuda events (GPU timeline)" : "wall clock";
  if (log) {
    *log << "hotpath bench train: " << recipe.model.name << ", batch " << tr.batch_size
         << (tr.accum_steps > 1 ? " (" + std::to_string(tr.accum_steps) + " micro-batches)" : "") << ", "
         << tr.precision
         << (tr.precision == "bf16" ? std::string(" (hotpath bf16 math: ") + ops::bf16_math_name() + ")" : "")
         << (recipe.model.channels_last ? ", channels-last" : "") << ", " << tr.threads << " thread(s), "
         << recipe.data.workers << " data worker(s); " << a.warmup << " warm-up + " << a.steps << " timed steps, "
         << a.repeats << " repeat(s)" << (a.compare.empty() ? "" : ", vs PyTorch") << "\n";
  }

  Benchmark bench("train " + recipe.name, "samples/s", a.repeats);
  train::TrainResult best;
  bench.add({"hotpath", "hotpath::train::train (the loop `hotpath train` runs) in benchmark mode: no checkpoints, "
                        "eval or model files",
             [&](int) {
               std::error_code ignored;
               hotpath::remove_tree(recipe.output_dir, ignored);
               train::TrainOptions options;
               options.quiet = true;
               options.out = log ? log : &std::cerr;
               options.benchmark_warmup_steps = a.warmup;
               const train::TrainResult result = train::train(recipe, options);
               HOTPATH_CHECK(result.steady_steps == a.steps, "bench train: hotpath ran ", result.steady_steps,
                             " timed steps, expected ", a.steps);
               if (result.steady_samples_per_s > best.steady_samples_per_s) best = result;
               return RunFigures{result.steady_samples_per_s,
                                 {{"breakdown", breakdown_json(result.breakdown,
                                                               wall_step_ms(tr.batch_size, result.steady_samples_per_s),
                                                               clock)}}};
             }});
  if (!a.compare.empty()) {
    const std::vector<std::string> argv = {
        peer_python(a.python, "bench train --compare torch"), peer_script("torch_train_peer.py"), "--recipe",
        recipe_path, "--steps", std::to_string(a.steps), "--warmup", std::to_string(a.warmup), "--schedule-steps",
        std::to_string(schedule_steps), "--steps-per-epoch", std::to_string(steps_per_epoch)};
    bench.add({"torch", "eager PyTorch python loop on the same resolved recipe (torchvision model, DataLoader + "
                        "webdataset, torch.optim, torch.autocast)",
               [argv](int) {
                 Json peer = run_peer(argv, "bench train --compare torch", "samples_per_s");
                 const double rate = peer["samples_per_s"].get<double>();
                 return RunFigures{rate, std::move(peer)};
               }});
  }
  const BenchmarkResult r = bench.run(log);

  const train::StepBreakdown& bd = best.breakdown;
  const double wall_ms = wall_step_ms(tr.batch_size, best.steady_samples_per_s);
  const double data_wait = bd.total_s() > 0 ? bd.data_s / bd.total_s() : 0;
  Json report{
      {"config", a.config},
      {"model", recipe.model.name},
      {"precision", tr.precision},
      // How hotpath computes bf16 autocast's convs/matmuls here (native kernels or fp32 math on
      // bf16-rounded operands); the peer always runs torch.autocast's own kernels.
      {"bf16_math", tr.precision == "bf16" ? Json(ops::bf16_math_name()) : Json(nullptr)},
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
      {"hotpath_samples_per_s", r.at("hotpath").best_per_s},
      {"torch_samples_per_s", nullptr},
      {"ratio", nullptr},
      {"data_wait_fraction", data_wait},
      {"torch_data_wait_fraction", nullptr},
      {"breakdown", bd.summary()},
      {"hotpath_breakdown", breakdown_json(bd, wall_ms, clock)},
      {"hotpath_runs_samples_per_s", r.at("hotpath").rates()},
  };
  // Both lines: the step time samples/s implies (wall), then the breakdown with the clock it was measured on.
  if (log) {
    *log << "  hotpath:  " << rate_text(best.steady_samples_per_s) << " samples/s = " << fixed(wall_ms, 1)
         << " ms/step wall; breakdown (" << clock << ", " << bd.steps << " timed steps): " << bd.summary() << "\n";
    // The phases should add up to the wall step (see breakdown_json); say so when they do not, so that a
    // run shows which of the two figures to distrust.
    const double step_ms = bd.steps ? 1000.0 * bd.total_s() / static_cast<double>(bd.steps) : 0.0;
    if (wall_ms > 0 && std::abs(step_ms - wall_ms) > 0.1 * wall_ms) {
      *log << "  note: the breakdown's " << fixed(step_ms, 1) << " ms/step is not the " << fixed(wall_ms, 1)
           << " ms/step samples/s implies\n";
    }
  }
  if (r.has("torch")) {
    const ContenderResult& torch = r.at("torch");
    const Json& peer_best = torch.best().details;
    report["torch_samples_per_s"] = torch.best_per_s;
    report["ratio"] = r.ratio_vs("torch");
    report["torch_data_wait_fraction"] = peer_best.value("data_wait_fraction", 0.0);
    report["torch_breakdown"] = peer_best.value("breakdown", Json::object());
    report["torch_runs_samples_per_s"] = torch.rates();
    report["torch_version"] = peer_best.value("torch", "");
    std::string peer_summary;
    const Json breakdown = peer_best.value("breakdown", Json::object());
    if (const Json f = breakdown.value("fractions", Json::object()); !f.empty()) {
      peer_summary = " = " + fixed(wall_step_ms(tr.batch_size, torch.best_per_s), 1) + " ms/step wall; breakdown (" +
                     breakdown.value("clock", std::string("?")) + ", " +
                     std::to_string(breakdown.value("steps", std::int64_t{0})) + " timed steps): step " +
                     fixed(breakdown.value("step_ms", 0.0), 1) + " ms: data " +
                     fixed(100 * f.value("data", 0.0), 1) + "% · forward " + fixed(100 * f.value("forward", 0.0), 1) +
                     "% · backward " + fixed(100 * f.value("backward", 0.0), 1) + "% · optimizer " +
                     fixed(100 * f.value("optimizer", 0.0), 1) + "%";
    }
    if (log) {
      *log << "  PyTorch:  " << rate_text(torch.best_per_s) << " samples/s" << peer_summary << "\n"
           << "  ratio:    " << fixed(r.ratio_vs("torch"), 2) << "x\n";
    }
  }
  add_benchmark_fields(report, r);
  return {std::move(report), r.table_row()};
}

}  // namespace hotpath::bench
