// `hotpath data pack-text INPUT --format F -o PREFIX [...]`: text datasets → WebDataset shards.
// `hotpath data text-stats SHARDS... [--tokenizer DIR]`: padding fraction of fixed vs dynamic
// padding vs length bucketing vs a token budget over one epoch of the shards.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/bounded.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/text/text_data.h"
#include "hotpath/text/text_loader.h"

namespace hotpath::cli {
namespace {

struct PackTextArgs {
  std::string input;
  std::string format = "txt";
  text::TextPackOptions options;
};

struct TextStatsArgs {
  std::vector<std::string> shards;
  std::string tokenizer;
  text::PaddingComparisonOptions options;
  unsigned workers = text::TextLoaderOptions{}.workers;
  bool json = false;
};

void run_text_stats(const TextStatsArgs& args) {
  const auto shards = data::resolve_shards(args.shards);
  const text::TextCorpus corpus = text::read_text_corpus(shards, args.tokenizer, args.options.max_length, args.workers);
  const text::PaddingComparison cmp = text::compare_padding(corpus, args.options);

  nlohmann::ordered_json out;
  out["samples"] = cmp.samples;
  out["tokens"] = cmp.tokens;
  out["longest"] = cmp.longest;
  out["max_length"] = args.options.max_length;
  out["batch_size"] = args.options.batch_size;
  nlohmann::ordered_json table = nlohmann::ordered_json::array();
  if (!args.json) {
    std::printf("%zu samples, %zu tokens (mean %.1f, longest %u after truncation to %zu)\n", cmp.samples, cmp.tokens,
                static_cast<double>(cmp.tokens) / static_cast<double>(cmp.samples), cmp.longest, args.options.max_length);
    std::printf("%-40s %8s %12s %12s %9s\n", "batching", "batches", "real", "padded", "padding");
  }
  for (const text::PaddingComparisonRow& row : cmp.rows) {
    const text::PaddingStats& stats = row.stats;
    if (args.json) {
      table.push_back({{"batching", row.batching},
                       {"batches", stats.batches},
                       {"real_tokens", stats.real_tokens},
                       {"padded_tokens", stats.padded_tokens},
                       {"padding_fraction", stats.padding_fraction()}});
    } else {
      std::printf("%-40s %8lld %12lld %12lld %8.1f%%\n", row.batching.c_str(), static_cast<long long>(stats.batches),
                  static_cast<long long>(stats.real_tokens), static_cast<long long>(stats.padded_tokens),
                  100.0 * stats.padding_fraction());
    }
  }
  if (args.json) {
    out["batching"] = table;
    std::cout << out.dump(2) << "\n";
  }
}

}  // namespace

void add_data_text(CLI::App& data) {
  auto args = std::make_shared<PackTextArgs>();
  CLI::App* cmd = data.add_subcommand(
      "pack-text", "Pack a text dataset (lines, JSONL, fortune files, Weka ARFF) into WebDataset shards "
                   "PREFIX-000000.tar ... (KEY.txt or, with --tokenizer, KEY.ids + KEY.cls) plus PREFIX.json");
  cmd->add_option("INPUT", args->input, "text file (optionally gzip-compressed), or the fortunes directory")->required();
  cmd->add_option("--format", args->format, "txt (one sample per line), jsonl, fortunes or arff")
      ->check(CLI::IsMember({"txt", "jsonl", "fortunes", "arff"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", args->options.output_prefix, "output prefix, e.g. out/train")->required();
  cmd->add_option("--tokenizer", args->options.tokenizer_dir, "tokenizer directory: store token ids (KEY.ids)");
  cmd->add_option("--max-length", args->options.max_length, "with --tokenizer: truncate to this many tokens (0: none)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-samples-per-shard", args->options.max_samples_per_shard, "samples per shard (0 = no limit)")
      ->capture_default_str();
  cmd->add_option("--threads", args->options.threads, "tokenizer threads")->capture_default_str()->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_option("--labels", args->options.source.labels_path, "txt: a file with one label per input line");
  cmd->add_option("--text-field", args->options.source.text_field, "jsonl: text field")->capture_default_str();
  cmd->add_option("--pair-field", args->options.source.pair_field, "jsonl: second-sequence field")->capture_default_str();
  cmd->add_option("--label-field", args->options.source.label_field, "jsonl: label field")->capture_default_str();
  cmd->add_option("--text-attribute", args->options.source.text_attribute, "arff: text attribute (default: first string)");
  cmd->add_option("--label-attribute", args->options.source.label_attribute, "arff: label attribute (default: last nominal)");
  cmd->callback([args] {
    text::TextPackOptions options = args->options;
    options.source.format = text::parse_text_format(args->format);
    const text::TextPackReport r = text::pack_text(args->input, options);
    std::cout << "packed " << r.samples << " samples (" << r.classes.size() << " classes";
    if (!options.tokenizer_dir.empty()) std::cout << ", " << r.tokens << " tokens";
    std::cout << ") into " << r.shards.size() << " shards, " << r.bytes << " bytes: " << options.output_prefix
              << "-*.tar\n";
  });

  auto stats = std::make_shared<TextStatsArgs>();
  CLI::App* st = data.add_subcommand(
      "text-stats", "Padding fraction of one epoch of text shards: fixed vs dynamic padding vs length bucketing "
                    "vs a token budget");
  st->add_option("SHARDS", stats->shards, "shard paths, brace ranges or globs")->required();
  st->add_option("--tokenizer", stats->tokenizer, "tokenizer directory (needed for KEY.txt shards)");
  st->add_option("--max-length", stats->options.max_length, "truncation length")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  st->add_option("--batch-size", stats->options.batch_size, "batch size")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  st->add_option("--bucket-batches", stats->options.bucket_batches, "bucketing window, in batches")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  st->add_option("--max-tokens", stats->options.max_tokens, "token budget (default: batch size × max length)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  st->add_option("--pad-to-multiple-of", stats->options.pad_to_multiple_of, "")->capture_default_str()->check(CLI::Range(0, 65536));
  st->add_option("--workers", stats->workers, "tokenizer threads")->capture_default_str()->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  st->add_option("--seed", stats->options.seed, "shuffle seed")->capture_default_str();
  st->add_flag("--json", stats->json, "print JSON");
  st->callback([stats] { run_text_stats(*stats); });
}

}  // namespace hotpath::cli
