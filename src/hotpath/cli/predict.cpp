// `hotpath predict --model-dir RUN|PKG IMAGE...`: top-k classes of image files with a trained model (a run
// directory, or a model package from `hotpath export`, run by the engine) or `--model efficientnet_lite0
// --pretrained`: the real ImageNet weights.
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

struct PredictArgs {
  std::string model_dir;
  std::string model;
  bool pretrained = false;
  std::vector<std::string> images;
  int top_k = infer::kDefaultTopK;
  int threads = 0;
  bool json = false;
};

void run(const PredictArgs& a) {
  at::set_num_threads(a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  HOTPATH_CHECK(a.model_dir.empty() != a.model.empty(), "predict: give either --model-dir RUN or --model NAME --pretrained");
  HOTPATH_CHECK(a.model.empty() || a.pretrained, "predict: --model ", a.model,
                " needs --pretrained (or use --model-dir RUN)");
  const infer::Classifier classifier = a.model_dir.empty()
                                           ? infer::Classifier::from_pretrained(a.model)
                                           : infer::Classifier::from_dir(a.model_dir, a.threads);
  for (const std::string& image : a.images) {
    const at::Tensor x = classifier.preprocess().load_image(image).unsqueeze(0);  // errors name the file
    const std::vector<infer::TopK> top = classifier.classify(x, a.top_k).front();
    if (a.json) {
      nlohmann::ordered_json j = nlohmann::ordered_json::array();
      for (const auto& t : top) j.push_back({{"index", t.index}, {"label", t.label}, {"prob", t.prob}});
      std::cout << nlohmann::ordered_json{{"image", image}, {"top", j}}.dump() << "\n";
    } else {
      std::cout << image << "\n";
      for (const auto& t : top) {
        std::cout << "  " << std::fixed << std::setprecision(4) << t.prob << "  " << t.label << " (" << t.index << ")\n";
      }
    }
  }
}

}  // namespace

void add_predict(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand("predict", "Top-k classes of image files (JPEG/PNG) with a trained model");
  cmd->add_option("--model-dir", args->model_dir, "Run directory (model.json) or model package (hotpath export)");
  cmd->add_option("--model", args->model, "A registry model with --pretrained weights (efficientnet_lite0)");
  cmd->add_flag("--pretrained", args->pretrained, "Use the model's pretrained ImageNet weights");
  cmd->add_option("images", args->images, "Image files")->required()->check(CLI::ExistingFile);
  cmd->add_option("--top-k,-k", args->top_k)->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", args->threads, "LibTorch intra-op threads (0 = all cores)")->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_flag("--json", args->json, "One JSON object per image");
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
