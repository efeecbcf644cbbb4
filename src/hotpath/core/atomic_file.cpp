#include "hotpath/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }
  // Closes now so the caller can check the result (close can report a delayed write error).
  int close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

void write_all(int fd, std::span<const std::byte> bytes, const std::string& path) {
  // Linux writes at most ~2 GiB per call; loop over partial writes and EINTR.
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), std::min(bytes.size(), kChunk));
    if (n < 0 && errno == EINTR) continue;
    HOTPATH_CHECK(n > 0, path, ": write failed: ", std::strerror(errno));
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::span<const std::byte>>& chunks) {
  // A path that exists and is not a regular file (/dev/stdout, /dev/null, a FIFO) is written through:
  // renaming a temp file over it would replace the device node or the pipe. A directory is an error.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    HOTPATH_CHECK(!S_ISDIR(st.st_mode), path, ": is a directory, expected a file path");
    // O_NONBLOCK: a FIFO without a reader fails at once (ENXIO) instead of blocking forever.
    Fd fd(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    HOTPATH_CHECK(fd.get() >= 0, path, ": cannot open for writing: ", std::strerror(errno));
    const int flags = ::fcntl(fd.get(), F_GETFL);
    HOTPATH_CHECK(flags >= 0 && ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) == 0, path,
                  ": cannot make it blocking: ", std::strerror(errno));
    for (const auto& chunk : chunks) write_all(fd.get(), chunk, path);
    HOTPATH_CHECK(fd.close() == 0, path, ": close failed: ", std::strerror(errno));
    return;
  }
  const std::string tmp = path + ".tmp";
  // Remove the temp file on every failure path, so a failed write leaves PATH untouched and no litter.
  struct TmpRemover {
    const std::string& file;
    bool armed = true;
    ~TmpRemover() {
      if (armed) ::unlink(file.c_str());
    }
  } remover{tmp};

  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  HOTPATH_CHECK(fd.get() >= 0, tmp, ": cannot create: ", std::strerror(errno));
  for (const auto& chunk : chunks) write_all(fd.get(), chunk, tmp);
  HOTPATH_CHECK(::fsync(fd.get()) == 0, tmp, ": fsync failed: ", std::strerror(errno));
  HOTPATH_CHECK(fd.close() == 0, tmp, ": close failed: ", std::strerror(errno));
  HOTPATH_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot rename ", tmp, " over it: ",
                std::strerror(errno));
  remover.armed = false;
  // Make the rename itself durable; failing here loses no data, so it is not an error.
  std::string dir = std::filesystem::path(path).parent_path().string();
  sync_directory(dir.empty() ? "." : dir);
}

void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, {std::as_bytes(std::span(text.data(), text.size()))});
}

void sync_directory(const std::string& dir) {
  const Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
}

}  // namespace hotpath
