// hotpath/bench/loader_bench.h — `hotpath data bench`: images/s of the train transform through the
// loader, the JPEG decoder's ceiling on the same files and threads, and the PyTorch DataLoader +
// webdataset + PIL + torchvision peer (bench/peers/torch_data_peer.py), interleaved by the harness.
//
//   DataBenchOptions o{.loader = loader_options, .batches = 20, .repeats = 3, .compare = "torch"};
//   BenchReport r = run_data_bench(o, &std::cerr);   // r.json["ratio_vs_torch"], r.table_row
//   LoaderBenchResult one = bench_loader(loader_options, /*warmup_batches=*/2, /*batches=*/20);
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "hotpath/bench/harness.h"
#include "hotpath/data/loader.h"

namespace hotpath::bench {

struct LoaderBenchResult {
  double images_per_s = 0;
  std::int64_t images = 0;
  double seconds = 0;
  data::LoaderStats stats{};  // counters of the timed part only
  std::string loader;         // Loader::describe() after the run: which decode path ran
};

// Pulls `warmup_batches` untimed, then `batches` timed batches (epochs roll over as needed).
LoaderBenchResult bench_loader(const data::LoaderOptions& options, int warmup_batches, int batches);

// Full-size decode of the image members of `shards` (libjpeg-turbo's tjDecompress2 to RGB for
// JPEG, libpng for PNG) on `threads` threads, each reusing its output buffer: the speed of
// the decoder alone, the ceiling a loader that decodes every pixel cannot pass. Decodes at least
// `min_images` images (cycling over the files), returns images per second.
double bench_decode_ceiling(const std::vector<std::string>& shards, int threads, std::int64_t min_images);

// What a benchmark command hands back to the CLI: the JSON report and its markdown row.
struct BenchReport {
  Json json;
  std::string table_row;
};

struct DataBenchOptions {
  // Shards resolved, train transform (RandomResizedCrop). The loader's defaults, but 2 batches ahead (the
  // benchmark's setting since it was first measured; the peer DataLoader keeps its default prefetch_factor 2).
  data::LoaderOptions loader = [] {
    data::LoaderOptions o;
    o.prefetch = 2;
    return o;
  }();
  int warmup_batches = 3;
  int batches = 20;
  int repeats = 3;
  std::string dtype = "float32";  // names for the report (loader.format holds the values)
  std::string layout = "nchw";
  std::string compare;  // "" or "torch"
  std::string python;   // venv python for the peer ("" = the setup venv)
};
// With loader.device = cuda, "hotpath" is the loader's CUDA mode (loader.decode: nvJPEG or CPU threads) and the
// contender "cpu_decode" runs the same options on the CPU path with the same threads, side by side
// (ratio_vs_cpu_decode = CUDA mode / CPU path).

// Contenders hotpath (the loader), ceiling (the decoder alone) and, with compare "torch", torch.
// JSON: the harness' fields (benchmark.*, ratio_vs_torch, host, dispatch, load) plus the historic ones
// (hotpath_images_per_s, decode_ceiling_images_per_s, fraction_of_ceiling, torch_images_per_s, ratio, ...).
BenchReport run_data_bench(const DataBenchOptions& options, std::ostream* log);

}  // namespace hotpath::bench
