#include "hotpath/formats/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/json.h"

namespace hotpath::formats {
namespace {

using Json = nlohmann::json;

constexpr std::size_t kLengthPrefixBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  std::size_t bits;
};

// Indexed by the enum's value.
constexpr std::array<DtypeInfo, 22> kDtypes = {{
    {Dtype::BOOL, "BOOL", 8},       {Dtype::F4, "F4", 4},
    {Dtype::F6_E2M3, "F6_E2M3", 6}, {Dtype::F6_E3M2, "F6_E3M2", 6},
    {Dtype::U8, "U8", 8},           {Dtype::I8, "I8", 8},
    {Dtype::F8_E5M2, "F8_E5M2", 8}, {Dtype::F8_E4M3, "F8_E4M3", 8},
    {Dtype::F8_E8M0, "F8_E8M0", 8}, {Dtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {Dtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {Dtype::I16, "I16", 16},        {Dtype::U16, "U16", 16},
    {Dtype::F16, "F16", 16},        {Dtype::BF16, "BF16", 16},
    {Dtype::I32, "I32", 32},        {Dtype::U32, "U32", 32},
    {Dtype::F32, "F32", 32},        {Dtype::C64, "C64", 64},
    {Dtype::F64, "F64", 64},        {Dtype::I64, "I64", 64},
    {Dtype::U64, "U64", 64},
}};

const DtypeInfo& info(Dtype dtype) {
  const auto index = static_cast<std::size_t>(dtype);
  HOTPATH_ASSERT(index < kDtypes.size() && kDtypes[index].dtype == dtype);
  return kDtypes[index];
}

std::string known_dtype_names() {
  std::string out;
  for (const auto& d : kDtypes) out.append(out.empty() ? "" : ", ").append(d.name);
  return out;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i == 0 ? "" : ", ") << shape[i];
  out << ']';
  return out.str();
}

// Bits a tensor of `shape` and `dtype` occupies (callers reject sub-byte remainders), or nullopt
// when the element or bit count overflows 64 bits. Checked in dimension order, like the reference.
std::optional<std::uint64_t> checked_bits(const std::vector<std::int64_t>& shape, Dtype dtype) {
  std::uint64_t count = 1;
  for (const std::int64_t dim : shape) {
    const auto d = static_cast<std::uint64_t>(dim);
    if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / d) return std::nullopt;
    count *= d;
  }
  const std::uint64_t bits = dtype_bits(dtype);
  if (count > std::numeric_limits<std::uint64_t>::max() / bits) return std::nullopt;
  return count * bits;
}

std::uint64_t load_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

// ---- reader helpers ------------------------------------------------------------------------

// A JSON value for an error message, cut short so a hostile header cannot make a huge message.
std::string brief(const Json& value) {
  constexpr std::size_t kMaxChars = 60;
  std::string text = value.dump();
  if (text.size() > kMaxChars) text.replace(kMaxChars, std::string::npos, "...");
  return text;
}

// A non-negative JSON integer, or an error naming `where` and `field`.
std::uint64_t json_unsigned(const Json& value, const std::string& where, const std::string& field) {
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    HOTPATH_CHECK(false, where, ": ", field, " is ", value.get<std::int64_t>(),
                  ", expected a non-negative integer");
  }
  HOTPATH_CHECK(value.is_number_unsigned(), where, ": ", field, " is ", brief(value),
                ", expected a non-negative integer below 2^64");
  return value.get<std::uint64_t>();
}

const Json& json_field(const Json& entry, std::string_view field, const std::string& where) {
  const auto it = entry.find(field);
  HOTPATH_CHECK(it != entry.end(), where, ": missing field '", field,
                "' (an entry needs dtype, shape and data_offsets)");
  return *it;
}

// Parses the header JSON, rejecting duplicate keys (nlohmann, like serde, would keep the last one
// silently; a header that says two things about one tensor is corrupt), nesting bounded (core/json.h).
Json parse_header_json(std::string_view text, const std::string& source) {
  return parse_json(text, source + ": header", DuplicateKeys::kReject);
}

