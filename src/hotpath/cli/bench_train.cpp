// `hotpath bench train CONFIG --steps N [--compare torch] --json FILE`: training throughput of a
// recipe in hotpath and (--compare torch) in eager PyTorch on the same resolved recipe, side by side
// in one invocation (the benchmark: hotpath/bench/train_bench.h).
#include <CLI/CLI.hpp>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "hotpath/bench/train_bench.h"

namespace hotpath::cli {

void add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Side-by-side benchmarks against the PyTorch peers");
  bench->require_subcommand(1);
  auto args = std::make_shared<bench::TrainBenchOptions>();
  auto json_path = std::make_shared<std::string>();
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
  cmd->add_option("--json", *json_path, "Write the JSON report here ('-' = stdout)");
  cmd->add_option("--python", args->python, "Python of the venv for --compare (default: the setup venv)");
  cmd->add_flag("--keep", args->keep, "Keep the scratch directory (run directory + resolved recipe)");
  cmd->callback([args, json_path] {
    const bench::BenchReport report = bench::run_train_bench(*args, &std::cerr);
    print_bench_report(report.json, *json_path, {report.table_row});
  });
  add_bench_text(*bench);
  add_bench_data(*bench);
}

}  // namespace hotpath::cli
