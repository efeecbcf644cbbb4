// hotpath/text/tokenizer.h — BERT WordPiece tokenizer, token-for-token compatible with Hugging Face
// `tokenizers` (BertWordPieceTokenizer, or a BERT tokenizer.json such as all-MiniLM-L6-v2's).
//
//   auto tok = hotpath::text::Tokenizer::from_directory("all-MiniLM-L6-v2");  // tokenizer.json or vocab.txt
//   hotpath::text::Encoding e = tok.encode("Hello, world!");            // [CLS] hello , world ! [SEP]
//   auto batch = tok.encode_batch(lines, {.max_length = 128, .padding = hotpath::text::Padding::kLongest, .threads = 4});
//   // Long documents: windows of 384 tokens overlapping by 128, one row each (HF return_overflowing_tokens).
//   auto rows = hotpath::text::flatten_overflowing(tok.encode_pair_batch(questions, contexts,
//       {.max_length = 384, .truncation = hotpath::text::TruncationStrategy::kOnlySecond, .stride = 128,
//        .return_overflowing_tokens = true}));
//
// Added tokens (tokenizer.json "added_tokens", the special tokens of a vocab.txt) are found in the
// text before anything else and never split, with HF's single_word / lstrip / rstrip / normalized.
//
// Input must be valid UTF-8: anything else is rejected with the byte offset (and the line in a
// batch) rather than replaced, since a python str — what HF sees — cannot hold invalid bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/text/bert_normalizer.h"

namespace hotpath::text {

enum class TruncationStrategy { kLongestFirst, kOnlyFirst, kOnlySecond };
// HF's names ("longest_first", "only_first", "only_second"); parse throws naming `where` and the three names.
const char* truncation_strategy_name(TruncationStrategy strategy);
TruncationStrategy parse_truncation_strategy(std::string_view name, std::string_view where);
enum class Side { kRight, kLeft };
enum class Padding { kNone, kLongest, kMaxLength };
enum class OffsetUnit { kBytes, kChars };  // kChars: code points, what HF's python API returns

struct EncodeOptions {
  bool add_special_tokens = true;
  // Truncate to at most this many tokens, special tokens included; 0: no truncation. With a
  // pair, `truncation` says which sequence loses tokens (HF's rules, errors included).
  std::size_t max_length = 0;
  TruncationStrategy truncation = TruncationStrategy::kLongestFirst;
  Side truncation_side = Side::kRight;
  // With max_length: consecutive windows overlap by this many tokens (HF `stride`; must be below
  // each truncated sequence's length limit, or it is an error, as in HF).
  std::size_t stride = 0;
  // Keep what truncation cuts off, as further windows in Encoding::overflowing (HF's order).
  bool return_overflowing_tokens = false;
  // kLongest: to the longest encoding of the batch; kMaxLength: to pad_length (0: max_length).
  Padding padding = Padding::kNone;
  std::size_t pad_length = 0;
  std::size_t pad_to_multiple_of = 0;
  Side padding_side = Side::kRight;
  bool return_offsets = false;
  OffsetUnit offset_unit = OffsetUnit::kBytes;
  bool return_special_tokens_mask = false;
  unsigned threads = 1;  // batch encode workers; 0: one per hardware thread
};

// [begin, end) into the sequence a token came from; {0, 0} for special and padding tokens.
struct Offset {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
  bool operator==(const Offset&) const = default;
};

struct Encoding {
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> type_ids;
  std::vector<std::int32_t> attention_mask;
  std::vector<Offset> offsets;  // empty unless EncodeOptions::return_offsets
  // Empty unless EncodeOptions::return_special_tokens_mask: 1 for the tokens the post-processor
  // added ([CLS], [SEP]) and padding, 0 for the text's tokens (an added token in the text too), as HF.
  std::vector<std::int32_t> special_tokens_mask;
  // With return_overflowing_tokens: the windows after this one (padded like it), in HF's order.
  std::vector<Encoding> overflowing;
  [[nodiscard]] std::size_t size() const { return ids.size(); }
};

// transformers' rows with return_overflowing_tokens: each encoding followed by its overflowing
// windows, all flat; overflow_to_sample_mapping[row] is the index of the input it came from.
struct FlatEncodings {
  std::vector<Encoding> encodings;
  std::vector<std::size_t> overflow_to_sample_mapping;
};
FlatEncodings flatten_overflowing(std::vector<Encoding> batch);

// Settings for a tokenizer built from vocab.txt (BertWordPieceTokenizer's arguments, or what
// tokenizer_config.json says: do_lower_case, strip_accents, tokenize_chinese_chars, *_token).
struct VocabConfig {
  NormalizerOptions normalizer;
  std::string unk_token = "[UNK]";
  std::string sep_token = "[SEP]";
  std::string cls_token = "[CLS]";
  std::string pad_token = "[PAD]";
  std::string mask_token = "[MASK]";
  std::string continuing_subword_prefix = "##";
  std::size_t max_input_chars_per_word = 100;
  std::size_t model_max_length = 0;  // informational (tokenizer_config.json); 0: unknown

