#include "hotpath/text/tokenize_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "hotpath/core/error.h"
#include "hotpath/core/process.h"

namespace hotpath::text {

TokenizeBenchResult bench_tokenize(const Tokenizer& tokenizer, std::span<const std::string_view> lines,
                                   const EncodeOptions& options, std::size_t batch_size, int repeats) {
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
      const std::vector<Encoding> encodings = tokenizer.encode_batch(batch, options);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (const Encoding& e : encodings) {
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

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    pos = end + 1;
  }
  return out;
}

std::string to_json(const TokenizeBenchResult& r) {
  return nlohmann::json{{"threads", r.threads},         {"lines", r.lines},
                        {"tokens", r.tokens},           {"bytes", r.bytes},
                        {"seconds", r.seconds},         {"lines_per_s", r.lines_per_s},
                        {"tokens_per_s", r.tokens_per_s}, {"megabytes_per_s", r.megabytes_per_s}}
      .dump();
}

TokenizerPeerResult run_tokenizer_peer(const TokenizerPeerOptions& o) {
  const std::string python = peer_python(o.python, "tokenizer bench --compare hf");
  HOTPATH_CHECK(std::filesystem::exists(o.script), "tokenizer bench --compare hf: peer script not found at ", o.script);
  const CommandResult r = run_command({python, o.script, "--tokenizer", o.tokenizer_dir, "--input", o.input, "--threads",
                                       std::to_string(o.threads), "--batch-size", std::to_string(o.batch_size),
                                       "--repeats", std::to_string(o.repeats), "--max-length",
                                       std::to_string(o.max_length), "--mode", o.mode});
  HOTPATH_CHECK(r.exit_code == 0, "tokenizer bench --compare hf: the peer failed (exit ", r.exit_code, "): ", o.script);
  // The report is the last non-empty line (the peer may log before it).
  std::string out = r.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  const std::size_t nl = out.rfind('\n');
  const std::string line = nl == std::string::npos ? out : out.substr(nl + 1);
  TokenizerPeerResult result;
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    result.peer = j.at("peer").get<std::string>();
    result.lines = j.at("lines").get<std::size_t>();
    result.tokens = j.at("tokens").get<std::size_t>();
    result.lines_per_s = j.at("lines_per_s").get<double>();
    result.tokens_per_s = j.at("tokens_per_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, "tokenizer bench --compare hf: the peer printed no JSON report (", e.what(), "): '", line, "'");
  }
  return result;
}

}  // namespace hotpath::text
