#include "hotpath/text/bert_normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <span>

#include "hotpath/core/error.h"
#include "hf_unicode_exceptions.h"

namespace hotpath::text {
namespace {

bool in_ranges(std::span<const CodepointRange> ranges, char32_t c) {
  // Ranges are sorted and disjoint: the last one starting at or before c decides.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                             [](char32_t v, const CodepointRange& r) { return v < r.first; });
  return it != ranges.begin() && c <= std::prev(it)->last;
}

utf8proc_category_t category(char32_t c) {
  return static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(c)));
}

}  // namespace

bool is_bert_whitespace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_bert_punctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  }
  if (in_ranges(kHfPunctuationAdded, c)) return true;
  if (in_ranges(kHfPunctuationRemoved, c)) return false;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (in_ranges(kHfOtherAdded, c)) return true;
  if (in_ranges(kHfOtherRemoved, c)) return false;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CS:
      return true;
    default:
      return false;
  }
}

bool is_bert_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_bert_nonspacing_mark(char32_t c) {
  if (in_ranges(kHfMarkAdded, c)) return true;
  if (in_ranges(kHfMarkRemoved, c)) return false;
  return category(c) == UTF8PROC_CATEGORY_MN;
}

NormalizedChar BertNormalizer::apply(char32_t c) const {
  NormalizedChar out;
  if (options_.clean_text) {
    if (c == 0 || c == 0xFFFD || is_bert_control(c)) {
      out.kind = CharKind::kRemoved;
      return out;
    }
    if (is_bert_whitespace(c)) {
      out.kind = CharKind::kSpace;
      out.count = 1;
      out.cps[0] = U' ';
      return out;
    }
  }
  if (options_.handle_chinese_chars && is_bert_chinese(c)) out.kind = CharKind::kChinese;

  if (options_.strips_accents() && c >= 0x80 && !in_ranges(kHfNoDecomposition, c)) {
    utf8proc_int32_t buffer[NormalizedChar::kMaxExpansion];
    int boundclass = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buffer,
                                                       NormalizedChar::kMaxExpansion, UTF8PROC_DECOMPOSE, &boundclass);
    HOTPATH_ASSERT(n > 0 && n <= NormalizedChar::kMaxExpansion);
    for (utf8proc_ssize_t i = 0; i < n; ++i) {
      const auto d = static_cast<char32_t>(buffer[i]);
      if (!is_bert_nonspacing_mark(d)) out.cps[out.count++] = d;
    }
  } else {
    out.cps[out.count++] = c;
  }

  if (options_.lowercase) {
    NormalizedChar lowered = out;
    lowered.count = 0;
    for (int i = 0; i < out.count; ++i) {
      const char32_t d = out.cps[i];
      if (d < 0x80) {
        lowered.cps[lowered.count++] = (d >= 'A' && d <= 'Z') ? d + 32 : d;
      } else if (d == 0x130) {
        // The one unconditional multi-character lowercase mapping (SpecialCasing.txt): İ -> i + U+0307.
        lowered.cps[lowered.count++] = U'i';
        if (lowered.count < NormalizedChar::kMaxExpansion) lowered.cps[lowered.count++] = 0x307;
      } else {
        lowered.cps[lowered.count++] = lowercase_override(d).value_or(
            static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(d))));
      }
    }
    out = lowered;
  }
  return out;
}

std::string BertNormalizer::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  utf8proc_ssize_t i = 0;
  const auto n = static_cast<utf8proc_ssize_t>(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  while (i < n) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(bytes + i, n - i, &c);
    HOTPATH_CHECK(len > 0, "normalize: invalid UTF-8 at byte ", i);
    i += len;
    const NormalizedChar nc = apply(static_cast<char32_t>(c));
    if (nc.kind == CharKind::kChinese) out.push_back(' ');
    for (int k = 0; k < nc.count; ++k) append_utf8(out, nc.cps[k]);
    if (nc.kind == CharKind::kChinese) out.push_back(' ');
  }
  return out;
}

std::size_t find_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time: most text is ASCII.
    if (i + 8 <= n) {
      std::uint64_t word = 0;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;  // no overlongs
      if (b == 0xED) hi = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace hotpath::text
