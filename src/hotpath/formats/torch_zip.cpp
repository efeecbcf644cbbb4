// torch.save's zip container (see torch_zip.h). Written here rather than taken from LibTorch so that
// the whole pytorch_model.bin path builds without LibTorch and runs under the fuzzer; the format is
// the small STORED subset miniz writes for torch (APPNOTE 4.3.7 local header, 4.3.12 central
// directory, 4.3.14-16 ZIP64 end records, 4.5.3 ZIP64 extra field).
#include "hotpath/formats/torch_zip.h"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::formats {
namespace {

constexpr std::uint32_t kLocalHeader = 0x04034b50;
constexpr std::uint32_t kCentralHeader = 0x02014b50;
constexpr std::uint32_t kEnd = 0x06054b50;
constexpr std::uint32_t kEnd64 = 0x06064b50;
constexpr std::uint32_t kEnd64Locator = 0x07064b50;
constexpr std::size_t kEndSize = 22;
constexpr std::size_t kEnd64Size = 56;
constexpr std::size_t kLocatorSize = 20;
constexpr std::size_t kCentralSize = 46;
constexpr std::size_t kLocalSize = 30;
constexpr const char* kWhat = ": cannot read as a weights-only torch.save zip checkpoint: ";

// Little-endian reads; the caller has checked the bounds.
std::uint64_t le(std::span<const std::byte> b, std::uint64_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(b[at + static_cast<std::uint64_t>(i)]) << (8 * i);
  return v;
}


std::uint32_t crc32_of(std::span<const std::byte> data) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  return static_cast<std::uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), static_cast<z_size_t>(data.size())));
}

}  // namespace

