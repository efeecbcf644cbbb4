// Brace expansion ported from python's braceexpand 0.1.7 (what webdataset uses), so a shard
// pattern names the same files here and there; then glob(3) for wildcard patterns.
#include "hotpath/data/shard_list.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <memory>
#include <optional>

#include "hotpath/core/error.h"

namespace hotpath::data {
namespace {

// A pattern that expands further than this is a typo, not a shard list.
constexpr std::size_t kMaxExpansion = 1'000'000;

using Names = std::vector<std::string>;

class BraceExpander {
 public:
  explicit BraceExpander(std::string_view pattern) : whole_(pattern) {}

  Names run() {
    Names out = parse_pattern(whole_);
    for (std::string& s : out) s = strip_escapes(s);
    return out;
  }

 private:
  void check_size(std::size_t n) const {
    HOTPATH_CHECK(n <= kMaxExpansion, "shard pattern '", whole_, "' expands to more than ", kMaxExpansion, " names");
  }

  // Literal runs and {...} groups; the result is their cartesian product, first group slowest.
  Names parse_pattern(std::string_view pattern) {
    std::vector<Names> items;
    std::size_t start = 0;
    std::size_t pos = 0;
    int depth = 0;
    while (pos < pattern.size()) {
      const char c = pattern[pos];
      if (c == '\\') {
        pos += 2;
        continue;
      }
      if (c == '{') {
        if (depth == 0 && pos > start) {
          items.push_back({std::string(pattern.substr(start, pos - start))});
          start = pos;
        }
        ++depth;
      } else if (c == '}') {
        --depth;
        if (depth == 0) {
          const std::string_view expr = pattern.substr(start + 1, pos - start - 1);
          if (std::optional<Names> item = parse_expression(expr)) {
            items.push_back(std::move(*item));
          } else {  // "{x}" without a comma or range stays literal, its inside still expands
            items.push_back({"{"});
            items.push_back(parse_pattern(expr));
            items.push_back({"}"});
          }
          start = pos + 1;
        }
      }
      ++pos;
    }
    HOTPATH_CHECK(depth == 0, "shard pattern '", whole_, "': unbalanced braces");
    if (start < pattern.size()) items.push_back({std::string(pattern.substr(start))});
    return product(items);
  }

  Names product(const std::vector<Names>& items) const {
    Names out{""};
    for (const Names& item : items) {
      check_size(out.size() * item.size());
      Names next;
      next.reserve(out.size() * item.size());
      for (const std::string& head : out) {
        for (const std::string& tail : item) next.push_back(head + tail);
      }
      out = std::move(next);
    }
    return out;
  }

  std::optional<Names> parse_expression(std::string_view expr) {
    if (auto r = int_range(expr)) return r;
    if (auto r = char_range(expr)) return r;
    return parse_sequence(expr);
  }

  // Comma-separated alternatives at depth 0, each a pattern; none = not a sequence.
  std::optional<Names> parse_sequence(std::string_view seq) {
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    int depth = 0;
    for (std::size_t pos = 0; pos < seq.size(); ++pos) {
      const char c = seq[pos];
      if (c == '\\') {
        ++pos;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}') {
        --depth;
      } else if (c == ',' && depth == 0) {
        parts.push_back(seq.substr(start, pos - start));
        start = pos + 1;
      }
    }
    if (depth != 0 || parts.empty()) return std::nullopt;
    parts.push_back(seq.substr(std::min(start, seq.size())));
    Names out;
    for (std::string_view part : parts) {
      Names sub = parse_pattern(part);
      check_size(out.size() + sub.size());
      out.insert(out.end(), std::make_move_iterator(sub.begin()), std::make_move_iterator(sub.end()));
    }
    return out;
  }

  // "-?\d+" at the front of `s`; returns its length (0 = none).
  static std::size_t integer_prefix(std::string_view s) {
    std::size_t i = s.starts_with('-') ? 1 : 0;
    const std::size_t digits_begin = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i == digits_begin ? 0 : i;
  }

