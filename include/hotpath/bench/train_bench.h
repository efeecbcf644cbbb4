// hotpath/bench/train_bench.h — `hotpath bench train`: training samples/s of a recipe through the real
// training loop (hotpath::train::train in benchmark mode: no checkpoints, eval or model files) and, with
// compare "torch", of the same resolved recipe in eager PyTorch (bench/peers/torch_train_peer.py): same
// model, batch, optimizer, schedule, precision, memory format, threads and shards, runs interleaved.
//
//   TrainBenchOptions o{.config = "configs/fashion_mnist.yaml", .steps = 60, .warmup = 5, .compare = "torch"};
//   BenchReport r = run_train_bench(o, &std::cerr);   // r.json["ratio_vs_torch"]
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "hotpath/bench/loader_bench.h"

namespace hotpath::bench {

struct TrainBenchOptions {
  std::string config;                  // recipe file
  std::vector<std::string> overrides;  // "dotted.key=value"
  std::int64_t steps = 20;             // timed optimizer steps
  std::int64_t warmup = 3;             // untimed optimizer steps first
  int repeats = 1;
  std::int64_t threads = 0;            // > 0: train.threads for both sides
  std::string compare;                 // "" or "torch"
  std::string python;
  bool keep = false;                   // keep the scratch directory (run dir + resolved recipe)
};

// JSON: the harness' fields plus hotpath_samples_per_s, torch_samples_per_s, ratio, the recipe's
// settings, both sides' step-time breakdowns and every run.
BenchReport run_train_bench(const TrainBenchOptions& options, std::ostream* log);

}  // namespace hotpath::bench
