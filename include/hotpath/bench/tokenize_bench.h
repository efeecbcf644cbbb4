// hotpath/bench/tokenize_bench.h — tokenizer throughput: lines/s and tokens/s of batch encode at a given
// thread count (`hotpath tokenize --bench`, `hotpath bench text --part tokenizer`, hotpath_tokenize_bench),
// and the Hugging Face `tokenizers` peer (bench/peers/tokenizer_peer.py) on the same lines.
//
//   auto tok = hotpath::text::Tokenizer::from_directory(dir);
//   auto r = hotpath::bench::bench_tokenize(tok, lines, {.threads = 2});
//   std::cout << r.tokens_per_s << " tokens/s\n";
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/text/tokenizer.h"

namespace hotpath::bench {

struct TokenizeBenchResult {
  unsigned threads = 1;
  std::size_t lines = 0;   // per pass
  std::size_t tokens = 0;  // per pass, special tokens included, padding excluded
  std::size_t bytes = 0;   // per pass
  double seconds = 0;      // the fastest pass
  double lines_per_s = 0;
  double tokens_per_s = 0;
  double megabytes_per_s = 0;
};

// Encodes `lines` with encode_batch in batches of `batch_size` (0: all at once), `repeats`
// times, and reports the fastest pass (the first also warms the caches).
TokenizeBenchResult bench_tokenize(const text::Tokenizer& tokenizer, std::span<const std::string_view> lines,
                                   const text::EncodeOptions& options, std::size_t batch_size = 0, int repeats = 3);

// One result as a JSON object, e.g. for --json output.
std::string to_json(const TokenizeBenchResult& result);

// The Hugging Face side, run in a child process (bench/peers/tokenizer_peer.py in the venv) on the same
// lines, tokenizer, threads (RAYON_NUM_THREADS) and batch size.
struct TokenizerPeerOptions {
  std::string python;  // empty: $HOTPATH_PYTHON, else ~/.cache/hotpath/venv/bin/python
  std::string script;  // empty: bench/peers/tokenizer_peer.py
  std::string tokenizer_dir;
  std::string input;   // one line per text
  unsigned threads = 1;
  std::size_t batch_size = 1024;
  std::size_t max_length = 0;
  int repeats = 1;
  std::string mode = "batch";  // "batch": encode_batch; "fast": encode_batch_fast (no offsets)
};
struct TokenizerPeerResult {
  std::string peer;  // e.g. "tokenizers 0.23.3 encode_batch"
  std::size_t lines = 0;
  std::size_t tokens = 0;
  double lines_per_s = 0;
  double tokens_per_s = 0;
};
TokenizerPeerResult run_tokenizer_peer(const TokenizerPeerOptions& options);

}  // namespace hotpath::bench
