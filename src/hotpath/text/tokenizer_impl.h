// The tokenizer's private state, shared by tokenizer_load.cpp (building it from files) and
// tokenizer.cpp (encoding). Immutable once built, so encode is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/text/tokenizer.h"
#include "vocab_table.h"

namespace hotpath::text {

// An added token (HF's AddedToken): found in the text before pre-tokenization and never split
// ("[CLS]" in the input is id 101, not "[", "cl", "##s", "]").
struct AddedToken {
  std::string content;  // as in the file
  std::string pattern;  // what is matched: `content`, or its normalized form when `normalized`
  std::int32_t id = 0;
  bool single_word = false;  // only where no word character (regex \w) touches either end
  bool lstrip = false;       // the match takes the whitespace before it
  bool rstrip = false;       // ... and after it
  bool normalized = false;   // matched in the normalized text (e.g. lowercased), else in the raw text
  bool special = false;
};

// The added tokens matched in one text (raw or normalized): longest first, so the first that
// matches at a position is HF's leftmost-longest match.
struct AddedTokenSet {
  std::vector<AddedToken> tokens;
  std::array<bool, 256> first_byte{};  // quick reject: can a match start with this byte
  std::string first_bytes;             // the distinct first bytes (one: memchr finds candidates)
  [[nodiscard]] bool empty() const { return tokens.empty(); }
};

// One element of the post-processor's template: a special token or sequence A/B.
struct TemplateItem {
  bool is_sequence = false;
  int sequence = 0;  // 0: A, 1: B
  std::int32_t type_id = 0;
  std::vector<std::int32_t> ids;  // the special token's ids
};

// What normalization + pre-tokenization do to an ASCII byte (precomputed per tokenizer).
enum class AsciiAction : std::uint8_t { kDrop, kSplit, kPunct, kKeep };

struct Tokenizer::Impl {
  std::string name;  // the file it came from, for messages
  BertNormalizer normalizer;
  std::array<AsciiAction, 128> ascii_action{};
  std::array<char, 128> ascii_lower{};

  internal::VocabTable initial;       // every model token
  internal::VocabTable continuation;  // tokens starting with the prefix, keyed without it
  std::vector<std::string> id_to_token;
  std::string continuing_subword_prefix = "##";
  std::size_t max_input_chars_per_word = 100;
  std::int32_t unk_id = 0;
  std::size_t vocab_size = 0;  // ids that have a token (set by finish())

  std::vector<AddedToken> added;  // every added token, in file order
  AddedTokenSet raw_added;         // the non-normalized ones
  AddedTokenSet normalized_added;  // the normalized ones, patterns normalized
  internal::VocabTable added_lookup;

  bool has_post_processor = false;
  std::vector<TemplateItem> single_template;
  std::vector<TemplateItem> pair_template;

  std::int32_t pad_id = 0;
  std::int32_t pad_type_id = 0;
  EncodeOptions file_options;
  std::size_t model_max_length = 0;

  // Fills ascii_action/ascii_lower and the added-token sets from the rest; call once built.
  void finish();
};

}  // namespace hotpath::text
