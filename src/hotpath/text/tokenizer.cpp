// Encoding: added-token split (raw text, then normalized text) -> BERT normalization +
// pre-tokenization (one pass over the bytes, an ASCII table for the common case) -> WordPiece ->
// truncation into windows -> template -> padding. Offsets are tracked per normalized byte back to
// the original text, as HF does.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>

#include <utf8proc.h>

#include "hotpath/core/error.h"
#include "tokenizer_impl.h"

namespace hotpath::text {
namespace {

struct Piece {
  std::int32_t id;
  std::uint32_t begin;
  std::uint32_t end;
};

// [begin, end) of a text's pieces: what truncation keeps, or an overflowing window.
struct Window {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// Per-thread buffers, reused from line to line.
struct Scratch {
  std::string word;          // the current word, normalized
  std::vector<Offset> align;  // per byte of `word`: the original character it came from
  std::size_t word_chars = 0;
  std::string norm;                // a normalized piece of text (only with normalized added tokens)
  std::vector<Offset> norm_align;  // per byte of `norm`: the original character it came from
  std::vector<Piece> first;
  std::vector<Piece> second;
  std::vector<Window> first_windows;
  std::vector<Window> second_windows;
  std::vector<std::uint32_t> char_index;
};

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Greedy longest-match-first over the current word (HF's WordPiece::tokenize).
void wordpiece(const Tokenizer::Impl& t, Scratch& s, std::vector<Piece>& out) {
  const std::string& w = s.word;
  const std::size_t n = w.size();
  const Offset whole{s.align.front().begin, s.align.back().end};
  if (s.word_chars > t.max_input_chars_per_word) {
    out.push_back({t.unk_id, whole.begin, whole.end});
    return;
  }
  const std::size_t mark = out.size();
  std::size_t start = 0;
  while (start < n) {
    const internal::VocabTable& table = start == 0 ? t.initial : t.continuation;
    // No token is longer than table.max_len() bytes: start there, on a character boundary.
    std::size_t end = std::min(n, start + table.max_len());
    while (end > start && end < n && is_continuation_byte(w[end])) --end;
    std::int32_t id = -1;
    while (end > start) {
      id = table.find(w.data() + start, end - start);
      if (id >= 0) break;
      --end;
      while (end > start && is_continuation_byte(w[end])) --end;
    }
    if (id < 0) {  // some part has no token: the whole word is [UNK]
      out.resize(mark);
      out.push_back({t.unk_id, whole.begin, whole.end});
      return;
    }
    out.push_back({id, s.align[start].begin, s.align[end - 1].end});
    start = end;
  }
}

char32_t decode_utf8(const unsigned char* p, std::size_t& len) {
  if (p[0] < 0xE0) {
    len = 2;
    return static_cast<char32_t>((p[0] & 0x1F) << 6 | (p[1] & 0x3F));
  }
  if (p[0] < 0xF0) {
    len = 3;
    return static_cast<char32_t>((p[0] & 0x0F) << 12 | (p[1] & 0x3F) << 6 | (p[2] & 0x3F));
  }
  len = 4;
  return static_cast<char32_t>((p[0] & 0x07) << 18 | (p[1] & 0x3F) << 12 | (p[2] & 0x3F) << 6 | (p[3] & 0x3F));
}

// The current word is complete: WordPiece it.
void flush_word(const Tokenizer::Impl& t, Scratch& s, std::vector<Piece>& out) {
  if (s.word.empty()) return;
  wordpiece(t, s, out);
  s.word.clear();
  s.align.clear();
  s.word_chars = 0;
}

// text[begin, end) -> words (normalization + BertPreTokenizer in one pass over the raw bytes, an
// ASCII table for the common case) -> word pieces with byte offsets into `text`.
void segment_raw(const Tokenizer::Impl& t, std::string_view text, std::size_t begin, std::size_t end, Scratch& s,
                 std::vector<Piece>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto push = [&](char32_t c, std::uint32_t from, std::uint32_t to) {
    const std::size_t before = s.word.size();
    append_utf8(s.word, c);
    s.align.insert(s.align.end(), s.word.size() - before, Offset{from, to});
    ++s.word_chars;
  };
  std::size_t i = begin;
  while (i < end) {
    const unsigned char b = p[i];
    const auto pos = static_cast<std::uint32_t>(i);
    if (b < 0x80) {
      switch (t.ascii_action[b]) {
        case AsciiAction::kKeep:
          s.word.push_back(t.ascii_lower[b]);
          s.align.push_back({pos, pos + 1});
          ++s.word_chars;
          break;
        case AsciiAction::kSplit:
          flush_word(t, s, out);
          break;
        case AsciiAction::kPunct:
          flush_word(t, s, out);
          s.word.push_back(t.ascii_lower[b]);
          s.align.push_back({pos, pos + 1});
          s.word_chars = 1;
          flush_word(t, s, out);
          break;
        case AsciiAction::kDrop:
          break;
      }
      ++i;
      continue;
    }
    std::size_t len = 0;
    const char32_t c = decode_utf8(p + i, len);
    const auto stop = static_cast<std::uint32_t>(i + len);
    i += len;
    const NormalizedChar nc = t.normalizer.apply(c);
    if (nc.kind == CharKind::kRemoved) continue;
    if (nc.kind == CharKind::kSpace || nc.kind == CharKind::kChinese) flush_word(t, s, out);
    for (int k = 0; k < nc.count; ++k) {
      const char32_t d = nc.cps[k];
      if (is_bert_whitespace(d)) {
        flush_word(t, s, out);
      } else if (is_bert_punctuation(d)) {
        flush_word(t, s, out);
        push(d, pos, stop);
        flush_word(t, s, out);
      } else {
        push(d, pos, stop);
      }
    }
    if (nc.kind == CharKind::kChinese) flush_word(t, s, out);
  }
  flush_word(t, s, out);
}

// The code point at text[i] (valid UTF-8); `len` gets its size in bytes.
char32_t char_at(std::string_view text, std::size_t i, std::size_t& len) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + i;
  if (p[0] < 0x80) {
    len = 1;
    return p[0];
  }
  return decode_utf8(p, len);
}

// The code point that ends at text[i] (i > 0); `len` gets its size in bytes.
char32_t char_before(std::string_view text, std::size_t i, std::size_t& len) {
  std::size_t start = i - 1;
  while (start > 0 && is_continuation_byte(text[start])) --start;
  return char_at(text, start, len);
}

// Letters and marks assigned after utf8proc's Unicode tables (13) that HF's regex crate (Unicode 16)
// counts as \w; found and checked by the all-code-point single_word parity test.
constexpr std::pair<char32_t, char32_t> kNewerWordChars[] = {
    {0x897, 0x897}, {0x1C89, 0x1C8A}, {0xA7CB, 0xA7CD},
    {0xA7DA, 0xA7DC}, {0x105C0, 0x105F3}, {0x10D40, 0x10D65},
    {0x10D69, 0x10D6D}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4},
    {0x10EFC, 0x10EFC}, {0x11380, 0x11389}, {0x1138B, 0x1138B},
    {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113C0},
    {0x113C2, 0x113C2}, {0x113C5, 0x113C5}, {0x113C7, 0x113CA},
    {0x113CC, 0x113D3}, {0x113E1, 0x113E2}, {0x116D0, 0x116E3},
    {0x11BC0, 0x11BE0}, {0x11BF0, 0x11BF9}, {0x11F5A, 0x11F5A},
    {0x13460, 0x143FA}, {0x16100, 0x16139}, {0x16D40, 0x16D6C},
    {0x16D70, 0x16D79}, {0x18CFF, 0x18CFF}, {0x1CCF0, 0x1CCF9},
    {0x1E5D0, 0x1E5FA}, {0x2EBF0, 0x2EE5D}};

// Rust regex's \w, which HF's single_word tests: Alphabetic, marks, decimal digits, connector
// punctuation and the two joiners.
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      break;
  }
  // Other_Alphabetic outside the marks: circled and squared Latin letters.
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189)) {
    return true;
  }
  return std::any_of(std::begin(kNewerWordChars), std::end(kNewerWordChars),
                     [c](const auto& r) { return c >= r.first && c <= r.second; });
}

