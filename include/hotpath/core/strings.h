// hotpath/core/strings.h — the small ASCII text helpers the parsers share (pack lists, shard inspection, text
// sources), one definition each.
//
//   trim("  a b \r\n") == "a b";   ascii_lower("Fashion.PNG") == "fashion.png"
#pragma once

#include <string>
#include <string_view>

namespace hotpath {

// `s` without leading and trailing spaces, tabs, CRs and LFs (a view into `s`).
inline std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// `s` with A-Z lowered; every other byte (UTF-8 included) unchanged, whatever the locale.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

}  // namespace hotpath
