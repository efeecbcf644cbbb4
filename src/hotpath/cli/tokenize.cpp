// `hotpath tokenize`: BERT WordPiece encoding of text lines, one JSON object per input line
// ({"input_ids":[..],"token_type_ids":[..],"attention_mask":[..]}), or (--bench) the throughput.
//   hotpath tokenize --tokenizer all-MiniLM-L6-v2 < lines.txt > encodings.jsonl
//   hotpath tokenize --tokenizer DIR --pair --max-length 128 --padding longest < pairs.tsv
//   hotpath tokenize --tokenizer DIR --pair --max-length 384 --truncation only_second --stride 128
//     --return-overflowing-tokens < question_context.tsv   # one line per window + "overflow_to_sample_mapping"
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hotpath/bench/tokenize_bench.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/text/lines.h"
#include "hotpath/text/tokenizer.h"

namespace hotpath::cli {
namespace {

// Lengths a flag may ask for: far above any model (512, 8192), far below an allocation that fails.
constexpr std::size_t kMaxTokens = std::size_t{1} << 20;

// The flags that have a field in text::EncodeOptions bind to it (its defaults are the library's); the strings
// (truncation, padding, offsets) are turned into its enums in run().
struct TokenizeArgs {
  std::string tokenizer;
  std::string input = "-";
  bool pair = false;
  text::EncodeOptions encode;
  std::string truncation = "longest_first";
  bool length = false;
  std::string padding = "none";
  bool offsets = false;
  bool char_offsets = false;
  bool no_special_tokens = false;
  std::size_t batch_size = 4096;  // lines per encode_batch call (and per --bench batch)
  bool bench = false;
  int repeats = 3;
};

std::string read_input(const std::string& path) {
  if (path != "-") return read_file(path, read_limit::kList, "input");
  return read_stream(std::cin, read_limit::kList, "tokenize: stdin");
}

void run(const TokenizeArgs& a) {
  using namespace hotpath::text;
  const Tokenizer tok = Tokenizer::from_directory(a.tokenizer);
  EncodeOptions o = a.encode;
  o.add_special_tokens = !a.no_special_tokens;
  // Without truncation nothing overflows: the flags would be silently ignored.
  HOTPATH_CHECK(o.max_length > 0 || (o.stride == 0 && !o.return_overflowing_tokens),
                "tokenize: --stride and --return-overflowing-tokens need --max-length (nothing is cut without it)");
  o.truncation = text::parse_truncation_strategy(a.truncation, "tokenize: --truncation");
  o.padding = a.padding == "longest" ? Padding::kLongest : a.padding == "max_length" ? Padding::kMaxLength : Padding::kNone;
  o.return_offsets = a.offsets || a.char_offsets;
  o.offset_unit = a.char_offsets ? OffsetUnit::kChars : OffsetUnit::kBytes;

  const std::string source = a.input == "-" ? std::string("stdin") : a.input;
  const std::string text = read_input(a.input);
  const std::vector<std::string_view> lines = split_lines(text);
  // Checked here, so the message names the input line (1-based) rather than a place in a batch.
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::size_t bad = find_invalid_utf8(lines[i]);
    HOTPATH_CHECK(bad == std::string_view::npos, "tokenize: ", source, ":", i + 1, ": invalid UTF-8 at byte ", bad,
                  " of the line");
  }
  if (a.bench) {
    HOTPATH_CHECK(!a.pair, "tokenize --bench measures single texts; drop --pair");
    const bench::TokenizeBenchResult r = bench::bench_tokenize(tok, lines, o, a.batch_size, a.repeats);
    std::cout << bench::to_json(r) << "\n";
    std::cerr << "hotpath tokenize: " << r.lines << " lines, " << r.tokens << " tokens in " << r.seconds << " s: "
              << r.lines_per_s << " lines/s, " << r.tokens_per_s << " tokens/s on " << r.threads << " thread(s)\n";
    return;
  }
  std::vector<std::string_view> firsts;
  std::vector<std::string_view> seconds;
  std::string out;
  for (std::size_t begin = 0; begin < lines.size(); begin += a.batch_size) {
    const std::size_t end = std::min(lines.size(), begin + a.batch_size);
    firsts.assign(lines.begin() + static_cast<std::ptrdiff_t>(begin), lines.begin() + static_cast<std::ptrdiff_t>(end));
    seconds.clear();
    if (a.pair) {
      for (std::size_t i = 0; i < firsts.size(); ++i) {
        const std::size_t tab = firsts[i].find('\t');
        HOTPATH_CHECK(tab != std::string_view::npos, "tokenize --pair: ", source, ":", begin + i + 1,
                      ": expected first<TAB>second");
        seconds.push_back(firsts[i].substr(tab + 1));
        firsts[i] = firsts[i].substr(0, tab);
      }
    }
    std::vector<Encoding> encodings;
    try {
      encodings = a.pair ? tok.encode_pair_batch(firsts, seconds, o) : tok.encode_batch(firsts, o);
    } catch (const Error&) {
      // The batch's message counts lines within the batch: find the input line again, one by one.
      for (std::size_t i = 0; i < firsts.size(); ++i) {
        try {
          (void)(a.pair ? tok.encode_pair(firsts[i], seconds[i], o) : tok.encode(firsts[i], o));
        } catch (const Error& e) {
          throw e.with_context(detail::concat("tokenize: ", source, ":", begin + i + 1));
        }
      }
      throw;
    }
    out.clear();
    if (o.return_overflowing_tokens) {
      const FlatEncodings flat = flatten_overflowing(std::move(encodings));
      for (std::size_t row = 0; row < flat.encodings.size(); ++row) {
        append_json(out, flat.encodings[row],
                    {.length = a.length, .overflow_to_sample_mapping = begin + flat.overflow_to_sample_mapping[row]});
        out += '\n';
      }
    } else {
      for (const Encoding& e : encodings) {
        append_json(out, e, {.length = a.length, .overflow_to_sample_mapping = std::nullopt});
        out += '\n';
      }
    }
    HOTPATH_CHECK(std::fwrite(out.data(), 1, out.size(), stdout) == out.size(), "tokenize: cannot write stdout");
  }
  HOTPATH_CHECK(std::fflush(stdout) == 0, "tokenize: cannot write stdout");
}

}  // namespace

