// Helpers shared by hotpath tests: temp dirs, running the venv python, small byte utilities.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::test {

// A fresh directory under $TMPDIR, removed (recursively) when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The venv python: $HOTPATH_PYTHON, else the one CMake was configured with.
std::string python();
// $HOTPATH_SOURCE_DIR/<relative>, e.g. source_path("tests/oracles/ref_image.py").
std::string source_path(std::string_view relative);
// Runs `python script args...`; returns its stdout; fails the test (throws) on non-zero exit.
std::string run_python(const std::string& script, const std::vector<std::string>& args);

// `python <script> fixtures --out DIR` run once per change of the script or of the venv that runs it, DIR
// returned: ctest runs each TEST in its own process, so the fixtures are kept in $TMPDIR under
// "hotpath-<name>-<hash of both>" (written to a partial directory, renamed into place when complete).
std::filesystem::path cached_python_fixtures(std::string_view script_relative, std::string_view name);

void write_file(const std::string& path, std::span<const std::byte> bytes);
void write_file(const std::string& path, std::string_view text);
std::vector<std::byte> read_bytes(const std::string& path);
std::span<const std::byte> as_bytes(std::string_view text);

// The message of the hotpath::Error that f() throws, or "(no error)": EXPECT_NE(error_of(f).find("..."), npos).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace hotpath::test
