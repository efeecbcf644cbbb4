// libFuzzer target: arbitrary text as an `--recipe` flags file (cli/flags_file.h) applied to a command with the kinds
// of flags `hotpath export` has (integer and float ranges, a list, a switch, a choice, a flag that no file may set).
// Bad input must end in hotpath::Error naming the file (never a crash, a hang, or a CLI11 or yaml-cpp exception
// escaping); what is accepted must have passed the flag's own validator.
#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/flags_file.h"
#include "hotpath/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CLI::App command("fuzz", "export");
  std::int64_t steps = 1;
  double lr = 1e-4;
  std::vector<std::string> shards;
  bool pretrained = false;
  std::string importance = "l1", recipe;
  command.add_option("--qat-steps", steps)->check(CLI::Range(1, 10000000));
  command.add_option("--prune-macs", lr)->check(CLI::Range(0.0, 1.0));
  command.add_option("--calibration", shards);
  command.add_flag("--pretrained", pretrained);
  command.add_option("--prune-importance", importance)->check(CLI::IsMember({"l1", "l2", "taylor"}));
  command.add_option("--recipe", recipe)->configurable(false);
  try {
    hotpath::cli::apply_flags_yaml(command, text, "fuzz.yaml");
  } catch (const hotpath::Error& e) {
    if (std::string(e.what()).rfind("fuzz.yaml", 0) != 0) {
      std::fprintf(stderr, "fuzz_flags_file: an error that does not name the file: %s\n", e.what());
      std::abort();
    }
    return 0;
  }
  if (steps < 1 || steps > 10000000 || !(lr >= 0.0 && lr <= 1.0) ||
      (importance != "l1" && importance != "l2" && importance != "taylor") || !recipe.empty()) {
    std::fprintf(stderr, "fuzz_flags_file: a value past its validator: steps %lld, prune-macs %g, importance %s\n",
                 static_cast<long long>(steps), lr, importance.c_str());
    std::abort();
  }
  return 0;
}
