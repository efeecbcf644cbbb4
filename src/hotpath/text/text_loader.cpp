// TextLoader: shards → in-memory token corpus → per-epoch batch plan → padded int32 batches.
#include "hotpath/text/text_loader.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/random.h"
#include "hotpath/formats/tar.h"
#include "hotpath/text/tokenizer.h"

namespace hotpath::text {
namespace {

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::vector<std::int32_t> read_int32_le(std::span<const std::byte> bytes) {
  std::vector<std::int32_t> out(bytes.size() / 4);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint32_t v = static_cast<std::uint32_t>(p[4 * i]) | (static_cast<std::uint32_t>(p[4 * i + 1]) << 8) |
                            (static_cast<std::uint32_t>(p[4 * i + 2]) << 16) |
                            (static_cast<std::uint32_t>(p[4 * i + 3]) << 24);
    out[i] = static_cast<std::int32_t>(v);
  }
  return out;
}

// Truncation of stored ids keeps the last one: for BERT encodings that is [SEP].
void truncate_keep_last(std::vector<std::int32_t>& v, std::size_t max_length) {
  if (max_length == 0 || v.size() <= max_length) return;
  const std::int32_t last = v.back();
  v.resize(max_length);
  v.back() = last;
}

std::string where(const formats::ShardReader& shard, const formats::SampleMember& m) {
  return shard.path() + ":" + std::to_string(m.header_offset) + ":" + m.name;
}

}  // namespace

void TextCorpus::add(std::span<const std::int32_t> sample_ids, std::span<const std::int32_t> sample_type_ids,
                     std::int64_t label) {
  HOTPATH_ASSERT(sample_type_ids.empty() || sample_type_ids.size() == sample_ids.size());
  ids.insert(ids.end(), sample_ids.begin(), sample_ids.end());
  if (sample_type_ids.empty()) {
    type_ids.resize(ids.size(), 0);
  } else {
    type_ids.insert(type_ids.end(), sample_type_ids.begin(), sample_type_ids.end());
  }
  offsets.push_back(ids.size());
  labels.push_back(label);
}

std::size_t padded_length(std::size_t longest, const BatchPlanOptions& options) {
  std::size_t length = std::max(longest, options.fixed_length);
  const std::size_t m = options.pad_to_multiple_of;
  if (m > 1) length = (length + m - 1) / m * m;
  return length;
}

namespace {
std::vector<std::vector<std::uint32_t>> plan_rank(std::span<const std::uint32_t> lengths,
                                                  const BatchPlanOptions& options, std::int64_t epoch);
}  // namespace

std::vector<std::vector<std::uint32_t>> plan_batches(std::span<const std::uint32_t> lengths,
                                                     const BatchPlanOptions& options, std::int64_t epoch) {
  auto plan = plan_rank(lengths, options, epoch);
  // With a token budget ranks can get different batch counts, and a data-parallel step would then
  // wait forever for the rank that ran out: every rank keeps only as many batches as the fewest.
  if (options.world_size > 1 && options.max_tokens > 0) {
    std::size_t fewest = plan.size();
    for (int r = 0; r < options.world_size; ++r) {
      if (r == options.rank) continue;
      BatchPlanOptions other = options;
      other.rank = r;
      fewest = std::min(fewest, plan_rank(lengths, other, epoch).size());
    }
    plan.resize(fewest);
  }
  return plan;
}

