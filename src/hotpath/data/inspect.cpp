// inspect_shards: walk each shard's samples (and the reader's structural problems, merged in
// archive order) and check what a classification loader needs: a numeric .cls and an image
// member whose header probes. Only headers are read, so inspecting is I/O-bound.
#include "hotpath/core/strings.h"
#include "hotpath/data/inspect.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <span>
#include <string_view>

#include "hotpath/core/error.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar.h"

namespace hotpath::data {
namespace {

constexpr std::string_view kImageExtensions[] = {"jpg", "jpeg", "png", "webp"};
constexpr std::size_t kMaxShownLabel = 40;
constexpr std::size_t kMaxLabelBytes = 64;

bool is_image_extension(std::string_view ext) {
  for (const auto e : kImageExtensions) {
    if (ext == e) return true;
  }
  return false;
}

// The label text as it can be shown on one line: control bytes escaped, long text cut.
std::string printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < kMaxShownLabel; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxShownLabel) out += "...";
  return out;
}

// A decimal integer with an optional sign, surrounded by optional whitespace.
std::optional<std::int64_t> parse_label(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

void add_problem(std::string& reasons, const formats::BadRecord& record) {
  if (!reasons.empty()) reasons += "; ";
  reasons += record.to_string();
}

InspectedSample inspect_sample(const formats::ShardReader& reader, const formats::TarSample& sample, std::int64_t num_classes) {
  InspectedSample out;
  out.shard = reader.path();
  out.key = sample.key;
  out.offset = sample.offset;
  for (const auto& m : sample.members) out.members.emplace_back(m.ext, m.size);

  if (const formats::SampleMember* cls = sample.find("cls")) {
    const auto bytes = reader.bytes(*cls);
    // A label is a few digits; only a bounded prefix is read, so a huge .cls costs nothing.
    const std::string text = as_text(bytes.first(std::min<std::size_t>(bytes.size(), kMaxLabelBytes)));
    if (bytes.size() <= kMaxLabelBytes) out.label = parse_label(text);
    if (!out.label) {
      add_problem(out.bad_reason, {reader.path(), cls->header_offset, cls->name,
                                   "non-numeric label '" + printable(trim(text)) + "'"});
    } else if (*out.label < 0 || (num_classes > 0 && *out.label >= num_classes)) {
      // The loader skips and counts these the same way (data/loader.cpp): the loss must never see them.
      add_problem(out.bad_reason, {reader.path(), cls->header_offset, cls->name,
                                   "label " + std::to_string(*out.label) + " outside [0, " +
                                       (num_classes > 0 ? std::to_string(num_classes) : std::string("inf")) + ")"});
    }
  } else {
    add_problem(out.bad_reason, {reader.path(), sample.offset, sample.key, "missing .cls"});
  }

  bool has_image = false;
  for (const auto& m : sample.members) {
    if (!is_image_extension(m.ext)) continue;
    has_image = true;
    try {
      (void)probe_image(reader.bytes(m));
    } catch (const Error& e) {
      add_problem(out.bad_reason, {reader.path(), m.header_offset, m.name, e.what()});
    }
  }
  if (!has_image) {
    add_problem(out.bad_reason, {reader.path(), sample.offset, sample.key, "no image member (jpg, jpeg, png, webp)"});
  }
  return out;
}

InspectedSample structural_problem(const formats::BadRecord& record) {
  InspectedSample out;
  out.shard = record.shard;
  out.offset = record.offset;
  if (const formats::KeyExt k = formats::split_key(record.member); k.ok) out.key = k.key;
  out.bad_reason = record.to_string();
  return out;
}

}  // namespace

InspectSummary inspect_shards(const std::vector<std::string>& shards,
                              const std::function<void(const InspectedSample&)>& visit, std::int64_t num_classes) {
  InspectSummary summary;
  for (const auto& path : shards) {
    const formats::ShardReader reader(path);
    const auto& samples = reader.samples();
    const auto& bad = reader.bad();
    std::size_t s = 0;
    std::size_t b = 0;
    while (s < samples.size() || b < bad.size()) {
      if (b < bad.size() && (s == samples.size() || bad[b].offset < samples[s].offset)) {
        ++summary.bad;
        visit(structural_problem(bad[b++]));
        continue;
      }
      const InspectedSample x = inspect_sample(reader, samples[s++], num_classes);
      ++summary.samples;
      if (!x.bad_reason.empty()) ++summary.bad;
      visit(x);
    }
  }
  return summary;
}

}  // namespace hotpath::data
