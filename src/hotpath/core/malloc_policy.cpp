#include "hotpath/core/malloc_policy.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

// Written once by apply_malloc_policy (called from main before any thread), read afterwards.
const char* g_policy_name = "system";

}  // namespace

void apply_malloc_policy() {
  const char* env = std::getenv("HOTPATH_MALLOC");
  const std::string_view choice = env != nullptr ? env : "keep";
  HOTPATH_CHECK(choice == "keep" || choice == "system", "HOTPATH_MALLOC=", choice,
                ": expected keep (the default) or system");
  if (choice == "system") {
    g_policy_name = "system (HOTPATH_MALLOC)";
    return;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    g_policy_name = "system (GLIBC_TUNABLES sets malloc)";
    return;
  }
  // No mmap'd blocks: every block comes from an arena and goes back to it on free. (glibc still
  // mmaps a block a thread arena's 64 MB heap cannot hold; those behave as before.)
  const bool ok = mallopt(M_MMAP_MAX, 0) == 1 &&
                  // Never trim the heap top back to the kernel (the next step wants it again).
                  mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && mallopt(M_TOP_PAD, 64 << 20) == 1;
  g_policy_name = ok ? "keep" : "system (mallopt refused)";
}

const char* malloc_policy_name() { return g_policy_name; }

}  // namespace hotpath
