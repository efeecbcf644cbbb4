#include "hotpath/core/error.h"

namespace hotpath::detail {

void fail_check(std::string message) { throw Error(message); }

void fail_assert(const char* condition, const char* file, int line) {
  throw Error(concat("internal error (a bug in hotpath): assertion `", condition,
                     "` failed at ", file, ":", line));
}

}  // namespace hotpath::detail
