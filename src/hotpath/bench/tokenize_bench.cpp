#include "hotpath/bench/tokenize_bench.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <limits>

#include "hotpath/bench/harness.h"
#include "hotpath/core/error.h"
#include "hotpath/core/process.h"

namespace hotpath::bench {

TokenizeBenchResult bench_tokenize(const text::Tokenizer& tokenizer, std::span<const std::string_view> lines,
                                   const text::EncodeOptions& options, std::size_t batch_size, int repeats) {
  TokenizeBenchResult r;
  r.threads = options.threads;
  r.lines = lines.size();
  for (const std::string_view line : lines) r.bytes += line.size();
  if (batch_size == 0) batch_size = std::max<std::size_t>(lines.size(), 1);
  double best = std::numeric_limits<double>::infinity();
  for (int pass = 0; pass < std::max(repeats, 1); ++pass) {
    std::size_t tokens = 0;
    double seconds = 0;
    for (std::size_t begin = 0; begin < lines.size(); begin += batch_size) {
      const auto batch = lines.subspan(begin, std::min(batch_size, lines.size() - begin));
      // Only encode_batch is timed, as on the python side.
      const auto start = std::chrono::steady_clock::now();
      const std::vector<text::Encoding> encodings = tokenizer.encode_batch(batch, options);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (const text::Encoding& e : encodings) {
        tokens += static_cast<std::size_t>(std::count(e.attention_mask.begin(), e.attention_mask.end(), 1));
      }
    }
    best = std::min(best, seconds);
    r.tokens = tokens;
  }
  r.seconds = best;
  if (best > 0) {
    r.lines_per_s = static_cast<double>(r.lines) / best;
    r.tokens_per_s = static_cast<double>(r.tokens) / best;
    r.megabytes_per_s = static_cast<double>(r.bytes) / best / 1e6;
  }
  return r;
}

std::string to_json(const TokenizeBenchResult& r) {
  return nlohmann::json{{"threads", r.threads},         {"lines", r.lines},
                        {"tokens", r.tokens},           {"bytes", r.bytes},
                        {"seconds", r.seconds},         {"lines_per_s", r.lines_per_s},
                        {"tokens_per_s", r.tokens_per_s}, {"megabytes_per_s", r.megabytes_per_s}}
      .dump();
}

TokenizerPeerResult run_tokenizer_peer(const TokenizerPeerOptions& o) {
  const std::string who = "tokenizer bench --compare hf";
  const std::string script = o.script.empty() ? peer_script("tokenizer_peer.py") : o.script;
  const Json j = run_peer({peer_python(o.python, who), script, "--tokenizer", o.tokenizer_dir, "--input", o.input,
                           "--threads", std::to_string(o.threads), "--batch-size", std::to_string(o.batch_size),
                           "--repeats", std::to_string(o.repeats), "--max-length", std::to_string(o.max_length),
                           "--mode", o.mode},
                          who, "tokens_per_s");
  TokenizerPeerResult result;
  try {
    result.peer = j.at("peer").get<std::string>();
    result.lines = j.at("lines").get<std::size_t>();
    result.tokens = j.at("tokens").get<std::size_t>();
    result.lines_per_s = j.at("lines_per_s").get<double>();
    result.tokens_per_s = j.at("tokens_per_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, who, ": the peer's report lacks a field (", e.what(), "): ", j.dump());
  }
  return result;
}

}  // namespace hotpath::bench