void add_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "BERT WordPiece tokenization (HF tokenizers compatible): one JSON object per input line");
  cmd->add_option("--tokenizer", args->tokenizer, "Directory with tokenizer.json, or vocab.txt (+ tokenizer_config.json)")
      ->required();
  cmd->add_option("--input", args->input, "Text file, one input per line ('-' = stdin)");
  cmd->add_flag("--pair", args->pair, "Each line is first<TAB>second: a pair with token_type_ids 0/1");
  cmd->add_option("--max-length", args->encode.max_length, "Truncate to this many tokens, special tokens included (0: no)")
      ->check(CLI::Range(std::size_t{0}, kMaxTokens));
  cmd->add_option("--truncation", args->truncation, "Which text of a pair loses tokens")
      ->check(CLI::IsMember({"longest_first", "only_first", "only_second"}));
  cmd->add_option("--stride", args->encode.stride,
                  "With --max-length: overlap of consecutive windows, in tokens (HF stride)")
      ->check(CLI::Range(std::size_t{0}, kMaxTokens));
  cmd->add_flag("--return-overflowing-tokens", args->encode.return_overflowing_tokens,
                "Also write the windows truncation cuts off, one line each, with \"overflow_to_sample_mapping\" "
                "(the 0-based input line)");
  cmd->add_flag("--special-tokens-mask,--return-special-tokens-mask", args->encode.return_special_tokens_mask,
                "Add special_tokens_mask: 1 for [CLS]/[SEP]/padding, 0 for the text's tokens");
  cmd->add_flag("--return-length", args->length, "Add \"length\": the number of tokens, padding included");
  cmd->add_option("--padding", args->padding, "longest: within each batch; max_length: to --pad-length or --max-length")
      ->check(CLI::IsMember({"none", "longest", "max_length"}));
  cmd->add_option("--pad-length", args->encode.pad_length, "Length for --padding max_length (0: --max-length)")
      ->check(CLI::Range(std::size_t{0}, kMaxTokens));
  cmd->add_option("--pad-to-multiple-of", args->encode.pad_to_multiple_of, "Round padded lengths up to a multiple of this")
      ->check(CLI::Range(std::size_t{0}, kMaxTokens));
  cmd->add_flag("--offsets", args->offsets, "Add offset_mapping: byte offsets into each line");
  cmd->add_flag("--char-offsets", args->char_offsets, "Add offset_mapping in code points (what HF's python API gives)");
  cmd->add_flag("--no-special-tokens", args->no_special_tokens, "No [CLS]/[SEP]");
  cmd->add_option("--threads", args->encode.threads, "Encoding threads (0: all cores); the output does not depend on it")
      ->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_option("--batch-size", args->batch_size, "Lines per batch")->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24));
  cmd->add_flag("--bench", args->bench, "Print throughput (lines/s, tokens/s) as JSON instead of the encodings");
  cmd->add_option("--repeats", args->repeats, "--bench: passes, the fastest counts")->check(CLI::Range(1, 100));
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
