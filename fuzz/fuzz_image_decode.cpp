// libFuzzer target for the image kernels: probe, full decode (RGB and gray) and crop-and-resize
// decode (with and without DCT scaling) of arbitrary bytes. Bad input must end in hotpath::Error;
// any other exception, a crash or a sanitizer report is a finding. A small pixel limit keeps
// memory bounded (libjpeg and libpng themselves are not instrumented).
//
//   fuzz_image_decode -max_total_time=60 CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/data/kernels/image.h"

namespace {

constexpr std::int64_t kMaxPixels = 4'000'000;
constexpr int kOut = 16;

template <typename Fn>
void expect_clean(Fn fn) {
  try {
    fn();
  } catch (const hotpath::Error&) {
    // The only acceptable way to refuse input.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hotpath::data;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const DecodeLimits limits{.max_pixels = kMaxPixels};
  (void)sniff_format(bytes);
  ImageInfo info;
  try {
    info = probe_image(bytes, limits);
  } catch (const hotpath::Error&) {
    return 0;
  }
  expect_clean([&] { (void)decode_image(bytes, 3, limits); });
  expect_clean([&] { (void)decode_image(bytes, 1, limits); });

  // A box from the middle of the image, and the whole image, into a small output.
  const Box boxes[] = {{info.width / 4.0, info.height / 3.0, info.width / 2.0, info.height / 2.0, true},
                       {0, 0, static_cast<double>(info.width), static_cast<double>(info.height), false}};
  std::vector<std::uint8_t> out(kOut * kOut * 3);
  DecodeScratch scratch;
  for (const Box& box : boxes) {
    for (const bool dct : {true, false}) {
      expect_clean([&] {
        decode_box_resized(bytes, box, kOut, kOut, {.channels = 3, .allow_dct_scaling = dct, .limits = limits},
                           out.data(), scratch);
      });
    }
  }
  return 0;
}
