#include "hotpath/infer/text_classifier.h"

#include <ATen/ops/cat.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::infer {

TextClassifier TextClassifier::from_dir(const std::string& dir, int threads) {
  HOTPATH_CHECK(is_package_dir(dir), dir, ": not a model package (no config.json with \"hotpath_package\"); export a text "
                "run or a Hugging Face classifier with hotpath export --task classify");
  const Package package = read_package(dir);
  HOTPATH_CHECK(package.kind == PackageKind::kTextClassifier, dir, ": a ", package_kind_name(package.kind),
                " package, expected a text_classifier");
  HOTPATH_CHECK(package.text.tokenizer, dir, ": the package has no tokenizer files (tokenizer.json or vocab.txt); it "
                "takes token ids only (hotpath serve's tensor inputs)");
  return TextClassifier(Predictor::load(package, {.threads = threads}));
}

at::Tensor TextClassifier::logits(std::span<const std::string_view> texts, std::span<const std::string_view> pairs,
                                  std::int64_t batch_size) const {
  HOTPATH_CHECK(pairs.empty() || pairs.size() == texts.size(), "classify: ", pairs.size(), " second texts for ",
                texts.size(), " texts (give one per text, or none)");
  HOTPATH_CHECK(batch_size >= 1, "classify: batch_size is ", batch_size, ", expected at least 1");
  HOTPATH_CHECK(!texts.empty(), "classify: no texts");
  const c10::InferenceMode inference;
  std::vector<at::Tensor> parts;
  for (std::size_t begin = 0; begin < texts.size(); begin += static_cast<std::size_t>(batch_size)) {
    const std::size_t n = std::min(texts.size() - begin, static_cast<std::size_t>(batch_size));
    const text::TextBatchTensors t =
        predictor_.text_inputs(texts.subspan(begin, n), pairs.empty() ? pairs : pairs.subspan(begin, n));
    parts.push_back(predictor_.run({t.input_ids, t.attention_mask, t.token_type_ids}).front().to(at::kFloat));
  }
  return parts.size() == 1 ? parts.front() : at::cat(parts);
}

std::vector<std::vector<TopK>> TextClassifier::classify(std::span<const std::string_view> texts,
                                                        std::span<const std::string_view> pairs, std::int64_t k,
                                                        std::int64_t batch_size) const {
  return predictor_.top_k(logits(texts, pairs, batch_size), k);
}

}  // namespace hotpath::infer
