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

// A special token matched in the raw text before normalization ("[CLS]" in the input is id 101,
// not "[", "cl", "##s", "]"), like HF's non-normalized added tokens.
struct AddedToken {
  std::string content;
  std::int32_t id = 0;
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

  std::vector<AddedToken> added;               // longest first
  std::array<bool, 256> added_first_byte{};    // quick reject before trying `added`
  internal::VocabTable added_lookup;

  bool has_post_processor = false;
  std::vector<TemplateItem> single_template;
  std::vector<TemplateItem> pair_template;

  std::int32_t pad_id = 0;
  std::int32_t pad_type_id = 0;
  EncodeOptions file_options;
  std::size_t model_max_length = 0;

  // Fills ascii_action/ascii_lower and added_first_byte from the rest; call once built.
  void finish();
};

}  // namespace hotpath::text
