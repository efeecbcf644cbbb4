// remove_tree (core/remove_tree.h): a depth-first walk over directory file descriptors (openat/unlinkat), no
// std::filesystem call that LibTorch's copy could take.
#include "hotpath/core/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

struct DirCloser {
  void operator()(DIR* dir) const { closedir(dir); }
};

std::error_code last_error() { return {errno, std::generic_category()}; }

// Removes every entry inside the directory open as `fd` (which this takes over and closes).
void remove_contents(int fd, std::uintmax_t& removed, std::error_code& ec) {
  const std::unique_ptr<DIR, DirCloser> dir(fdopendir(fd));
  if (!dir) {
    ec = last_error();
    close(fd);
    return;
  }
  const int at = dirfd(dir.get());
  while (const dirent* entry = readdir(dir.get())) {
    const char* name = entry->d_name;
    if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
    if (unlinkat(at, name, 0) == 0) {  // a file, a symlink (never followed), a socket, ...
      ++removed;
      continue;
    }
    if (errno != EISDIR && errno != EPERM) {  // Linux says EISDIR for a directory, POSIX allows EPERM
      ec = last_error();
      return;
    }
    const int sub = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      ec = last_error();
      return;
    }
    remove_contents(sub, removed, ec);
    if (ec) return;
    if (unlinkat(at, name, AT_REMOVEDIR) != 0) {
      ec = last_error();
      return;
    }
    ++removed;
  }
}

}  // namespace

std::uintmax_t remove_tree(const std::filesystem::path& path, std::error_code& ec) noexcept {
  ec.clear();
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec = last_error();
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlink(path.c_str()) != 0) {
      ec = last_error();
      return 0;
    }
    return 1;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    ec = last_error();
    return 0;
  }
  std::uintmax_t removed = 0;
  remove_contents(fd, removed, ec);
  if (ec) return removed;
  if (rmdir(path.c_str()) != 0) {
    ec = last_error();
    return removed;
  }
  return removed + 1;
}

std::uintmax_t remove_tree(const std::filesystem::path& path) {
  std::error_code ec;
  const std::uintmax_t removed = remove_tree(path, ec);
  HOTPATH_CHECK(!ec, "cannot remove ", path.string(), ": ", ec.message());
  return removed;
}

}  // namespace hotpath
