#include "hotpath/core/error.h"

namespace hotpath::detail {

void fail_check(std::string message) { throw Error(message); }

void fail_assert(const char* condition, const char* file, int line) {
  throw Error(concat("internal error (a bug in hotpath): assertion `", condition,
                     "` failed at ", file, ":", line));
}

}  // namespace hotpath::detail

namespace hotpath {

std::string printable(std::string_view bytes, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes.substr(0, max_bytes)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  if (bytes.size() > max_bytes) out += "...";
  return out;
}

}  // namespace hotpath
