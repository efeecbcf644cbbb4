// Private to the image kernels: runtime choice between the reference loops and the AVX2 ones.
// The library is built for baseline x86-64; AVX2 code lives in target("avx2") functions and runs
// only after the CPU check below.
#pragma once

#include "hotpath/core/error.h"
#include "hotpath/data/kernels/resample.h"

#if defined(__x86_64__)
#define HOTPATH_HAVE_AVX2 1
#endif

namespace hotpath::data::x86 {

inline bool cpu_has_avx2() {
#ifdef HOTPATH_HAVE_AVX2
  static const bool has = __builtin_cpu_supports("avx2") != 0;
  return has;
#else
  return false;
#endif
}

inline const char* why_not_avx2() {
#ifdef HOTPATH_HAVE_AVX2
  return cpu_has_avx2() ? nullptr : "this CPU lacks AVX2";
#else
  return "not an x86-64 build";
#endif
}

inline bool use_avx2(SimdPath path) {
  switch (path) {
    case SimdPath::kAuto: return cpu_has_avx2();
    case SimdPath::kReference: return false;
    case SimdPath::kAvx2:
      HOTPATH_CHECK(cpu_has_avx2(), "the AVX2 kernel was requested but ", why_not_avx2());
      return true;
  }
  return false;
}

}  // namespace hotpath::data::x86
