// hotpath/core/malloc_policy.h — keep freed tensor memory in the process instead of handing it back
// to the kernel after every step.
//
//   int main() { hotpath::apply_malloc_policy(); ... }            // first thing, before any thread
//   std::cout << hotpath::malloc_policy_name();                   // "keep" or "system (HOTPATH_MALLOC)"
//
// Why: LibTorch's CPU allocator is glibc malloc, which serves every block over its mmap threshold
// (at most 32 MB) with a fresh mmap and munmaps it on free. A training step allocates and frees the
// same activation and gradient blocks every time (BERT-base batch 32 × 128: tens of 50 MB blocks), so
// each step pays a page fault and the kernel zeroing every 4 KiB page again — 8 % of the fine-tuning
// step in a `perf` profile here. The "keep" policy does what jemalloc/tcmalloc do for PyTorch users
// who LD_PRELOAD them: large blocks come from the heap and freed memory stays in it for the next step
// (resident memory stays at the run's peak rather than falling between steps).
// HOTPATH_MALLOC=system leaves glibc's defaults (and a GLIBC_TUNABLES the user set is respected:
// the policy only changes what the environment did not set).
#pragma once

namespace hotpath {

// Applies the policy chosen by $HOTPATH_MALLOC ("keep", the default, or "system"). Process-wide and
// idempotent; call it from main() before threads start (it is not for library code).
void apply_malloc_policy();

// "keep", "system", or "system (...)" saying why keep was not applied; for run headers and reports.
const char* malloc_policy_name();

}  // namespace hotpath
