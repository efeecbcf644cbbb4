#include "hotpath/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

InputFile InputFile::open(const std::string& path) {
  HOTPATH_CHECK(path.find('\0') == std::string::npos, printable(path), ": a path with a NUL byte");
  HOTPATH_CHECK(!path.empty(), "an empty file path");
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  HOTPATH_CHECK(fd >= 0, printable(path, 400), ": cannot open: ", std::strerror(errno));
  InputFile file(path, fd, 0);
  struct stat st {};
  HOTPATH_CHECK(::fstat(fd, &st) == 0, printable(path, 400), ": cannot stat: ", std::strerror(errno));
  const std::string kind = kind_of(st.st_mode);
  HOTPATH_CHECK(kind.empty(), printable(path, 400), ": is ", kind, ", not a regular file");
  // Regular files never block; clear the flag so reads behave normally.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  file.size_ = static_cast<std::uint64_t>(st.st_size);
  return file;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

std::string InputFile::read_all(std::size_t max_bytes, std::string_view kind) const {
  HOTPATH_CHECK(size_ <= max_bytes, printable(path_, 400), ": ", kind, " of ", size_,
                " bytes exceeds the limit of ", max_bytes, " bytes");
  std::string out(static_cast<std::size_t>(size_), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd_, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    HOTPATH_CHECK(n >= 0, printable(path_, 400), ": read error: ", std::strerror(errno));
    if (n == 0) break;  // shrank while reading: keep what is there
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  // Grew while reading (or a /proc-style file reporting size 0): read on, still bounded.
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    HOTPATH_CHECK(n >= 0, printable(path_, 400), ": read error: ", std::strerror(errno));
    if (n == 0) break;
    HOTPATH_CHECK(out.size() + static_cast<std::size_t>(n) <= max_bytes, printable(path_, 400), ": ", kind,
                  " exceeds the limit of ", max_bytes, " bytes");
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string non_regular_kind(const std::string& path) {
  HOTPATH_CHECK(path.find('\0') == std::string::npos, printable(path), ": a path with a NUL byte");
  struct stat st {};
  HOTPATH_CHECK(::stat(path.c_str(), &st) == 0, printable(path, 400), ": cannot open: ", std::strerror(errno));
  return kind_of(st.st_mode);
}

void check_regular_file(const std::string& path) {
  const std::string kind = non_regular_kind(path);
  HOTPATH_CHECK(kind.empty(), printable(path, 400), ": is ", kind, ", not a regular file");
}

std::string read_file(const std::string& path, std::size_t max_bytes, std::string_view kind) {
  return InputFile::open(path).read_all(max_bytes, kind);
}

std::string read_stream(std::istream& in, std::size_t max_bytes, std::string_view name) {
  std::string out;
  char buf[65536];
  while (in) {
    in.read(buf, sizeof buf);
    const auto n = static_cast<std::size_t>(in.gcount());
    HOTPATH_CHECK(out.size() + n <= max_bytes, name, ": input exceeds the limit of ", max_bytes, " bytes");
    out.append(buf, n);
  }
  HOTPATH_CHECK(!in.bad(), name, ": read error");
  return out;
}

}  // namespace hotpath