struct AddedMatch {
  std::size_t start = 0;      // the token's span, with what lstrip / rstrip took
  std::size_t stop = 0;
  std::size_t match_end = 0;  // where the pattern itself ended: the search goes on from here
  std::int32_t id = 0;
};

// HF's AddedVocabulary::find_matches, one step: the next leftmost-longest match in text[from, n)
// that single_word accepts (a rejected match is skipped whole, as HF's iterator does), widened by
// lstrip (never before `floor`, the end of the previous token) and rstrip. Like HF, the search
// resumes where the previous pattern ended, so a pattern starting with whitespace can overlap
// what the previous token's rstrip took (HF then gives both tokens those characters).
bool next_added(const AddedTokenSet& set, std::string_view text, std::size_t from, std::size_t floor, AddedMatch& m) {
  const char* data = text.data();
  const std::size_t n = text.size();
  std::size_t i = from;
  while (i < n) {
    if (set.first_bytes.size() == 1) {  // BERT: every special token starts with '['
      const void* hit = std::memchr(data + i, set.first_bytes[0], n - i);
      if (hit == nullptr) return false;
      i = static_cast<std::size_t>(static_cast<const char*>(hit) - data);
    } else {
      while (i < n && !set.first_byte[static_cast<unsigned char>(data[i])]) ++i;
      if (i == n) return false;
    }
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : set.tokens) {  // longest first
      if (a.pattern.size() <= n - i && std::memcmp(data + i, a.pattern.data(), a.pattern.size()) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;  // patterns are UTF-8 starting with a lead byte: they only match on character boundaries
      continue;
    }
    std::size_t start = i;
    std::size_t stop = i + hit->pattern.size();
    std::size_t len = 0;
    if (hit->single_word && ((start > 0 && is_word_char(char_before(text, start, len))) ||
                             (stop < n && is_word_char(char_at(text, stop, len))))) {
      i = stop;
      continue;
    }
    const std::size_t match_end = stop;
    if (hit->lstrip) {
      std::size_t first_space = start;
      while (first_space > 0 && is_bert_whitespace(char_before(text, first_space, len))) first_space -= len;
      start = std::max(first_space, floor);
    }
    if (hit->rstrip) {
      while (stop < n && is_bert_whitespace(char_at(text, stop, len))) stop += len;
    }
    m = {start, stop, match_end, hit->id};
    return true;
  }
  return false;
}

