#include "hotpath/text/tokenize_bench.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <nlohmann/json.hpp>

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
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t begin = 0; begin < lines.size(); begin += batch_size) {
      const auto batch = lines.subspan(begin, std::min(batch_size, lines.size() - begin));
      for (const Encoding& e : tokenizer.encode_batch(batch, options)) {
        tokens += static_cast<std::size_t>(std::count(e.attention_mask.begin(), e.attention_mask.end(), 1));
      }
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
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

}  // namespace hotpath::text
