#include "hotpath/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

struct FdCloser {
  void operator()(const int* fd) const {
    ::close(*fd);
    delete fd;
  }
};
using UniqueFd = std::unique_ptr<int, FdCloser>;

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HOTPATH_CHECK(raw >= 0, path, ": cannot open: ", std::strerror(errno));
  const UniqueFd fd(new int(raw));
  struct stat st {};
  HOTPATH_CHECK(::fstat(raw, &st) == 0, path, ": cannot stat: ", std::strerror(errno));
  HOTPATH_CHECK(S_ISREG(st.st_mode), path, ": not a regular file");
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ == 0) return;
  void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, raw, 0);
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
  std::ifstream in(path, std::ios::binary);
  HOTPATH_CHECK(in.good(), path, ": cannot open for reading");
  std::ostringstream buf;
  buf << in.rdbuf();
  HOTPATH_CHECK(!in.bad(), path, ": read error");
  return buf.str();
}

}  // namespace hotpath
