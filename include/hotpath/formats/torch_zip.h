// hotpath/formats/torch_zip.h — the zip container of torch.save / pytorch_model.bin, read in place.
//
//   hotpath::MappedFile file("pytorch_model.bin");
//   TorchZip zip(file.bytes(), "pytorch_model.bin");            // hotpath::Error when malformed
//   std::span<const std::byte> pickle = zip.record("data.pkl");  // "archive/data.pkl" in the zip
//
// torch.save writes a STORED (uncompressed) zip with one top-level folder (the archive name,
// "archive" or the file's stem) and a ZIP64 end record; its local headers carry sizes in a data
// descriptor, so sizes come from the central directory. Every offset and size is bounds-checked
// against the file; compressed, encrypted, split or duplicate entries are refused by name. Records
// are views into the caller's bytes (no copy) and their CRC-32 is checked when first read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::formats {

struct TorchZipOptions {
  // Compare each record with its CRC-32 when read (a truncated or corrupted file fails there). Off
  // only for the fuzzer, which cannot forge checksums.
  bool check_crc = true;
};

class TorchZip {
 public:
  // `bytes` must outlive the reader. `source` names the file in errors.
  TorchZip(std::span<const std::byte> bytes, std::string source, TorchZipOptions options = {});

  // The top-level folder every record sits in ("archive").
  [[nodiscard]] const std::string& archive_name() const { return archive_; }
  // `name` relative to the archive folder ("data.pkl", "data/0").
  [[nodiscard]] bool has(std::string_view name) const;
  // The record's bytes; a missing record or a CRC mismatch is a hotpath::Error.
  [[nodiscard]] std::span<const std::byte> record(std::string_view name) const;
  // Record names relative to the archive folder, sorted.
  [[nodiscard]] std::vector<std::string> names() const;
  [[nodiscard]] const std::string& source() const { return source_; }

 private:
  struct Entry {
    std::uint64_t offset = 0;  // of the data, in the file
    std::uint64_t size = 0;
    std::uint32_t crc = 0;
  };

  std::span<const std::byte> bytes_;
  std::string source_;
  TorchZipOptions options_;
  std::string archive_;
  std::map<std::string, Entry, std::less<>> entries_;  // keyed by the name relative to archive_
};

}  // namespace hotpath::formats
