// Private to the ops: per-thread float scratch that only grows, shared by the fused attention kernels. A fresh
// vector per call is an mmap of a few hundred KB whose page faults cost more than small heads' arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hotpath::ops::detail {

inline float* thread_scratch(std::int64_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<std::size_t>(floats)) scratch.resize(static_cast<std::size_t>(floats));
  return scratch.data();
}

constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

}  // namespace hotpath::ops::detail
