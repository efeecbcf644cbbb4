#include "hotpath/core/bounded.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>
#include <thread>

#include "hotpath/core/error.h"

namespace hotpath {

std::int64_t max_threads() {
  const auto cores = static_cast<std::int64_t>(std::thread::hardware_concurrency());
  return std::max<std::int64_t>(64, 8 * cores);
}

void check_int_in(std::int64_t value, std::int64_t lo, std::int64_t hi, std::string_view what) {
  HOTPATH_CHECK(value >= lo && value <= hi, what, ": expected an integer in [", lo, ", ", hi, "], got ", value);
}

std::int64_t parse_int(std::string_view text, std::int64_t lo, std::int64_t hi, std::string_view what) {
  const bool digits = !text.empty() && std::all_of(text.begin() + (text.front() == '-' ? 1 : 0), text.end(),
                                                   [](char c) { return c >= '0' && c <= '9'; }) &&
                      text != "-";
  HOTPATH_CHECK(digits, what, ": expected an integer in [", lo, ", ", hi, "], got '", printable(text, 40), "'");
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  HOTPATH_CHECK(ec == std::errc() && end == text.data() + text.size() && value >= lo && value <= hi, what,
                ": expected an integer in [", lo, ", ", hi, "], got ", printable(text, 40));
  return value;
}

std::int64_t double_to_int(double value, std::int64_t lo, std::int64_t hi, std::string_view what) {
  // Compare as doubles first: converting an out-of-range double to int64 is undefined behaviour.
  const double r = std::nearbyint(value);
  HOTPATH_CHECK(std::isfinite(value) && r >= static_cast<double>(lo) && r <= static_cast<double>(hi), what,
                ": expected a value in [", lo, ", ", hi, "], got ", value);
  if (r >= 9223372036854775808.0) return hi;  // hi = INT64_MAX rounds up to 2^63 as a double
  return std::clamp(static_cast<std::int64_t>(r), lo, hi);
}

void check_double_in(double value, double lo, double hi, std::string_view what) {
  HOTPATH_CHECK(std::isfinite(value) && value >= lo && value <= hi, what, ": expected a finite number in [", lo,
                ", ", hi, "], got ", value);
}

}  // namespace hotpath