  // Reads tokenizer_config.json over the defaults; `name` goes into error messages.
  static VocabConfig from_config_json(std::string_view json_text, std::string_view name = "tokenizer_config.json");
};

class Tokenizer {
 public:
  // tokenizer.json if the directory has one, else vocab.txt (+ tokenizer_config.json if present).
  static Tokenizer from_directory(const std::filesystem::path& dir);
  static Tokenizer from_json_file(const std::filesystem::path& path);
  static Tokenizer from_json(std::string_view json_text, std::string_view name = "tokenizer.json");
  // vocab.txt: one token per line, the line number is the id. `config`: tokenizer_config.json or empty.
  static Tokenizer from_vocab_file(const std::filesystem::path& vocab, const std::filesystem::path& config = {});
  static Tokenizer from_vocab(std::string_view vocab_text, const VocabConfig& config = {},
                              std::string_view name = "vocab.txt");

  [[nodiscard]] Encoding encode(std::string_view text, const EncodeOptions& options = {}) const;
  [[nodiscard]] Encoding encode_pair(std::string_view first, std::string_view second,
                                     const EncodeOptions& options = {}) const;
  // Deterministic whatever `options.threads`; an error names the (0-based) line.
  [[nodiscard]] std::vector<Encoding> encode_batch(std::span<const std::string_view> texts,
                                                   const EncodeOptions& options = {}) const;
  [[nodiscard]] std::vector<Encoding> encode_pair_batch(std::span<const std::string_view> firsts,
                                                        std::span<const std::string_view> seconds,
                                                        const EncodeOptions& options = {}) const;
  // The word pieces of `text` (no special tokens added), e.g. {"hello", ",", "token", "##izer"}.
  [[nodiscard]] std::vector<std::string> tokenize(std::string_view text) const;

  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const;
  [[nodiscard]] std::string_view id_to_token(std::int32_t id) const;  // "" when no token has this id
  [[nodiscard]] std::size_t vocab_size() const;                       // model vocabulary + added tokens
  [[nodiscard]] std::int32_t unk_id() const;
  [[nodiscard]] std::int32_t pad_id() const;  // padding's id (tokenizer.json "padding", else [PAD], else 0)
  // Special tokens the post-processor adds: 2 for a single sequence, 3 for a pair (BERT).
  [[nodiscard]] std::size_t num_special_tokens(bool pair) const;
  [[nodiscard]] const NormalizerOptions& normalizer() const;
  // Truncation and padding saved in tokenizer.json (HF applies them by default); else defaults.
  [[nodiscard]] const EncodeOptions& file_options() const;
  [[nodiscard]] std::size_t model_max_length() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  static std::shared_ptr<Impl> json_impl(std::string_view json_text, std::string_view name);
  std::shared_ptr<const Impl> impl_;
};

// Optional fields of append_json, named as transformers names them.
struct JsonFields {
  bool length = false;                                     // "length": ids.size(), padding included
  std::optional<std::size_t> overflow_to_sample_mapping;  // the input this row came from
};

// One encoding as a JSON object on one line (no newline): {"input_ids":[..],"token_type_ids":[..],
// "attention_mask":[..]} plus "offset_mapping":[[b,e],..] and "special_tokens_mask":[..] when it has
// them, and `fields`. Appends to `out`; ignores `overflowing` (flatten_overflowing makes them rows).
void append_json(std::string& out, const Encoding& encoding, const JsonFields& fields = {});

}  // namespace hotpath::text
