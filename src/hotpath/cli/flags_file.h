// cli/flags_file.h — a command's flags read from a YAML file (`hotpath export --recipe configs/qat_*.yaml`): a flat
// map whose keys are the long flag names without the dashes ("qat-steps: 300", "pretrained: true", a list for a
// flag that takes several values). A flag also given on the command line keeps the command line's value; an
// unknown key, a nested value or a value the flag refuses is an error naming the file, line and key.
//
//   cmd->add_option("--recipe", a->recipe, "A YAML file of this command's flags");
//   cmd->callback([a, cmd] { apply_flags_file(*cmd, a->recipe); run(*a); });
//
// (CLI11 2.1's own config files are read by the top-level app only, not by a subcommand.)
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace hotpath::cli {

// Sets every flag the file names that the command line left unset (its validators run). "" does nothing.
void apply_flags_file(CLI::App& command, const std::string& path);
// The same for the file's text; `path` names it in messages (fuzz/fuzz_flags_file.cpp).
void apply_flags_yaml(CLI::App& command, const std::string& text, const std::string& path);

}  // namespace hotpath::cli
