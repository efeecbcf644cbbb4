#include "hotpath/core/error.h"

#include <gtest/gtest.h>

namespace hotpath {
namespace {

TEST(HotpathCheck, PassingConditionDoesNotThrow) { EXPECT_NO_THROW(HOTPATH_CHECK(1 + 1 == 2, "never")); }

TEST(HotpathCheck, FailingConditionThrowsConcatenatedMessage) {
  try {
    HOTPATH_CHECK(false, "shard.tar", ":", 512, ":", "a.jpg", ": expected ", 3, " channels");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "shard.tar:512:a.jpg: expected 3 channels");
  }
}

TEST(HotpathCheck, WithContextPrependsWhere) {
  const Error e("bad label");
  EXPECT_STREQ(e.with_context("train.tar:1024:x.cls").what(), "train.tar:1024:x.cls: bad label");
}

TEST(HotpathAssert, NamesConditionAndMarksBug) {
  try {
    HOTPATH_ASSERT(2 < 1);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 < 1"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bug in hotpath"), std::string::npos);
  }
}

}  // namespace
}  // namespace hotpath
