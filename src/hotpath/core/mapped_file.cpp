#include "hotpath/core/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"

namespace hotpath {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // Never blocks on a FIFO; refuses directories and devices naming what they are (core/input_file.h).
  const InputFile file = InputFile::open(path);
  size_ = static_cast<std::size_t>(file.size());
  if (size_ == 0) return;
  void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  HOTPATH_CHECK(map != MAP_FAILED, path, ": cannot mmap ", size_, " bytes: ", std::strerror(errno));
  data_ = static_cast<const std::byte*>(map);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

std::string read_file(const std::string& path) {
  return read_file(path, read_limit::kDefault, "file");
}

}  // namespace hotpath
