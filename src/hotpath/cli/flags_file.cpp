// A command's flags from a flat YAML map (flags_file.h).
#include "cli/flags_file.h"

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"

namespace hotpath::cli {

void apply_flags_file(CLI::App& command, const std::string& path) {
  if (path.empty()) return;
  apply_flags_yaml(command, read_file(path, read_limit::kConfig, "--recipe"), path);
}

void apply_flags_yaml(CLI::App& command, const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(path + ":" + std::to_string(e.mark.line + 1) + ": not YAML: " + e.msg);
  }
  if (root.IsNull()) return;
  HOTPATH_CHECK(root.IsMap(), path, ": expected a map of flag: value (flags of `hotpath ", command.get_name(),
                "` without their dashes)");
  for (const auto& entry : root) {
    const std::string where = path + ":" + std::to_string(entry.first.Mark().line + 1);
    HOTPATH_CHECK(entry.first.IsScalar(), where, ": expected a flag name as the key");
    const std::string name = entry.first.as<std::string>();
    CLI::Option* option = nullptr;
    try {
      option = command.get_option("--" + name);
    } catch (const CLI::OptionNotFound&) {
      throw Error(where + ": '" + name + "' is no flag of `hotpath " + command.get_name() + "` (see --help)");
    }
    HOTPATH_CHECK(option->get_configurable() && name != "recipe", where, ": '", name, "' cannot be set from a file");
    if (option->count() > 0) continue;  // the command line wins
    std::vector<std::string> values;
    const auto scalar = [&](const YAML::Node& v) {
      HOTPATH_CHECK(v.IsScalar(), where, ": ", name, ": expected a value or a list of values");
      values.push_back(v.as<std::string>());
    };
    if (entry.second.IsSequence()) {
      for (const auto& v : entry.second) scalar(v);
    } else {
      scalar(entry.second);
    }
    try {
      for (const std::string& v : values) option->add_result(v);
      option->run_callback();
    } catch (const CLI::Error& e) {
      throw Error(where + ": " + name + ": " + e.what());
    }
  }
}

}  // namespace hotpath::cli
