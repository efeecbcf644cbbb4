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
  if (p == nullptr) std::abort();
  std::memset(p, 1, kBytes);
  asm volatile("" : : "r"(p) : "memory");  // the writes must happen
  std::free(p);
}

// The policy is process-wide and one-way, so each case runs in a fresh process (gtest's threadsafe
// death-test style re-executes the binary for the statement) whatever order or filter the suite uses.
// Exit code 0: as expected; 2: skipped (glibc refused); 1: not as expected.
TEST(MallocPolicy, KeepReusesFreedLargeBlocksWithoutPageFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        unsetenv("HOTPATH_MALLOC");
        apply_malloc_policy();
        if (std::string(malloc_policy_name()) != "keep") std::exit(2);
        touch_and_free_large_block();  // the heap grows once
        const long before = minor_faults();
        for (int i = 0; i < 4; ++i) touch_and_free_large_block();
        // glibc's default mmaps and munmaps the block each time: 4 × 16,384 page faults.
        std::exit(minor_faults() - before < 2000 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(MallocPolicy, SystemLeavesGlibcDefaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("HOTPATH_MALLOC", "system", 1);
        apply_malloc_policy();
        if (std::string(malloc_policy_name()) != "system (HOTPATH_MALLOC)") std::exit(1);
        const long before = minor_faults();
        for (int i = 0; i < 2; ++i) touch_and_free_large_block();
        std::exit(minor_faults() - before > 2 * 10000 ? 0 : 1);  // each block is a fresh mapping
      },
      ::testing::ExitedWithCode(0), "");
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
