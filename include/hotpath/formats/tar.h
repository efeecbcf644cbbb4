// hotpath/formats/tar.h — read WebDataset tar shards: index members, group them into samples.
//
// A shard is memory-mapped and indexed once (headers only; no data is copied). Members are
// grouped into samples by WebDataset's rule (see split_key). Structural problems (bad header
// checksum, truncated archive, garbage pax records, ...) never throw: they end or skip the
// affected part and are recorded in bad() as "shard:offset:member: reason".
//
//   hotpath::formats::ShardReader shard("train-000000.tar");
//   for (const auto& sample : shard.samples())
//     if (const auto* jpg = sample.find("jpg")) use(shard.bytes(*jpg));
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/mapped_file.h"

namespace hotpath::formats {

// One problem found in a shard: formats as "shard:offset:member: reason".
struct BadRecord {
  std::string shard;
  std::uint64_t offset = 0;  // byte offset of the offending header (or sample's first header)
  std::string member;        // member name, or "" when the name itself could not be read
  std::string reason;
  [[nodiscard]] std::string to_string() const;
};

struct SampleMember {
  std::string name;          // full member path as stored (pax / GNU long names resolved)
  std::string ext;           // WebDataset extension, lowercased ("jpg", "seg.png", "cls")
  std::uint64_t header_offset = 0;  // its first header (the pax / GNU long-name one if any)
  std::uint64_t data_offset = 0;
  std::uint64_t size = 0;
};

struct TarSample {
  std::string key;             // WebDataset __key__
  std::uint64_t offset = 0;    // header offset of the sample's first member
  std::vector<SampleMember> members;  // archive order
  // The member with extension `ext` (exact, lowercase), or nullptr.
  [[nodiscard]] const SampleMember* find(std::string_view ext) const;
};

// WebDataset's key/extension split of a member path: key = the path up to the first dot of the
// basename (directories included), ext = the rest, lowercased. A basename without a dot has no
// extension: `ok` is false and the member belongs to no sample.
struct KeyExt {
  std::string key;
  std::string ext;
  bool ok = false;
};
KeyExt split_key(std::string_view member_path);

// True for the members python webdataset skips as metadata: a top-level "__name__" or a path
// starting with "__dir__/". They belong to no sample.
bool is_meta_member(std::string_view member_path);

// What indexing one shard produces.
struct ShardIndex {
  std::vector<TarSample> samples;
  std::vector<BadRecord> bad;
};

class ShardReader {
 public:
  // Maps and indexes the shard. Throws hotpath::Error only if the file cannot be opened/mapped.
  explicit ShardReader(std::string path);

  [[nodiscard]] const std::string& path() const { return file_.path(); }
  [[nodiscard]] const std::vector<TarSample>& samples() const { return samples_; }
  [[nodiscard]] const std::vector<BadRecord>& bad() const { return bad_; }
  // The member's bytes, valid while this reader lives.
  [[nodiscard]] std::span<const std::byte> bytes(const SampleMember& member) const;

  // Indexes tar bytes already in memory (fuzzing, tests); `shard_name` only labels BadRecords.
  // Offsets in the result are into `bytes`. Never throws on bad input.
  static ShardIndex index_bytes(std::string_view shard_name, std::span<const std::byte> bytes);

 private:
  MappedFile file_;
  std::vector<TarSample> samples_;
  std::vector<BadRecord> bad_;
};

}  // namespace hotpath::formats
