// hotpath/text/text_loader.h — text shards → padded int32 batches (torch-free), with dynamic
// padding, length bucketing and a token budget.
//
//   TextLoader loader({.shards = resolve_shards({"out/corn-*.tar"}), .tokenizer_dir = "minilm", .max_length = 128});
//   loader.seek({epoch, 0});
//   while (auto b = loader.next()) train_step(b->input_ids, b->attention_mask, b->labels);  // [B, L] row-major
//
// The loader reads every sample of the shards once at construction (KEY.ids as stored, KEY.txt
// tokenized by `workers` threads), so text corpora live in memory as token ids (4 bytes a token).
// Each epoch is then planned from token lengths alone: a permutation drawn from (seed, epoch), the
// rank's share, batches. Batches therefore do not depend on the thread count, and seek() replays
// only the plan: a resumed epoch yields exactly the batches an uninterrupted one would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hotpath/core/position.h"

namespace hotpath::text {

// Samples as token ids, concatenated (CSR layout): sample i is ids[offsets[i], offsets[i + 1]).
struct TextCorpus {
  std::vector<std::uint64_t> offsets{0};
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> type_ids;  // same layout; all 0 for single sequences
  std::vector<std::int64_t> labels;    // -1: unlabelled
  [[nodiscard]] std::size_t size() const { return labels.size(); }
  [[nodiscard]] std::uint32_t length(std::size_t i) const {
    return static_cast<std::uint32_t>(offsets[i + 1] - offsets[i]);
  }
  void add(std::span<const std::int32_t> sample_ids, std::span<const std::int32_t> sample_type_ids, std::int64_t label);
};

// How one epoch's samples become batches.
struct BatchPlanOptions {
  int batch_size = 32;             // samples per batch (the nominal size with max_tokens)
  std::int64_t max_tokens = 0;     // > 0: batch × padded length ≤ max_tokens, the batch size varies
                                   // (a single longer sample still gets a batch of 1)
  std::size_t pad_to_multiple_of = 0;
  std::size_t fixed_length = 0;    // > 0: every batch padded to this (the fixed-padding baseline)
  int bucket_batches = 0;          // > 0: sort by length within windows of this many batches, then
                                   // shuffle the batches (when shuffling)
  bool shuffle = true;
  bool drop_last = false;          // fixed batch_size only: drop the last partial batch
  std::uint64_t seed = 0;
  int rank = 0;                    // this rank takes every world_size-th sample of the permutation,
  int world_size = 1;              // all ranks the same count (the remainder is dropped); with
                                   // max_tokens all ranks also get the same number of batches
};

// The padded length of a batch whose longest sample is `longest` tokens.
std::size_t padded_length(std::size_t longest, const BatchPlanOptions& options);
// Batches of one epoch as sample indices; a function of (lengths, options, epoch) only.
std::vector<std::vector<std::uint32_t>> plan_batches(std::span<const std::uint32_t> lengths,
                                                     const BatchPlanOptions& options, std::int64_t epoch);

struct PaddingStats {
  std::int64_t batches = 0;
  std::int64_t samples = 0;
  std::int64_t real_tokens = 0;    // attention_mask ones
  std::int64_t padded_tokens = 0;  // batch × length, summed
  [[nodiscard]] double padding_fraction() const {
    return padded_tokens == 0 ? 0.0 : 1.0 - static_cast<double>(real_tokens) / static_cast<double>(padded_tokens);
  }
};
PaddingStats padding_stats(std::span<const std::uint32_t> lengths, const std::vector<std::vector<std::uint32_t>>& plan,
                           const BatchPlanOptions& options);

// What one epoch of a corpus pays in padding under each batching strategy (`hotpath data text-stats`): fixed
// padding to max_length, dynamic padding to the batch's longest, dynamic to a multiple, length bucketing, and
// bucketing under a token budget. The corpus is read truncated to max_length.
struct PaddingComparisonOptions {
  std::size_t max_length = 128;        // truncation, and the fixed-padding baseline's length
  int batch_size = 32;
  int bucket_batches = 100;            // the bucketing window, in batches
  std::int64_t max_tokens = 0;         // the token-budget row's budget; 0: batch_size × max_length
  std::size_t pad_to_multiple_of = 8;  // the "multiple of" row's
  std::uint64_t seed = 0;              // epoch 0's shuffle
};
struct PaddingComparisonRow {
  std::string batching;  // "fixed (pad to max_length)", "dynamic (pad to longest)", ...
  BatchPlanOptions options;
  PaddingStats stats;
};
struct PaddingComparison {
  std::size_t samples = 0;
  std::size_t tokens = 0;
  std::uint32_t longest = 0;  // after truncation
  std::vector<PaddingComparisonRow> rows;
};
PaddingComparison compare_padding(const TextCorpus& corpus, const PaddingComparisonOptions& options);

// One batch, [batch_size, length] row-major int32 (right padding).
struct TextBatch {
  std::int64_t batch_size = 0;
  std::int64_t length = 0;
  std::vector<std::int32_t> input_ids;
  std::vector<std::int32_t> attention_mask;
  std::vector<std::int32_t> token_type_ids;
  std::vector<std::int64_t> labels;  // [batch_size]
  std::vector<std::int64_t> samples;  // [batch_size]: each row's index in the corpus (its global identity)
  std::int64_t real_tokens = 0;
  std::int64_t padded_tokens = 0;
  std::int64_t epoch = 0;
  std::int64_t index = 0;  // batch index within the epoch
  [[nodiscard]] double padding_fraction() const {
    return padded_tokens == 0 ? 0.0 : 1.0 - static_cast<double>(real_tokens) / static_cast<double>(padded_tokens);
  }
};

TextBatch collate(const TextCorpus& corpus, std::span<const std::uint32_t> samples, const BatchPlanOptions& options,
                  std::int32_t pad_id);

struct TextLoaderOptions {
  std::vector<std::string> shards;  // resolved shard paths (see hotpath/data/shard_list.h)
  std::string tokenizer_dir{};      // needed when shards hold KEY.txt; its pad id pads
  std::size_t max_length = 512;     // truncation (KEY.ids keep their last id, e.g. [SEP]); 0: none
  unsigned workers = 2;             // tokenizer threads
  BatchPlanOptions batching{};
};

class TextLoader {
 public:
  explicit TextLoader(TextLoaderOptions options);
  // Over a corpus already in memory (tests, benchmarks).
  TextLoader(TextCorpus corpus, TextLoaderOptions options, std::int32_t pad_id = 0);
  ~TextLoader();
  TextLoader(const TextLoader&) = delete;
  TextLoader& operator=(const TextLoader&) = delete;

  // The next batch is batch `position.batch` of epoch `position.epoch`; also how an epoch starts.
  void seek(BatchPosition position);
  // The next batch of the current epoch, or nullopt at its end.
  std::optional<TextBatch> next();
  [[nodiscard]] BatchPosition position() const;
  [[nodiscard]] std::int64_t batches_in_epoch(std::int64_t epoch) const;
  [[nodiscard]] PaddingStats stats() const;  // batches returned so far
  [[nodiscard]] const TextCorpus& corpus() const;
  [[nodiscard]] std::int32_t pad_id() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Reads the samples of `shards` (KEY.ids [+ KEY.type.ids], or KEY.txt [+ KEY.pair.txt] tokenized
// with the tokenizer in `tokenizer_dir` on `workers` threads) in shard order. Throws naming the
// shard and member for a sample without text/ids, a bad .cls or a .ids size not a multiple of 4.
TextCorpus read_text_corpus(const std::vector<std::string>& shards, const std::string& tokenizer_dir,
                            std::size_t max_length, unsigned workers);

}  // namespace hotpath::text
