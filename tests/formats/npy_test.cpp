#include "hotpath/formats/npy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "support/test_support.h"

namespace hotpath::formats {
namespace {

using test::TempDir;

std::vector<std::byte> bytes_of(std::string_view text) {
  const auto s = test::as_bytes(text);
  return {s.begin(), s.end()};
}

// A hand-made file: magic, version 1.0, the header dict (padded to end in '\n'), then `data`.
std::vector<std::byte> npy_file(const std::string& dict, std::size_t data_bytes, int major = 1) {
  std::string header = dict + '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  if (major >= 2) out += std::string(2, '\0');
  out += header;
  out += std::string(data_bytes, '\x01');
  return bytes_of(out);
}

std::string error_of(const std::vector<std::byte>& file) {
  try {
    (void)parse_npy(file, "x.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Npy, HeaderIsAlignedAndReadsBack) {
  for (const std::vector<std::int64_t>& shape :
       std::vector<std::vector<std::int64_t>>{{}, {0}, {7}, {3, 4}, {2, 0, 5}, {1, 2, 3, 4, 5, 6}, {123456789, 2}}) {
    for (const NpyDtype dtype : {NpyDtype::kFloat32, NpyDtype::kInt64}) {
      const std::string header = npy_header(dtype, shape);
      EXPECT_EQ(header.size() % 64, 0U);
      EXPECT_EQ(header.back(), '\n');
      std::uint64_t n = 1;
      for (const auto d : shape) n *= static_cast<std::uint64_t>(d);
      if (n > 1000) continue;
      std::vector<std::byte> file = bytes_of(header);
      file.resize(file.size() + n * npy_itemsize(dtype), std::byte{7});
      const NpyArray a = parse_npy(file, "x.npy");
      EXPECT_EQ(a.dtype, dtype);
      EXPECT_EQ(a.shape, shape);
      EXPECT_EQ(a.data.size(), n * npy_itemsize(dtype));
      EXPECT_EQ(a.data.data(), file.data() + header.size());
    }
  }
  // The header `hotpath embed` has always written (python: repr of a 2-tuple, numpy's dict order).
  for (const auto& [header, dict] :
       {std::pair{npy_header(NpyDtype::kFloat32, {2, 384}),
                  std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 384), }")},
        {npy_header(NpyDtype::kInt64, {5}), "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }"},
        {npy_header(NpyDtype::kInt64, {}), "{'descr': '<i8', 'fortran_order': False, 'shape': (), }"}}) {
    EXPECT_EQ(header.substr(0, 10), std::string("\x93NUMPY\x01\x00\x76\x00", 10));
    EXPECT_EQ(header.substr(10), dict + std::string(128 - 10 - dict.size() - 1, ' ') + "\n");
  }
}

TEST(Npy, WriteIsAtomicAndChecksTheDataSize) {
  TempDir dir;
  const std::vector<std::int64_t> values{1, -2, 3, INT64_MAX, INT64_MIN, 0};
  write_npy(dir.file("a.npy"), NpyDtype::kInt64, {2, 3}, std::as_bytes(std::span(values)));
  const std::vector<std::byte> file = test::read_bytes(dir.file("a.npy"));
  const NpyArray a = parse_npy(file, "a.npy");
  ASSERT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  std::vector<std::int64_t> back(6);
  std::memcpy(back.data(), a.data.data(), a.data.size());
  EXPECT_EQ(back, values);
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.npy.tmp")));
  EXPECT_THROW(write_npy(dir.file("b.npy"), NpyDtype::kInt64, {2, 2}, std::as_bytes(std::span(values))), Error);
  EXPECT_THROW(write_npy(dir.file("b.npy"), NpyDtype::kInt64, {-1, -6}, std::as_bytes(std::span(values))), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.npy")));
}

TEST(Npy, ReadsWhatNumpyMayWrite) {
  // Double quotes, any key order, no trailing comma, version 2.0, Python 2 longs.
  const NpyArray a =
      parse_npy(npy_file("{\"shape\": (2,3), \"fortran_order\": False, \"descr\": \"<f4\"}   ", 24, 2), "x.npy");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(parse_npy(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (3L,), }", 24), "x").shape,
            (std::vector<std::int64_t>{3}));
}

TEST(Npy, RefusesBadFilesNamingWhatWasWrong) {
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  EXPECT_EQ(error_of(npy_file(ok, 8)), "");
  EXPECT_NE(error_of(bytes_of("")).find("x.npy: not a .npy file"), std::string::npos);
  EXPECT_NE(error_of(bytes_of("\x93NUMPZ\x01\x00\x00\x00")).find("not a .npy file"), std::string::npos);
  EXPECT_NE(error_of(npy_file(ok, 8, 4)).find("unsupported .npy version 4.0"), std::string::npos);
  EXPECT_NE(error_of(npy_file(ok, 7)).find("data has 7 bytes, the header's shape and dtype need 8"), std::string::npos);
  EXPECT_NE(error_of(npy_file(ok, 9)).find("data has 9 bytes"), std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8)).find("dtype '>f4'"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8)).find("Fortran"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False}", 8)).find("lacks 'shape'"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", 4))
                .find("repeats 'descr'"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8))
                .find("unexpected header key 'x'"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", 8)).find("dimension"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 8))
                .find("dimension too large"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 8))
                .find("more than 2^64"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,", 8)).find("x.npy"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", 8)).find("x.npy"),
            std::string::npos);
  // Header length past the end of the file.
  std::vector<std::byte> truncated = npy_file(ok, 8);
  truncated.resize(20);
  EXPECT_NE(error_of(truncated).find("runs past the end"), std::string::npos);
  // Missing the final '\n'.
  std::vector<std::byte> no_newline = npy_file(ok, 8);
  no_newline[10 + ok.size()] = std::byte{' '};
  EXPECT_NE(error_of(no_newline).find("must end with"), std::string::npos);
}

}  // namespace
}  // namespace hotpath::formats
