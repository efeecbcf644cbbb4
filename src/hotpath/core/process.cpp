#include "hotpath/core/process.h"

#include <sys/wait.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <memory>
#include <string>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

struct PipeCloser {
  void operator()(std::FILE* f) const { ::pclose(f); }
};

}  // namespace

std::string shell_quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

CommandResult run_command(const std::vector<std::string>& argv) {
  HOTPATH_CHECK(!argv.empty(), "run_command: empty argv");
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + shell_quote(a);
  std::FILE* raw = ::popen(cmd.c_str(), "r");
  HOTPATH_CHECK(raw != nullptr, "cannot start: ", cmd);
  std::unique_ptr<std::FILE, PipeCloser> pipe(raw);
  CommandResult result;
  std::array<char, 65536> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0) result.output.append(buf.data(), n);
  const int status = ::pclose(pipe.release());
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string peer_python(const std::string& explicit_path, const std::string& who) {
  std::string python = explicit_path;
  if (python.empty()) {
    if (const char* env = std::getenv("HOTPATH_PYTHON")) python = env;
  }
  if (python.empty()) {
    const char* home = std::getenv("HOME");
    python = std::string(home ? home : "") + "/.cache/hotpath/venv/bin/python";
  }
  HOTPATH_CHECK(std::filesystem::exists(python), who, ": python not found at ", python,
                " (run scripts/setup, or pass --python)");
  return python;
}

}  // namespace hotpath