// The words of s.norm[begin, end) (BertPreTokenizer on normalized text) -> word pieces.
void pretokenize_normalized(const Tokenizer::Impl& t, Scratch& s, std::size_t begin, std::size_t end,
                            std::vector<Piece>& out) {
  std::size_t i = begin;
  while (i < end) {
    std::size_t len = 0;
    const char32_t d = char_at(s.norm, i, len);
    const Offset at = s.norm_align[i];
    const auto push = [&] {
      s.word.append(s.norm, i, len);
      s.align.insert(s.align.end(), len, at);
      ++s.word_chars;
    };
    if (is_bert_whitespace(d)) {
      flush_word(t, s, out);
    } else if (is_bert_punctuation(d)) {
      flush_word(t, s, out);
      push();
      flush_word(t, s, out);
    } else {
      push();
    }
    i += len;
  }
  flush_word(t, s, out);
}

// HF's second added-token pass: text[begin, end) is normalized as a whole (s.norm, each byte
// aligned to the character it came from), normalized added tokens are matched in it, the rest
// is pre-tokenized.
void segment_normalized(const Tokenizer::Impl& t, std::string_view text, std::size_t begin, std::size_t end,
                        Scratch& s, std::vector<Piece>& out) {
  s.norm.clear();
  s.norm_align.clear();
  std::size_t i = begin;
  while (i < end) {
    std::size_t len = 0;
    const char32_t c = char_at(text, i, len);
    const Offset at{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + len)};
    i += len;
    const NormalizedChar nc = t.normalizer.apply(c);
    if (nc.kind == CharKind::kRemoved) continue;
    const std::size_t before = s.norm.size();
    if (nc.kind == CharKind::kChinese) s.norm.push_back(' ');
    for (int k = 0; k < nc.count; ++k) append_utf8(s.norm, nc.cps[k]);
    if (nc.kind == CharKind::kChinese) s.norm.push_back(' ');
    s.norm_align.insert(s.norm_align.end(), s.norm.size() - before, at);
  }
  std::size_t pos = 0;
  AddedMatch m;
  for (std::size_t from = 0; next_added(t.normalized_added, s.norm, from, pos, m); from = m.match_end) {
    if (pos < m.start) pretokenize_normalized(t, s, pos, m.start, out);
    out.push_back({m.id, s.norm_align[m.start].begin, s.norm_align[m.stop - 1].end});
    pos = m.stop;
  }
  pretokenize_normalized(t, s, pos, s.norm.size(), out);
}

