// hotpath/core/mapped_file.h — a read-only memory map of a whole file (RAII).
//
//   hotpath::MappedFile shard("data-000000.tar");     // throws hotpath::Error
//   std::span<const std::byte> bytes = shard.bytes();  // valid while `shard` lives
//
// Empty files map to an empty span. Move-only; the mapping is released in the destructor.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace hotpath {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  [[nodiscard]] std::span<const std::byte> bytes() const { return {data_, size_}; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Reads a whole file into memory (for small files: configs, lists), at most read_limit::kDefault;
// see core/input_file.h for the per-kind limits and the regular-file check. Throws hotpath::Error.
std::string read_file(const std::string& path);

}  // namespace hotpath
