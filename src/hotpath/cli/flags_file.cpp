// A command's flags from a flat YAML map (flags_file.h), through CLI11's config-file hook.
#include "cli/flags_file.h"

#include <yaml-cpp/yaml.h>

#include <istream>
#include <sstream>
#include <string>
#include <vector>

namespace hotpath::cli {
namespace {

class YamlFlags final : public CLI::Config {
 public:
  std::string to_config(const CLI::App* /*app*/, bool /*default_also*/, bool /*write_description*/,
                        std::string /*prefix*/) const override {
    return {};
  }

  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    std::ostringstream text;
    text << in.rdbuf();
    YAML::Node root;
    try {
      root = YAML::Load(text.str());
    } catch (const YAML::Exception& e) {
      throw CLI::ConversionError("--recipe: not YAML: " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
    }
    std::vector<CLI::ConfigItem> items;
    if (root.IsNull()) return items;
    if (!root.IsMap()) throw CLI::ConversionError("--recipe: expected a map of flag: value at the top level");
    for (const auto& entry : root) {
      CLI::ConfigItem item;
      item.name = entry.first.as<std::string>();
      const YAML::Node& value = entry.second;
      const auto scalar = [&](const YAML::Node& v) {
        if (!v.IsScalar()) {
          throw CLI::ConversionError("--recipe: " + item.name + " (line " + std::to_string(v.Mark().line + 1) +
                                     "): expected a value or a list of values");
        }
        return v.as<std::string>();
      };
      if (value.IsSequence()) {
        for (const auto& v : value) item.inputs.push_back(scalar(v));
      } else {
        item.inputs.push_back(scalar(value));
      }
      items.push_back(std::move(item));
    }
    return items;
  }
};

}  // namespace

std::shared_ptr<CLI::Config> yaml_flags_file() { return std::make_shared<YamlFlags>(); }

}  // namespace hotpath::cli
