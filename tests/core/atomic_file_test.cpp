// write_file_atomic: regular files are replaced whole; devices and pipes are written through, never
// renamed over; a directory is refused naming it.
#include "hotpath/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "support/test_support.h"

namespace hotpath {
namespace {

TEST(WriteFileAtomic, ReplacesARegularFileAndLeavesNoTemp) {
  test::TempDir dir;
  const std::string path = dir.file("a.txt");
  write_file_atomic(path, "old");
  write_file_atomic(path, "new contents");
  EXPECT_EQ(read_file(path), "new contents");
  EXPECT_NE(::access((path + ".tmp").c_str(), F_OK), 0);
}

TEST(WriteFileAtomic, WritesThroughAFifoInsteadOfReplacingIt) {
  test::TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    const int fd = ::open(fifo.c_str(), O_RDONLY);
    char buf[64];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
  });
  // The writer opens without blocking, so wait until the reader has the FIFO open.
  for (int i = 0; i < 2000; ++i) {
    try {
      write_file_atomic(fifo, "through the pipe");
      break;
    } catch (const Error&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a regular file";
}

TEST(WriteFileAtomic, AFifoWithoutReaderFailsAtOnceAndADirectoryIsRefused) {
  test::TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(write_file_atomic(fifo, "x"), Error);  // no reader: ENXIO, no hang
  try {
    write_file_atomic(dir.path().string(), "x");
    FAIL() << "a directory was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotpath
