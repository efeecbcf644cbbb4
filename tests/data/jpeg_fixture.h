// tests/data/jpeg_fixture.h — JPEG shards for the loader's CUDA-mode tests (fast twin tests and gpu tests):
// photo-like images of several sizes whose label is their id, so any batch row can be traced to its file.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar_writer.h"
#include "support/test_support.h"

namespace hotpath::data::fixture {

using hotpath::test::as_bytes;

// A photo-like JPEG whose content tells left from right and top from bottom (so a wrong crop or flip shows):
// smooth colour ramps plus a low-frequency wave, quality 92, 4:2:0. Size varies with the id.
inline std::vector<std::byte> textured_jpeg(int id, int& w, int& h) {
  w = 96 + 17 * (id % 5);
  h = 72 + 23 * (id % 4);
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      auto* p = &px[(static_cast<std::size_t>(y) * w + x) * 3];
      p[0] = static_cast<std::uint8_t>(30 + 190 * x / w);
      p[1] = static_cast<std::uint8_t>(30 + 190 * y / h);
      p[2] = static_cast<std::uint8_t>(128 + 90 * std::sin((x + 2 * y + 5 * id) / 9.0));
    }
  }
  return encode_jpeg(px.data(), w, h, 3, 92);
}

struct Fixture {
  std::vector<std::string> shards;
  std::map<std::int64_t, std::vector<std::byte>> jpegs;  // by label (= sample id)
};

// `n` samples, label = id, over shards of 16.
inline Fixture make_jpeg_shards(const hotpath::test::TempDir& dir, int n) {
  Fixture f;
  formats::ShardWriter writer(dir.file("j-%06d.tar"), {.max_samples = 16});
  for (int i = 0; i < n; ++i) {
    int w = 0, h = 0;
    f.jpegs[i] = textured_jpeg(i, w, h);
    const std::string label = std::to_string(i);
    writer.write({std::to_string(200000 + i), {{"jpg", f.jpegs[i]}, {"cls", as_bytes(label)}}});
  }
  writer.close();
  f.shards = writer.shards();
  return f;
}

// `n` samples (label = id, key 300000 + id, shards of 16) where id % 10 == 3 is truncated in the scan data,
// == 6 has its header cut, == 8 is not an image: n / 10 * 3 bad samples, the rest good.
struct CorruptFixture {
  std::vector<std::string> shards;
  std::map<std::int64_t, std::vector<std::byte>> files;  // by id, as written
};

inline CorruptFixture make_corrupt_jpeg_shards(const hotpath::test::TempDir& dir, int n) {
  CorruptFixture f;
  formats::ShardWriter writer(dir.file("c-%06d.tar"), {.max_samples = 16});
  for (int i = 0; i < n; ++i) {
    int w = 0, h = 0;
    std::vector<std::byte> jpeg = textured_jpeg(i, w, h);
    if (i % 10 == 3) jpeg.resize(jpeg.size() * 6 / 10);
    if (i % 10 == 6) jpeg.resize(40);
    if (i % 10 == 8) std::fill(jpeg.begin(), jpeg.end(), std::byte{0x5a});
    f.files[i] = jpeg;
    const std::string label = std::to_string(i);
    writer.write({std::to_string(300000 + i), {{"jpg", jpeg}, {"cls", as_bytes(label)}}});
  }
  writer.close();
  f.shards = writer.shards();
  return f;
}

}  // namespace hotpath::data::fixture
