// hotpath_tokenize_bench: tokenizer throughput of hotpath (batch encode) and, with --compare hf,
// of Hugging Face `tokenizers` on the same lines, tokenizer, threads and batch size, the runs
// interleaved on the shared machine and the best of each kept. Torch-free, so it builds in
// seconds; `hotpath tokenize --bench` reports the same numbers from the CLI.
//   hotpath_tokenize_bench --tokenizer DIR --input lines.txt --threads 1,2 --compare hf --json out.json
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/text/tokenize_bench.h"
#include "hotpath/text/tokenizer.h"

namespace {

struct Args {
  std::string tokenizer;
  std::string input;
  std::vector<unsigned> threads = {1};
  std::size_t batch_size = 1024;
  std::size_t max_length = 0;
  int repeats = 5;
  bool offsets = false;
  std::string compare;
  std::string python;
  std::string peer = std::string(HOTPATH_SOURCE_DIR) + "/bench/tokenizer_peer.py";
  std::string json_path;
};

void run(const Args& a) {
  using namespace hotpath::text;
  const Tokenizer tok = Tokenizer::from_directory(a.tokenizer);
  const std::string text = hotpath::read_file(a.input);
  const std::vector<std::string_view> lines = split_lines(text);
  nlohmann::json report = {{"input", a.input}, {"lines", lines.size()}, {"bytes", text.size()},
                           {"tokenizer", a.tokenizer}, {"batch_size", a.batch_size}, {"max_length", a.max_length},
                           {"offsets", a.offsets}, {"repeats", a.repeats}, {"results", nlohmann::json::array()}};
  for (const unsigned threads : a.threads) {
    EncodeOptions o;
    o.threads = threads;
    o.max_length = a.max_length;
    o.return_offsets = a.offsets;
    TokenizeBenchResult best;
    TokenizerPeerResult hf_batch;
    TokenizerPeerResult hf_fast;
    TokenizerPeerOptions peer{a.python, a.peer, a.tokenizer, a.input, threads, a.batch_size, a.max_length, 1, "batch"};
    // Interleaved: other load on the machine slows whichever runs at the time; best of each.
    for (int r = 0; r < a.repeats; ++r) {
      const TokenizeBenchResult run = bench_tokenize(tok, lines, o, a.batch_size, 1);
      if (run.tokens_per_s > best.tokens_per_s) best = run;
      std::cerr << "threads " << threads << " run " << r + 1 << ": hotpath " << run.tokens_per_s << " tokens/s";
      if (!a.compare.empty()) {
        peer.mode = "batch";
        const TokenizerPeerResult b = run_tokenizer_peer(peer);
        peer.mode = "fast";
        const TokenizerPeerResult f = run_tokenizer_peer(peer);
        if (b.tokens_per_s > hf_batch.tokens_per_s) hf_batch = b;
        if (f.tokens_per_s > hf_fast.tokens_per_s) hf_fast = f;
        std::cerr << ", hf encode_batch " << b.tokens_per_s << ", encode_batch_fast " << f.tokens_per_s;
        HOTPATH_CHECK(b.tokens == run.tokens, "the peer counted ", b.tokens, " tokens, hotpath ", run.tokens,
                      ": not the same work");
      }
      std::cerr << "\n";
    }
    nlohmann::json entry = nlohmann::json::parse(to_json(best));
    entry["hotpath_per_s"] = best.tokens_per_s;
    if (!a.compare.empty()) {
      entry["peer"] = hf_batch.peer;
      entry["hf_per_s"] = hf_batch.tokens_per_s;
      entry["hf_fast_per_s"] = hf_fast.tokens_per_s;
      entry["ratio"] = best.tokens_per_s / hf_batch.tokens_per_s;
      entry["ratio_vs_fast"] = best.tokens_per_s / hf_fast.tokens_per_s;
      std::cerr << "threads " << threads << ": hotpath " << best.tokens_per_s << " tokens/s (" << best.lines_per_s
                << " lines/s), hf " << hf_batch.tokens_per_s << " (fast " << hf_fast.tokens_per_s << "), ratio "
                << entry["ratio"].get<double>() << "x (" << entry["ratio_vs_fast"].get<double>() << "x vs fast)\n";
    }
    report["results"].push_back(entry);
  }
  const std::string out = report.dump(2);
  if (a.json_path.empty() || a.json_path == "-") {
    std::cout << out << "\n";
  } else {
    std::ofstream f(a.json_path);
    f << out << "\n";
    HOTPATH_CHECK(f.good(), "cannot write --json ", a.json_path);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("Tokenizer throughput: hotpath batch encode vs Hugging Face tokenizers (--compare hf)");
  app.add_option("--tokenizer", a.tokenizer, "Directory with tokenizer.json (the peer needs it) or vocab.txt")->required();
  app.add_option("--input", a.input, "Text file, one input per line")->required();
  app.add_option("--threads", a.threads, "Thread counts to measure, e.g. 1,2")->delimiter(',');
  app.add_option("--batch-size", a.batch_size, "Lines per encode_batch call")->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-length", a.max_length, "Truncate to this many tokens (0: none)");
  app.add_option("--repeats", a.repeats, "Interleaved runs of each side; the best counts")->check(CLI::Range(1, 100));
  app.add_flag("--offsets", a.offsets, "hotpath also returns offsets (HF's encode_batch always does)");
  app.add_option("--compare", a.compare, "Also run the Hugging Face peer")->check(CLI::IsMember({"hf"}));
  app.add_option("--python", a.python, "Python of the venv for --compare");
  app.add_option("--peer", a.peer, "The peer script");
  app.add_option("--json", a.json_path, "Write the JSON report here ('-' = stdout)");
  CLI11_PARSE(app, argc, argv);
  try {
    run(a);
  } catch (const std::exception& e) {
    std::cerr << "hotpath_tokenize_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
