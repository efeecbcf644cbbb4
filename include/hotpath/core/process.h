// hotpath/core/process.h — run a child process and capture its standard output.
//
// For the side-by-side benchmarks (python peers) and tests; never on a data path.
//   CommandResult r = run_command({python, "bench/peers/torch_data_peer.py", "--workers", "2"});
//   if (r.exit_code != 0) ...;  use(r.output);
// Arguments are shell-quoted; stderr is inherited (the child's logs stay visible).
#pragma once

#include <string>
#include <vector>

namespace hotpath {

struct CommandResult {
  int exit_code = -1;  // the child's exit status, or -1 when it did not exit normally
  std::string output;  // everything it wrote to stdout
};

// Single-quotes `arg` for /bin/sh.
std::string shell_quote(const std::string& arg);

// Runs argv (argv[0] looked up in PATH) and waits for it. Throws hotpath::Error if it cannot start.
CommandResult run_command(const std::vector<std::string>& argv);

// The python that runs the side-by-side peers: `explicit_path` if given, else $HOTPATH_PYTHON, else
// ~/.cache/hotpath/venv/bin/python. Throws naming `who` (e.g. "bench --compare torch") when it is missing.
std::string peer_python(const std::string& explicit_path, const std::string& who);

}  // namespace hotpath