void segment(const Tokenizer::Impl& t, std::string_view text, std::size_t begin, std::size_t end, Scratch& s,
             std::vector<Piece>& out) {
  if (t.normalized_added.empty()) {
    segment_raw(t, text, begin, end, s, out);
  } else {
    segment_normalized(t, text, begin, end, s, out);
  }
}

// Valid UTF-8 in, word pieces with byte offsets into `text` out. Like HF: added tokens are split
// off the raw text first, then each piece between them is normalized and pre-tokenized.
void split_text(const Tokenizer::Impl& t, std::string_view text, Scratch& s, std::vector<Piece>& out) {
  s.word.clear();
  s.align.clear();
  s.word_chars = 0;
  std::size_t pos = 0;
  AddedMatch m;
  for (std::size_t from = 0; !t.raw_added.empty() && next_added(t.raw_added, text, from, pos, m); from = m.match_end) {
    if (pos < m.start) segment(t, text, pos, m.start, s, out);
    out.push_back({m.id, static_cast<std::uint32_t>(m.start), static_cast<std::uint32_t>(m.stop)});
    pos = m.stop;
  }
  segment(t, text, pos, text.size(), s, out);
}

constexpr std::size_t kKeepAll = std::numeric_limits<std::size_t>::max();

// HF's truncate_encodings: how many pieces each sequence may keep (kKeepAll: untouched).
// `limit` already excludes the special tokens.
std::pair<std::size_t, std::size_t> truncation_limits(std::size_t n_a, std::size_t n_b, bool pair, std::size_t limit,
                                                      const EncodeOptions& o) {
  if (limit == 0) return {0, 0};  // HF truncates both to nothing, whatever the strategy
  const std::size_t total = n_a + n_b;
  if (total <= limit) return {kKeepAll, kKeepAll};
  const std::size_t to_remove = total - limit;
  if (o.truncation == TruncationStrategy::kLongestFirst) {
    if (!pair) return {limit, kKeepAll};
    std::size_t n1 = n_a;
    std::size_t n2 = n_b;
    const bool swapped = n1 > n2;
    if (swapped) std::swap(n1, n2);
    n2 = n1 > limit ? n1 : std::max(n1, limit - n1);
    if (n1 + n2 > limit) {
      n1 = limit / 2;
      n2 = n1 + limit % 2;
    }
    if (swapped) std::swap(n1, n2);
    return {n1, n2};
  }
  const bool first = o.truncation == TruncationStrategy::kOnlyFirst;
  HOTPATH_CHECK(first || pair, "truncation only_second needs a pair of texts");
  const std::size_t target = first ? n_a : n_b;
  HOTPATH_CHECK(target > to_remove, "truncation ", first ? "only_first" : "only_second", ": the ",
                first ? "first" : "second", " text has ", target, " tokens, too few to drop the ", to_remove,
                " that max_length ", o.max_length, " requires");
  return first ? std::pair{target - to_remove, kKeepAll} : std::pair{kKeepAll, target - to_remove};
}

