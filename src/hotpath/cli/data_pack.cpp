// `hotpath data pack SOURCE -o PREFIX [...]`: a thin wrapper over hotpath::data::pack_dataset.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/pack.h"

namespace hotpath::cli {
namespace {

constexpr std::size_t kMaxSkippedShown = 20;

// classes.txt-style file: one name per line; trailing blank lines ignored, inner ones are errors
// (they would silently shift every later index).
std::vector<std::string> read_class_names(const std::string& path) {
  const std::string text = read_file(path, read_limit::kClasses, "classes file");
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names.push_back(line);
    start = end + 1;
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  for (std::size_t i = 0; i < names.size(); ++i) {
    HOTPATH_CHECK(!names[i].empty(), path, ":", i + 1, ": empty class name");
  }
  HOTPATH_CHECK(!names.empty(), path, ": no class names");
  return names;
}

std::string shard_range(const std::string& prefix, std::size_t count) {
  char buf[64];
  if (count == 1) {
    std::snprintf(buf, sizeof buf, "-%06d.tar", 0);
  } else {
    std::snprintf(buf, sizeof buf, "-{%06d..%06zu}.tar", 0, count - 1);
  }
  return prefix + buf;
}

struct PackArgs {
  std::string source;
  data::PackOptions options;
  int jpeg_quality = 0;
  int max_side = 0;
  std::vector<std::string> class_names;
  std::string classes_file;
};

}  // namespace

void add_data_pack(CLI::App& data) {
  auto args = std::make_shared<PackArgs>();
  CLI::App* cmd = data.add_subcommand(
      "pack", "Pack an ImageFolder tree, a CSV/JSONL list of (path,label) or MNIST-style IDX files into "
              "WebDataset shards PREFIX-000000.tar ... plus classes.txt and PREFIX.json");
  cmd->add_option("SOURCE", args->source,
                  "ImageFolder directory, .csv (header path,label), .jsonl ({\"path\":..,\"label\":..}) or "
                  "IDX images file (optionally .gz)")
      ->required();
  cmd->add_option("-o,--output", args->options.output_prefix, "output prefix, e.g. out/train")->required();
  cmd->add_option("--max-samples-per-shard", args->options.max_samples_per_shard, "samples per shard (0 = no limit)")
      ->capture_default_str();
  cmd->add_option("--max-shard-bytes", args->options.max_shard_bytes, "bytes per shard (0 = no limit)")
      ->capture_default_str();
  CLI::Option* quality = cmd->add_option("--jpeg-quality", args->jpeg_quality, "re-encode every image as JPEG at this quality")
                             ->check(CLI::Range(1, 100));
  CLI::Option* max_side = cmd->add_option("--max-side", args->max_side,
                                          "downscale images whose longer side exceeds this (aspect kept)")
                              ->check(CLI::PositiveNumber);
  cmd->add_option("--labels", args->options.labels_path,
                  "IDX labels file (default: the images file name with images-idx3 -> labels-idx1)");
  CLI::Option* names = cmd->add_option("--class-names", args->class_names, "class names for labels 0..N-1, comma-separated")
                           ->delimiter(',');
  cmd->add_option("--classes-file", args->classes_file, "class names, one per line (index = line number - 1)")
      ->excludes(names);
  cmd->add_option("--limit", args->options.limit, "pack at most this many samples")->check(CLI::PositiveNumber);

  cmd->callback([args, quality, max_side] {
    data::PackOptions options = args->options;
    if (quality->count() > 0) options.jpeg_quality = args->jpeg_quality;
    if (max_side->count() > 0) options.max_side = args->max_side;
    options.class_names = args->classes_file.empty() ? args->class_names : read_class_names(args->classes_file);

    const data::PackReport report = data::pack_dataset(args->source, options);
    for (std::size_t i = 0; i < report.skipped.size() && i < kMaxSkippedShown; ++i) {
      std::cerr << "skipped: " << report.skipped[i] << "\n";
    }
    if (report.skipped.size() > kMaxSkippedShown) {
      std::cerr << "skipped: ... and " << report.skipped.size() - kMaxSkippedShown << " more\n";
    }
    std::cout << "packed " << report.samples << " samples (" << report.classes.size() << " classes) into "
              << report.shards.size() << " shards, " << report.bytes << " bytes: "
              << shard_range(options.output_prefix, report.shards.size()) << "; " << report.skipped.size()
              << " skipped\n";
  });
}

}  // namespace hotpath::cli