namespace {
std::vector<std::vector<std::uint32_t>> plan_rank(std::span<const std::uint32_t> lengths,
                                                  const BatchPlanOptions& options, std::int64_t epoch) {
  HOTPATH_CHECK(options.batch_size > 0, "batch_size must be positive, got ", options.batch_size);
  HOTPATH_CHECK(options.world_size > 0 && options.rank >= 0 && options.rank < options.world_size, "rank ",
                options.rank, " is outside world_size ", options.world_size);
  std::vector<std::uint32_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0U);
  if (options.shuffle) {
    Rng rng = Rng::for_stream(options.seed, {static_cast<std::uint64_t>(epoch), 0});
    for (std::size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i - 1)))]);
    }
  }
  if (options.world_size > 1) {
    const std::size_t per_rank = order.size() / static_cast<std::size_t>(options.world_size);
    std::vector<std::uint32_t> mine(per_rank);
    for (std::size_t k = 0; k < per_rank; ++k) mine[k] = order[static_cast<std::size_t>(options.rank) + k * options.world_size];
    order = std::move(mine);
  }

  const auto batch = static_cast<std::size_t>(options.batch_size);
  const std::size_t window = options.bucket_batches > 0 ? batch * static_cast<std::size_t>(options.bucket_batches)
                                                        : std::max<std::size_t>(order.size(), 1);
  std::vector<std::vector<std::uint32_t>> batches;
  for (std::size_t begin = 0; begin < order.size(); begin += window) {
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), begin + window));
    if (options.bucket_batches > 0) {
      std::stable_sort(first, last, [&](std::uint32_t a, std::uint32_t b) { return lengths[a] < lengths[b]; });
    }
    std::vector<std::uint32_t> current;
    std::size_t longest = 0;
    for (auto it = first; it != last; ++it) {
      const std::size_t len = lengths[*it];
      bool full = false;
      if (options.max_tokens > 0) {
        const std::size_t grown = padded_length(std::max(longest, len), options) * (current.size() + 1);
        full = !current.empty() && grown > static_cast<std::size_t>(options.max_tokens);
      } else {
        full = current.size() == batch;
      }
      if (full) {
        batches.push_back(std::move(current));
        current.clear();
        longest = 0;
      }
      current.push_back(*it);
      longest = std::max(longest, len);
    }
    if (!current.empty()) batches.push_back(std::move(current));
  }
  if (options.drop_last && options.max_tokens <= 0 && !batches.empty() && batches.back().size() < batch) {
    batches.pop_back();
  }
  if (options.bucket_batches > 0 && options.shuffle) {
    Rng rng = Rng::for_stream(options.seed, {static_cast<std::uint64_t>(epoch), 1});
    for (std::size_t i = batches.size(); i > 1; --i) {
      std::swap(batches[i - 1], batches[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i - 1)))]);
    }
  }
  return batches;
}
}  // namespace

PaddingStats padding_stats(std::span<const std::uint32_t> lengths, const std::vector<std::vector<std::uint32_t>>& plan,
                           const BatchPlanOptions& options) {
  PaddingStats stats;
  for (const auto& b : plan) {
    std::size_t longest = 0;
    for (const std::uint32_t i : b) {
      longest = std::max<std::size_t>(longest, lengths[i]);
      stats.real_tokens += lengths[i];
    }
    stats.padded_tokens += static_cast<std::int64_t>(padded_length(longest, options) * b.size());
    stats.samples += static_cast<std::int64_t>(b.size());
    ++stats.batches;
  }
  return stats;
}

PaddingComparison compare_padding(const TextCorpus& corpus, const PaddingComparisonOptions& options) {
  PaddingComparison out;
  out.samples = corpus.size();
  out.tokens = corpus.ids.size();
  std::vector<std::uint32_t> lengths(corpus.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    lengths[i] = corpus.length(i);
    out.longest = std::max(out.longest, lengths[i]);
  }
  const BatchPlanOptions base{.batch_size = options.batch_size, .seed = options.seed};
  const auto add = [&](std::string name, BatchPlanOptions plan) {
    PaddingStats stats = padding_stats(lengths, plan_batches(lengths, plan, 0), plan);
    out.rows.push_back({std::move(name), plan, stats});
  };
  BatchPlanOptions plan = base;
  plan.fixed_length = options.max_length;
  add("fixed (pad to max_length)", plan);
  add("dynamic (pad to longest)", base);
  plan = base;
  plan.pad_to_multiple_of = options.pad_to_multiple_of;
  add("dynamic, multiple of " + std::to_string(options.pad_to_multiple_of), plan);
  plan = base;
  plan.bucket_batches = options.bucket_batches;
  add("bucketed (" + std::to_string(options.bucket_batches) + "-batch windows)", plan);
  plan.max_tokens = options.max_tokens > 0 ? options.max_tokens
                                           : static_cast<std::int64_t>(options.batch_size) *
                                                 static_cast<std::int64_t>(options.max_length);
  add("bucketed + token budget " + std::to_string(plan.max_tokens), plan);
  return out;
}

