// pack_text: text records → WebDataset shards (KEY.txt/KEY.ids + KEY.cls) and PREFIX.json.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/formats/tar_writer.h"
#include "hotpath/text/text_data.h"
#include "hotpath/text/tokenizer.h"

namespace fs = std::filesystem;

namespace hotpath::text {
namespace {

// Tokenized in chunks so memory stays bounded by the chunk, not the corpus.
constexpr std::size_t kTokenizeChunk = 4096;

std::string sample_key(std::size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08zu", index);
  return buf;
}

std::string little_endian_bytes(std::span<const std::int32_t> values) {
  std::string out(values.size() * 4, '\0');
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto v = static_cast<std::uint32_t>(values[i]);
    out[4 * i] = static_cast<char>(v & 0xFF);
    out[4 * i + 1] = static_cast<char>((v >> 8) & 0xFF);
    out[4 * i + 2] = static_cast<char>((v >> 16) & 0xFF);
    out[4 * i + 3] = static_cast<char>((v >> 24) & 0xFF);
  }
  return out;
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

}  // namespace

TextPackReport pack_text(const std::string& input, const TextPackOptions& options) {
  HOTPATH_CHECK(!options.output_prefix.empty(), "pack_text: an output prefix is required");
  const TextSource source = read_text_source(input, options.source);
  std::optional<Tokenizer> tokenizer;
  if (!options.tokenizer_dir.empty()) tokenizer = Tokenizer::from_directory(options.tokenizer_dir);

  const fs::path prefix(options.output_prefix);
  if (!prefix.parent_path().empty()) fs::create_directories(prefix.parent_path());
  formats::ShardWriter writer(options.output_prefix + "-%06d.tar",
                           {.max_samples = options.max_samples_per_shard, .max_bytes = 1ULL << 30});
  TextPackReport report;
  report.classes = source.classes;
  report.class_counts.assign(source.classes.size(), 0);

  EncodeOptions encode{.max_length = options.max_length, .threads = std::max(1U, options.threads)};
  const auto& records = source.records;
  for (std::size_t begin = 0; begin < records.size(); begin += kTokenizeChunk) {
    const std::size_t end = std::min(records.size(), begin + kTokenizeChunk);
    // Singles and pairs are encoded as two batches (encode_batch vs encode_pair_batch).
    std::vector<Encoding> encodings(end - begin);
    if (tokenizer) {
      for (const bool pairs : {false, true}) {
        std::vector<std::size_t> which;
        std::vector<std::string_view> firsts;
        std::vector<std::string_view> seconds;
        for (std::size_t i = begin; i < end; ++i) {
          if (records[i].text_pair.empty() == pairs) continue;
          which.push_back(i - begin);
          firsts.push_back(records[i].text);
          seconds.push_back(records[i].text_pair);
        }
        if (which.empty()) continue;
        try {
          auto out = pairs ? tokenizer->encode_pair_batch(firsts, seconds, encode) : tokenizer->encode_batch(firsts, encode);
          for (std::size_t k = 0; k < which.size(); ++k) encodings[which[k]] = std::move(out[k]);
        } catch (const Error& e) {
          throw e.with_context(input);
        }
      }
    }
    for (std::size_t i = begin; i < end; ++i) {
      const TextRecord& r = records[i];
      const std::string cls = std::to_string(r.label);
      std::string ids;
      std::string type_ids;
      formats::SampleToWrite sample{sample_key(i), {}};
      if (tokenizer) {
        const Encoding& e = encodings[i - begin];
        ids = little_endian_bytes(e.ids);
        sample.members.emplace_back("ids", bytes_of(ids));
        if (!r.text_pair.empty()) {
          type_ids = little_endian_bytes(e.type_ids);
          sample.members.emplace_back("type.ids", bytes_of(type_ids));
        }
        report.tokens += e.ids.size();
      } else {
        sample.members.emplace_back("txt", bytes_of(r.text));
        if (!r.text_pair.empty()) sample.members.emplace_back("pair.txt", bytes_of(r.text_pair));
      }
      if (r.label >= 0) {
        sample.members.emplace_back("cls", bytes_of(cls));
        ++report.class_counts[static_cast<std::size_t>(r.label)];
      }
      writer.write(sample);
      ++report.samples;
    }
  }
  writer.close();
  report.shards = writer.shards();
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const auto& shard : report.shards) {
    report.bytes += fs::file_size(shard);
    shards.push_back(fs::path(shard).filename().string());
  }
  formats::remove_stale_shards(options.output_prefix, report.shards.size());

  nlohmann::ordered_json meta;
  meta["format"] = "webdataset";
  meta["source"] = input;
  meta["source_kind"] = text_format_name(options.source.format);
  meta["samples"] = report.samples;
  meta["shards"] = shards;
  meta["bytes"] = report.bytes;
  meta["members"] = tokenizer ? "ids" : "txt";
  if (tokenizer) meta["tokens"] = report.tokens;
  meta["classes"] = report.classes;
  meta["class_counts"] = report.class_counts;
  nlohmann::ordered_json opts;
  opts["max_samples_per_shard"] = options.max_samples_per_shard;
  opts["tokenizer"] = options.tokenizer_dir.empty() ? nlohmann::ordered_json(nullptr)
                                                    : nlohmann::ordered_json(options.tokenizer_dir);
  opts["max_length"] = options.max_length;
  meta["options"] = opts;
  const fs::path dir = prefix.parent_path();
  write_file_atomic((dir / (prefix.filename().string() + ".json")).string(), meta.dump(2) + "\n");
  return report;
}

}  // namespace hotpath::text