// HF's Encoding::truncate of `len` pieces to `max_len`: the kept window first, then (when
// `overflow`) the cut-off windows, each overlapping the one before by `stride` pieces.
void truncation_windows(std::size_t len, std::size_t max_len, const EncodeOptions& o, bool overflow,
                        std::vector<Window>& out) {
  out.clear();
  if (max_len >= len) {
    out.push_back({0, len});
    return;
  }
  if (max_len == 0) {  // HF moves the whole sequence into the overflow
    out.push_back({0, 0});
    if (overflow) out.push_back({0, len});
    return;
  }
  HOTPATH_CHECK(o.stride < max_len, "stride ", o.stride, " must be below the ", max_len,
                " tokens a truncated sequence keeps (max_length ", o.max_length,
                " less the special tokens, shared between the texts of a pair)");
  const std::size_t step = max_len - o.stride;
  if (o.truncation_side == Side::kRight) {
    for (std::size_t begin = 0;; begin += step) {
      const std::size_t end = std::min(begin + max_len, len);
      out.push_back({begin, end});
      if (end == len || !overflow) break;
    }
  } else {
    for (std::size_t end = len;; end -= std::min(step, end)) {
      const std::size_t begin = end > max_len ? end - max_len : 0;
      out.push_back({begin, end});
      if (begin == 0 || !overflow) break;
    }
  }
}

std::size_t added_tokens(const std::vector<TemplateItem>& tmpl) {
  std::size_t n = 0;
  for (const TemplateItem& item : tmpl) n += item.ids.size();
  return n;
}

// Byte offsets -> code point offsets for non-ASCII text.
void to_char_offsets(std::string_view text, Scratch& s, std::vector<Piece>& pieces) {
  bool ascii = true;
  for (const char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return;
  s.char_index.assign(text.size() + 1, 0);
  std::uint32_t chars = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {  // offsets sit on character boundaries
    s.char_index[i] = chars;
    if (!is_continuation_byte(text[i])) ++chars;
  }
  s.char_index[text.size()] = chars;
  for (Piece& p : pieces) {
    p.begin = s.char_index[p.begin];
    p.end = s.char_index[p.end];
  }
}

void validate(std::string_view text, const char* which) {
  HOTPATH_CHECK(text.size() < std::numeric_limits<std::uint32_t>::max(), which, " is ", text.size(),
                " bytes; the limit is 4 GiB");
  const std::size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) [[unlikely]] {
    std::string bytes;
    for (std::size_t k = bad; k < std::min(text.size(), bad + 4); ++k) {
      static const char* kHex = "0123456789abcdef";
      const auto v = static_cast<unsigned char>(text[k]);
      bytes += detail::concat(k == bad ? "" : " ", "0x", kHex[v >> 4], kHex[v & 15]);
    }
    HOTPATH_CHECK(false, "invalid UTF-8 in ", which, " at byte ", bad, " (", bytes, ")");
  }
}

// The template around window `wa` of the first text's pieces (and `wb` of the second's).
// `overflow`: HF's post-processor leaves an overflowing window's type ids as the sequence's own.
Encoding assemble(const std::vector<TemplateItem>& tmpl, const Scratch& s, Window wa, const Window* wb,
                  const EncodeOptions& o, bool overflow) {
  Encoding e;
  const std::size_t n_added = o.add_special_tokens ? added_tokens(tmpl) : 0;
  const std::size_t size = (wa.end - wa.begin) + (wb ? wb->end - wb->begin : 0) + n_added;
  e.ids.reserve(size);
  e.type_ids.reserve(size);
  if (o.return_offsets) e.offsets.reserve(size);
  if (o.return_special_tokens_mask) e.special_tokens_mask.reserve(size);
  for (const TemplateItem& item : tmpl) {
    if (!item.is_sequence) {
      if (!o.add_special_tokens) continue;
      for (const std::int32_t id : item.ids) {
        e.ids.push_back(id);
        e.type_ids.push_back(item.type_id);
        if (o.return_offsets) e.offsets.push_back({0, 0});
        if (o.return_special_tokens_mask) e.special_tokens_mask.push_back(1);
      }
      continue;
    }
    if (item.sequence == 1 && !wb) continue;
    const std::vector<Piece>& pieces = item.sequence == 0 ? s.first : s.second;
    const Window w = item.sequence == 0 ? wa : *wb;
    // Without special tokens HF keeps each sequence's own type id (0 for A, 1 for B).
    const std::int32_t type_id = o.add_special_tokens && !overflow ? item.type_id : item.sequence;
    for (std::size_t k = w.begin; k < w.end; ++k) {
      const Piece& piece = pieces[k];
      e.ids.push_back(piece.id);
      e.type_ids.push_back(type_id);
      if (o.return_offsets) e.offsets.push_back({piece.begin, piece.end});
    }
    if (o.return_special_tokens_mask) e.special_tokens_mask.insert(e.special_tokens_mask.end(), w.end - w.begin, 0);
  }
  e.attention_mask.assign(e.ids.size(), 1);
  return e;
}

