// hotpath_tokenize_bench: tokenizer throughput of hotpath (batch encode) and, with --compare hf,
// of Hugging Face `tokenizers` on the same lines, tokenizer, threads and batch size, the runs
// interleaved on the shared machine and the best of each kept (the harness: hotpath/bench/harness.h);
// `hotpath tokenize --bench` reports hotpath's numbers from the CLI.
//   hotpath_tokenize_bench --tokenizer DIR --input lines.txt --threads 1,2 --compare hf --json out.json
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "hotpath/bench/harness.h"
#include "hotpath/bench/tokenize_bench.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/text/lines.h"
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
  std::string peer;  // "" = bench/peers/tokenizer_peer.py
  std::string json_path;
};

void run(const Args& a) {
  using namespace hotpath::bench;
  const hotpath::text::Tokenizer tok = hotpath::text::Tokenizer::from_directory(a.tokenizer);
  const std::string text = hotpath::read_file(a.input);
  const std::vector<std::string_view> lines = hotpath::text::split_lines(text);
  Json report = {{"input", a.input}, {"lines", lines.size()}, {"bytes", text.size()},
                 {"tokenizer", a.tokenizer}, {"batch_size", a.batch_size}, {"max_length", a.max_length},
                 {"offsets", a.offsets}, {"repeats", a.repeats}, {"results", Json::array()}};
  std::vector<std::string> rows;
  for (const unsigned threads : a.threads) {
    hotpath::text::EncodeOptions o;
    o.threads = threads;
    o.max_length = a.max_length;
    o.return_offsets = a.offsets;
    TokenizeBenchResult best;
    std::size_t tokens = 0;
    std::cerr << "threads " << threads << ":\n";
    Benchmark bench("tokenizer, " + std::to_string(threads) + " thread(s)", "tokens/s", a.repeats);
    bench.add({"hotpath", "hotpath::text::Tokenizer::encode_batch", [&](int) {
                 const TokenizeBenchResult r = bench_tokenize(tok, lines, o, a.batch_size, 1);
                 tokens = r.tokens;
                 if (r.tokens_per_s > best.tokens_per_s) best = r;
                 return RunFigures{r.tokens_per_s};
               }});
    if (!a.compare.empty()) {
      // HF's encode_batch (with offsets, always) and encode_batch_fast (without): the same lines and batches.
      for (const char* mode : {"batch", "fast"}) {
        TokenizerPeerOptions peer{a.python, a.peer, a.tokenizer, a.input, threads, a.batch_size, a.max_length, 1, mode};
        const std::string name = std::string(mode) == "batch" ? "hf" : "hf_fast";
        bench.add({name, std::string("tokenizers Tokenizer.encode_") + (name == "hf" ? "batch" : "batch_fast"),
                   [&tokens, peer](int) {
                     const TokenizerPeerResult r = run_tokenizer_peer(peer);
                     HOTPATH_CHECK(r.tokens == tokens, "the peer counted ", r.tokens, " tokens, hotpath ", tokens,
                                   ": not the same work");
                     return RunFigures{r.tokens_per_s, {{"peer", r.peer}}};
                   }});
      }
    }
    const BenchmarkResult r = bench.run(&std::cerr);
    Json entry = Json::parse(to_json(best));
    entry["hotpath_per_s"] = best.tokens_per_s;
    if (r.has("hf")) {
      entry["peer"] = r.at("hf").best().details.value("peer", "");
      entry["hf_per_s"] = r.at("hf").best_per_s;
      entry["hf_fast_per_s"] = r.at("hf_fast").best_per_s;
      entry["ratio"] = r.ratio_vs("hf");
      entry["ratio_vs_fast"] = r.ratio_vs("hf_fast");
    }
    add_benchmark_fields(entry, r);
    report["results"].push_back(entry);
    rows.push_back(r.table_row());
  }
  write_report(report, a.json_path);
  std::ostream& out = a.json_path.empty() || a.json_path == "-" ? std::cerr : std::cout;
  for (const std::string& row : rows) out << row << "\n";
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
  app.add_option("--peer", a.peer, "The peer script (default: bench/peers/tokenizer_peer.py)");
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
