// cli/flags_file.h — a command's flags read from a YAML file (`hotpath export --recipe configs/qat_*.yaml`): a flat
// map whose keys are the long flag names without the dashes ("qat-steps: 300", "pretrained: true", a list for a
// flag that takes several values). Given on the command line too, a flag's command-line value wins; an unknown key
// is an error naming it.
//
//   cmd->config_formatter(yaml_flags_file());
//   cmd->set_config("--recipe", "", "A YAML file of this command's flags")->check(CLI::ExistingFile);
//   cmd->allow_config_extras(CLI::config_extras_mode::error);
#pragma once

#include <CLI/CLI.hpp>

#include <memory>

namespace hotpath::cli {

std::shared_ptr<CLI::Config> yaml_flags_file();

}  // namespace hotpath::cli
