// hotpath/data/idx.h — read MNIST-style IDX files (images and labels), plain or gzip-compressed.
//
// Only the two layouts MNIST/Fashion-MNIST use are accepted: unsigned-byte images (magic
// 0x00000803: count × rows × cols) and unsigned-byte labels (0x00000801: count). The header is
// validated before any pixel memory is allocated, and a file with fewer or more bytes than its
// header declares is an error naming the file and the field.
//
//   IdxImages images = read_idx_images("train-images-idx3-ubyte.gz");
//   std::vector<std::uint8_t> labels = read_idx_labels("train-labels-idx1-ubyte.gz");
//   const std::uint8_t* first = images.image(0);  // rows × cols, row-major
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hotpath::data {

inline constexpr std::uint32_t kIdxImagesMagic = 0x00000803;  // ubyte, 3 dimensions
inline constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;  // ubyte, 1 dimension

struct IdxImages {
  std::uint32_t count = 0;
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  std::vector<std::uint8_t> pixels;  // count × rows × cols

  [[nodiscard]] const std::uint8_t* image(std::size_t index) const {
    return pixels.data() + index * rows * cols;
  }
};

// The file's first 4 bytes as a big-endian integer (after gunzip when gzip-compressed), or
// nullopt when it holds fewer. Throws hotpath::Error if the file cannot be opened.
std::optional<std::uint32_t> read_idx_magic(const std::string& path);

IdxImages read_idx_images(const std::string& path);
std::vector<std::uint8_t> read_idx_labels(const std::string& path);

// The labels file that belongs to an images file: "images-idx3" → "labels-idx1" in the file's
// name ("train-images-idx3-ubyte.gz" → "train-labels-idx1-ubyte.gz"); "" if the name lacks it.
std::string idx_labels_path_for(const std::string& images_path);

}  // namespace hotpath::data
