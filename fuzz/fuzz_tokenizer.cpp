// libFuzzer target: the tokenizer's loaders and encoder. The first byte picks what the rest is:
//   0: a tokenizer.json   1: a vocab.txt   2: a tokenizer_config.json
//   3: text to encode (a pair when it holds a tab) with options drawn from the first byte's high bits
//      and the second byte (stride, overflowing windows, special_tokens_mask, and a tokenizer whose
//      added tokens use single_word / lstrip / rstrip / normalized).
// Bad input must end in hotpath::Error (never a crash, hang or a JSON exception escaping); an
// encoding must keep its invariants: equal lengths, offsets on character boundaries inside the text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/text/tokenizer.h"

namespace {

using hotpath::text::Encoding;
using hotpath::text::EncodeOptions;
using hotpath::text::Tokenizer;

const Tokenizer& fixed_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_vocab(
      "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n,\n!\n.\ntoken\n##izer\n##s\na\n##a\nb\n##b\n\xE4\xB8\xAD\n"
      "\xC3\xA9\n##\xC3\xA9\ncafe\n$\n-\n'\n");
  return tok;
}

// The same vocabulary as a tokenizer.json whose added tokens carry every flag HF has.
const Tokenizer& flagged_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_json(R"({
    "normalizer": {"type": "BertNormalizer", "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
    "added_tokens": [
      {"id": 3, "content": "[SEP]", "special": true, "normalized": false},
      {"id": 4, "content": "[MASK]", "special": true, "normalized": false, "lstrip": true, "rstrip": true},
      {"id": 24, "content": "Hello World", "normalized": true},
      {"id": 25, "content": "ab", "single_word": true, "normalized": true, "rstrip": true},
      {"id": 26, "content": "中", "normalized": true, "lstrip": true},
      {"id": 27, "content": "x y", "single_word": true, "normalized": false, "lstrip": true}],
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3,
      "[MASK]": 4, "hello": 5, "world": 6, ",": 7, "!": 8, "a": 9, "##a": 10, "b": 11, "##b": 12, "é": 13}}})");
  return tok;
}

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "fuzz_tokenizer: %s (input of %zu bytes)\n", what, text.size());
  std::abort();
}

bool on_boundary(std::string_view text, std::uint32_t i) {
  return i == text.size() || (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80);
}

// `pair`: encoded as a pair (the second text may be empty: it still brings its [SEP]).
void check(const Encoding& e, std::string_view first, std::string_view second, bool pair, const EncodeOptions& o,
           bool window) {
  if (e.type_ids.size() != e.ids.size() || e.attention_mask.size() != e.ids.size()) fail("lengths differ", first);
  if (o.return_offsets && e.offsets.size() != e.ids.size()) fail("offsets missing", first);
  if (o.return_special_tokens_mask && e.special_tokens_mask.size() != e.ids.size()) fail("mask missing", first);
  if (window && !e.overflowing.empty()) fail("a window has windows", first);
  if (!o.return_overflowing_tokens && !e.overflowing.empty()) fail("windows nobody asked for", first);
  for (std::size_t i = 0; i < e.offsets.size(); ++i) {
    const auto [begin, end] = e.offsets[i];
    const std::string_view text = e.type_ids[i] == 0 ? first : second;
    if (begin > end || end > text.size() || !on_boundary(text, begin) || !on_boundary(text, end)) {
      fail("offset out of range or inside a character", first);
    }
  }
  // With room for the special tokens only, HF moves whole texts into the overflow: no bound there.
  const std::size_t specials = fixed_tokenizer().num_special_tokens(pair);
  const std::size_t bound = window ? specials + 1 : specials;
  if (o.max_length >= bound && o.max_length > 0 && o.padding == hotpath::text::Padding::kNone &&
      e.ids.size() > o.max_length) {
    fail("longer than max_length", first);
  }
  for (const Encoding& w : e.overflowing) check(w, first, second, pair, o, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (mode & 3) {
      case 0: {
        const Tokenizer tok = Tokenizer::from_json(input);
        (void)tok.encode_pair("Hello, world! [SEP] caf\xC3\xA9", "\xE4\xB8\xAD token", {.max_length = 12});
        (void)tok.encode("Hello [MASK] world, HELLO  the caf\xC3\xA9 \xE4\xB8\xAD [mask] tokenizers",
                         {.max_length = 8, .stride = 2, .return_overflowing_tokens = true, .return_offsets = true,
                          .return_special_tokens_mask = true});
        break;
      }
      case 1: {
        const Tokenizer tok = Tokenizer::from_vocab(input);
        (void)tok.encode("hello world tokenizers", {.return_offsets = true});
        break;
      }
      case 2:
        (void)hotpath::text::VocabConfig::from_config_json(input);
        break;
      default: {
        EncodeOptions o;
        o.return_offsets = true;
        o.max_length = (mode >> 2) & 7 ? ((mode >> 2) & 7) * 3 : 0;
        o.truncation = static_cast<hotpath::text::TruncationStrategy>((mode >> 5) % 3);
        o.truncation_side = mode & 0x80 ? hotpath::text::Side::kLeft : hotpath::text::Side::kRight;
        o.offset_unit = mode & 0x40 ? hotpath::text::OffsetUnit::kChars : hotpath::text::OffsetUnit::kBytes;
        std::string_view text = input;
        bool flagged = false;
        if (!text.empty()) {
          const auto extra = static_cast<std::uint8_t>(text[0]);
          text.remove_prefix(1);
          o.stride = extra & 3;
          // A pair's windows are a cross product (as in HF): keep them small.
          o.return_overflowing_tokens = (extra & 4) != 0 && text.size() <= 256;
          o.return_special_tokens_mask = (extra & 8) != 0;
          flagged = (extra & 16) != 0;
        }
        const std::size_t tab = text.find('\t');
        const std::string_view first = text.substr(0, tab);
        const std::string_view second = tab == std::string_view::npos ? std::string_view() : text.substr(tab + 1);
        const Tokenizer& tok = flagged ? flagged_tokenizer() : fixed_tokenizer();
        const Encoding e = tab == std::string_view::npos ? tok.encode(first, o) : tok.encode_pair(first, second, o);
        if (o.offset_unit == hotpath::text::OffsetUnit::kBytes) {
          check(e, first, second, tab != std::string_view::npos, o, false);
        }
        const std::vector<std::string_view> lines = {first, second};
        (void)tok.encode_batch(lines, {.padding = hotpath::text::Padding::kLongest, .pad_to_multiple_of = 8, .threads = 2});
        break;
      }
    }
  } catch (const hotpath::Error&) {
    return 0;  // rejected with a message
  }
  return 0;
}
