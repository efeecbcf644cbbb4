// `hotpath data inspect SHARDS... [--json]`: a thin wrapper over hotpath::data::inspect_shards.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hotpath/data/inspect.h"
#include "hotpath/data/shard_list.h"

namespace hotpath::cli {
namespace {

struct InspectArgs {
  std::vector<std::string> patterns;
  bool json = false;
  std::int64_t num_classes = 0;
};

// "00000001  jpg:1234 cls:1  label=3", bad samples end in "  BAD reason".
void print_text(const data::InspectedSample& x) {
  std::string line = x.key.empty() ? "-" : x.key;
  if (!x.members.empty()) {
    line += " ";
    for (const auto& [ext, size] : x.members) line += " " + ext + ":" + std::to_string(size);
  }
  if (x.label) line += "  label=" + std::to_string(*x.label);
  if (!x.bad_reason.empty()) line += "  BAD " + x.bad_reason;
  std::cout << line << "\n";
}

void print_json(const data::InspectedSample& x) {
  nlohmann::ordered_json j;
  j["key"] = x.key;
  nlohmann::ordered_json members = nlohmann::ordered_json::object();
  for (const auto& [ext, size] : x.members) members[ext] = size;
  j["members"] = members;
  j["label"] = x.label ? nlohmann::ordered_json(*x.label) : nullptr;
  j["shard"] = x.shard;
  j["offset"] = x.offset;
  if (!x.bad_reason.empty()) j["bad"] = x.bad_reason;
  std::cout << j.dump() << "\n";
}

}  // namespace

void add_data_inspect(CLI::App& data) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = data.add_subcommand(
      "inspect", "List the samples of WebDataset shards (key, members and sizes, label) and the bad ones with their reason");
  cmd->add_option("SHARDS", args->patterns, "shard files, brace patterns (train-{000000..000009}.tar) or globs")
      ->required();
  cmd->add_flag("--json", args->json, "one JSON object per sample, then a summary object");
  cmd->add_option("--num-classes", args->num_classes, "labels must lie in [0, N): others are bad samples (0: only >= 0)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1'000'000}));

  cmd->callback([args] {
    const std::vector<std::string> shards = data::resolve_shards(args->patterns);
    std::string current_shard;
    const data::InspectSummary summary = data::inspect_shards(shards, [&](const data::InspectedSample& x) {
      if (args->json) {
        print_json(x);
        return;
      }
      if (shards.size() > 1 && x.shard != current_shard) {
        current_shard = x.shard;
        std::cout << "# " << current_shard << "\n";
      }
      print_text(x);
    }, args->num_classes);
    if (args->json) {
      nlohmann::ordered_json j;
      j["samples"] = summary.samples;
      j["bad"] = summary.bad;
      j["shards"] = shards.size();
      std::cout << j.dump() << "\n";
    } else {
      std::cout << summary.samples << " samples, " << summary.bad << " bad, in " << shards.size() << " shards\n";
    }
  });
}

}  // namespace hotpath::cli
