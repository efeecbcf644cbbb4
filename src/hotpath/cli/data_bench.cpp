// `hotpath data bench` (also `hotpath bench data`): images/s of the train transform through the loader,
// the JPEG decoder's ceiling on the same files and threads, and (--compare torch) the PyTorch DataLoader
// pipeline in the same invocation (the benchmark: hotpath/bench/loader_bench.h).
#include <ATen/Context.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "hotpath/bench/loader_bench.h"
#include "hotpath/core/error.h"
#include "hotpath/data/shard_list.h"

namespace hotpath::cli {
namespace {

// What the command line sets: the benchmark's own options (their defaults are the library's, loader_bench.h),
// plus the strings turned into library values in run().
struct BenchArgs {
  bench::DataBenchOptions options;
  std::vector<std::string> shards;
  bool no_dct_scaling = false;
  std::string json_path;
  std::string device = "cpu";
  std::string decode = "cpu";
};

void run(BenchArgs a) {
  HOTPATH_CHECK(a.decode == "cpu" || a.device == "cuda", "data bench: --decode nvjpeg needs --device cuda");
  HOTPATH_CHECK(a.device == "cpu" || at::globalContext().hasCUDA(),
                "data bench: --device cuda was asked for but no CUDA device is available");
  bench::DataBenchOptions& b = a.options;
  data::LoaderOptions& o = b.loader;
  o.shards = data::resolve_shards(a.shards);
  o.crop = data::CropMode::kRandomResizedCrop;
  o.allow_dct_scaling = !a.no_dct_scaling;
  o.format.type = b.dtype == "uint8"      ? data::PixelType::kUInt8
                  : b.dtype == "bfloat16" ? data::PixelType::kBFloat16
                                          : data::PixelType::kFloat32;
  o.format.layout = b.layout == "nhwc" ? data::PixelLayout::kHWC : data::PixelLayout::kCHW;
  o.device = a.device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  o.decode = a.decode == "nvjpeg" ? data::DecodeBackend::kNvjpeg : data::DecodeBackend::kCpu;
  const bench::BenchReport report = bench::run_data_bench(b, &std::cerr);
  print_bench_report(report.json, a.json_path, {report.table_row});
}

// The options of `hotpath data bench` and its alias `hotpath bench data`.
void add_loader_bench(CLI::App& parent, const char* name) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = parent.add_subcommand(
      name, "Images/s of the train transform (RandomResizedCrop + flip + normalize -> batch), vs the decoder "
            "ceiling and, with --compare torch, the PyTorch DataLoader pipeline");
  cmd->add_option("shards", args->shards, "Shard files, brace patterns or globs")->required();
  cmd->add_option("--batch-size", args->options.loader.batch_size, "Samples per batch")->check(CLI::Range(1, 65536));
  cmd->add_option("--workers", args->options.loader.workers, "Decode threads (and DataLoader workers for the peer)")->check(CLI::Range(1, 256));
  cmd->add_option("--size", args->options.loader.size, "Output height and width")->check(CLI::Range(1, 8192));
  cmd->add_option("--channels", args->options.loader.channels, "3 (RGB) or 1 (gray)")->check(CLI::IsMember({1, 3}));
  cmd->add_option("--batches", args->options.batches, "Timed batches")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup-batches", args->options.warmup_batches, "Untimed batches first")->check(CLI::Range(0, 1000000));
  cmd->add_option("--prefetch", args->options.loader.prefetch, "Batches prepared ahead")->check(CLI::Range(1, 64));
  cmd->add_option("--repeats", args->options.repeats, "Runs of each pipeline, interleaved; the best counts")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--dtype", args->options.dtype, "Batch dtype")->check(CLI::IsMember({"float32", "bfloat16", "uint8"}));
  cmd->add_option("--layout", args->options.layout, "nchw, or nhwc (channels-last)")->check(CLI::IsMember({"nchw", "nhwc"}));
  cmd->add_flag("--no-dct-scaling", args->no_dct_scaling, "Always decode JPEGs at full resolution");
  cmd->add_option("--compare", args->options.compare, "Also run the peer pipeline in this invocation")->check(CLI::IsMember({"torch"}));
  cmd->add_option("--json", args->json_path, "Write the JSON report here ('-' = stdout)");
  cmd->add_option("--python", args->options.python, "Python of the venv for --compare (default: the setup venv)");
  cmd->add_option("--seed", args->options.loader.seed, "Shuffle/augmentation seed");
  cmd->add_option("--device", args->device,
                  "cuda: the loader's CUDA mode (batches finished on GPU 0), side by side with the CPU path")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--decode", args->decode, "nvjpeg: decode the JPEGs on the GPU (needs --device cuda)")
      ->check(CLI::IsMember({"cpu", "nvjpeg"}));
  cmd->add_option("--nvjpeg-cpu-share", args->options.loader.nvjpeg_cpu_share,
                  "With --decode nvjpeg: the fraction of each batch the decode threads decode on the CPU (0..1; "
                  "default: adapted so that both sides are busy)")
      ->check(CLI::Range(-1.0, 1.0));
  cmd->callback([args] { run(*args); });
}

}  // namespace

void add_data_bench(CLI::App& data) { add_loader_bench(data, "bench"); }
void add_bench_data(CLI::App& bench) { add_loader_bench(bench, "data"); }

}  // namespace hotpath::cli