TextBatch collate(const TextCorpus& corpus, std::span<const std::uint32_t> samples, const BatchPlanOptions& options,
                  std::int32_t pad_id) {
  TextBatch batch;
  std::size_t longest = 0;
  for (const std::uint32_t i : samples) longest = std::max<std::size_t>(longest, corpus.length(i));
  const std::size_t length = padded_length(longest, options);
  const std::size_t n = samples.size();
  batch.batch_size = static_cast<std::int64_t>(n);
  batch.length = static_cast<std::int64_t>(length);
  batch.input_ids.assign(n * length, pad_id);
  batch.attention_mask.assign(n * length, 0);
  batch.token_type_ids.assign(n * length, 0);
  batch.labels.resize(n);
  batch.samples.assign(samples.begin(), samples.end());
  for (std::size_t row = 0; row < n; ++row) {
    const std::uint32_t i = samples[row];
    const std::size_t len = corpus.length(i);
    const std::uint64_t off = corpus.offsets[i];
    std::copy_n(corpus.ids.begin() + static_cast<std::ptrdiff_t>(off), len, batch.input_ids.begin() + static_cast<std::ptrdiff_t>(row * length));
    std::copy_n(corpus.type_ids.begin() + static_cast<std::ptrdiff_t>(off), len,
                batch.token_type_ids.begin() + static_cast<std::ptrdiff_t>(row * length));
    std::fill_n(batch.attention_mask.begin() + static_cast<std::ptrdiff_t>(row * length), len, 1);
    batch.labels[row] = corpus.labels[i];
    batch.real_tokens += static_cast<std::int64_t>(len);
  }
  batch.padded_tokens = static_cast<std::int64_t>(n * length);
  return batch;
}

TextCorpus read_text_corpus(const std::vector<std::string>& shards, const std::string& tokenizer_dir,
                            std::size_t max_length, unsigned workers) {
  std::optional<Tokenizer> tokenizer;
  if (!tokenizer_dir.empty()) tokenizer = Tokenizer::from_directory(tokenizer_dir);
  TextCorpus corpus;
  for (const auto& path : shards) {
    const formats::ShardReader shard(path);
    HOTPATH_CHECK(shard.bad().empty(), "text shard is damaged: ", shard.bad().front().to_string());
    // Texts of this shard are gathered first so they are tokenized as one multi-threaded batch.
    struct Pending {
      std::string_view text;
      std::string_view pair;
      std::int64_t label;
    };
    std::vector<Pending> texts;
    std::vector<std::size_t> text_slot;  // position among the shard's samples
    std::vector<std::vector<std::int32_t>> ids_by_sample;
    std::vector<std::vector<std::int32_t>> types_by_sample;
    std::vector<std::int64_t> labels;
    for (const auto& sample : shard.samples()) {
      std::int64_t label = -1;
      if (const auto* cls = sample.find("cls")) {
        const std::string_view s = as_text(shard.bytes(*cls));
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), label);
        HOTPATH_CHECK(ec == std::errc() && end == s.data() + s.size() && label >= -1, where(shard, *cls),
                      ": expected a decimal class index, found '", s.substr(0, 20), "'");
      }
      labels.push_back(label);
      ids_by_sample.emplace_back();
      types_by_sample.emplace_back();
      if (const auto* ids = sample.find("ids")) {
        const auto bytes = shard.bytes(*ids);
        HOTPATH_CHECK(bytes.size() % 4 == 0, where(shard, *ids), ": size ", bytes.size(),
                      " is not a multiple of 4 (little-endian int32 token ids)");
        ids_by_sample.back() = read_int32_le(bytes);
        if (const auto* types = sample.find("type.ids")) {
          HOTPATH_CHECK(shard.bytes(*types).size() == bytes.size(), where(shard, *types),
                        ": holds a different number of ids than the sample's .ids");
          types_by_sample.back() = read_int32_le(shard.bytes(*types));
        }
        truncate_keep_last(ids_by_sample.back(), max_length);
        truncate_keep_last(types_by_sample.back(), max_length);
      } else if (const auto* txt = sample.find("txt")) {
        HOTPATH_CHECK(tokenizer.has_value(), where(shard, *txt), ": a text sample needs a tokenizer (tokenizer_dir)");
        const auto* pair = sample.find("pair.txt");
        texts.push_back({as_text(shard.bytes(*txt)), pair ? as_text(shard.bytes(*pair)) : std::string_view(), label});
        text_slot.push_back(labels.size() - 1);
      } else {
        HOTPATH_CHECK(false, shard.path(), ":", sample.offset, ":", sample.key, ": sample has neither .ids nor .txt");
      }
    }
    if (!texts.empty()) {
      const EncodeOptions encode{.max_length = max_length, .threads = std::max(1U, workers)};
      for (const bool pairs : {false, true}) {
        std::vector<std::string_view> firsts;
        std::vector<std::string_view> seconds;
        std::vector<std::size_t> slots;
        for (std::size_t k = 0; k < texts.size(); ++k) {
          if (texts[k].pair.empty() == pairs) continue;
          firsts.push_back(texts[k].text);
          seconds.push_back(texts[k].pair);
          slots.push_back(text_slot[k]);
        }
        if (firsts.empty()) continue;
        std::vector<Encoding> out;
        try {
          out = pairs ? tokenizer->encode_pair_batch(firsts, seconds, encode) : tokenizer->encode_batch(firsts, encode);
        } catch (const Error& e) {
          throw e.with_context(shard.path());
        }
        for (std::size_t k = 0; k < slots.size(); ++k) {
          ids_by_sample[slots[k]] = std::move(out[k].ids);
          if (pairs) types_by_sample[slots[k]] = std::move(out[k].type_ids);
        }
      }
    }
    for (std::size_t s = 0; s < labels.size(); ++s) corpus.add(ids_by_sample[s], types_by_sample[s], labels[s]);
  }
  return corpus;
}

