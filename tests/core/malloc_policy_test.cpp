#include "hotpath/core/malloc_policy.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Allocates, touches every page of and frees a 64 MB block (a BERT-base activation is ~50 MB).
void touch_and_free_large_block() {
  constexpr std::size_t kBytes = 64u << 20;
  char* p = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, kBytes);
  asm volatile("" : : "r"(p) : "memory");  // the writes must happen
  std::free(p);
}

TEST(MallocPolicy, KeepReusesFreedLargeBlocksWithoutPageFaults) {
  unsetenv("HOTPATH_MALLOC");
  apply_malloc_policy();
  if (std::string(malloc_policy_name()) != "keep") GTEST_SKIP() << malloc_policy_name();
  touch_and_free_large_block();  // the heap grows once
  const long before = minor_faults();
  for (int i = 0; i < 4; ++i) touch_and_free_large_block();
  // glibc's default mmaps and munmaps the block each time: 4 × 16,384 page faults.
  EXPECT_LT(minor_faults() - before, 2000);
}

TEST(MallocPolicy, SystemLeavesGlibcDefaults) {
  setenv("HOTPATH_MALLOC", "system", 1);
  apply_malloc_policy();
  unsetenv("HOTPATH_MALLOC");
  EXPECT_STREQ(malloc_policy_name(), "system (HOTPATH_MALLOC)");
  const long before = minor_faults();
  for (int i = 0; i < 2; ++i) touch_and_free_large_block();
  EXPECT_GT(minor_faults() - before, 2 * 10000);  // each block is a fresh mapping
}

TEST(MallocPolicy, RejectsAnUnknownChoiceByName) {
  setenv("HOTPATH_MALLOC", "jemalloc", 1);
  try {
    apply_malloc_policy();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HOTPATH_MALLOC=jemalloc: expected keep"), std::string::npos) << e.what();
  }
  unsetenv("HOTPATH_MALLOC");
}

}  // namespace
}  // namespace hotpath
