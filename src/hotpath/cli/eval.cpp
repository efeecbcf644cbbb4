// `hotpath eval --model-dir RUN SHARDS...`: top-1/top-5/loss of a trained model package on shards.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <ATen/Parallel.h>

#include <iomanip>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/infer/evaluate.h"
#include "hotpath/infer/package.h"

namespace hotpath::cli {
namespace {

struct EvalArgs {
  std::string model_dir;
  std::vector<std::string> shards;
  int batch_size = 256;
  int workers = 2;
  int threads = 0;
  std::string precision = "fp32";
  bool json = false;
};

void run(const EvalArgs& a) {
  at::set_num_threads(a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const infer::ModelPackage package = infer::read_package(a.model_dir);
  models::ModelHandle model = infer::load_package_model(package);
  data::LoaderOptions lo = package.preprocess.loader_options(data::resolve_shards(a.shards));
  HOTPATH_CHECK(!lo.shards.empty(), "eval: no shard matches ", a.shards.front());
  lo.batch_size = a.batch_size;
  lo.workers = a.workers;
  lo.num_classes = package.num_classes;  // a label outside the model's classes is a bad sample, counted
  data::Loader loader(lo);
  const infer::EvalResult r = infer::evaluate(*model, loader, {.precision = a.precision});
  if (a.json) {
    std::cout << nlohmann::json{{"model_dir", a.model_dir}, {"samples", r.samples}, {"top1", r.top1},
                                {"top5", r.top5}, {"loss", r.loss}}.dump()
              << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(2) << package.model << " on " << r.samples << " samples: top-1 "
            << r.top1 << "%  top-5 " << r.top5 << "%  loss " << std::setprecision(4) << r.loss << "\n";
}

}  // namespace

void add_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a trained model (a run directory) on WebDataset shards");
  cmd->add_option("--model-dir", args->model_dir, "Run directory with model.json + model.safetensors")->required();
  cmd->add_option("shards", args->shards, "Shard paths or patterns (brace ranges, globs)")->required();
  cmd->add_option("--batch-size", args->batch_size)->check(CLI::Range(1, 65536));
  cmd->add_option("--workers", args->workers, "Decode threads")->check(CLI::Range(1, 256));
  cmd->add_option("--threads", args->threads, "LibTorch intra-op threads (0 = all cores)")->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_option("--precision", args->precision)->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_flag("--json", args->json, "One JSON object instead of text");
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