Encoding encode_one(const Tokenizer::Impl& t, std::string_view first, const std::string_view* second,
                    const EncodeOptions& o, Scratch& s) {
  validate(first, second ? "the first text" : "the text");
  if (second) validate(*second, "the second text");
  s.first.clear();
  s.second.clear();
  split_text(t, first, s, s.first);
  if (second) split_text(t, *second, s, s.second);
  if (o.return_offsets && o.offset_unit == OffsetUnit::kChars) {
    to_char_offsets(first, s, s.first);
    if (second) to_char_offsets(*second, s, s.second);
  }

  const std::vector<TemplateItem>& tmpl = second ? t.pair_template : t.single_template;
  const std::size_t n_added = o.add_special_tokens ? added_tokens(tmpl) : 0;
  std::pair<std::size_t, std::size_t> limits{kKeepAll, kKeepAll};
  if (o.max_length > 0) {
    HOTPATH_CHECK(o.max_length >= n_added, "max_length ", o.max_length, " leaves no room: the ", n_added,
                  " special tokens alone need more");
    // HF checks the stride when truncation is configured, against a single text's special tokens.
    const std::size_t n_single = added_tokens(t.single_template);
    HOTPATH_CHECK(o.max_length < n_single || o.stride <= o.max_length - n_single, "stride ", o.stride,
                  " is greater than the ", o.max_length - std::min(o.max_length, n_single),
                  " tokens max_length ", o.max_length, " leaves after ", n_single, " special tokens");
    limits = truncation_limits(s.first.size(), s.second.size(), second != nullptr, o.max_length - n_added, o);
  }
  const bool overflow = o.return_overflowing_tokens;
  std::vector<Window>& wa = s.first_windows;
  std::vector<Window>& wb = s.second_windows;
  wb.clear();
  truncation_windows(s.first.size(), limits.first, o, overflow, wa);
  if (second) truncation_windows(s.second.size(), limits.second, o, overflow, wb);

  Encoding e = assemble(tmpl, s, wa[0], second ? &wb[0] : nullptr, o, false);
  // HF's Encoding::merge_with order: each overflow of A with B and with B's overflows, then A with
  // each overflow of B.
  for (std::size_t i = 1; i < wa.size(); ++i) {
    e.overflowing.push_back(assemble(tmpl, s, wa[i], second ? &wb[0] : nullptr, o, true));
    for (std::size_t j = 1; j < wb.size(); ++j) e.overflowing.push_back(assemble(tmpl, s, wa[i], &wb[j], o, true));
  }
  for (std::size_t j = 1; j < wb.size(); ++j) e.overflowing.push_back(assemble(tmpl, s, wa[0], &wb[j], o, true));
  return e;
}

void pad_to(Encoding& e, std::size_t length, const Tokenizer::Impl& t, const EncodeOptions& o) {
  for (Encoding& window : e.overflowing) pad_to(window, length, t, o);  // HF pads every window alike
  if (e.ids.size() >= length) return;
  const std::size_t n = length - e.ids.size();
  const auto where = [&](auto& v) { return o.padding_side == Side::kRight ? v.end() : v.begin(); };
  e.ids.insert(where(e.ids), n, t.pad_id);
  e.type_ids.insert(where(e.type_ids), n, t.pad_type_id);
  e.attention_mask.insert(where(e.attention_mask), n, 0);
  if (o.return_offsets) e.offsets.insert(where(e.offsets), n, Offset{0, 0});
  if (o.return_special_tokens_mask) e.special_tokens_mask.insert(where(e.special_tokens_mask), n, 1);
}

