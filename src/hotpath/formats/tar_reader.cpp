// Tar shard indexing and WebDataset grouping. The archive rules follow python's tarfile (what
// webdataset 1.0.2 reads with) and the grouping rules follow webdataset's tariterators.py, so
// both see the same samples; where tarfile silently stops (a corrupt header mid-archive) we
// stop too but record why.
#include "hotpath/core/strings.h"
#include "hotpath/formats/tar.h"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::formats {
namespace {

constexpr std::uint64_t kBlock = 512;

// Header field offsets and lengths (POSIX ustar; GNU shares everything below 345).
struct Field {
  std::size_t offset;
  std::size_t length;
  const char* name;
};
constexpr Field kName{0, 100, "name"};
constexpr Field kMode{100, 8, "mode"};
constexpr Field kUid{108, 8, "uid"};
constexpr Field kGid{116, 8, "gid"};
constexpr Field kSize{124, 12, "size"};
constexpr Field kMtime{136, 12, "mtime"};
constexpr Field kChksum{148, 8, "chksum"};
constexpr std::size_t kTypeflag = 156;
constexpr std::size_t kMagic = 257;
constexpr Field kDevMajor{329, 8, "devmajor"};
constexpr Field kDevMinor{337, 8, "devminor"};
constexpr Field kPrefix{345, 155, "prefix"};
// Old GNU sparse headers: "is extended" flag in the header and in each extension block.
constexpr std::size_t kSparseIsExtended = 482;
constexpr std::size_t kSparseExtIsExtended = 504;

using Bytes = std::span<const std::byte>;

std::string_view as_chars(Bytes b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// A C string field: up to the first NUL.
std::string_view c_string(std::string_view field) {
  return field.substr(0, std::min(field.find('\0'), field.size()));
}

std::uint64_t round_up(std::uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

enum class NumberStatus { kOk, kNegative, kOverflow, kInvalid };
struct Number {
  NumberStatus status = NumberStatus::kInvalid;
  std::uint64_t value = 0;
};

// A numeric header field as tarfile's nti() reads it: base-256 when the first byte is 0x80
// (positive) or 0xff (negative, GNU), else octal up to the first NUL with surrounding blanks.
Number parse_number(std::string_view field) {
  const auto lead = static_cast<unsigned char>(field[0]);
  if (lead == 0x80 || lead == 0xff) {
    if (lead == 0xff) return {NumberStatus::kNegative, 0};
    std::uint64_t v = 0;
    for (std::size_t i = 1; i < field.size(); ++i) {
      if (v >> 56 != 0) return {NumberStatus::kOverflow, 0};
      v = (v << 8) | static_cast<unsigned char>(field[i]);
    }
    return {NumberStatus::kOk, v};
  }
  std::string_view s = c_string(field);
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '7') return {NumberStatus::kInvalid, 0};
    if (v >> 61 != 0) return {NumberStatus::kOverflow, 0};
    v = v * 8 + static_cast<std::uint64_t>(c - '0');
  }
  return {NumberStatus::kOk, v};
}

// Printable form of a raw field for error messages.
std::string quoted(std::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (char ch : raw) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + "'";
}

std::string to_octal(std::uint64_t v) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + (v & 7)));
    v >>= 3;
  } while (v != 0);
  return s;
}

bool all_zero(Bytes b) {
  return std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; });
}

// Why the block at `h` is not a valid header, or "" if it is (checksum + numeric fields).
std::string check_header(std::string_view h) {
  const Number stored = parse_number(h.substr(kChksum.offset, kChksum.length));
  if (stored.status != NumberStatus::kOk) {
    return "bad header checksum: field " + quoted(h.substr(kChksum.offset, kChksum.length)) +
           " is not an octal number";
  }
  // Sum with the checksum field counted as spaces. A plain loop (vectorised) then a fix-up is
  // much cheaper than a per-byte branch; this runs once per member.
  const auto sum_as = [&h]<typename Byte>() {
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < kBlock; ++i) sum += static_cast<Byte>(h[i]);
    for (std::size_t i = kChksum.offset; i < kChksum.offset + kChksum.length; ++i) sum -= static_cast<Byte>(h[i]);
    return sum + 8 * ' ';
  };
  const std::int64_t unsigned_sum = sum_as.template operator()<unsigned char>();
  if (stored.value != static_cast<std::uint64_t>(unsigned_sum) &&
      stored.value != static_cast<std::uint64_t>(sum_as.template operator()<signed char>())) {
    return "bad header checksum: stored " + to_octal(stored.value) + " (octal), computed " +
           to_octal(static_cast<std::uint64_t>(unsigned_sum));
  }
  for (const Field& f : {kMode, kUid, kGid, kSize, kMtime, kDevMajor, kDevMinor}) {
    const Number n = parse_number(h.substr(f.offset, f.length));
    if (n.status == NumberStatus::kInvalid) {
      return std::string(f.name) + " field " + quoted(h.substr(f.offset, f.length)) +
             " is not an octal number";
    }
    if (f.offset == kSize.offset && n.status != NumberStatus::kOk) {
      return std::string("size field ") + quoted(h.substr(f.offset, f.length)) +
             (n.status == NumberStatus::kNegative ? " is negative" : " overflows 64 bits");
    }
  }
  return {};
}

