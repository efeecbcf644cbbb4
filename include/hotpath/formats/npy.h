// hotpath/formats/npy.h — NumPy .npy files: float32 / int64 arrays in C order, no torch, no python.
//
//   write_npy("emb.npy", NpyDtype::kFloat32, {rows, cols}, std::as_bytes(std::span(values)));
//   NpyArray a = parse_npy(read_bytes, "emb.npy");   // a.dtype, a.shape, a.data (a view of the bytes)
//   // python: numpy.load("emb.npy") → array of shape (rows, cols), dtype float32
//
// Format (numpy.lib.format): the magic "\x93NUMPY", a version (1.0 is written), the header length
// (u16 LE in 1.0, u32 LE in 2.0/3.0), then a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (rows, cols), } padded with spaces so that the data
// starts on a 64-byte boundary and ended by '\n', then the little-endian data. The reader accepts what
// numpy writes for these dtypes (any key order, either quote, trailing commas, versions 1-3) and refuses
// anything else naming `where` and what was wrong: other dtypes, Fortran order, a header running past the
// file, data that is not exactly shape × itemsize bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hotpath::formats {

enum class NpyDtype : std::uint8_t {
  kFloat32,  // '<f4'
  kInt64,    // '<i8'
};

std::size_t npy_itemsize(NpyDtype dtype);
const char* npy_descr(NpyDtype dtype);  // "<f4", "<i8"

// The version 1.0 header (magic through '\n') of a C-order array; its size is a multiple of 64.
std::string npy_header(NpyDtype dtype, const std::vector<std::int64_t>& shape);

// Writes PATH atomically (core/atomic_file.h): header + data. data.size() must be the product of
// shape × itemsize (little-endian values, C order).
void write_npy(const std::string& path, NpyDtype dtype, const std::vector<std::int64_t>& shape,
               std::span<const std::byte> data);

struct NpyArray {
  NpyDtype dtype = NpyDtype::kFloat32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;  // inside the parsed bytes; not necessarily aligned: memcpy it out
};

// Parses a whole .npy file held in `bytes`; throws hotpath::Error naming `where`.
NpyArray parse_npy(std::span<const std::byte> bytes, const std::string& where);

}  // namespace hotpath::formats