// HF's pad_encodings: the longest is taken over the batch's encodings, not their overflows.
void pad_batch(std::vector<Encoding>& batch, const Tokenizer::Impl& t, const EncodeOptions& o) {
  if (o.padding == Padding::kNone || batch.empty()) return;
  std::size_t length = 0;
  if (o.padding == Padding::kLongest) {
    for (const Encoding& e : batch) length = std::max(length, e.ids.size());
  } else {
    length = o.pad_length > 0 ? o.pad_length : o.max_length;
    HOTPATH_CHECK(length > 0, "padding max_length needs pad_length or max_length");
  }
  if (o.pad_to_multiple_of > 0 && length % o.pad_to_multiple_of != 0) {
    length += o.pad_to_multiple_of - length % o.pad_to_multiple_of;
  }
  for (Encoding& e : batch) pad_to(e, length, t, o);
}

// Runs encode(i, scratch) for i in [0, n) on `threads` workers; rethrows the error of the
// lowest failing index, with the line number, so the outcome does not depend on scheduling.
template <typename Fn>
void parallel_lines(std::size_t n, unsigned threads, Fn&& encode) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, (n + 15) / 16));
  std::size_t failed_at = std::numeric_limits<std::size_t>::max();
  std::exception_ptr failure;
  std::mutex mutex;
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    Scratch scratch;
    constexpr std::size_t kChunk = 16;
    for (std::size_t begin = next.fetch_add(kChunk); begin < n; begin = next.fetch_add(kChunk)) {
      for (std::size_t i = begin; i < std::min(n, begin + kChunk); ++i) {
        try {
          encode(i, scratch);
        } catch (const Error& e) {
          const std::lock_guard lock(mutex);
          if (i < failed_at) {
            failed_at = i;
            failure = std::make_exception_ptr(e.with_context(detail::concat("line ", i)));
          }
          next.store(n);
          return;
        }
      }
    }
  };
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned k = 0; k < threads; ++k) pool.emplace_back(work);
    for (std::thread& th : pool) th.join();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

Encoding Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  Scratch scratch;
  std::vector<Encoding> one;
  one.push_back(encode_one(*impl_, text, nullptr, options, scratch));
  pad_batch(one, *impl_, options);
  return std::move(one.front());
}

Encoding Tokenizer::encode_pair(std::string_view first, std::string_view second, const EncodeOptions& options) const {
  Scratch scratch;
  std::vector<Encoding> one;
  one.push_back(encode_one(*impl_, first, &second, options, scratch));
  pad_batch(one, *impl_, options);
  return std::move(one.front());
}

std::vector<Encoding> Tokenizer::encode_batch(std::span<const std::string_view> texts,
                                              const EncodeOptions& options) const {
  std::vector<Encoding> out(texts.size());
  parallel_lines(texts.size(), options.threads, [&](std::size_t i, Scratch& scratch) {
    out[i] = encode_one(*impl_, texts[i], nullptr, options, scratch);
  });
  pad_batch(out, *impl_, options);
  return out;
}

std::vector<Encoding> Tokenizer::encode_pair_batch(std::span<const std::string_view> firsts,
                                                   std::span<const std::string_view> seconds,
                                                   const EncodeOptions& options) const {
  HOTPATH_CHECK(firsts.size() == seconds.size(), "encode_pair_batch: ", firsts.size(), " first texts but ",
                seconds.size(), " second texts");
  std::vector<Encoding> out(firsts.size());
  parallel_lines(firsts.size(), options.threads, [&](std::size_t i, Scratch& scratch) {
    out[i] = encode_one(*impl_, firsts[i], &seconds[i], options, scratch);
  });
  pad_batch(out, *impl_, options);
  return out;
}