struct TextLoader::State {
  TextLoaderOptions options;
  TextCorpus corpus;
  std::vector<std::uint32_t> lengths;
  std::int32_t pad_id = 0;
  BatchPosition position{};
  std::int64_t planned_epoch = -1;
  std::vector<std::vector<std::uint32_t>> plan;
  PaddingStats stats;

  const std::vector<std::vector<std::uint32_t>>& plan_for(std::int64_t epoch) {
    if (planned_epoch != epoch) {
      plan = plan_batches(lengths, options.batching, epoch);
      planned_epoch = epoch;
    }
    return plan;
  }
};

TextLoader::TextLoader(TextCorpus corpus, TextLoaderOptions options, std::int32_t pad_id)
    : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
  state_->corpus = std::move(corpus);
  state_->pad_id = pad_id;
  state_->lengths.resize(state_->corpus.size());
  for (std::size_t i = 0; i < state_->lengths.size(); ++i) state_->lengths[i] = state_->corpus.length(i);
  HOTPATH_CHECK(state_->corpus.size() > 0, "text loader: no samples");
  seek({0, 0});
}

namespace {
std::int32_t pad_id_of(const std::string& tokenizer_dir) {
  return tokenizer_dir.empty() ? 0 : Tokenizer::from_directory(tokenizer_dir).pad_id();
}
}  // namespace

TextLoader::TextLoader(TextLoaderOptions options)
    : TextLoader(read_text_corpus(options.shards, options.tokenizer_dir, options.max_length, options.workers), options,
                 pad_id_of(options.tokenizer_dir)) {}

TextLoader::~TextLoader() = default;

void TextLoader::seek(BatchPosition position) {
  HOTPATH_CHECK(position.epoch >= 0 && position.batch >= 0, "text loader: bad position (epoch ", position.epoch,
                ", batch ", position.batch, ")");
  const auto& plan = state_->plan_for(position.epoch);
  HOTPATH_CHECK(position.batch <= static_cast<std::int64_t>(plan.size()), "text loader: batch ", position.batch,
                " is past the ", plan.size(), " batches of epoch ", position.epoch);
  state_->position = position;
}

std::optional<TextBatch> TextLoader::next() {
  State& s = *state_;
  const auto& plan = s.plan_for(s.position.epoch);
  if (s.position.batch >= static_cast<std::int64_t>(plan.size())) return std::nullopt;
  TextBatch batch = collate(s.corpus, plan[static_cast<std::size_t>(s.position.batch)], s.options.batching, s.pad_id);
  batch.epoch = s.position.epoch;
  batch.index = s.position.batch;
  ++s.position.batch;
  ++s.stats.batches;
  s.stats.samples += batch.batch_size;
  s.stats.real_tokens += batch.real_tokens;
  s.stats.padded_tokens += batch.padded_tokens;
  return batch;
}

BatchPosition TextLoader::position() const { return state_->position; }
std::int64_t TextLoader::batches_in_epoch(std::int64_t epoch) const {
  return static_cast<std::int64_t>(plan_batches(state_->lengths, state_->options.batching, epoch).size());
}
PaddingStats TextLoader::stats() const { return state_->stats; }
const TextCorpus& TextLoader::corpus() const { return state_->corpus; }
std::int32_t TextLoader::pad_id() const { return state_->pad_id; }

}  // namespace hotpath::text
