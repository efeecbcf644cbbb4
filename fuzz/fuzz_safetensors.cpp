// libFuzzer target: arbitrary bytes through the safetensors reader. A bad file must end in
// hotpath::Error, never a crash, hang or unbounded allocation; a file the reader accepts must
// survive a write/read round trip unchanged (names, dtypes, shapes, bytes, metadata).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/formats/safetensors.h"

namespace {

volatile unsigned g_checksum = 0;  // keeps the byte reads from being optimised away

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* begin = reinterpret_cast<const std::byte*>(data);
  std::vector<std::byte> bytes(begin, begin + size);
  const std::byte* const file_begin = bytes.data();
  std::optional<hotpath::formats::SafetensorsFile> file;
  try {
    file.emplace(hotpath::formats::SafetensorsFile::from_bytes(std::move(bytes), "fuzz.safetensors"));
  } catch (const hotpath::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }

  // Touch every byte of every tensor (ASan flags any view outside the buffer) and rebuild the file.
  unsigned checksum = 0;
  std::vector<hotpath::formats::TensorToWrite> tensors;
  for (const auto& t : file->tensors()) {
    for (const std::byte b : t.data) checksum += std::to_integer<unsigned>(b);
    if (!t.data.empty() && (t.data.data() < file_begin || t.data.data() + t.data.size() > file_begin + size)) {
      fail("tensor data outside the input");
    }
    tensors.push_back({t.name, t.dtype, t.shape, t.data});
  }
  try {
    const auto again = hotpath::formats::SafetensorsFile::from_bytes(
        hotpath::formats::serialize_safetensors(tensors, file->metadata()), "roundtrip.safetensors");
    if (again.metadata() != file->metadata()) fail("metadata changed in the round trip");
    if (again.tensors().size() != file->tensors().size()) fail("tensor count changed in the round trip");
    for (const auto& t : file->tensors()) {
      const hotpath::formats::TensorView* u = again.find(t.name);
      if (u == nullptr) fail("tensor lost in the round trip");
      if (u->dtype != t.dtype || u->shape != t.shape) fail("dtype or shape changed in the round trip");
      if (!std::equal(t.data.begin(), t.data.end(), u->data.begin(), u->data.end())) {
        fail("bytes changed in the round trip");
      }
    }
  } catch (const hotpath::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("an accepted file could not be written and read back");
  }
  g_checksum = checksum;
  return 0;
}
