// libFuzzer target: arbitrary bytes through the .npy reader. A bad file must end in hotpath::Error,
// never a crash, hang or read outside the input; a file the reader accepts must read back the same
// after its header is rewritten by npy_header (dtype, shape, data).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/formats/npy.h"

namespace {

volatile unsigned g_checksum = 0;  // keeps the byte reads from being optimised away

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_npy: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* begin = reinterpret_cast<const std::byte*>(data);
  const std::vector<std::byte> bytes(begin, begin + size);
  hotpath::formats::NpyArray array;
  try {
    array = hotpath::formats::parse_npy(bytes, "fuzz.npy");
  } catch (const hotpath::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  if (!array.data.empty() &&
      (array.data.data() < bytes.data() || array.data.data() + array.data.size() != bytes.data() + bytes.size())) {
    fail("data is not the tail of the input");
  }
  unsigned checksum = 0;
  for (const std::byte b : array.data) checksum += std::to_integer<unsigned>(b);
  try {
    const std::string header = hotpath::formats::npy_header(array.dtype, array.shape);
    if (header.size() % 64 != 0) fail("written header is not 64-byte aligned");
    std::vector<std::byte> again(reinterpret_cast<const std::byte*>(header.data()),
                                 reinterpret_cast<const std::byte*>(header.data()) + header.size());
    again.insert(again.end(), array.data.begin(), array.data.end());
    const hotpath::formats::NpyArray back = hotpath::formats::parse_npy(again, "roundtrip.npy");
    if (back.dtype != array.dtype || back.shape != array.shape || back.data.size() != array.data.size()) {
      fail("dtype, shape or size changed in the round trip");
    }
  } catch (const hotpath::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("an accepted file could not be written and read back");
  }
  g_checksum = checksum;
  return 0;
}
