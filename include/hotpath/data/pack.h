// hotpath/data/pack.h — write labelled image datasets as WebDataset shards.
//
// Sources: an ImageFolder tree (one subfolder per class, classes sorted by name like
// torchvision), MNIST/Fashion-MNIST IDX files (optionally gzip-compressed), or a CSV/JSONL list
// of (path, label). Output: PREFIX-000000.tar, ... with KEY.jpg|KEY.png, KEY.cls (decimal label)
// and optional KEY.json, plus classes.txt and PREFIX.json (metadata) beside the shards.
// The same input and options always give byte-identical shards.
//
//   PackOptions opts{.output_prefix = "out/train"};
//   PackReport report = pack_dataset("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", opts);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hotpath::data {

struct PackOptions {
  std::string output_prefix{};               // "out/train" -> out/train-000000.tar ...
  std::uint64_t max_samples_per_shard = 10000;  // 0 = no limit
  std::uint64_t max_shard_bytes = 1ULL << 30;   // 0 = no limit (a larger single sample gets its own shard)
  std::optional<int> jpeg_quality{};         // re-encode every image as JPEG at this quality
  std::optional<int> max_side{};             // downscale (aspect kept, PIL bilinear) images whose longer
                                             // side exceeds this; re-encoded in their own format
                                             // (JPEG at jpeg_quality or 90)
  std::string labels_path{};                 // IDX: labels file (default: derived from images path)
  std::vector<std::string> class_names{};    // IDX/list sources: names for labels 0..N-1
  std::int64_t limit = -1;                   // pack at most this many samples (-1 = all)
};

struct PackReport {
  std::vector<std::string> shards;
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> classes;
  std::vector<std::string> skipped;          // "path: reason" for inputs that could not be packed
};

// Detects the source kind from `source` (directory, .csv, .jsonl, IDX magic) and packs it.
// Keys are the zero-padded index of the item in the source listing ("00000042"), so they stay
// stable when items are skipped. Without re-encoding, files are stored byte-for-byte under the
// extension of their sniffed format; files that are not JPEG/PNG or whose header does not probe
// (and, when re-encoding, that do not decode) are skipped and listed in `skipped`. Bad sources,
// options, list lines or IDX headers throw hotpath::Error naming the file, line or field.
PackReport pack_dataset(const std::string& source, const PackOptions& options);

}  // namespace hotpath::data
