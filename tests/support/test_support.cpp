#include "support/test_support.h"

#include "hotpath/core/process.h"
#include "hotpath/core/remove_tree.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace hotpath::test {

TempDir::TempDir() {
  std::random_device rd;
  const auto base = std::filesystem::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto candidate = base / ("hotpath-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a temp directory");
}

TempDir::~TempDir() {
  std::error_code ec;
  hotpath::remove_tree(path_, ec);
}

std::string python() {
  const char* p = std::getenv("HOTPATH_PYTHON");
  return p != nullptr ? std::string(p) : std::string(HOTPATH_TEST_PYTHON);
}

std::string source_path(std::string_view relative) {
  const char* env = std::getenv("HOTPATH_SOURCE_DIR");
  const char* root = env != nullptr ? env : HOTPATH_TEST_SOURCE_DIR;
  return (std::filesystem::path(root) / relative).string();
}

std::string run_python(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv{python(), script};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = run_command(argv);
  if (r.exit_code != 0) {
    throw std::runtime_error("python failed (exit " + std::to_string(r.exit_code) + "): " + script);
  }
  return r.output;
}

std::filesystem::path cached_python_fixtures(std::string_view script_relative, std::string_view name) {
  const std::string script = source_path(script_relative);
  std::ifstream in(script, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::error_code ec;
  const std::filesystem::path venv = std::filesystem::canonical(std::filesystem::path(python()).parent_path(), ec);
  const std::size_t key = std::hash<std::string>{}(text.str() + "\n" + (ec ? python() : venv.string()));
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hotpath-" + std::string(name) + "-" + std::to_string(key));
  if (std::filesystem::exists(dir / "done")) return dir;
  const std::filesystem::path partial = dir.string() + "." + std::to_string(::getpid()) + ".partial";
  run_python(script, {"fixtures", "--out", partial.string()});
  write_file((partial / "done").string(), "");
  std::filesystem::rename(partial, dir, ec);  // atomic; a parallel process may have won the race
  if (ec) hotpath::remove_tree(partial);
  return dir;
}

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

void write_file(const std::string& path, std::string_view text) { write_file(path, as_bytes(text)); }

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::span<const std::byte> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

}  // namespace hotpath::test
