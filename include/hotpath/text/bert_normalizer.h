// hotpath/text/bert_normalizer.h — BERT's text normalizer and character classes, exactly as
// Hugging Face `tokenizers` applies them (BertNormalizer + BertPreTokenizer).
//
//   hotpath::text::BertNormalizer normalizer({.lowercase = true});
//   std::string s = normalizer.normalize("Héllo\tWORLD");   // "hello world"
//   bool p = hotpath::text::is_bert_punctuation(U'¿');        // true: a word of its own
//
// Unicode data comes from utf8proc; where HF's (older) Unicode tables disagree, the HF answer
// wins (see bert_normalizer.cpp), so that token ids match for every code point.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hotpath::text {

// The BertNormalizer flags, named as in tokenizer.json.
struct NormalizerOptions {
  bool clean_text = true;            // drop control characters and U+FFFD, map whitespace to ' '
  bool handle_chinese_chars = true;  // CJK ideographs become words of their own
  std::optional<bool> strip_accents = std::nullopt;  // NFD + drop Mn marks; unset: follow `lowercase`
  bool lowercase = true;

  [[nodiscard]] bool strips_accents() const { return strip_accents.value_or(lowercase); }
  bool operator==(const NormalizerOptions&) const = default;
};

// What normalization makes of one code point.
enum class CharKind : std::uint8_t {
  kRemoved,  // clean_text drops it (control, format, private use, U+0000, U+FFFD)
  kSpace,    // clean_text turned it into ' ' (a word boundary)
  kChinese,  // a CJK ideograph: `cps` is a word of its own
  kText,     // `cps` continue the text (each may still be whitespace or punctuation)
};

struct NormalizedChar {
  static constexpr int kMaxExpansion = 8;  // canonical decompositions have at most 4 code points
  CharKind kind = CharKind::kText;
  std::uint8_t count = 0;
  std::array<char32_t, kMaxExpansion> cps{};
};

class BertNormalizer {
 public:
  explicit BertNormalizer(NormalizerOptions options = {}) : options_(options) {}

  // The normalized text, like HF's `BertNormalizer.normalize_str`. `text` must be valid UTF-8.
  [[nodiscard]] std::string normalize(std::string_view text) const;
  // One code point through clean_text, handle_chinese_chars, strip_accents and lowercase.
  [[nodiscard]] NormalizedChar apply(char32_t c) const;
  [[nodiscard]] const NormalizerOptions& options() const { return options_; }

 private:
  NormalizerOptions options_;
};

// Rust's char::is_whitespace (Unicode White_Space): BertPreTokenizer splits on these.
bool is_bert_whitespace(char32_t c);
// ASCII punctuation or Unicode category P*: BertPreTokenizer isolates these.
bool is_bert_punctuation(char32_t c);
// clean_text's "control": categories Cc, Cf, Co, Cs except \t \n \r.
bool is_bert_control(char32_t c);
// The CJK ideograph blocks BERT splits into single characters.
bool is_bert_chinese(char32_t c);
// Category Mn: what strip_accents drops after NFD.
bool is_bert_nonspacing_mark(char32_t c);

// UTF-8 helpers shared by the tokenizer. Strict like Rust's str: no overlongs, surrogates or
// code points past U+10FFFF. Returns the offset of the first invalid byte, or npos.
std::size_t find_invalid_utf8(std::string_view text);
void append_utf8(std::string& out, char32_t c);

}  // namespace hotpath::text
