#include "hotpath/infer/text_classifier.h"

#include <ATen/ops/cat.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/text/text_batch_tensor.h"

namespace hotpath::infer {

TextClassifier::TextClassifier(std::shared_ptr<const Engine> engine, text::Tokenizer tokenizer, std::int64_t max_length,
                               std::vector<std::string> labels)
    : engine_(std::move(engine)), tokenizer_(std::move(tokenizer)), max_length_(max_length), labels_(std::move(labels)) {}

TextClassifier TextClassifier::from_dir(const std::string& dir, int threads) {
  HOTPATH_CHECK(is_package_dir(dir), dir, ": not a model package (no config.json with \"hotpath_package\"); export a text "
                "run or a Hugging Face classifier with hotpath export --task classify");
  const Package package = read_package(dir);
  HOTPATH_CHECK(package.kind == PackageKind::kTextClassifier, dir, ": a ", package_kind_name(package.kind),
                " package, expected a text_classifier");
  const std::filesystem::path root(dir);
  HOTPATH_CHECK(std::filesystem::exists(root / "tokenizer.json") || std::filesystem::exists(root / "vocab.txt"), dir,
                ": the package has no tokenizer files (tokenizer.json or vocab.txt); it takes token ids only "
                "(hotpath serve's tensor inputs)");
  auto engine = std::make_shared<const Engine>(
      Engine::from_graph(load_package_graph(package), {.threads = threads, .precision = package.precision}));
  return {std::move(engine), text::Tokenizer::from_directory(root), package.text.max_length, package.labels};
}

at::Tensor TextClassifier::logits(std::span<const std::string_view> texts, std::span<const std::string_view> pairs,
                                  std::int64_t batch_size) const {
  HOTPATH_CHECK(pairs.empty() || pairs.size() == texts.size(), "classify: ", pairs.size(), " second texts for ",
                texts.size(), " texts (give one per text, or none)");
  HOTPATH_CHECK(batch_size >= 1, "classify: batch_size is ", batch_size, ", expected at least 1");
  HOTPATH_CHECK(!texts.empty(), "classify: no texts");
  const text::EncodeOptions options{.max_length = static_cast<std::size_t>(max_length_)};
  const c10::InferenceMode inference;
  std::vector<at::Tensor> parts;
  for (std::size_t begin = 0; begin < texts.size(); begin += static_cast<std::size_t>(batch_size)) {
    const std::size_t n = std::min(texts.size() - begin, static_cast<std::size_t>(batch_size));
    const std::vector<text::Encoding> enc =
        pairs.empty() ? tokenizer_.encode_batch(texts.subspan(begin, n), options)
                      : tokenizer_.encode_pair_batch(texts.subspan(begin, n), pairs.subspan(begin, n), options);
    const text::TextBatchTensors t = text::to_padded_tensors(enc, tokenizer_.pad_id());
    parts.push_back(engine_->run({t.input_ids, t.attention_mask, t.token_type_ids}).front().to(at::kFloat));
  }
  return parts.size() == 1 ? parts.front() : at::cat(parts);
}

std::vector<std::vector<TopK>> TextClassifier::classify(std::span<const std::string_view> texts,
                                                        std::span<const std::string_view> pairs, std::int64_t k,
                                                        std::int64_t batch_size) const {
  return top_k(logits(texts, pairs, batch_size), k, labels_);
}

}  // namespace hotpath::infer