struct Entry {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  TensorView view;
};

Entry parse_entry(const std::string& name, const Json& value, const std::string& source) {
  const std::string where = detail::concat(source, ": tensor '", name, "'");
  HOTPATH_CHECK(value.is_object(), where, ": entry is a JSON ", value.type_name(),
                ", expected an object with dtype, shape and data_offsets");
  Entry entry;
  entry.view.name = name;

  const Json& dtype = json_field(value, "dtype", where);
  HOTPATH_CHECK(dtype.is_string(), where, ": dtype is ", brief(dtype), ", expected a string such as \"F32\"");
  const auto& dtype_text = dtype.get_ref<const std::string&>();
  const auto parsed = parse_dtype(dtype_text);
  HOTPATH_CHECK(parsed.has_value(), where, ": unknown dtype '", dtype_text, "' (known: ", known_dtype_names(),
                ")");
  entry.view.dtype = *parsed;

  const Json& shape = json_field(value, "shape", where);
  HOTPATH_CHECK(shape.is_array(), where, ": shape is ", brief(shape), ", expected an array of sizes");
  entry.view.shape.reserve(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::uint64_t dim = json_unsigned(shape[i], where, detail::concat("shape[", i, "]"));
    HOTPATH_CHECK(dim <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), where,
                  ": shape[", i, "] is ", dim, ", larger than the int64 sizes tensors use");
    entry.view.shape.push_back(static_cast<std::int64_t>(dim));
  }

  const Json& offsets = json_field(value, "data_offsets", where);
  HOTPATH_CHECK(offsets.is_array() && offsets.size() == 2, where, ": data_offsets is ", brief(offsets),
                ", expected [begin, end]");
  entry.begin = json_unsigned(offsets[0], where, "data_offsets[0]");
  entry.end = json_unsigned(offsets[1], where, "data_offsets[1]");
  HOTPATH_CHECK(entry.begin <= entry.end, where, ": data_offsets [", entry.begin, ", ", entry.end,
                "] end before they begin");

  const std::string what = detail::concat("shape ", shape_string(entry.view.shape), " of ", dtype_text);
  const auto bits = checked_bits(entry.view.shape, entry.view.dtype);
  HOTPATH_CHECK(bits.has_value(), where, ": ", what, " overflows 64 bits when counting its bytes");
  HOTPATH_CHECK(*bits % 8 == 0, where, ": ", what, " holds ", *bits, " bits, not a whole number of bytes");
  HOTPATH_CHECK(entry.end - entry.begin == *bits / 8, where, ": data_offsets [", entry.begin, ", ", entry.end,
                "] hold ", entry.end - entry.begin, " bytes but ", what, " needs ", *bits / 8);
  return entry;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::string& source) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;  // the reference accepts null as "no metadata"
  HOTPATH_CHECK(value.is_object(), source, ": __metadata__ is a JSON ", value.type_name(),
                ", expected an object of string values");
  for (const auto& [key, v] : value.items()) {
    HOTPATH_CHECK(v.is_string(), source, ": __metadata__ '", key, "' is ", brief(v), ", expected a string");
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

// ---- writer helpers ------------------------------------------------------------------------

// JSON string literal with the escapes serde_json uses (", \, control characters; UTF-8 kept
// as is), so headers match python's byte for byte. nlohmann also checks the UTF-8.
std::string json_string(const std::string& text, std::string_view what) {
  try {
    return Json(text).dump();
  } catch (const Json::exception& e) {
    HOTPATH_CHECK(false, what, " '", text, "' is not valid UTF-8: ", e.what());
  }
  return {};  // unreachable
}

struct Prepared {
  std::string header;  // padded with spaces to a multiple of 8
  std::vector<const TensorToWrite*> order;
  std::uint64_t data_bytes = 0;
};

Prepared prepare(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata,
                 const std::string& target) {
  Prepared out;
  out.order.reserve(tensors.size());
  std::set<std::string_view> names;
  for (const auto& t : tensors) {
    const std::string where = detail::concat(target, ": tensor '", t.name, "'");
    HOTPATH_CHECK(t.name != kMetadataKey, where, ": the name is reserved for the metadata entry");
    HOTPATH_CHECK(names.insert(t.name).second, where, ": duplicate tensor name");
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      HOTPATH_CHECK(t.shape[i] >= 0, where, ": shape[", i, "] is ", t.shape[i], ", expected >= 0");
    }
    const auto bits = checked_bits(t.shape, t.dtype);
    const std::string what = detail::concat("shape ", shape_string(t.shape), " of ", dtype_name(t.dtype));
    HOTPATH_CHECK(bits.has_value(), where, ": ", what, " overflows 64 bits when counting its bytes");
    HOTPATH_CHECK(*bits % 8 == 0, where, ": ", what, " holds ", *bits, " bits, not a whole number of bytes");
    HOTPATH_CHECK(t.data.size() == *bits / 8, where, ": data holds ", t.data.size(), " bytes but ", what,
                  " needs ", *bits / 8);
    out.order.push_back(&t);
  }
  // python safetensors' order: dtype descending (largest alignment first), then name (bytewise).
  std::sort(out.order.begin(), out.order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    return std::tie(b->dtype, a->name) < std::tie(a->dtype, b->name);
  });

  std::string& h = out.header;
  h.push_back('{');
  if (!metadata.empty()) {
    h.append("\"__metadata__\":{");
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) h.push_back(',');
      first = false;
      h.append(json_string(key, "metadata key")).push_back(':');
      h.append(json_string(value, detail::concat("metadata '", key, "' value")));
    }
    h.push_back('}');
  }
  for (const TensorToWrite* t : out.order) {
    if (h.size() > 1) h.push_back(',');
    h.append(json_string(t->name, "tensor name"));
    h.append(":{\"dtype\":\"").append(dtype_name(t->dtype)).append("\",\"shape\":[");
    for (std::size_t i = 0; i < t->shape.size(); ++i) h.append(i == 0 ? "" : ",").append(std::to_string(t->shape[i]));
    h.append("],\"data_offsets\":[").append(std::to_string(out.data_bytes)).push_back(',');
    out.data_bytes += t->data.size();
    h.append(std::to_string(out.data_bytes)).append("]}");
  }
  h.push_back('}');
  // Pad so the data buffer starts 8-byte aligned (as the reference writer does).
  h.resize((h.size() + kLengthPrefixBytes - 1) / kLengthPrefixBytes * kLengthPrefixBytes, ' ');
  HOTPATH_CHECK(h.size() <= kSafetensorsMaxHeaderBytes, target, ": header would be ", h.size(),
                " bytes, above the format's limit of ", kSafetensorsMaxHeaderBytes);
  return out;
}

