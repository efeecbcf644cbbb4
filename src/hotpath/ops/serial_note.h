// Private to the ops: the dispatch note of a kernel whose translation unit was built without OpenMP —
// at::parallel_for is header-inline and then runs on one thread. Per translation unit on purpose
// (internal linkage): each op file is compiled with or without -fopenmp on its own.
#pragma once

namespace hotpath::ops::detail {
namespace {
#ifdef _OPENMP
constexpr const char* kSerialNote = "";
#else
constexpr const char* kSerialNote = "serial: built without OpenMP";
#endif
}  // namespace
}  // namespace hotpath::ops::detail