// A compressed shard fails the checksum test; say what it really is.
std::string_view compression_name(Bytes b) {
  const std::string_view s = as_chars(b);
  if (s.starts_with("\x1f\x8b")) return "gzip";
  if (s.starts_with("BZh")) return "bzip2";
  if (s.starts_with(std::string_view("\xfd" "7zXZ\0", 6))) return "xz";
  if (s.starts_with("\x28\xb5\x2f\xfd")) return "zstd";
  return {};
}

// The records of one pax extended header that matter to us. Views point into the mapping.
struct PaxRecords {
  std::optional<std::string_view> path;
  std::optional<std::uint64_t> size;
  bool sparse = false;
  std::string error;  // "" when well formed
};

std::optional<std::uint64_t> parse_decimal(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

// Parses "LEN key=value\n" records (LEN counts the whole record). Trailing NUL padding is
// tolerated; anything else that does not parse makes the header malformed. As in tarfile, a
// later record for the same key wins.
PaxRecords parse_pax(std::string_view data) {
  PaxRecords out;
  std::size_t pos = 0;
  while (pos < data.size()) {
    const std::string_view rest = data.substr(pos);
    if (all_zero({reinterpret_cast<const std::byte*>(rest.data()), rest.size()})) break;
    const std::size_t space = rest.find(' ');
    const std::size_t digits = space == std::string_view::npos ? rest.size() : space;
    const auto length = parse_decimal(rest.substr(0, std::min<std::size_t>(digits, 21)));
    if (space == std::string_view::npos || !length) {
      out.error = "malformed pax record at byte " + std::to_string(pos) + ": expected 'LEN key=value\\n', got " +
                  quoted(rest.substr(0, 32));
      return out;
    }
    if (*length > rest.size() || *length < space + 4) {
      out.error = "malformed pax record at byte " + std::to_string(pos) + ": length " +
                  std::to_string(*length) + " does not fit the " + std::to_string(rest.size()) +
                  " bytes left";
      return out;
    }
    const std::string_view record = rest.substr(0, *length);
    if (record.back() != '\n') {
      out.error = "malformed pax record at byte " + std::to_string(pos) + ": length " +
                  std::to_string(*length) + " does not end at a newline";
      return out;
    }
    const std::string_view body = record.substr(space + 1, record.size() - space - 2);
    const std::size_t eq = body.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      out.error = "malformed pax record at byte " + std::to_string(pos) + ": no 'key=' in " +
                  quoted(body.substr(0, 32));
      return out;
    }
    const std::string_view key = body.substr(0, eq);
    const std::string_view value = body.substr(eq + 1);
    if (key == "path") {
      std::string_view p = value;
      while (!p.empty() && p.back() == '/') p.remove_suffix(1);  // tarfile strips them too
      out.path = p;
    } else if (key == "size") {
      const auto v = parse_decimal(value);
      if (!v) {
        out.error = "malformed pax record: size " + quoted(value.substr(0, 32)) + " is not a decimal number";
        return out;
      }
      out.size = *v;
    } else if (key.starts_with("GNU.sparse.")) {
      out.sparse = true;
    }
    pos += *length;
  }
  return out;
}

// Mirrors webdataset's base_plus_ext regex ^((?:.*/|)[^.]+)[.]([^/]*)$ exactly: the split is
// always at the first dot of the basename; the regex only decides whether there is a match
// (e.g. "a/.hidden" matches with key "a/", ".hidden" and "a.b/.c" do not).
// Returns the position of the splitting dot, or npos when the name belongs to no sample.
std::size_t key_end(std::string_view p) {
  constexpr auto npos = std::string_view::npos;
  const std::size_t last_slash = p.rfind('/');
  const std::size_t base = last_slash == npos ? 0 : last_slash + 1;
  const std::size_t dot = p.find('.', base);
  if (dot == npos || dot == 0) return npos;
  // The regex's "(?:.*/|)" ends at some slash j (or is empty), then "[^.]+" must reach `dot`
  // without crossing another dot, and ".*" cannot cross a newline.
  const std::size_t dir_dot = p.rfind('.', dot - 1);  // last dot in the directory part
  const std::size_t newline = p.find('\n');
  bool ok = dir_dot == npos;  // the empty alternative: "[^.]+" from the start
  const std::size_t lo = dir_dot == npos ? 0 : dir_dot + 1;
  const std::size_t hi = std::min(dot - 1, newline);  // j < dot - 1 and no newline before j
  const std::size_t slash = p.find('/', lo);
  if (slash != npos && slash < hi) ok = true;
  return ok ? dot : npos;
}

bool is_reserved_ext(std::string_view ext) { return ext == "__key__" || ext == "__url__"; }

// Walks the headers of one archive and groups regular members into samples.
class Indexer {
 public:
  Indexer(std::string_view shard, Bytes data) : shard_(shard), data_(data) {}

  ShardIndex run() {
    walk();
    drop_marked_bad();
    return std::move(out_);
  }

 private:
  void bad(std::uint64_t offset, std::string member, std::string reason) {
    out_.bad.push_back({std::string(shard_), offset, std::move(member), std::move(reason)});
  }

  // Extended headers (GNU 'L'/'K', pax 'x') seen since the last real member.
  struct Pending {
    bool active = false;
    std::uint64_t start = 0;  // offset of the first extended header: the member's offset
    std::optional<std::string_view> name;
    std::optional<std::uint64_t> size;
    bool sparse = false;
    std::string error;
  };

  void begin_chain(std::uint64_t offset) {
    if (!pending_.active) {
      pending_.active = true;
      pending_.start = offset;
    }
  }

  void walk() {
    const std::uint64_t end = data_.size();
    if (end == 0) {
      bad(0, "", "empty file: not a tar archive");
      return;
    }
    std::uint64_t offset = 0;
    while (true) {
      if (offset == end) {  // a clean member boundary without end-of-archive blocks is fine
        if (pending_.active) bad(pending_.start, "", "archive ends after an extended header, before its member");
        return;
      }
      const Bytes block = data_.subspan(offset, std::min(kBlock, end - offset));
      if (block.size() < kBlock || all_zero(block)) {
        if (!all_zero(block)) {
          bad(offset, "", "truncated archive: a header needs 512 bytes, only " + std::to_string(block.size()) +
                              " are left");
        } else if (pending_.active) {
          bad(pending_.start, "", "end of archive right after an extended header, before its member");
        }
        return;
      }
      const std::string_view h = as_chars(block);
      if (std::string reason = check_header(h); !reason.empty()) {
        if (offset == 0 && !compression_name(block).empty()) {
          reason = "not a tar archive: the shard is " + std::string(compression_name(block)) +
                   "-compressed; hotpath reads uncompressed tar";
        }
        const std::string_view name = c_string(h.substr(kName.offset, kName.length));
        bad(pending_.active ? pending_.start : offset, std::string(name), reason + "; rest of the shard skipped");
        return;
      }
      std::uint64_t next = 0;
      if (!member(offset, h, next)) return;
      offset = next;
    }
  }

