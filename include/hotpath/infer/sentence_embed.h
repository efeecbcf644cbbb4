// Sentences → L2-normalised sentence embeddings end to end (tokenize, BERT, mean pooling), as
// sentence-transformers' `SentenceTransformer(dir).encode(sentences, normalize_embeddings=True)`.
// `hotpath embed` and `hotpath bench text --part embed` both run this code.
//   const auto encoder = hotpath::infer::SentenceEncoder::from_directory("all-MiniLM-L6-v2");
//   std::vector<std::string_view> lines = {"The cat sat.", "A dog barked."};
//   at::Tensor emb = encoder.encode(lines);  // float32 [2, 384], row i = lines[i]
//
// Speed, and why: lines are tokenized on `threads` workers without padding, then batched in token
// length order (longest first, as sentence-transformers sorts) so each batch pads only to its own
// longest line; rows go back to input order at the end. The model runs under c10::InferenceMode with
// the fused attention kernel (padding masked inside it), and the batch's id/mask buffers are
// allocated once for the largest batch and reused.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "hotpath/infer/package.h"
#include "hotpath/infer/predictor.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/text/tokenizer.h"

namespace hotpath::infer {

struct SentenceEncodeOptions {
  std::size_t batch_size = 32;  // sentences per forward pass (padded to the batch's longest)
  unsigned threads = 0;         // tokenizer workers; 0: at::get_num_threads()
};

struct SentenceEncoderLoadOptions {
  // Truncate to this many tokens; 0: sentence_bert_config.json's max_seq_length (256 for
  // all-MiniLM-L6-v2), else the model's max_position_embeddings.
  std::size_t max_length = 0;
  models::AttentionFn attention = nullptr;  // nullptr: ops::fused_attention
};

class SentenceEncoder {
 public:
  // The tokenizer (tokenizer.json or vocab.txt), config.json + weights and the sentence-transformers
  // pipeline files (1_Pooling/config.json, modules.json) of a model directory.
  static SentenceEncoder from_directory(const std::filesystem::path& dir, const SentenceEncoderLoadOptions& options = {});
  // A sentence_embedder model package (package.h) through its Predictor (predictor.h): its tokenizer, the engine
  // on its graph (fp32, bf16 or int8 as exported, pooled and normalised inside); max_length 0 takes the package's.
  static SentenceEncoder from_package(const Package& package, const SentenceEncoderLoadOptions& options = {});
  // The one choice `hotpath embed --model` and hotpath.infer.SentenceEncoder make: a sentence_embedder model package
  // (package.h) in the engine, else a sentence-transformers / Hugging Face directory eagerly.
  static SentenceEncoder from_dir(const std::filesystem::path& dir, const SentenceEncoderLoadOptions& options = {});
  SentenceEncoder(text::Tokenizer tokenizer, models::SentenceEmbedder embedder, std::size_t max_length);

  // → float32 [lines.size(), hidden_size], row i the embedding of lines[i] (an inference tensor:
  // read or copy it; it cannot enter autograd). Lines must be valid UTF-8 (see check_utf8_lines).
  [[nodiscard]] at::Tensor encode(std::span<const std::string_view> lines,
                                  const SentenceEncodeOptions& options = {}) const;

  [[nodiscard]] const text::Tokenizer& tokenizer() const { return tokenizer_; }
  // The model of a directory encoder; a package encoder runs the engine and has none (nullptr).
  [[nodiscard]] const models::SentenceEmbedder* embedder() const { return embedder_ ? &*embedder_ : nullptr; }
  [[nodiscard]] std::size_t max_length() const { return max_length_; }
  [[nodiscard]] std::int64_t dimension() const { return dimension_; }

 private:
  explicit SentenceEncoder(Predictor predictor);

  text::Tokenizer tokenizer_;
  std::optional<models::SentenceEmbedder> embedder_;
  std::optional<Predictor> predictor_;  // set for packages: pooled and normalised inside the graph
  std::int64_t dimension_ = 0;
  std::size_t max_length_;
};

// Throws naming `source`:line and the byte of the first line that is not valid UTF-8.
void check_utf8_lines(std::span<const std::string_view> lines, std::string_view source);

// The order encode() runs lines in: indices sorted by token count, longest first, ties in input order.
std::vector<std::size_t> longest_first_order(std::span<const text::Encoding> encodings);

}  // namespace hotpath::infer
