// hotpath/text/text_data.h — labelled text datasets (plain text, JSONL, fortune files, Weka ARFF)
// read into records and packed as WebDataset shards.
//
//   TextSource src = read_text_source("/usr/share/games/fortunes", {.format = TextFormat::kFortunes});
//   TextPackReport r = pack_text("ReutersCorn-train.arff", {.format = TextFormat::kArff, .output_prefix = "out/corn"});
//   // out/corn-000000.tar: KEY.txt (+ KEY.pair.txt) + KEY.cls, or KEY.ids (+ KEY.type.ids) with a tokenizer
//
// Samples are KEY.txt (UTF-8), KEY.pair.txt (the second sequence, if any) and KEY.cls (decimal class
// index); with a tokenizer they are pre-tokenized instead: KEY.ids and, for pairs, KEY.type.ids
// (little-endian int32). Keys are the zero-padded index in the source listing. Bad input throws
// hotpath::Error with one line naming "file:line: what was expected".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::text {

enum class TextFormat { kTxt, kJsonl, kFortunes, kArff };
TextFormat parse_text_format(std::string_view name);  // "txt", "jsonl", "fortunes", "arff"
const char* text_format_name(TextFormat format);

struct TextRecord {
  std::string text;
  std::string text_pair;    // "" when the dataset has single sequences
  std::int64_t label = -1;  // index into TextSource::classes; -1: unlabelled
  std::size_t line = 0;     // 1-based line in its file (error messages), 0 when not line-based
};

struct TextSource {
  std::vector<TextRecord> records;
  std::vector<std::string> classes;  // label names, index = class id
};

struct TextSourceOptions {
  TextFormat format = TextFormat::kTxt;
  // txt: a file with one label per input line (names, or integers 0..N-1). Empty: unlabelled.
  std::string labels_path{};
  // JSONL field names; a missing pair field means single sequences, a missing label field -1.
  std::string text_field = "text";
  std::string pair_field = "text_pair";
  std::string label_field = "label";
  // ARFF attribute names; empty: the first string attribute / the last nominal attribute.
  std::string text_attribute{};
  std::string label_attribute{};
};

// Parsers over bytes already in memory (also the fuzz entry points); `name` labels errors.
// Labels given as strings become classes in sorted order; integers are used as class ids.
TextSource parse_jsonl(std::string_view content, std::string_view name, const TextSourceOptions& options = {});
// Weka ARFF (dense data only): classes are the label attribute's nominal values, in declared order.
TextSource parse_arff(std::string_view content, std::string_view name, const TextSourceOptions& options = {});
// One fortune file: entries separated by lines holding only "%"; blank entries dropped.
std::vector<TextRecord> parse_fortunes(std::string_view content, std::string_view name);

// Reads `path` in `options.format`: a file (gzip-compressed if it starts with the gzip magic) or,
// for fortunes, a directory of fortune files, one class per file (sorted; *.dat, *.u8 and
// subdirectories skipped). Every text is checked to be valid UTF-8.
TextSource read_text_source(const std::string& path, const TextSourceOptions& options);

struct TextPackOptions {
  TextSourceOptions source{};
  std::string output_prefix{};                  // "out/train" -> out/train-000000.tar ...
  std::uint64_t max_samples_per_shard = 10000;  // 0 = no limit
  std::string tokenizer_dir{};                  // set: store KEY.ids instead of KEY.txt
  std::size_t max_length = 0;                   // with a tokenizer: truncate to this many tokens (0: none)
  unsigned threads = 1;                         // tokenizer threads (the output does not depend on it)
};

struct TextPackReport {
  std::vector<std::string> shards;
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;
  std::uint64_t tokens = 0;  // with a tokenizer: token ids written
  std::vector<std::string> classes;
  std::vector<std::uint64_t> class_counts;
};

// Packs `input` into PREFIX-000000.tar ... plus PREFIX.json (classes, counts, options). Shards are
// written atomically and byte-identical for the same input and options; stale higher-numbered
// shards of an earlier run with the same prefix are removed.
TextPackReport pack_text(const std::string& input, const TextPackOptions& options);

}  // namespace hotpath::text
