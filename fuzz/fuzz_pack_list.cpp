// libFuzzer target: arbitrary bytes as the CSV or JSONL image list of `hotpath data pack` (the first
// byte picks the format). Bad input must end in hotpath::Error or skipped rows, never a crash, a hang,
// an allocation sized by a label (16,777,215 once built 16 M class names) or an escaping exception.
// The seeds name a real 1x1 PNG so that rows are also packed.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/data/pack.h"

namespace {

namespace fs = std::filesystem;

// An 8-bit gray 1x1 PNG (PIL's encoding).
constexpr unsigned char kPng[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x7e, 0x9b, 0x55, 0x00,
    0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x07, 0x00, 0x00, 0x09, 0x00, 0x08,
    0x20, 0x23, 0xc3, 0x8c, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

const fs::path& work_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("fuzz_pack_list." + std::to_string(::getpid()));
    fs::create_directories(d);
    std::FILE* f = std::fopen((d / "a.png").c_str(), "wb");
    std::fwrite(kPng, 1, sizeof kPng, f);
    std::fclose(f);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const fs::path& dir = work_dir();
  const fs::path list = dir / ((data[0] & 1) ? "list.jsonl" : "list.csv");
  {
    std::FILE* f = std::fopen(list.c_str(), "wb");
    std::fwrite(data + 1, 1, size - 1, f);
    std::fclose(f);
  }
  hotpath::data::PackOptions options;
  options.output_prefix = (dir / "out" / "p").string();
  options.limit = 4;
  std::error_code ec;
  fs::create_directories(dir / "out", ec);
  try {
    (void)hotpath::data::pack_dataset(list.string(), options);
  } catch (const hotpath::Error&) {
    // rejected with a message
  }
  fs::remove(list, ec);
  return 0;
}
