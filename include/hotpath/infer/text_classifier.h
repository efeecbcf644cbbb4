// hotpath/infer/text_classifier.h — a text_classifier model package ready to answer, as a view of one Predictor
// (predictor.h: its tokenizer, max length, pad id and truncation, the engine at the package's precision, softmax
// + top-k with its labels), batching the texts. What hotpath.infer.TextClassifier runs.
//
//   TextClassifier c = TextClassifier::from_dir("pkg/minilm-reuters-int8");
//   std::vector<std::string_view> texts{"Oil prices rose.", "The bank cut rates."};
//   for (const TopK& t : c.classify(texts, {}, 3).front()) std::cout << t.label << " " << t.prob << "\n";
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hotpath/infer/predictor.h"

namespace hotpath::infer {

class TextClassifier {
 public:
  // A text_classifier package with its tokenizer files (`hotpath export` of a text run or a Hugging Face
  // BERT-family classifier). Anything else is an error naming the directory.
  static TextClassifier from_dir(const std::string& dir, int threads = 0);

  // Logits [N, labels] float32. `pairs`: empty, or one second text per text (sentence-pair tasks). Texts are
  // truncated to the package's max_length (pairs: with the package's truncation) and run in batches of `batch_size`, each
  // padded to its longest row.
  [[nodiscard]] at::Tensor logits(std::span<const std::string_view> texts, std::span<const std::string_view> pairs = {},
                                  std::int64_t batch_size = 32) const;
  // For each text the min(k, labels) most probable labels, most probable first (top_k).
  [[nodiscard]] std::vector<std::vector<TopK>> classify(std::span<const std::string_view> texts,
                                                        std::span<const std::string_view> pairs = {},
                                                        std::int64_t k = 5, std::int64_t batch_size = 32) const;

  [[nodiscard]] const std::vector<std::string>& labels() const { return predictor_.labels(); }
  [[nodiscard]] std::int64_t max_length() const { return predictor_.text().max_length; }
  [[nodiscard]] const Predictor& predictor() const { return predictor_; }

 private:
  explicit TextClassifier(Predictor predictor) : predictor_(std::move(predictor)) {}

  Predictor predictor_;
};

}  // namespace hotpath::infer
