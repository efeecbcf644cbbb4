#include "hotpath/infer/classifier.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/data/loader.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/text/text_batch_tensor.h"
#include "hotpath/text/text_loader.h"
#include "hotpath/models/vision/pretrained.h"

namespace hotpath::infer {

Classifier::Classifier(models::ModelHandle model, EvalPreprocess preprocess, std::vector<std::string> class_names)
    : predictor_(Predictor::from_model(std::move(model), std::move(preprocess), std::move(class_names))) {}

Classifier::Classifier(Predictor predictor) : predictor_(std::move(predictor)) {
  HOTPATH_CHECK(predictor_.kind() == PackageKind::kImageClassifier, predictor_.package().dir, ": a ",
                package_kind_name(predictor_.kind()), " package, expected an image_classifier");
}

Classifier Classifier::from_package(const Package& package, int threads, std::optional<at::ScalarType> autocast) {
  HOTPATH_CHECK(package.kind == PackageKind::kImageClassifier, package.dir, ": a ", package_kind_name(package.kind),
                " package, expected an image_classifier");
  return Classifier(Predictor::load(package, {.threads = threads, .autocast = autocast}));
}

Classifier Classifier::from_dir(const std::string& dir, int threads) { return from_package(read_package(dir), threads); }

at::Tensor Classifier::logits(const at::Tensor& batch) const { return predictor_.run({batch}).front(); }

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
  return predictor_.top_k(logits(batch), k);
}

namespace {

// A text_classifier package over text shards (KEY.txt [+ KEY.pair.txt] tokenized with the package's tokenizer, or
// KEY.ids), in order, batches padded to their longest row; every id and label checked before it reaches the engine.
DirEvalResult evaluate_text_package(const Package& package, const std::vector<std::string>& shard_patterns,
                                    const DirEvalOptions& options) {
  const Predictor predictor = Predictor::load(package, {.threads = options.threads});
  const TextPreprocess& t = predictor.text();
  // The text loader cuts pairs longest first, as export writes every package; another policy would differ.
  HOTPATH_CHECK(t.truncation == text::TruncationStrategy::kLongestFirst, "eval: ", package.dir,
                "/preprocess.json: truncation ", text::truncation_strategy_name(t.truncation),
                "; eval reads text shards truncated longest_first");
  text::TextLoaderOptions lo;
  lo.shards = data::resolve_shards(shard_patterns);
  HOTPATH_CHECK(!lo.shards.empty(), "eval: no shard matches ", shard_patterns.front());
  if (predictor.tokenizer() != nullptr) lo.tokenizer_dir = package.dir;
  lo.max_length = static_cast<std::size_t>(t.max_length);
  lo.workers = static_cast<unsigned>(options.workers);
  lo.batching.batch_size = static_cast<int>(options.batch_size);
  lo.batching.shuffle = false;
  text::TextLoader loader(std::move(lo));
  TopKMeter meter(predictor.output_width());
  loader.seek({});
  while (auto batch = loader.next()) {
    for (std::size_t i = 0; i < batch->labels.size(); ++i) {
      const std::int64_t label = batch->labels[i];
      HOTPATH_CHECK(label >= 0 && label < predictor.output_width(), "eval: sample ", batch->samples[i], " has label ",
                    label, ", outside the package's ", predictor.output_width(), " classes");
    }
    const auto [lo_id, hi_id] = std::minmax_element(batch->input_ids.begin(), batch->input_ids.end());
    HOTPATH_CHECK(*lo_id >= 0 && *hi_id < t.vocab_size, "eval: token id ", *lo_id < 0 ? *lo_id : *hi_id,
                  " outside the package's vocabulary [0, ", t.vocab_size, ")");
    const text::TextBatchTensors x = text::to_tensors(*batch);
    meter.add(predictor.run({x.input_ids, x.attention_mask, x.token_type_ids}).front(), x.labels);
  }
  return {.model = package.architecture + " (" + precision_name(package.precision) + " package)",
          .eval = meter.result("eval")};
}

}  // namespace

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
  HOTPATH_CHECK(package.kind != PackageKind::kSentenceEmbedder, "eval: ", dir,
                " is a sentence_embedder package: it has no classes to score");
  HOTPATH_CHECK(!shard_patterns.empty(), "eval: no shards given");
  if (package.kind == PackageKind::kTextClassifier) return evaluate_text_package(package, shard_patterns, options);
  std::optional<at::ScalarType> autocast;
  if (options.precision == "bf16") autocast = at::kBFloat16;
  if (options.precision == "fp16") autocast = at::kHalf;
  const Classifier classifier = Classifier::from_package(package, options.threads, autocast);
  out.model = engine ? package.architecture + " (" + precision_name(package.precision) + " package)" : package.architecture;
  const EvalPreprocess& preprocess = package.image;
  const std::int64_t num_classes = package.num_classes;
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