std::vector<std::string> Tokenizer::tokenize(std::string_view text) const {
  validate(text, "the text");
  Scratch scratch;
  std::vector<Piece> pieces;
  split_text(*impl_, text, scratch, pieces);
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const Piece& p : pieces) out.emplace_back(id_to_token(p.id));
  return out;
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  std::int32_t id = impl_->added_lookup.find(token.data(), token.size());
  if (id < 0) id = impl_->initial.find(token.data(), token.size());
  if (id < 0) return std::nullopt;
  return id;
}

std::string_view Tokenizer::id_to_token(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_to_token.size()) return {};
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

std::size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

const char* truncation_strategy_name(TruncationStrategy strategy) {
  switch (strategy) {
    case TruncationStrategy::kLongestFirst: return "longest_first";
    case TruncationStrategy::kOnlyFirst: return "only_first";
    case TruncationStrategy::kOnlySecond: return "only_second";
  }
  return "longest_first";
}

TruncationStrategy parse_truncation_strategy(std::string_view name, std::string_view where) {
  for (const TruncationStrategy s :
       {TruncationStrategy::kLongestFirst, TruncationStrategy::kOnlyFirst, TruncationStrategy::kOnlySecond}) {
    if (name == truncation_strategy_name(s)) return s;
  }
  throw Error(std::string(where) + ": truncation '" + std::string(name) +
              "' is not one of longest_first, only_first, only_second");
}

std::int32_t Tokenizer::unk_id() const { return impl_->unk_id; }
std::int32_t Tokenizer::pad_id() const { return impl_->pad_id; }
std::size_t Tokenizer::num_special_tokens(bool pair) const {
  return added_tokens(pair ? impl_->pair_template : impl_->single_template);
}
const NormalizerOptions& Tokenizer::normalizer() const { return impl_->normalizer.options(); }
const EncodeOptions& Tokenizer::file_options() const { return impl_->file_options; }
std::size_t Tokenizer::model_max_length() const { return impl_->model_max_length; }

FlatEncodings flatten_overflowing(std::vector<Encoding> batch) {
  FlatEncodings flat;
  std::size_t rows = 0;
  for (const Encoding& e : batch) rows += 1 + e.overflowing.size();
  flat.encodings.reserve(rows);
  flat.overflow_to_sample_mapping.reserve(rows);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    std::vector<Encoding> windows = std::move(batch[i].overflowing);
    batch[i].overflowing.clear();
    flat.encodings.push_back(std::move(batch[i]));
    flat.overflow_to_sample_mapping.push_back(i);
    for (Encoding& w : windows) {
      flat.encodings.push_back(std::move(w));
      flat.overflow_to_sample_mapping.push_back(i);
    }
  }
  return flat;
}

void append_json(std::string& out, const Encoding& e, const JsonFields& fields) {
  char buffer[24];
  const auto append_number = [&](auto v) { out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, v).ptr); };
  const auto append_ints = [&](const char* key, const std::vector<std::int32_t>& values) {
    out += key;
    out += '[';
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) out += ',';
      append_number(values[i]);
    }
    out += ']';
  };
  append_ints("{\"input_ids\":", e.ids);
  append_ints(",\"token_type_ids\":", e.type_ids);
  append_ints(",\"attention_mask\":", e.attention_mask);
  if (!e.offsets.empty()) {
    out += ",\"offset_mapping\":[";
    for (std::size_t i = 0; i < e.offsets.size(); ++i) {
      out += i ? ",[" : "[";
      append_number(e.offsets[i].begin);
      out += ',';
      append_number(e.offsets[i].end);
      out += ']';
    }
    out += ']';
  }
  if (!e.special_tokens_mask.empty()) append_ints(",\"special_tokens_mask\":", e.special_tokens_mask);
  if (fields.length) {
    out += ",\"length\":";
    append_number(e.ids.size());
  }
  if (fields.overflow_to_sample_mapping) {
    out += ",\"overflow_to_sample_mapping\":";
    append_number(*fields.overflow_to_sample_mapping);
  }
  out += '}';
}

}  // namespace hotpath::text
