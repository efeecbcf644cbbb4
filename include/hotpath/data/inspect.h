// hotpath/data/inspect.h — describe the samples of shards, and the bad ones with their reason.
//
//   InspectSummary s = inspect_shards(paths, [](const InspectedSample& x) { print(x); });
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hotpath::data {

struct InspectedSample {
  std::string shard;
  std::string key;
  std::uint64_t offset = 0;
  std::vector<std::pair<std::string, std::uint64_t>> members;  // (ext, size) in archive order
  std::optional<std::int64_t> label;                           // from .cls when valid
  std::string bad_reason;  // empty when good; "shard:offset:member: reason" otherwise
};

struct InspectSummary {
  std::uint64_t samples = 0;  // samples found (good or bad), structural problems not included
  std::uint64_t bad = 0;      // bad samples + structural problems
};

// Calls `visit` for each sample (and each structural problem, as a sample with bad_reason set)
// of each shard, in archive order. Checks that each sample has a .cls holding a decimal integer
// and an image member (jpg/jpeg/png/webp) whose header probes, and that the label is in
// [0, num_classes) (num_classes 0: only that it is not negative). Throws hotpath::Error only when a
// shard cannot be opened.
InspectSummary inspect_shards(const std::vector<std::string>& shards,
                              const std::function<void(const InspectedSample&)>& visit, std::int64_t num_classes = 0);

}  // namespace hotpath::data
