#include "hotpath/infer/classifier.h"

#include <ATen/ops/softmax.h>
#include <ATen/ops/topk.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/data/loader.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/models/vision/pretrained.h"
#include "hotpath/ops/autocast_ops.h"

namespace hotpath::infer {

Classifier::Classifier(models::ModelHandle model, EvalPreprocess preprocess, std::vector<std::string> class_names)
    : model_(std::move(model)), preprocess_(std::move(preprocess)), class_names_(std::move(class_names)) {
  HOTPATH_ASSERT(model_ != nullptr);
}

Classifier::Classifier(std::shared_ptr<const Engine> engine, EvalPreprocess preprocess,
                       std::vector<std::string> class_names)
    : engine_(std::move(engine)), preprocess_(std::move(preprocess)), class_names_(std::move(class_names)) {
  HOTPATH_ASSERT(engine_ != nullptr);
}

Classifier Classifier::from_package(const Package& package, int threads, std::optional<at::ScalarType> autocast) {
  HOTPATH_CHECK(package.kind == PackageKind::kImageClassifier, package.dir, ": a ", package_kind_name(package.kind),
                " package, expected an image_classifier");
  if (package.layout == PackageLayout::kRunDirectory) {
    Classifier c(load_package_model(package), package.image, package.labels);
    c.autocast_ = autocast;
    return c;
  }
  HOTPATH_CHECK(!autocast, package.dir, ": a model package runs at its exported precision (",
                precision_name(package.precision), "), not under autocast");
  auto engine = std::make_shared<const Engine>(
      Engine::from_graph(load_package_graph(package), {.threads = threads, .precision = package.precision}));
  return {std::move(engine), package.image, package.labels};
}

Classifier Classifier::from_dir(const std::string& dir, int threads) { return from_package(read_package(dir), threads); }

at::Tensor Classifier::logits(const at::Tensor& batch) const {
  if (engine_) return engine_->run({batch}).front();
  torch::NoGradGuard no_grad;
  const ops::AutocastGuard autocast(batch.device().type(), autocast_);
  return model_->forward(batch).to(at::kFloat);
}

Classifier Classifier::from_pretrained(const std::string& model) {
  const models::Preprocessing& pre = models::pretrained_preprocessing(model);
  EvalPreprocess preprocess{.image_size = pre.crop,
                            .channels = 3,
                            .crop = EvalCrop::kResizeCenterCrop,
                            .resize_shorter = pre.resize_shorter,
                            .mean = std::vector<double>(pre.mean.begin(), pre.mean.end()),
                            .std = std::vector<double>(pre.std.begin(), pre.std.end())};
  return {models::load_pretrained_model(model), std::move(preprocess), models::pretrained_class_names(model)};
}

std::vector<std::vector<TopK>> Classifier::classify(const at::Tensor& batch, std::int64_t k) const {
  return top_k(logits(batch), k, class_names_);
}

std::vector<std::vector<TopK>> top_k(const at::Tensor& logits, std::int64_t k, const std::vector<std::string>& labels) {
  HOTPATH_CHECK(k >= 1, "classify: k is ", k, ", expected at least 1");
  const at::Tensor probs = at::softmax(logits, 1);
  k = std::min(k, probs.size(1));
  const auto [values, indices] = probs.topk(k, 1);
  const at::Tensor values_cpu = values.to(at::kDouble).cpu().contiguous();
  const at::Tensor indices_cpu = indices.cpu().contiguous();
  const double* v = values_cpu.const_data_ptr<double>();
  const std::int64_t* ix = indices_cpu.const_data_ptr<std::int64_t>();
  std::vector<std::vector<TopK>> out(static_cast<std::size_t>(probs.size(0)));
  for (std::size_t n = 0; n < out.size(); ++n) {
    for (std::int64_t i = 0; i < k; ++i) {
      const std::size_t at = n * static_cast<std::size_t>(k) + static_cast<std::size_t>(i);
      const std::int64_t index = ix[at];
      std::string label = index < static_cast<std::int64_t>(labels.size()) ? labels[static_cast<std::size_t>(index)]
                                                                           : std::to_string(index);
      out[n].push_back({.index = index, .label = std::move(label), .prob = v[at]});
    }
  }
  return out;
}

DirEvalResult evaluate_dir(const std::string& dir, const std::vector<std::string>& shard_patterns,
                           const DirEvalOptions& options) {
  HOTPATH_CHECK(options.batch_size >= 1 && options.batch_size <= 65536 && options.workers >= 1 &&
                    options.workers <= 256,
                "eval: batch size ", options.batch_size, " and workers ", options.workers,
                ": expected 1..65536 and 1..256");
  HOTPATH_CHECK(options.precision.empty() || options.precision == "fp32" || options.precision == "bf16" ||
                    options.precision == "fp16",
                "eval: precision: expected fp32, bf16 or fp16, got '", options.precision, "'");
  DirEvalResult out;
  const Package package = read_package(dir);
  const bool engine = package.layout == PackageLayout::kModelPackage;
  HOTPATH_CHECK(options.precision.empty() || !engine, "eval: --precision applies to run directories; the package ", dir,
                " runs at its exported precision (", precision_name(package.precision), ")");
  std::optional<at::ScalarType> autocast;
  if (options.precision == "bf16") autocast = at::kBFloat16;
  if (options.precision == "fp16") autocast = at::kHalf;
  const Classifier classifier = Classifier::from_package(package, options.threads, autocast);
  out.model = engine ? package.architecture + " (" + precision_name(package.precision) + " package)" : package.architecture;
  const EvalPreprocess& preprocess = package.image;
  const std::int64_t num_classes = package.num_classes;
  HOTPATH_CHECK(!shard_patterns.empty(), "eval: no shards given");
  data::LoaderOptions lo = preprocess.loader_options(data::resolve_shards(shard_patterns));
  HOTPATH_CHECK(!lo.shards.empty(), "eval: no shard matches ", shard_patterns.front());
  lo.batch_size = static_cast<int>(options.batch_size);
  lo.workers = static_cast<int>(options.workers);
  lo.num_classes = num_classes;  // a label outside the model's classes is a bad sample, counted
  data::Loader loader(lo);
  std::optional<TopKMeter> meter;
  while (auto batch = loader.next()) {
    const at::Tensor logits = classifier.logits(batch->images);
    if (!meter) meter.emplace(logits.size(1));
    meter->add(logits, batch->labels);
  }
  HOTPATH_CHECK(meter.has_value(), "eval: the shards yielded no samples");
  out.eval = meter->result("eval");
  return out;
}

}  // namespace hotpath::infer