std::array<std::byte, kLengthPrefixBytes> le64(std::uint64_t v) {
  std::array<std::byte, kLengthPrefixBytes> out{};
  for (auto& b : out) {
    b = static_cast<std::byte>(v & 0xFF);
    v >>= 8;
  }
  return out;
}

}  // namespace

// ---- dtypes ----------------------------------------------------------------------------------

std::string_view dtype_name(Dtype dtype) { return info(dtype).name; }

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

std::size_t dtype_bits(Dtype dtype) { return info(dtype).bits; }

std::size_t dtype_size(Dtype dtype) {
  const std::size_t bits = dtype_bits(dtype);
  HOTPATH_CHECK(bits % 8 == 0, dtype_name(dtype), " packs ", bits,
                " bits per element, so it has no whole-byte element size (use dtype_bits)");
  return bits / 8;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;  // the reader checked that the product fits
  return n;
}

// ---- reader ----------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : source_(path), map_(std::in_place, path) {
  parse(map_->bytes());
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::byte> bytes, std::string name) {
  SafetensorsFile file;
  file.source_ = std::move(name);
  file.owned_ = std::move(bytes);
  file.parse(file.owned_);
  return file;
}

void SafetensorsFile::parse(std::span<const std::byte> file) {
  const std::string& src = source_;
  HOTPATH_CHECK(file.size() >= kLengthPrefixBytes, src, ": file is ", file.size(),
                " bytes, too short for the 8-byte header length (truncated, or not a safetensors file)");
  const std::uint64_t header_bytes = load_le64(file.data());
  HOTPATH_CHECK(header_bytes <= kSafetensorsMaxHeaderBytes, src, ": header length ", header_bytes,
                " exceeds the format's limit of ", kSafetensorsMaxHeaderBytes,
                " bytes (corrupt, or not a safetensors file)");
  const std::size_t after_prefix = file.size() - kLengthPrefixBytes;
  HOTPATH_CHECK(header_bytes <= after_prefix, src, ": header length ", header_bytes,
                " runs past the end of the file (", after_prefix,
                " bytes follow the length; truncated, or not a safetensors file)");
  const auto header_size = static_cast<std::size_t>(header_bytes);
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + kLengthPrefixBytes, header_size);
  const std::span<const std::byte> buffer = file.subspan(kLengthPrefixBytes + header_size);

  const Json root = parse_header_json(text, src);
  HOTPATH_CHECK(root.is_object(), src, ": header is a JSON ", root.type_name(),
                ", expected an object of tensor entries");

  std::vector<Entry> entries;
  entries.reserve(root.size());
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      metadata_ = parse_metadata(value, src);
    } else {
      entries.push_back(parse_entry(key, value, src));
    }
  }

  // The tensors must tile the buffer: sorted by offset, each starts where the previous ends.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.view.name) < std::tie(b.begin, b.end, b.view.name);
  });
  std::uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin != covered) {
      const std::string after =
          previous == nullptr ? std::string("the data buffer starts at 0")
                              : detail::concat("the previous tensor '", *previous, "' ends at ", covered);
      HOTPATH_CHECK(false, src, ": tensor '", e.view.name, "': data_offsets [", e.begin, ", ", e.end, "] ",
                    e.begin < covered ? "overlap" : "leave a gap", ": it starts at ", e.begin, " but ", after);
    }
    covered = e.end;
    previous = &e.view.name;
  }
  HOTPATH_CHECK(covered <= buffer.size(), src, ": truncated: the tensors need ", covered,
                " bytes of data after the header but the file holds ", buffer.size());
  HOTPATH_CHECK(covered == buffer.size(), src, ": the tensors cover ", covered,
                " bytes of data but the file holds ", buffer.size(), " after the header (",
                buffer.size() - covered, " unaccounted bytes at the end)");

  tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    e.view.data = buffer.subspan(static_cast<std::size_t>(e.begin), static_cast<std::size_t>(e.end - e.begin));
    index_.emplace(e.view.name, tensors_.size());
    tensors_.push_back(std::move(e.view));
  }
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& SafetensorsFile::at(std::string_view name) const {
  const TensorView* t = find(name);
  HOTPATH_CHECK(t != nullptr, source_, ": no tensor named '", name, "' (the file has ", tensors_.size(),
                " tensors)");
  return *t;
}

// ---- writer ----------------------------------------------------------------------------------

std::vector<std::byte> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  const Prepared p = prepare(tensors, metadata, "<memory>");
  std::vector<std::byte> out;
  out.reserve(kLengthPrefixBytes + p.header.size() + p.data_bytes);
  const auto prefix = le64(p.header.size());
  out.insert(out.end(), prefix.begin(), prefix.end());
  const auto* header = reinterpret_cast<const std::byte*>(p.header.data());
  out.insert(out.end(), header, header + p.header.size());
  for (const TensorToWrite* t : p.order) out.insert(out.end(), t->data.begin(), t->data.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const Prepared p = prepare(tensors, metadata, path);
  const auto prefix = le64(p.header.size());
  std::vector<std::span<const std::byte>> chunks{prefix, std::as_bytes(std::span(p.header))};
  for (const TensorToWrite* t : p.order) chunks.push_back(t->data);
  write_file_atomic(path, chunks);
}

}  // namespace hotpath::formats