  // The optional "..-?STEP" suffix of a range; nullopt when the rest does not match.
  std::optional<std::int64_t> range_step(std::string_view rest) const {
    if (rest.empty()) return 1;
    if (!rest.starts_with("..")) return std::nullopt;
    rest.remove_prefix(2);
    if (rest.starts_with('-')) rest.remove_prefix(1);
    if (rest.empty() || integer_prefix(rest) != rest.size()) return std::nullopt;
    std::int64_t step = 0;
    const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), step);
    HOTPATH_CHECK(ec == std::errc() && p == rest.data() + rest.size(), "shard pattern '", whole_, "': range step '",
                  rest, "' is too large");
    return step == 0 ? 1 : step;
  }

  std::int64_t to_int(std::string_view s) const {
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    HOTPATH_CHECK(ec == std::errc() && p == s.data() + s.size(), "shard pattern '", whole_, "': range bound '", s,
                  "' is too large");
    return v;
  }

  // {START..END[..STEP]}: a leading zero on either bound pads every number to the wider bound.
  std::optional<Names> int_range(std::string_view expr) const {
    const std::size_t a = integer_prefix(expr);
    if (a == 0 || expr.substr(a, 2) != "..") return std::nullopt;
    const std::string_view first = expr.substr(0, a);
    const std::string_view after = expr.substr(a + 2);
    const std::size_t b = integer_prefix(after);
    if (b == 0) return std::nullopt;
    const std::string_view last = after.substr(0, b);
    const std::optional<std::int64_t> step = range_step(after.substr(b));
    if (!step) return std::nullopt;

    const auto padded = [](std::string_view s) {
      return s != "0" && s != "-0" && (s.starts_with('0') || s.starts_with("-0"));
    };
    const std::size_t width = padded(first) || padded(last) ? std::max(first.size(), last.size()) : 0;
    const std::int64_t from = to_int(first);
    const std::int64_t to = to_int(last);
    const std::uint64_t span = from < to ? static_cast<std::uint64_t>(to) - static_cast<std::uint64_t>(from)
                                         : static_cast<std::uint64_t>(from) - static_cast<std::uint64_t>(to);
    const std::uint64_t steps = span / static_cast<std::uint64_t>(*step);
    check_size(std::min<std::uint64_t>(steps, kMaxExpansion) + 1);
    Names out;
    out.reserve(steps + 1);
    for (std::uint64_t i = 0; i <= steps; ++i) {
      // Unsigned arithmetic wraps into the right signed value without overflow.
      const std::uint64_t delta = i * static_cast<std::uint64_t>(*step);
      const std::uint64_t raw = static_cast<std::uint64_t>(from);
      out.push_back(format_padded(static_cast<std::int64_t>(from < to ? raw + delta : raw - delta), width));
    }
    return out;
  }

  // python's "%0{width}d": the sign counts toward the width.
  static std::string format_padded(std::int64_t v, std::size_t width) {
    std::string digits = std::to_string(v);
    const bool negative = v < 0;
    if (digits.size() >= width) return digits;
    const std::size_t zeros = width - digits.size();
    return negative ? "-" + std::string(zeros, '0') + digits.substr(1) : std::string(zeros, '0') + digits;
  }

  // {a..e[..STEP]} over braceexpand's alphabet A-Z then a-z.
  std::optional<Names> char_range(std::string_view expr) const {
    static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    if (expr.size() < 4 || expr.substr(1, 2) != "..") return std::nullopt;
    const std::size_t from = kAlphabet.find(expr[0]);
    const std::size_t to = kAlphabet.find(expr[3]);
    if (from == std::string_view::npos || to == std::string_view::npos) return std::nullopt;
    const std::optional<std::int64_t> step = range_step(expr.substr(4));
    if (!step) return std::nullopt;
    const auto stride = static_cast<std::uint64_t>(*step);
    Names out;
    if (from < to) {
      for (std::uint64_t i = from; i <= to; i += stride) out.emplace_back(1, kAlphabet[i]);
    } else {
      for (std::uint64_t i = from;; i -= stride) {
        out.emplace_back(1, kAlphabet[i]);
        if (i < to + stride) break;
      }
    }
    return out;
  }

  // braceexpand drops escaping backslashes after expansion: "\x" -> "x" (not before a newline).
  static std::string strip_escapes(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] != '\n') ++i;
      out += s[i];
    }
    return out;
  }

  std::string_view whole_;
};

struct GlobFree {
  void operator()(glob_t* g) const {
    globfree(g);
    delete g;
  }
};

bool has_glob_chars(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::vector<std::string> expand_braces(std::string_view pattern) { return BraceExpander(pattern).run(); }

std::vector<std::string> resolve_shards(const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    HOTPATH_CHECK(!pattern.empty(), "empty shard pattern");
    for (const std::string& name : expand_braces(pattern)) {
      const std::string from = name == pattern ? std::string() : " (from pattern '" + pattern + "')";
      if (!has_glob_chars(name)) {
        struct stat st {};
        HOTPATH_CHECK(::stat(name.c_str(), &st) == 0, "shard '", name, "'", from, " does not exist");
        HOTPATH_CHECK(!S_ISDIR(st.st_mode), "shard '", name, "'", from, " is a directory, not a tar file");
        out.push_back(name);
        continue;
      }
      std::unique_ptr<glob_t, GlobFree> g(new glob_t{});
      const int rc = ::glob(name.c_str(), GLOB_NOSORT, nullptr, g.get());
      HOTPATH_CHECK(rc == 0 || rc == GLOB_NOMATCH, "shard pattern '", name, "'", from, ": glob failed (",
                    rc == GLOB_NOSPACE ? "out of memory" : "read error", ")");
      std::vector<std::string> matches;
      for (std::size_t i = 0; rc == 0 && i < g->gl_pathc; ++i) {
        std::string match = g->gl_pathv[i];
        if (!is_directory(match)) matches.push_back(std::move(match));
      }
      HOTPATH_CHECK(!matches.empty(), "shard pattern '", name, "'", from, " matches no files");
      // Byte order, not the locale's collation: the same list on every machine.
      std::sort(matches.begin(), matches.end());
      out.insert(out.end(), std::make_move_iterator(matches.begin()), std::make_move_iterator(matches.end()));
    }
  }
  return out;
}

}  // namespace hotpath::data
