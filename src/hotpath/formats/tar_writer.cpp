// Deterministic ustar writing (pax headers only when ustar cannot hold the name or size) and
// shard rolling. Every header field is fixed except name, size and checksum, so identical
// input gives identical bytes.
#include "hotpath/formats/tar_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/formats/tar.h"

namespace hotpath::formats {
namespace {

constexpr std::uint64_t kBlock = 512;
constexpr std::size_t kNameLength = 100;
constexpr std::size_t kPrefixLength = 155;
constexpr std::uint64_t kMaxOctalSize = (1ULL << 33) - 1;  // 11 octal digits: 8 GiB - 1
constexpr std::uint64_t kEndOfArchive = 2 * kBlock;
// Same name python's tarfile gives pax headers, so tools list our shards like theirs.
constexpr std::string_view kPaxHeaderName = "././@PaxHeader";

using Block = std::array<char, kBlock>;

std::uint64_t round_up(std::uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// ustar splits a long name at a slash into prefix (<= 155) + name (<= 100); like tarfile we
// take the first slash that makes both fit.
std::optional<std::pair<std::string_view, std::string_view>> ustar_split(std::string_view name) {
  if (name.size() <= kNameLength) return std::pair{std::string_view(), name};
  for (std::size_t slash = name.find('/'); slash != std::string_view::npos; slash = name.find('/', slash + 1)) {
    const std::string_view prefix = name.substr(0, slash);
    const std::string_view rest = name.substr(slash + 1);
    if (prefix.size() <= kPrefixLength && rest.size() <= kNameLength && !rest.empty()) return std::pair{prefix, rest};
  }
  return std::nullopt;
}

// One "LEN key=value\n" record; LEN counts itself.
void append_pax_record(std::string& out, std::string_view key, std::string_view value) {
  const std::size_t body = 1 + key.size() + 1 + value.size() + 1;  // " key=value\n"
  std::size_t length = body + 1;
  while (std::to_string(length).size() + body != length) length = std::to_string(length).size() + body;
  out += std::to_string(length);
  out += ' ';
  out.append(key).append("=").append(value).append("\n");
}

// The pax records a member needs, "" when plain ustar holds it.
std::string pax_records(std::string_view name, std::uint64_t size) {
  std::string out;
  if (!ustar_split(name)) append_pax_record(out, "path", name);
  if (size > kMaxOctalSize) append_pax_record(out, "size", std::to_string(size));
  return out;
}

void put_octal(Block& h, std::size_t offset, std::size_t length, std::uint64_t value) {
  // length - 1 zero-padded digits and a NUL, as tarfile and GNU tar write them.
  for (std::size_t i = length - 1; i-- > 0;) {
    h[offset + i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  h[offset + length - 1] = '\0';
}

Block make_header(std::string_view prefix, std::string_view name, std::uint64_t size, char type) {
  Block h{};
  std::memcpy(h.data(), name.data(), std::min(name.size(), kNameLength));
  put_octal(h, 100, 8, 0644);  // mode
  put_octal(h, 108, 8, 0);     // uid
  put_octal(h, 116, 8, 0);     // gid
  put_octal(h, 124, 12, size <= kMaxOctalSize ? size : 0);  // larger sizes travel in pax
  put_octal(h, 136, 12, 0);    // mtime
  h[156] = type;
  std::memcpy(h.data() + 257, "ustar\0" "00", 8);
  put_octal(h, 329, 8, 0);  // devmajor
  put_octal(h, 337, 8, 0);  // devminor
  if (!prefix.empty()) std::memcpy(h.data() + 345, prefix.data(), std::min(prefix.size(), kPrefixLength));
  std::memset(h.data() + 148, ' ', 8);
  std::uint64_t sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  put_octal(h, 148, 7, sum);  // six digits + NUL, then the space already there
  return h;
}

std::uint64_t member_bytes_on_disk(std::string_view name, std::uint64_t size) {
  const std::string pax = pax_records(name, size);
  return kBlock + (pax.empty() ? 0 : kBlock + round_up(pax.size())) + round_up(size);
}

// Formats the shard pattern's single integer conversion (%d %i %u %x %X %o with optional
// flags, width and precision). The pattern is checked so a stray "%s" cannot reach printf.
class ShardPattern {
 public:
  explicit ShardPattern(std::string pattern) : pattern_(std::move(pattern)) {
    int conversions = 0;
    for (std::size_t i = 0; i < pattern_.size(); ++i) {
      if (pattern_[i] != '%') continue;
      if (i + 1 < pattern_.size() && pattern_[i + 1] == '%') {
        ++i;
        continue;
      }
      std::size_t j = i + 1;
      while (j < pattern_.size() && std::strchr("-+ #0", pattern_[j]) != nullptr && pattern_[j] != '\0') ++j;
      const std::size_t width_begin = j;
      while (j < pattern_.size() && pattern_[j] >= '0' && pattern_[j] <= '9') ++j;
      HOTPATH_CHECK(j - width_begin <= 2, "shard pattern '", pattern_, "': field width too large");
      if (j < pattern_.size() && pattern_[j] == '.') {
        const std::size_t precision_begin = ++j;
        while (j < pattern_.size() && pattern_[j] >= '0' && pattern_[j] <= '9') ++j;
        HOTPATH_CHECK(j - precision_begin <= 2, "shard pattern '", pattern_, "': precision too large");
      }
      HOTPATH_CHECK(j < pattern_.size() && std::strchr("diuxXo", pattern_[j]) != nullptr && pattern_[j] != '\0',
                    "shard pattern '", pattern_, "': expected an integer conversion such as %06d at byte ", i);
      conversion_ = pattern_[j];
      spec_begin_ = i;
      spec_end_ = j + 1;
      ++conversions;
      i = j;
    }
    HOTPATH_CHECK(conversions == 1, "shard pattern '", pattern_,
                  "' must hold exactly one integer conversion for the shard index (e.g. train-%06d.tar), found ",
                  conversions);
  }

  [[nodiscard]] std::string format(std::uint64_t index) const {
    const std::string spec = pattern_.substr(spec_begin_, spec_end_ - spec_begin_ - 1) + "ll" + conversion_;
    std::array<char, 256> buf{};
    const bool is_signed = conversion_ == 'd' || conversion_ == 'i';
    const int n = is_signed ? std::snprintf(buf.data(), buf.size(), spec.c_str(), static_cast<long long>(index))
                            : std::snprintf(buf.data(), buf.size(), spec.c_str(), static_cast<unsigned long long>(index));
    HOTPATH_ASSERT(n > 0 && static_cast<std::size_t>(n) < buf.size());
    return unescape(pattern_.substr(0, spec_begin_)) + std::string(buf.data(), static_cast<std::size_t>(n)) +
           unescape(pattern_.substr(spec_end_));
  }

 private:
  static std::string unescape(std::string_view s) {  // "%%" -> "%"
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      out += s[i];
      if (s[i] == '%' && i + 1 < s.size() && s[i + 1] == '%') ++i;
    }
    return out;
  }

  std::string pattern_;
  char conversion_ = 'd';
  std::size_t spec_begin_ = 0;
  std::size_t spec_end_ = 0;
};

// The member name and the checks that make a sample read back exactly as written.
std::string member_name(const SampleToWrite& sample, std::string_view ext) {
  std::string name = sample.key + "." + std::string(ext);
  const KeyExt back = split_key(name);
  HOTPATH_CHECK(back.ok && back.key == sample.key && back.ext == ext, "sample '", sample.key, "', extension '", ext,
                "': member '", name, "' would read back as key '", back.key, "', extension '", back.ext,
                "' (keys must have no dot in their last path component; extensions must be lowercase)");
  HOTPATH_CHECK(!is_meta_member(name), "sample '", sample.key, "': member '", name,
                "' would be skipped as webdataset metadata (names like __x__)");
  HOTPATH_CHECK(ext != "__key__" && ext != "__url__", "sample '", sample.key, "': extension '", ext,
                "' is reserved by webdataset");
  return name;
}

}  // namespace

// ---- TarWriter ---------------------------------------------------------------------------------

TarWriter::TarWriter(std::string path) : path_(std::move(path)), tmp_path_(path_ + ".tmp") {
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  HOTPATH_CHECK(file_ != nullptr, path_, ": cannot create ", tmp_path_, ": ", std::strerror(errno));
}

TarWriter::~TarWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

void TarWriter::write_raw(const void* data, std::size_t size) {
  if (size == 0) return;
  const std::size_t n = std::fwrite(data, 1, size, file_);
  HOTPATH_CHECK(n == size, tmp_path_, ": write failed at byte ", bytes_ + n, ": ", std::strerror(errno));
  bytes_ += size;
}

void TarWriter::add(std::string_view name, std::span<const std::byte> data) {
  HOTPATH_CHECK(file_ != nullptr, path_, ": add('", name, "') after close()");
  HOTPATH_CHECK(!name.empty(), path_, ": empty member name");
  HOTPATH_CHECK(name.find('\0') == std::string_view::npos, path_, ": member name with a NUL byte");
  static constexpr Block kZeros{};
  const std::uint64_t size = data.size();
  const std::string pax = pax_records(name, size);
  if (!pax.empty()) {
    const Block pax_header = make_header({}, kPaxHeaderName, pax.size(), 'x');
    write_raw(pax_header.data(), pax_header.size());
    write_raw(pax.data(), pax.size());
    write_raw(kZeros.data(), round_up(pax.size()) - pax.size());
  }
  // A name only pax can hold is cut to 100 bytes in the ustar header, as tarfile does.
  const auto [prefix, short_name] = ustar_split(name).value_or(std::pair{std::string_view(), name.substr(0, kNameLength)});
  const Block header = make_header(prefix, short_name, size, '0');
  write_raw(header.data(), header.size());
  write_raw(data.data(), data.size());
  write_raw(kZeros.data(), round_up(size) - size);
}

void TarWriter::close() {
  if (file_ == nullptr) return;
  static constexpr std::array<char, kEndOfArchive> kEnd{};
  write_raw(kEnd.data(), kEnd.size());
  HOTPATH_CHECK(std::fflush(file_) == 0, tmp_path_, ": flush failed: ", std::strerror(errno));
  HOTPATH_CHECK(::fsync(::fileno(file_)) == 0, tmp_path_, ": fsync failed: ", std::strerror(errno));
  std::FILE* f = std::exchange(file_, nullptr);
  if (std::fclose(f) != 0 || std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_path_.c_str());
    HOTPATH_CHECK(false, path_, ": cannot finish ", tmp_path_, ": ", std::strerror(err));
  }
  // Make the rename itself durable.
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// ---- ShardWriter -------------------------------------------------------------------------------

ShardWriter::ShardWriter(std::string pattern, ShardWriterOptions options)
    : pattern_(std::move(pattern)), options_(options) {
  (void)ShardPattern(pattern_);  // reject a bad pattern now, not at the first write
}

void ShardWriter::write(const SampleToWrite& sample) {
  HOTPATH_CHECK(!sample.key.empty(), pattern_, ": sample with an empty key");
  HOTPATH_CHECK(!sample.members.empty(), pattern_, ": sample '", sample.key, "' has no members");
  std::vector<std::string> names;
  names.reserve(sample.members.size());
  std::uint64_t sample_bytes = 0;
  for (std::size_t i = 0; i < sample.members.size(); ++i) {
    const auto& [ext, data] = sample.members[i];
    for (std::size_t j = 0; j < i; ++j) {
      HOTPATH_CHECK(sample.members[j].first != ext, pattern_, ": sample '", sample.key, "' has extension '", ext,
                    "' twice");
    }
    names.push_back(member_name(sample, ext));
    sample_bytes += member_bytes_on_disk(names.back(), data.size());
  }
  if (current_ != nullptr && in_shard_ > 0) {
    const bool full_count = options_.max_samples != 0 && in_shard_ >= options_.max_samples;
    const bool full_bytes =
        options_.max_bytes != 0 && current_->bytes_written() + sample_bytes + kEndOfArchive > options_.max_bytes;
    if (full_count || full_bytes) {
      current_->close();
      shards_.push_back(current_->path());
      current_.reset();
    }
  }
  if (current_ == nullptr) {
    current_ = std::make_unique<TarWriter>(ShardPattern(pattern_).format(shards_.size()));
    in_shard_ = 0;
  }
  for (std::size_t i = 0; i < names.size(); ++i) current_->add(names[i], sample.members[i].second);
  ++in_shard_;
  ++samples_;
}

void ShardWriter::close() {
  if (current_ == nullptr) return;
  current_->close();
  shards_.push_back(current_->path());
  current_.reset();
}

void remove_stale_shards(const std::string& prefix, std::size_t written) {
  const std::filesystem::path p(prefix);
  const std::filesystem::path dir = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  const std::string stem = p.filename().string() + "-";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != stem.size() + 10 || !name.starts_with(stem) || !name.ends_with(".tar")) continue;
    const std::string digits = name.substr(stem.size(), 6);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    if (static_cast<std::size_t>(std::stoul(digits)) >= written) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace hotpath::formats
