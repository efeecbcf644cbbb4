// remove_tree (core/remove_tree.h): what std::filesystem::remove_all does, in POSIX calls — nested folders,
// files, symlinks removed and not followed, a missing path, errors that name the path.
#include "hotpath/core/remove_tree.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "hotpath/core/error.h"
#include "support/test_support.h"

namespace hotpath {
namespace {

namespace fs = std::filesystem;

void touch(const fs::path& p) { std::ofstream(p) << "x"; }

// a/ {f1, b/ {f2, c/ {f3}}, d/ (empty), link -> outside (a directory with a file of its own)}
fs::path make_tree(const fs::path& root, const fs::path& outside) {
  const fs::path a = root / "a";
  fs::create_directories(a / "b" / "c");
  fs::create_directories(a / "d");
  touch(a / "f1");
  touch(a / "b" / "f2");
  touch(a / "b" / "c" / "f3");
  fs::create_directories(outside);
  touch(outside / "kept");
  fs::create_directory_symlink(outside, a / "link");
  return a;
}

TEST(RemoveTree, RemovesNestedFoldersFilesAndLinksButNotWhatLinksPointTo) {
  const test::TempDir dir;
  const fs::path a = make_tree(dir.path(), dir.path() / "outside");
  // a, b, c, d, f1, f2, f3, link: 8 entries, as std::filesystem::remove_all counts them.
  EXPECT_EQ(remove_tree(a), 8u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(a)));
  EXPECT_TRUE(fs::exists(dir.path() / "outside" / "kept")) << "a symlink is removed, never followed";
}

TEST(RemoveTree, CountsWhatStdFilesystemRemoveAllCounts) {
  const test::TempDir dir;
  const fs::path ours = make_tree(dir.path() / "ours", dir.path() / "o1");
  const fs::path theirs = make_tree(dir.path() / "theirs", dir.path() / "o2");
  EXPECT_EQ(remove_tree(ours), fs::remove_all(theirs));
}

TEST(RemoveTree, AFileASymlinkAndAMissingPath) {
  const test::TempDir dir;
  touch(dir.path() / "file");
  EXPECT_EQ(remove_tree(dir.path() / "file"), 1u);
  fs::create_symlink(dir.path() / "nowhere", dir.path() / "dangling");
  EXPECT_EQ(remove_tree(dir.path() / "dangling"), 1u);
  std::error_code ec;
  EXPECT_EQ(remove_tree(dir.path() / "missing", ec), 0u);
  EXPECT_FALSE(ec) << "a missing path is no error, as for remove_all";
}

TEST(RemoveTree, AFailureNamesThePathAndTheReason) {
  const test::TempDir dir;
  touch(dir.path() / "file");
  const fs::path bad = dir.path() / "file" / "below";  // a component that is not a directory
  std::error_code ec;
  EXPECT_EQ(remove_tree(bad, ec), 0u);
  EXPECT_EQ(ec, std::errc::not_a_directory);
  try {
    remove_tree(bad);
    FAIL() << "no error for " << bad;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Not a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotpath
