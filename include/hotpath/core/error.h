// hotpath/core/error.h — errors with context.
//
// HOTPATH_CHECK(cond, parts...) is for bad input: when `cond` is false it throws
// hotpath::Error whose message is the concatenation of `parts` (anything with
// operator<<). Name the file, member, offset, field and what was expected:
//
//   HOTPATH_CHECK(size <= kMax, shard, ":", offset, ":", member, ": size ", size,
//                 " exceeds the limit of ", kMax, " bytes");
//
// HOTPATH_ASSERT(cond) is for broken internal invariants (a bug in hotpath).
// Error::with_context() prepends "where: " when rethrowing from an outer layer.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace hotpath {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  // A copy of this error whose message starts with `where: `.
  [[nodiscard]] Error with_context(const std::string& where) const {
    std::string message(where);
    message.append(": ").append(what());
    return Error(message);
  }
};

// Bytes from a file (a name, a key, a label) as they can stand in a one-line message: control bytes
// and DEL escaped as \xNN, cut after `max_bytes` with "..." appended.
std::string printable(std::string_view bytes, std::size_t max_bytes = 100);

namespace detail {

template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

[[noreturn]] void fail_check(std::string message);
[[noreturn]] void fail_assert(const char* condition, const char* file, int line);

}  // namespace detail
}  // namespace hotpath

#define HOTPATH_CHECK(cond, ...)                                        \
  do {                                                                  \
    if (!(cond)) [[unlikely]] {                                         \
      ::hotpath::detail::fail_check(::hotpath::detail::concat(__VA_ARGS__)); \
    }                                                                   \
  } while (0)

#define HOTPATH_ASSERT(cond)                                              \
  do {                                                                    \
    if (!(cond)) [[unlikely]] {                                           \
      ::hotpath::detail::fail_assert(#cond, __FILE__, __LINE__);          \
    }                                                                     \
  } while (0)