  // Handles the valid header at `offset`; sets `next` to the following header. False = stop.
  bool member(std::uint64_t offset, std::string_view h, std::uint64_t& next) {
    const char type = h[kTypeflag];
    const std::uint64_t header_size = parse_number(h.substr(kSize.offset, kSize.length)).value;
    if (type == 'S') return sparse_member(offset, h, header_size, next);
    const bool extended = type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g';
    const bool regular = type == '0' || type == '\0' || type == '7';
    // tarfile skips no data for links, devices, fifos and directories (their size is ignored).
    const bool has_data = !(type >= '1' && type <= '6');
    std::uint64_t size = has_data ? header_size : 0;
    if (!extended && pending_.size && (regular || !is_known_type(type))) size = *pending_.size;

    const std::uint64_t data_offset = offset + kBlock;
    const std::uint64_t left = data_.size() - data_offset;
    const std::uint64_t member_offset = pending_.active ? pending_.start : offset;
    if (size > left) {
      bad(member_offset, full_name(h),
          "truncated archive: member data needs " + std::to_string(size) + " bytes at offset " +
              std::to_string(data_offset) + ", only " + std::to_string(left) + " are left; rest of the shard skipped");
      return false;
    }
    const std::string_view data = as_chars(data_.subspan(data_offset, size));
    next = data_offset + round_up(size);
    const bool padding_cut = next > data_.size();

    if (type == 'L' || type == 'K') {
      begin_chain(offset);
      // The outermost extended header wins, as in tarfile's recursive reading.
      if (type == 'L' && !pending_.name) pending_.name = c_string(data);
    } else if (type == 'x' || type == 'X') {
      begin_chain(offset);
      PaxRecords pax = parse_pax(data);
      if (!pax.error.empty()) {
        if (pending_.error.empty()) pending_.error = std::move(pax.error);
      } else {
        if (!pending_.name && pax.path) pending_.name = *pax.path;
        if (!pending_.size && pax.size) pending_.size = *pax.size;
        pending_.sparse = pending_.sparse || pax.sparse;
      }
    } else if (type == 'g') {
      // Global headers carry archive-wide defaults (mtime, charset, comments). tarfile would
      // even apply a global "path" to every later member; no writer does that, so we only
      // check that the records are well formed.
      if (PaxRecords pax = parse_pax(data); !pax.error.empty()) bad(offset, "", "global pax header: " + pax.error);
    } else {
      handle_entry(offset, h, type, regular, data_offset, size);
      pending_ = Pending{};
    }
    if (padding_cut) {
      bad(member_offset, full_name(h),
          "truncated archive: it ends inside the padding after this member's data");
      return false;
    }
    return true;
  }

  static bool is_known_type(char type) {
    return std::string_view("01234567LKSxXg").find(type) != std::string_view::npos || type == '\0';
  }

  // Old GNU sparse file: its data is a sparse map we do not expand. Skip the extension blocks
  // and the data so the walk stays in step, and count it.
  bool sparse_member(std::uint64_t offset, std::string_view h, std::uint64_t size, std::uint64_t& next) {
    const std::uint64_t member_offset = pending_.active ? pending_.start : offset;
    std::string name = full_name(h);
    pending_ = Pending{};
    std::uint64_t pos = offset + kBlock;
    bool extended = h[kSparseIsExtended] != '\0';
    while (extended && data_.size() - pos >= kBlock) {
      extended = as_chars(data_.subspan(pos, kBlock))[kSparseExtIsExtended] != '\0';
      pos += kBlock;
    }
    if (extended || size > data_.size() - pos) {
      bad(member_offset, std::move(name), "truncated archive inside a GNU sparse member; rest of the shard skipped");
      return false;
    }
    bad(member_offset, std::move(name), "GNU sparse files are not supported; member skipped");
    next = pos + round_up(size);
    if (next > data_.size()) {
      bad(member_offset, "", "truncated archive: it ends inside the padding after a sparse member");
      return false;
    }
    return true;
  }

  // The full name of a plain entry: a ustar prefix joins the name, except in GNU headers where
  // that area holds other fields.
  std::string full_name(std::string_view h) const {
    if (pending_.name) return std::string(*pending_.name);
    const std::string_view name = c_string(h.substr(kName.offset, kName.length));
    const bool gnu = h.substr(kMagic, 8) == std::string_view("ustar  \0", 8);
    const std::string_view prefix = gnu ? std::string_view() : c_string(h.substr(kPrefix.offset, kPrefix.length));
    if (prefix.empty()) return std::string(name);
    std::string out;
    out.reserve(prefix.size() + 1 + name.size());
    out.append(prefix).append("/").append(name);
    return out;
  }

  void handle_entry(std::uint64_t offset, std::string_view h, char type, bool regular, std::uint64_t data_offset,
                    std::uint64_t size) {
    const std::uint64_t member_offset = pending_.active ? pending_.start : offset;
    if (!regular) return;  // directories, links, devices, unknown types: not sample members
    // V7 tar marks a directory by a trailing slash on a type-'\0' entry.
    if (type == '\0' && c_string(h.substr(kName.offset, kName.length)).ends_with('/')) return;
    std::string name = full_name(h);
    if (!pending_.error.empty()) {
      bad(member_offset, std::move(name), pending_.error + "; member skipped");
      return;
    }
    if (pending_.sparse) {
      bad(member_offset, std::move(name), "GNU sparse files (pax) are not supported; member skipped");
      return;
    }
    add_to_sample(std::move(name), member_offset, data_offset, size);
  }

