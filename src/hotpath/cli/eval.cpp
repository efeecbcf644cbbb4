// `hotpath eval --model-dir RUN|PKG SHARDS...`: top-1/top-5/loss of a trained image model (a run directory,
// or a model package from `hotpath export`, run by the engine at its exported precision) on image shards, or of a
// text_classifier package on text shards (KEY.txt [+ KEY.pair.txt] or KEY.ids, with KEY.cls).
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
#include "hotpath/infer/classifier.h"

namespace hotpath::cli {
namespace {

struct EvalArgs {
  std::string model_dir;
  std::vector<std::string> shards;
  // The library's defaults (infer/classifier.h), one source for both.
  std::int64_t batch_size = infer::DirEvalOptions{}.batch_size;
  std::int64_t workers = infer::DirEvalOptions{}.workers;
  int threads = 0;
  std::string precision;  // run directories: fp32 (default), bf16, fp16 autocast
  bool json = false;
};

void run(const EvalArgs& a) {
  at::set_num_threads(a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const infer::DirEvalResult result = infer::evaluate_dir(
      a.model_dir, a.shards, {.batch_size = a.batch_size, .workers = a.workers, .threads = a.threads,
                              .precision = a.precision});
  const infer::EvalResult& r = result.eval;
  if (a.json) {
    std::cout << nlohmann::json{{"model_dir", a.model_dir}, {"samples", r.samples}, {"top1", r.top1},
                                {"top5", r.top5}, {"loss", r.loss}}.dump()
              << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(2) << result.model << " on " << r.samples << " samples: top-1 "
            << r.top1 << "%  top-5 " << r.top5 << "%  loss " << std::setprecision(4) << r.loss << "\n";
}

}  // namespace

void add_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a trained model (a run directory or a package; image or text) on WebDataset shards");
  cmd->add_option("--model-dir", args->model_dir, "Run directory (model.json) or model package (hotpath export)")->required();
  cmd->add_option("shards", args->shards, "Shard paths or patterns (brace ranges, globs)")->required();
  cmd->add_option("--batch-size", args->batch_size)->check(CLI::Range(std::int64_t{1}, std::int64_t{65536}));
  cmd->add_option("--workers", args->workers, "Decode (image) or tokenizer (text) threads")->check(CLI::Range(std::int64_t{1}, std::int64_t{256}));
  cmd->add_option("--threads", args->threads, "LibTorch intra-op threads (0 = all cores)")->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_option("--precision", args->precision, "Run directories: fp32 (default), bf16 or fp16 autocast")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_flag("--json", args->json, "One JSON object instead of text");
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
