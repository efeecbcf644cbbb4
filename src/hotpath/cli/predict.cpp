// `hotpath predict --model-dir RUN|PKG IMAGE...`: top-k classes of image files with a trained model (a run
// directory, or a model package from `hotpath export`, run by the engine) or `--model efficientnet_lite0
// --pretrained`: the real ImageNet weights. `hotpath predict --model-dir PKG --text "..." [--text-pair "..."]` or
// `--texts FILE`: top-k labels of texts with a text_classifier package. Both through the package's Predictor
// (infer/predictor.h): its preprocessing, its softmax + top-k, and its default k.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <ATen/Parallel.h>

#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/infer/classifier.h"
#include "hotpath/infer/text_classifier.h"

namespace hotpath::cli {
namespace {

struct PredictArgs {
  std::string model_dir;
  std::string model;
  bool pretrained = false;
  std::vector<std::string> images;
  std::vector<std::string> texts;       // --text, repeatable
  std::vector<std::string> text_pairs;  // --text-pair: one second text per --text
  std::string texts_file;               // --texts: one text per line
  std::optional<int> top_k;             // unset: the package's (config.json postprocess.top_k), else kDefaultTopK
  int threads = 0;
  bool json = false;
};

void print_top(const std::string& key, const std::string& what, const std::vector<infer::TopK>& top, bool json) {
  if (json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const auto& t : top) j.push_back({{"index", t.index}, {"label", t.label}, {"prob", t.prob}});
    std::cout << nlohmann::ordered_json{{key, what}, {"top", j}}.dump() << "\n";
    return;
  }
  std::cout << what << "\n";
  for (const auto& t : top) {
    std::cout << "  " << std::fixed << std::setprecision(4) << t.prob << "  " << t.label << " (" << t.index << ")\n";
  }
}

void predict_texts(const PredictArgs& a) {
  std::vector<std::string> texts = a.texts;
  if (!a.texts_file.empty()) {
    std::istringstream in(read_file(a.texts_file, read_limit::kDefault, "texts"));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) texts.push_back(line);
    }
    HOTPATH_CHECK(!texts.empty(), "predict: ", a.texts_file, " holds no text lines");
  }
  HOTPATH_CHECK(a.text_pairs.empty() || a.text_pairs.size() == texts.size(), "predict: ", a.text_pairs.size(),
                " --text-pair for ", texts.size(), " texts (give one per text, or none)");
  const infer::TextClassifier classifier = infer::TextClassifier::from_dir(a.model_dir, a.threads);
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const std::vector<std::string_view> pairs(a.text_pairs.begin(), a.text_pairs.end());
  const std::int64_t k = a.top_k ? *a.top_k : classifier.predictor().postprocess().top_k;
  const std::vector<std::vector<infer::TopK>> top = classifier.classify(views, pairs, k);
  for (std::size_t i = 0; i < texts.size(); ++i) print_top("text", texts[i], top[i], a.json);
}

void run(const PredictArgs& a) {
  at::set_num_threads(a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  HOTPATH_CHECK(a.model_dir.empty() != a.model.empty(), "predict: give either --model-dir RUN or --model NAME --pretrained");
  HOTPATH_CHECK(a.model.empty() || a.pretrained, "predict: --model ", a.model,
                " needs --pretrained (or use --model-dir RUN)");
  const bool text = !a.texts.empty() || !a.texts_file.empty();
  HOTPATH_CHECK(text != !a.images.empty(), "predict: give image files, or --text / --texts FILE, not both");
  HOTPATH_CHECK(text || a.text_pairs.empty(), "predict: --text-pair goes with --text");
  const std::optional<infer::Package> package =
      a.model_dir.empty() ? std::nullopt : std::optional(infer::read_package(a.model_dir));
  const infer::PackageKind kind = package ? package->kind : infer::PackageKind::kImageClassifier;
  HOTPATH_CHECK(kind != infer::PackageKind::kSentenceEmbedder, "predict: ", a.model_dir,
                " is a sentence_embedder package: hotpath embed --model ", a.model_dir);
  HOTPATH_CHECK(text == (kind == infer::PackageKind::kTextClassifier), "predict: ",
                a.model_dir.empty() ? a.model : a.model_dir,
                text ? " is an image_classifier: give image files, not --text"
                     : " is a text_classifier: give --text or --texts FILE, not image files");
  if (text) return predict_texts(a);
  const infer::Classifier classifier = package ? infer::Classifier::from_package(*package, a.threads)
                                               : infer::Classifier::from_pretrained(a.model);
  const std::int64_t k = a.top_k ? *a.top_k : classifier.predictor().postprocess().top_k;
  for (const std::string& image : a.images) {
    const at::Tensor x = classifier.preprocess().load_image(image).unsqueeze(0);  // errors name the file
    print_top("image", image, classifier.classify(x, k).front(), a.json);
  }
}

}  // namespace

void add_predict(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand("predict", "Top-k classes of image files (JPEG/PNG) or texts with a trained model");
  cmd->add_option("--model-dir", args->model_dir, "Run directory (model.json) or model package (hotpath export)");
  cmd->add_option("--model", args->model, "A registry model with --pretrained weights (efficientnet_lite0)");
  cmd->add_flag("--pretrained", args->pretrained, "Use the model's pretrained ImageNet weights");
  cmd->add_option("images", args->images, "Image files")->check(CLI::ExistingFile);
  cmd->add_option("--text", args->texts, "A text to classify (text_classifier packages; repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--text-pair", args->text_pairs, "The second text of a sentence pair, one per --text")
      ->allow_extra_args(false);
  cmd->add_option("--texts", args->texts_file, "A file of texts, one per line")->check(CLI::ExistingFile);
  cmd->add_option("--top-k,-k", args->top_k, "Classes to print (default: the package's top_k, 5)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", args->threads, "LibTorch intra-op threads (0 = all cores)")->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_flag("--json", args->json, "One JSON object per image or text");
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
