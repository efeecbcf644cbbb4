// hotpath/formats/safetensors.h — read and write safetensors weight files (no pickle, no torch).
//
//   hotpath::formats::SafetensorsFile file("model.safetensors");       // mmap + validated header; throws hotpath::Error
//   const hotpath::formats::TensorView& w = file.at("fc.weight");       // w.dtype, w.shape, w.data: zero-copy bytes
//   hotpath::formats::write_safetensors("out.safetensors", {{"fc.weight", hotpath::formats::Dtype::F32, {10, 4}, bytes}});
//
// Format (github.com/huggingface/safetensors): a little-endian u64 N, N bytes of UTF-8 JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
// (optionally padded with spaces), then the data buffer; offsets are relative to the buffer start.
// The reader applies the reference implementation's checks (safetensors/src/tensor.rs): header at most
// 100 MB, known dtype names, shape × dtype size == end - begin without overflow, offsets that tile the
// buffer exactly (no gaps, no overlaps, nothing left over). Stricter in two places: duplicate JSON keys
// and dimensions above INT64_MAX are rejected (the reference keeps the last duplicate silently).
// The writer produces the same bytes as python `safetensors` for the same tensors (sort by dtype, largest
// alignment first, then by name) when there is at most one metadata key; we write metadata keys sorted,
// python writes them in hash order.
//
// Tensor data is little-endian, row-major, and not necessarily aligned to the element size: copy it
// (std::memcpy) rather than reinterpret_cast-ing the span to float*.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/mapped_file.h"

namespace hotpath::formats {

// Spelled exactly as in the file format so a grep finds both. The order is the format's (increasing
// alignment); the writer sorts by it, so do not reorder.
enum class Dtype : std::uint8_t {
  BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
  I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64,
};

inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

std::string_view dtype_name(Dtype dtype);                  // "F32"
std::optional<Dtype> parse_dtype(std::string_view name);   // nullopt for unknown names
std::size_t dtype_bits(Dtype dtype);                       // 4 for F4, 6 for F6_*, 32 for F32
// Bytes per element; throws hotpath::Error for the sub-byte dtypes (F4, F6_*), use dtype_bits there.
std::size_t dtype_size(Dtype dtype);

// One tensor of a SafetensorsFile; `data` points into the file's mapping and lives as long as it does.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;  // [] for a scalar
  std::span<const std::byte> data;

  [[nodiscard]] std::int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the header; every error names the file and what is wrong.
  explicit SafetensorsFile(const std::string& path);
  // Parses bytes already in memory (the object keeps them); `name` stands in for the path in errors.
  static SafetensorsFile from_bytes(std::vector<std::byte> bytes, std::string name = "<memory>");

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  [[nodiscard]] const std::string& source() const { return source_; }
  // In file order (increasing data offset).
  [[nodiscard]] const std::vector<TensorView>& tensors() const { return tensors_; }
  [[nodiscard]] const TensorView* find(std::string_view name) const;
  // Like find(), but a missing tensor is an error naming the file and the tensor.
  [[nodiscard]] const TensorView& at(std::string_view name) const;
  // The "__metadata__" entry; empty when absent.
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void parse(std::span<const std::byte> file);

  std::string source_;
  std::optional<MappedFile> map_;  // either the mapping ...
  std::vector<std::byte> owned_;   // ... or the bytes given to from_bytes (moves keep data() stable)
  std::vector<TensorView> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;  // exactly numel × dtype bits / 8 bytes
};

// Writes atomically: PATH.tmp, fsync, rename over PATH, fsync the directory. Names must be unique,
// valid UTF-8 and not "__metadata__"; empty metadata writes no "__metadata__" entry.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same bytes in memory (for small files and tests).
std::vector<std::byte> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata = {});

}  // namespace hotpath::formats
