// hotpath/formats/tar_writer.h — write WebDataset tar shards, deterministically and atomically.
//
// Output is POSIX ustar (pax extended headers for names over 100 bytes or sizes over 8 GiB),
// with mtime 0, uid/gid 0, mode 0644 and empty user/group names, so the same input gives the
// same bytes. A file is written as PATH.tmp and renamed on close(); a writer destroyed without
// close() removes its temp file.
//
//   hotpath::formats::ShardWriter out("out/train-%06d.tar", {.max_samples = 1000});
//   out.write({"000001", {{"jpg", jpeg_bytes}, {"cls", as_bytes("3")}}});
//   out.close();  // out.shards() lists the files written
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hotpath::formats {

class TarWriter {
 public:
  explicit TarWriter(std::string path);
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  void add(std::string_view name, std::span<const std::byte> data);
  // Writes the end-of-archive blocks, fsyncs and renames PATH.tmp to PATH.
  void close();
  [[nodiscard]] std::uint64_t bytes_written() const { return bytes_; }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  void write_raw(const void* data, std::size_t size);
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  std::uint64_t bytes_ = 0;
};

struct ShardWriterOptions {
  std::uint64_t max_samples = 10000;      // per shard; 0 = unlimited
  std::uint64_t max_bytes = 1ULL << 30;   // per shard (a single larger sample still gets a shard)
};

struct SampleToWrite {
  std::string key;
  std::vector<std::pair<std::string, std::span<const std::byte>>> members;  // (ext, bytes)
};

// Removes PREFIX-NNNNNN.tar with NNNNNN >= written: shards left over from an earlier, longer run with
// the same prefix would be picked up by a glob and mixed with this run's output.
void remove_stale_shards(const std::string& prefix, std::size_t written);

class ShardWriter {
 public:
  // `pattern` holds one printf integer conversion for the shard index, e.g. "out/train-%06d.tar".
  ShardWriter(std::string pattern, ShardWriterOptions options);
  void write(const SampleToWrite& sample);
  void close();
  [[nodiscard]] const std::vector<std::string>& shards() const { return shards_; }
  [[nodiscard]] std::uint64_t samples_written() const { return samples_; }

 private:
  std::string pattern_;
  ShardWriterOptions options_;
  std::vector<std::string> shards_;
  std::uint64_t samples_ = 0;
  std::uint64_t in_shard_ = 0;
  std::unique_ptr<TarWriter> current_;
};

}  // namespace hotpath::formats
