// Encoding: special-token split -> BERT normalization + pre-tokenization (one pass over the
// bytes, an ASCII table for the common case) -> WordPiece -> truncation -> template -> padding.
// Offsets are tracked per normalized byte back to the original text, as HF does.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "hotpath/core/error.h"
#include "tokenizer_impl.h"

namespace hotpath::text {
namespace {

struct Piece {
  std::int32_t id;
  std::uint32_t begin;
  std::uint32_t end;
};

// Per-thread buffers, reused from line to line.
struct Scratch {
  std::string word;          // the current word, normalized
  std::vector<Offset> align;  // per byte of `word`: the original character it came from
  std::size_t word_chars = 0;
  std::vector<Piece> first;
  std::vector<Piece> second;
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

// Valid UTF-8 in, word pieces with byte offsets into `text` out.
void split_text(const Tokenizer::Impl& t, std::string_view text, Scratch& s, std::vector<Piece>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  s.word.clear();
  s.align.clear();
  s.word_chars = 0;
  const auto flush = [&] {
    if (s.word.empty()) return;
    wordpiece(t, s, out);
    s.word.clear();
    s.align.clear();
    s.word_chars = 0;
  };
  const auto push = [&](char32_t c, std::uint32_t begin, std::uint32_t end) {
    const std::size_t before = s.word.size();
    append_utf8(s.word, c);
    s.align.insert(s.align.end(), s.word.size() - before, Offset{begin, end});
    ++s.word_chars;
  };
  std::size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (t.added_first_byte[b]) {
      bool matched = false;
      for (const AddedToken& a : t.added) {  // longest first: leftmost-longest like HF
        if (a.content.size() <= n - i && std::memcmp(p + i, a.content.data(), a.content.size()) == 0) {
          flush();
          out.push_back({a.id, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + a.content.size())});
          i += a.content.size();
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    const auto pos = static_cast<std::uint32_t>(i);
    if (b < 0x80) {
      switch (t.ascii_action[b]) {
        case AsciiAction::kKeep:
          s.word.push_back(t.ascii_lower[b]);
          s.align.push_back({pos, pos + 1});
          ++s.word_chars;
          break;
        case AsciiAction::kSplit:
          flush();
          break;
        case AsciiAction::kPunct:
          flush();
          s.word.push_back(t.ascii_lower[b]);
          s.align.push_back({pos, pos + 1});
          s.word_chars = 1;
          flush();
          break;
        case AsciiAction::kDrop:
          break;
      }
      ++i;
      continue;
    }
    std::size_t len = 0;
    const char32_t c = decode_utf8(p + i, len);
    const auto end = static_cast<std::uint32_t>(i + len);
    i += len;
    const NormalizedChar nc = t.normalizer.apply(c);
    if (nc.kind == CharKind::kRemoved) continue;
    if (nc.kind == CharKind::kSpace || nc.kind == CharKind::kChinese) flush();
    for (int k = 0; k < nc.count; ++k) {
      const char32_t d = nc.cps[k];
      if (is_bert_whitespace(d)) {
        flush();
      } else if (is_bert_punctuation(d)) {
        flush();
        push(d, pos, end);
        flush();
      } else {
        push(d, pos, end);
      }
    }
    if (nc.kind == CharKind::kChinese) flush();
  }
  flush();
}

void truncate_to(std::vector<Piece>& v, std::size_t keep, Side side) {
  if (v.size() <= keep) return;
  if (side == Side::kRight) {
    v.resize(keep);
  } else {
    v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(keep));
  }
}

// HF's truncate_encodings; `limit` already excludes the special tokens.
void truncate(std::vector<Piece>& a, std::vector<Piece>* b, std::size_t limit, const EncodeOptions& o) {
  if (limit == 0) {
    a.clear();
    if (b) b->clear();
    return;
  }
  const std::size_t total = a.size() + (b ? b->size() : 0);
  if (total <= limit) return;
  const std::size_t to_remove = total - limit;
  if (o.truncation == TruncationStrategy::kLongestFirst) {
    if (!b) {
      truncate_to(a, limit, o.truncation_side);
      return;
    }
    std::size_t n1 = a.size();
    std::size_t n2 = b->size();
    const bool swapped = n1 > n2;
    if (swapped) std::swap(n1, n2);
    n2 = n1 > limit ? n1 : std::max(n1, limit - n1);
    if (n1 + n2 > limit) {
      n1 = limit / 2;
      n2 = n1 + limit % 2;
    }
    if (swapped) std::swap(n1, n2);
    truncate_to(a, n1, o.truncation_side);
    truncate_to(*b, n2, o.truncation_side);
    return;
  }
  const bool first = o.truncation == TruncationStrategy::kOnlyFirst;
  HOTPATH_CHECK(first || b, "truncation only_second needs a pair of texts");
  std::vector<Piece>& target = first ? a : *b;
  HOTPATH_CHECK(target.size() > to_remove, "truncation ", first ? "only_first" : "only_second", ": the ",
                first ? "first" : "second", " text has ", target.size(), " tokens, too few to drop the ", to_remove,
                " that max_length ", o.max_length, " requires");
  truncate_to(target, target.size() - to_remove, o.truncation_side);
}

std::size_t added_tokens(const std::vector<TemplateItem>& tmpl) {
  std::size_t n = 0;
  for (const TemplateItem& item : tmpl) n += item.ids.size();
  return n;
}

// Byte offsets -> code point offsets for non-ASCII text.
void to_char_offsets(std::string_view text, Scratch& s, std::vector<Offset>& offsets, std::size_t from) {
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
  for (std::size_t k = from; k < offsets.size(); ++k) {
    offsets[k] = {s.char_index[offsets[k].begin], s.char_index[offsets[k].end]};
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

Encoding encode_one(const Tokenizer::Impl& t, std::string_view first, const std::string_view* second,
                    const EncodeOptions& o, Scratch& s) {
  validate(first, second ? "the first text" : "the text");
  if (second) validate(*second, "the second text");
  s.first.clear();
  s.second.clear();
  split_text(t, first, s, s.first);
  if (second) split_text(t, *second, s, s.second);

  const std::vector<TemplateItem>& tmpl = second ? t.pair_template : t.single_template;
  const std::size_t n_added = o.add_special_tokens ? added_tokens(tmpl) : 0;
  if (o.max_length > 0) {
    HOTPATH_CHECK(o.max_length >= n_added, "max_length ", o.max_length, " leaves no room: the ", n_added,
                  " special tokens alone need more");
    truncate(s.first, second ? &s.second : nullptr, o.max_length - n_added, o);
  }

  Encoding e;
  const std::size_t size = s.first.size() + s.second.size() + n_added;
  e.ids.reserve(size);
  e.type_ids.reserve(size);
  if (o.return_offsets) e.offsets.reserve(size);
  for (const TemplateItem& item : tmpl) {
    if (!item.is_sequence) {
      if (!o.add_special_tokens) continue;
      for (const std::int32_t id : item.ids) {
        e.ids.push_back(id);
        e.type_ids.push_back(item.type_id);
        if (o.return_offsets) e.offsets.push_back({0, 0});
      }
      continue;
    }
    const std::vector<Piece>& pieces = item.sequence == 0 ? s.first : s.second;
    if (item.sequence == 1 && !second) continue;
    // Without special tokens HF keeps each sequence's own type id (0 for A, 1 for B).
    const std::int32_t type_id = o.add_special_tokens ? item.type_id : item.sequence;
    const std::size_t from = e.offsets.size();
    for (const Piece& piece : pieces) {
      e.ids.push_back(piece.id);
      e.type_ids.push_back(type_id);
      if (o.return_offsets) e.offsets.push_back({piece.begin, piece.end});
    }
    if (o.return_offsets && o.offset_unit == OffsetUnit::kChars) {
      to_char_offsets(item.sequence == 0 ? first : *second, s, e.offsets, from);
    }
  }
  e.attention_mask.assign(e.ids.size(), 1);
  return e;
}

void pad_to(Encoding& e, std::size_t length, const Tokenizer::Impl& t, const EncodeOptions& o) {
  if (e.ids.size() >= length) return;
  const std::size_t n = length - e.ids.size();
  const auto where = [&](auto& v) { return o.padding_side == Side::kRight ? v.end() : v.begin(); };
  e.ids.insert(where(e.ids), n, t.pad_id);
  e.type_ids.insert(where(e.type_ids), n, t.pad_type_id);
  e.attention_mask.insert(where(e.attention_mask), n, 0);
  if (o.return_offsets) e.offsets.insert(where(e.offsets), n, Offset{0, 0});
}

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

std::int32_t Tokenizer::unk_id() const { return impl_->unk_id; }
std::int32_t Tokenizer::pad_id() const { return impl_->pad_id; }
std::size_t Tokenizer::num_special_tokens(bool pair) const {
  return added_tokens(pair ? impl_->pair_template : impl_->single_template);
}
const NormalizerOptions& Tokenizer::normalizer() const { return impl_->normalizer.options(); }
const EncodeOptions& Tokenizer::file_options() const { return impl_->file_options; }
std::size_t Tokenizer::model_max_length() const { return impl_->model_max_length; }

void append_json(std::string& out, const Encoding& e) {
  char buffer[16];
  const auto append_ints = [&](const char* key, const std::vector<std::int32_t>& values) {
    out += key;
    out += '[';
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) out += ',';
      const auto r = std::to_chars(buffer, buffer + sizeof buffer, values[i]);
      out.append(buffer, r.ptr);
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
      out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, e.offsets[i].begin).ptr);
      out += ',';
      out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, e.offsets[i].end).ptr);
      out += ']';
    }
    out += ']';
  }
  out += '}';
}

}  // namespace hotpath::text