  // webdataset's tar_file_iterator + group_by_keys for one regular member.
  void add_to_sample(std::string name, std::uint64_t header_offset, std::uint64_t data_offset, std::uint64_t size) {
    if (is_meta_member(name)) return;
    const std::size_t dot = key_end(name);
    if (dot == std::string_view::npos) return;  // no extension: dropped without ending the sample
    // Views into `name` until we know a new key is needed: no allocation per member for keys.
    const std::string_view key = std::string_view(name).substr(0, dot);
    std::string ext = ascii_lower(std::string_view(name).substr(dot + 1));  // python's str.lower() on ASCII
    if (is_reserved_ext(ext)) {
      bad(header_offset, std::move(name),
          "extension '" + ext + "' collides with a field webdataset reserves; member skipped");
      return;
    }
    if (out_.samples.empty() || out_.samples.back().key != key) {
      TarSample& s = out_.samples.emplace_back();
      s.key = key;
      s.offset = header_offset;
      sample_exts_.clear();
    }
    TarSample& sample = out_.samples.back();
    // A set, not sample.find(): one sample of 100,000 members must not cost 10^10 comparisons.
    if (!sample_exts_.insert(ext).second) {
      const SampleMember* first = sample.find(ext);
      bad(header_offset, std::move(name),
          "duplicate extension '" + ext + "' in sample '" + sample.key + "' (first at offset " +
              std::to_string(first->header_offset) + "); webdataset raises here; member skipped");
      return;
    }
    if (ext == "__bad__" && size > 0) marked_bad_ = true;
    sample.members.push_back({std::move(name), std::move(ext), header_offset, data_offset, size});
  }

  // A non-empty "__bad__" member makes webdataset's valid_sample() drop the whole sample.
  void drop_marked_bad() {
    if (!marked_bad_) return;
    std::erase_if(out_.samples, [this](const TarSample& s) {
      const SampleMember* m = s.find("__bad__");
      if (m == nullptr || m->size == 0) return false;
      bad(s.offset, m->name, "sample '" + s.key + "' is marked __bad__; webdataset drops it");
      return true;
    });
  }

  std::string_view shard_;
  Bytes data_;
  ShardIndex out_;
  Pending pending_;
  bool marked_bad_ = false;
  std::unordered_set<std::string> sample_exts_;  // extensions of out_.samples.back()
};

}  // namespace

std::string BadRecord::to_string() const {
  std::string out = shard;
  out += ':';
  out += std::to_string(offset);
  out += ':';
  out += printable(member, member.size());  // member names come from the archive: keep the line one line
  out += ": ";
  out += reason;
  return out;
}

const SampleMember* TarSample::find(std::string_view ext) const {
  for (const SampleMember& m : members) {
    if (m.ext == ext) return &m;
  }
  return nullptr;
}

KeyExt split_key(std::string_view member_path) {
  const std::size_t dot = key_end(member_path);
  if (dot == std::string_view::npos) return {};
  return {std::string(member_path.substr(0, dot)), ascii_lower(member_path.substr(dot + 1)), true};
}


bool is_meta_member(std::string_view p) {
  if (!p.starts_with("__")) return false;
  const std::size_t slash = p.find('/');
  // tar_file_iterator: a top-level "__...__" name.
  if (slash == std::string_view::npos && p.ends_with("__")) return true;
  // skip_meta regex r"__[^/]*__($|/)", where "$" may also sit before a final newline.
  const std::size_t first = slash == std::string_view::npos ? p.size() : slash;
  if (first >= 4 && p.substr(first - 2, 2) == "__") return true;
  return slash == std::string_view::npos && p.size() >= 5 && p.back() == '\n' &&
         p.substr(p.size() - 3, 2) == "__";
}

ShardIndex ShardReader::index_bytes(std::string_view shard_name, std::span<const std::byte> bytes) {
  return Indexer(shard_name, bytes).run();
}

ShardReader::ShardReader(std::string path) : file_(path) {
  ShardIndex index = index_bytes(file_.path(), file_.bytes());
  samples_ = std::move(index.samples);
  bad_ = std::move(index.bad);
}

std::span<const std::byte> ShardReader::bytes(const SampleMember& member) const {
  return file_.bytes().subspan(member.data_offset, member.size);
}

}  // namespace hotpath::formats
