// data/cuda/nvjpeg_table.h (private to hotpath_data) — the nvJPEG functions hotpath calls, resolved with
// dlsym from the library NvjpegLibrary opened. Declarations come from the real nvjpeg.h (PyPI wheel,
// found by CMake: HOTPATH_HAVE_NVJPEG_H); without it the table is empty and NvjpegLibrary::open() refuses.
#pragma once

#include "hotpath/data/nvjpeg_library.h"

#ifdef HOTPATH_HAVE_NVJPEG_H
#include <nvjpeg.h>
#endif

namespace hotpath::data {

#ifdef HOTPATH_HAVE_NVJPEG_H
// X(name) for every function: the table's members and the dlsym loop come from this one list.
#define HOTPATH_NVJPEG_FUNCTIONS(X) \
  X(nvjpegGetProperty)              \
  X(nvjpegCreateEx)                 \
  X(nvjpegDestroy)                  \
  X(nvjpegJpegStateCreate)          \
  X(nvjpegJpegStateDestroy)         \
  X(nvjpegGetImageInfo)             \
  X(nvjpegDecode)                   \
  X(nvjpegDecodeBatchedInitialize)  \
  X(nvjpegDecodeBatched)            \
  X(nvjpegJpegStreamCreate)         \
  X(nvjpegJpegStreamDestroy)        \
  X(nvjpegJpegStreamParseHeader)    \
  X(nvjpegDecodeBatchedSupported)

struct NvjpegTable {
#define HOTPATH_NVJPEG_MEMBER(name) decltype(&::name) name = nullptr;
  HOTPATH_NVJPEG_FUNCTIONS(HOTPATH_NVJPEG_MEMBER)
#undef HOTPATH_NVJPEG_MEMBER
};
#else
struct NvjpegTable {};
#endif

}  // namespace hotpath::data