TorchZip::TorchZip(std::span<const std::byte> bytes, std::string source, TorchZipOptions options)
    : bytes_(bytes), source_(std::move(source)), options_(options) {
  const std::uint64_t size = bytes_.size();
  const auto fail_unless = [&](bool ok, const auto&... parts) {
    HOTPATH_CHECK(ok, source_, kWhat, parts...);
  };
  const auto in_file = [&](std::uint64_t at, std::uint64_t n) { return at <= size && n <= size - at; };

  // End of central directory: the last 22+ bytes, before a comment of up to 64 KiB.
  fail_unless(size >= kEndSize, "file of ", size, " bytes is too small for a zip (legacy non-zip torch.save "
              "files are not supported; re-save with torch.save's default format)");
  std::uint64_t end = size - kEndSize;
  const std::uint64_t lowest = size - kEndSize > 0xffff ? size - kEndSize - 0xffff : 0;
  while (le(bytes_, end, 4) != kEnd) {
    fail_unless(end > lowest, "no zip end-of-central-directory record (legacy non-zip torch.save files are not "
                "supported; re-save with torch.save's default format)");
    --end;
  }
  std::uint64_t disk = le(bytes_, end + 4, 2);
  std::uint64_t cd_disk = le(bytes_, end + 6, 2);
  std::uint64_t disk_entries = le(bytes_, end + 8, 2);
  std::uint64_t count = le(bytes_, end + 10, 2);
  std::uint64_t cd_size = le(bytes_, end + 12, 4);
  std::uint64_t cd_offset = le(bytes_, end + 16, 4);
  std::uint64_t cd_limit = end;  // the central directory lies before the end records
  // ZIP64: a locator right before the end record points at the ZIP64 end record (torch writes both).
  if (end >= kLocatorSize && le(bytes_, end - kLocatorSize, 4) == kEnd64Locator) {
    const std::uint64_t at = le(bytes_, end - kLocatorSize + 8, 8);
    fail_unless(le(bytes_, end - kLocatorSize + 4, 4) == 0 && le(bytes_, end - kLocatorSize + 16, 4) <= 1,
                "split (multi-disk) zip archives are not supported");
    fail_unless(at <= end - kLocatorSize && kEnd64Size <= end - kLocatorSize - at && le(bytes_, at, 4) == kEnd64,
                "the ZIP64 end record offset ", at, " does not point at a ZIP64 end record");
    disk = le(bytes_, at + 16, 4);
    cd_disk = le(bytes_, at + 20, 4);
    disk_entries = le(bytes_, at + 24, 8);
    count = le(bytes_, at + 32, 8);
    cd_size = le(bytes_, at + 40, 8);
    cd_offset = le(bytes_, at + 48, 8);
    cd_limit = at;
  }
  fail_unless(disk == 0 && cd_disk == 0 && disk_entries == count, "split (multi-disk) zip archives are not supported");
  fail_unless(cd_offset <= cd_limit && cd_size <= cd_limit - cd_offset, "central directory (offset ", cd_offset,
              ", ", cd_size, " bytes) runs past its end record at ", cd_limit);
  fail_unless(count <= cd_size / kCentralSize, "central directory of ", cd_size, " bytes cannot hold ", count,
              " entries");

  std::uint64_t pos = cd_offset;
  const std::uint64_t cd_end = cd_offset + cd_size;
  for (std::uint64_t i = 0; i < count; ++i) {
    fail_unless(kCentralSize <= cd_end - pos && le(bytes_, pos, 4) == kCentralHeader, "central directory entry ", i,
                " at offset ", pos, " is malformed");
    const std::uint64_t flags = le(bytes_, pos + 8, 2);
    const std::uint64_t method = le(bytes_, pos + 10, 2);
    const auto crc = static_cast<std::uint32_t>(le(bytes_, pos + 16, 4));
    std::uint64_t compressed = le(bytes_, pos + 20, 4);
    std::uint64_t uncompressed = le(bytes_, pos + 24, 4);
    const std::uint64_t name_len = le(bytes_, pos + 28, 2);
    const std::uint64_t extra_len = le(bytes_, pos + 30, 2);
    const std::uint64_t comment_len = le(bytes_, pos + 32, 2);
    std::uint64_t start_disk = le(bytes_, pos + 34, 2);
    std::uint64_t local = le(bytes_, pos + 42, 4);
    fail_unless(name_len + extra_len + comment_len <= cd_end - pos - kCentralSize, "central directory entry ", i,
                " at offset ", pos, " runs past the central directory");
    const std::string name(reinterpret_cast<const char*>(bytes_.data() + pos + kCentralSize), name_len);
    const std::string shown = printable(name, 120);

    // ZIP64 extra field: the 64-bit values of the fields stored as all-ones, in this order.
    std::uint64_t extra = pos + kCentralSize + name_len;
    const std::uint64_t extra_end = extra + extra_len;
    while (extra_end - extra >= 4) {
      const std::uint64_t id = le(bytes_, extra, 2);
      const std::uint64_t n = le(bytes_, extra + 2, 2);
      fail_unless(n <= extra_end - extra - 4, "record ", shown, ": extra field runs past its entry");
      if (id == 0x0001) {
        std::uint64_t at = extra + 4;
        const auto take = [&](std::uint64_t& field, std::uint64_t all_ones, int width) {
          if (field != all_ones) return;
          fail_unless(static_cast<std::uint64_t>(width) <= extra + 4 + n - at, "record ", shown,
                      ": ZIP64 extra field is too short");
          field = le(bytes_, at, width);
          at += static_cast<std::uint64_t>(width);
        };
        take(uncompressed, 0xffffffff, 8);
        take(compressed, 0xffffffff, 8);
        take(local, 0xffffffff, 8);
        take(start_disk, 0xffff, 4);
      }
      extra += 4 + n;
    }
    pos = extra_end + comment_len;

    fail_unless((flags & 0x41) == 0, "record ", shown, " is encrypted");
    fail_unless(method == 0, "record ", shown, " is compressed (method ", method,
                "); torch.save writes stored (uncompressed) records");
    fail_unless(compressed == uncompressed, "record ", shown, ": stored sizes differ (", compressed, " vs ",
                uncompressed, ")");
    fail_unless(start_disk == 0, "split (multi-disk) zip archives are not supported");
    // The local header repeats the name; its own sizes may be zero (data descriptor), so only its
    // name and extra lengths are used, to find where the data starts.
    fail_unless(in_file(local, kLocalSize) && le(bytes_, local, 4) == kLocalHeader, "record ", shown,
                ": no local header at offset ", local);
    const std::uint64_t local_name = le(bytes_, local + 26, 2);
    const std::uint64_t local_extra = le(bytes_, local + 28, 2);
    const std::uint64_t data = local + kLocalSize + local_name + local_extra;
    fail_unless(local_name == name_len && in_file(local + kLocalSize, local_name) &&
                    std::equal(name.begin(), name.end(),
                               reinterpret_cast<const char*>(bytes_.data() + local + kLocalSize)),
                "record ", shown, ": local header at offset ", local, " names another record");
    fail_unless(in_file(data, uncompressed), "record ", shown, " (", uncompressed, " bytes at offset ", data,
                ") runs past the end of the file (", size, " bytes): truncated?");

    // Every record sits in one top-level folder named by the first one, as PyTorchStreamReader reads it.
    if (i == 0) {
      const auto slash = name.find('/');
      fail_unless(slash != std::string::npos && slash > 0, "first record ", shown,
                  " is not inside a folder (torch.save writes archive/data.pkl, ...)");
      archive_ = name.substr(0, slash);
    }
    if (name.size() <= archive_.size() + 1 || name.compare(0, archive_.size() + 1, archive_ + "/") != 0) continue;
    const bool added =
        entries_.emplace(name.substr(archive_.size() + 1), Entry{data, uncompressed, crc}).second;
    fail_unless(added, "record ", shown, " appears twice");
  }
}

bool TorchZip::has(std::string_view name) const { return entries_.find(name) != entries_.end(); }

std::span<const std::byte> TorchZip::record(std::string_view name) const {
  const auto it = entries_.find(name);
  HOTPATH_CHECK(it != entries_.end(), source_, kWhat, "no record ", archive_, "/", printable(name, 120));
  const auto out = bytes_.subspan(it->second.offset, it->second.size);
  HOTPATH_CHECK(!options_.check_crc || crc32_of(out) == it->second.crc, source_, kWhat, "record ", archive_, "/",
                printable(name, 120), " fails its CRC-32 check (corrupted file?)");
  return out;
}

std::vector<std::string> TorchZip::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

}  // namespace hotpath::formats
