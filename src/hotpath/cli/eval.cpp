// `hotpath eval --model-dir RUN|PKG SHARDS...`: top-1/top-5/loss of a trained image model (a run directory,
// or a model package from `hotpath export`, run by the engine at its exported precision) on shards.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <ATen/Parallel.h>

#include <iomanip>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/infer/classifier.h"
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
  std::string precision;  // run directories: fp32 (default), bf16, fp16 autocast
  bool json = false;
};

void run(const EvalArgs& a) {
  at::set_num_threads(a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const bool is_package = infer::is_package_dir(a.model_dir);
  std::string name;
  infer::EvalPreprocess preprocess;
  std::int64_t num_classes = 0;
  std::optional<infer::Classifier> packaged;
  models::ModelHandle model;
  if (is_package) {
    const infer::PackageDir package = infer::read_package_dir(a.model_dir);
    HOTPATH_CHECK(a.precision.empty(), "eval: --precision applies to run directories; the package ", a.model_dir,
                  " runs at its exported precision (", infer::precision_name(package.precision), ")");
    packaged.emplace(infer::Classifier::from_package_dir(package, a.threads));
    name = package.architecture + " (" + infer::precision_name(package.precision) + " package)";
    preprocess = package.image;
    num_classes = static_cast<std::int64_t>(package.labels.size());
  } else {
    const infer::ModelPackage package = infer::read_package(a.model_dir);
    model = infer::load_package_model(package);
    name = package.model;
    preprocess = package.preprocess;
    num_classes = package.num_classes;
  }
  data::LoaderOptions lo = preprocess.loader_options(data::resolve_shards(a.shards));
  HOTPATH_CHECK(!lo.shards.empty(), "eval: no shard matches ", a.shards.front());
  lo.batch_size = a.batch_size;
  lo.workers = a.workers;
  lo.num_classes = num_classes;  // a label outside the model's classes is a bad sample, counted
  data::Loader loader(lo);
  infer::EvalResult r;
  if (packaged) {
    std::optional<infer::TopKMeter> meter;
    while (auto batch = loader.next()) {
      const at::Tensor logits = packaged->logits(batch->images);
      if (!meter) meter.emplace(logits.size(1));
      meter->add(logits, batch->labels);
    }
    HOTPATH_CHECK(meter.has_value(), "eval: the shards yielded no samples");
    r = meter->result("eval");
  } else {
    r = infer::evaluate(*model, loader, {.precision = a.precision.empty() ? "fp32" : a.precision});
  }
  if (a.json) {
    std::cout << nlohmann::json{{"model_dir", a.model_dir}, {"samples", r.samples}, {"top1", r.top1},
                                {"top5", r.top5}, {"loss", r.loss}}.dump()
              << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(2) << name << " on " << r.samples << " samples: top-1 "
            << r.top1 << "%  top-5 " << r.top5 << "%  loss " << std::setprecision(4) << r.loss << "\n";
}

}  // namespace

void add_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a trained model (a run directory) on WebDataset shards");
  cmd->add_option("--model-dir", args->model_dir, "Run directory (model.json) or model package (hotpath export)")->required();
  cmd->add_option("shards", args->shards, "Shard paths or patterns (brace ranges, globs)")->required();
  cmd->add_option("--batch-size", args->batch_size)->check(CLI::Range(1, 65536));
  cmd->add_option("--workers", args->workers, "Decode threads")->check(CLI::Range(1, 256));
  cmd->add_option("--threads", args->threads, "LibTorch intra-op threads (0 = all cores)")->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_option("--precision", args->precision, "Run directories: fp32 (default), bf16 or fp16 autocast")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_flag("--json", args->json, "One JSON object instead of text");
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
