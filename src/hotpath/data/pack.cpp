// pack_dataset: list the source (ImageFolder, CSV/JSONL list, IDX), turn each item into a
// sample (source bytes as-is, or re-encoded), stream the samples into formats::ShardWriter, then write
// classes.txt and PREFIX.json. Items are processed one at a time, so memory stays at one image
// whatever the dataset size.
#include "hotpath/core/strings.h"
#include "hotpath/data/pack.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/idx.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/data/kernels/resample.h"
#include "hotpath/formats/tar_writer.h"

namespace hotpath::data {
namespace {

namespace fs = std::filesystem;

// JPEG quality used when --max-side forces a JPEG to be re-encoded and no --jpeg-quality is given.
constexpr int kDefaultReencodeQuality = 90;
constexpr std::string_view kFashionMnistClasses[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                     "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

bool is_image_extension(const fs::path& p) {
  const std::string ext = ascii_lower(p.extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// ---- listing the source ------------------------------------------------------------------------

struct Item {
  std::string path;
  std::int64_t label = 0;
  std::string json;  // extra JSONL fields, stored as KEY.json; empty when none
};

struct Listing {
  std::vector<Item> items;
  std::vector<std::string> classes;
};

// torchvision ImageFolder: classes = sorted subfolder names; files = sorted(os.walk(class_dir))
// with sorted names inside each folder, i.e. ordered by (folder path, file name).
Listing list_image_folder(const std::string& root) {
  Listing listing;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) listing.classes.push_back(entry.path().filename().string());
  }
  std::sort(listing.classes.begin(), listing.classes.end());
  HOTPATH_CHECK(!listing.classes.empty(), root, ": ImageFolder has no class subfolders");
  for (const auto& name : listing.classes) {  // classes.txt holds one name a line
    HOTPATH_CHECK(name.find_first_of("\n\r") == std::string::npos, root, "/", printable(name),
                  ": a class folder name with a line break cannot be written to classes.txt");
  }
  for (std::size_t label = 0; label < listing.classes.size(); ++label) {
    std::vector<std::pair<std::string, std::string>> files;  // (folder, name)
    const fs::path class_dir = fs::path(root) / listing.classes[label];
    for (const auto& entry : fs::recursive_directory_iterator(
             class_dir, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_regular_file() && is_image_extension(entry.path())) {
        files.emplace_back(entry.path().parent_path().string(), entry.path().filename().string());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& [folder, name] : files) {
      listing.items.push_back({(fs::path(folder) / name).string(), static_cast<std::int64_t>(label), ""});
    }
  }
  HOTPATH_CHECK(!listing.items.empty(), root, ": ImageFolder has no .jpg/.jpeg/.png files in its ",
                listing.classes.size(), " class folders");
  return listing;
}

// A label as written in a CSV/JSONL line, resolved to an index once all lines are read (the
// class list may be inferred from all the names).
struct RawLabel {
  std::string text;
  std::size_t line = 0;
};

std::optional<std::int64_t> parse_index(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

// Class indices hotpath packs: model.num_classes' bound. A label past it is refused before the class
// list (one name per index) is built: 16,777,215 used to allocate 16 M names.
constexpr std::int64_t kMaxClasses = 1'000'000;

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// With a class list: a label is a class name or an index into it. Without: all-integer labels
// are indices (classes "0".."max"); all-name labels become sorted classes like ImageFolder's.
std::vector<std::int64_t> resolve_labels(const std::string& list_path, const std::vector<RawLabel>& raw,
                                         const std::vector<std::string>& class_names,
                                         std::vector<std::string>& classes_out) {
  std::vector<std::int64_t> out;
  out.reserve(raw.size());
  for (const auto& r : raw) {
    HOTPATH_CHECK(!r.text.empty(), list_path, ":", r.line, ": empty label");
    HOTPATH_CHECK(r.text.front() != '-' || !parse_index(r.text.substr(1)), list_path, ":", r.line,
                  ": bad label '", printable(r.text), "': labels must be >= 0");
    // Checked before any shard is written: classes.txt and PREFIX.json must be able to hold every name.
    HOTPATH_CHECK(valid_utf8(r.text), list_path, ":", r.line, ": label '", printable(r.text), "' is not valid UTF-8");
    HOTPATH_CHECK(std::none_of(r.text.begin(), r.text.end(), [](char c) { return c == '\n' || c == '\r' || c == '\0'; }),
                  list_path, ":", r.line, ": label '", printable(r.text), "' holds a line break or NUL");
    if (!r.text.empty() && r.text.size() <= 20 && parse_index(r.text)) continue;
    HOTPATH_CHECK(!std::all_of(r.text.begin(), r.text.end(), [](char c) { return c >= '0' && c <= '9'; }), list_path,
                  ":", r.line, ": label ", printable(r.text, 30), " is not a class index below ", kMaxClasses);
  }
  if (!class_names.empty()) {
    std::map<std::string, std::int64_t, std::less<>> index;
    for (std::size_t i = 0; i < class_names.size(); ++i) index.emplace(class_names[i], static_cast<std::int64_t>(i));
    for (const auto& r : raw) {
      if (const auto it = index.find(r.text); it != index.end()) {
        out.push_back(it->second);
      } else if (const auto n = parse_index(r.text)) {
        HOTPATH_CHECK(*n < static_cast<std::int64_t>(class_names.size()), list_path, ":", r.line, ": label ", *n,
                      " is out of range for the ", class_names.size(), " given class names");
        out.push_back(*n);
      } else {
        HOTPATH_CHECK(false, list_path, ":", r.line, ": unknown class name '", r.text, "' (not among the ",
                      class_names.size(), " given class names)");
      }
    }
    classes_out = class_names;
    return out;
  }
  const auto first_index = std::find_if(raw.begin(), raw.end(), [](const RawLabel& r) { return parse_index(r.text).has_value(); });
  const auto first_name = std::find_if(raw.begin(), raw.end(), [](const RawLabel& r) { return !parse_index(r.text); });
  if (first_name == raw.end()) {
    std::int64_t max_label = -1;
    for (const auto& r : raw) {
      out.push_back(*parse_index(r.text));
      max_label = std::max(max_label, out.back());
    }
    HOTPATH_CHECK(max_label < kMaxClasses, list_path, ": label ", max_label, " is outside [0, ", kMaxClasses,
                  "): too large for a class index (give --class-names/--classes-file for named classes)");
    for (std::int64_t i = 0; i <= max_label; ++i) classes_out.push_back(std::to_string(i));
    return out;
  }
  HOTPATH_CHECK(first_index == raw.end(), list_path, ":", first_name->line, ": bad label '", first_name->text,
                "': not an integer, while line ", first_index->line, " has the integer label '", first_index->text,
                "' (give --class-names/--classes-file to mix names and indices)");
  const std::set<std::string> names = [&] {
    std::set<std::string> s;
    for (const auto& r : raw) s.insert(r.text);
    return s;
  }();
  classes_out.assign(names.begin(), names.end());
  for (const auto& r : raw) {
    out.push_back(std::distance(names.begin(), names.find(r.text)));
  }
  return out;
}

std::string resolve_relative(const fs::path& list_dir, const std::string& path) {
  const fs::path p(path);
  return p.is_absolute() ? p.string() : (list_dir / p).string();
}

// One CSV record (RFC 4180 quoting, within one line). Returns false on an unterminated quote.
bool split_csv_line(std::string_view line, std::vector<std::string>& fields) {
  fields.assign(1, "");
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return !quoted;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  if (!lines.empty() && lines.front().starts_with("\xEF\xBB\xBF")) lines.front().remove_prefix(3);  // UTF-8 BOM
  return lines;
}

Listing list_csv(const std::string& csv_path, const std::vector<std::string>& class_names) {
  const std::string text = read_file(csv_path, read_limit::kList, "CSV list");
  const fs::path dir = fs::path(csv_path).parent_path();
  const auto lines = split_lines(text);
  std::size_t header_line = 0;
  while (header_line < lines.size() && trim(lines[header_line]).empty()) ++header_line;
  HOTPATH_CHECK(header_line < lines.size(), csv_path, ": empty CSV: expected a header `path,label`");

  std::vector<std::string> fields;
  HOTPATH_CHECK(split_csv_line(trim(lines[header_line]), fields), csv_path, ":", header_line + 1,
                ": unterminated quote in the header");
  std::optional<std::size_t> path_col;
  std::optional<std::size_t> label_col;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::string name = ascii_lower(trim(fields[i]));
    if (name == "path") path_col = i;
    if (name == "label") label_col = i;
  }
  HOTPATH_CHECK(path_col.has_value(), csv_path, ":", header_line + 1, ": header lacks the column 'path' (expected `path,label`)");
  HOTPATH_CHECK(label_col.has_value(), csv_path, ":", header_line + 1, ": header lacks the column 'label' (expected `path,label`)");
  const std::size_t columns = fields.size();

  Listing listing;
  std::vector<RawLabel> raw;
  for (std::size_t i = header_line + 1; i < lines.size(); ++i) {
    const std::string_view line = trim(lines[i]);
    if (line.empty()) continue;
    HOTPATH_CHECK(split_csv_line(line, fields), csv_path, ":", i + 1, ": unterminated quote");
    HOTPATH_CHECK(fields.size() == columns, csv_path, ":", i + 1, ": expected ", columns, " fields like the header, found ",
                  fields.size());
    const std::string path(trim(fields[*path_col]));
    HOTPATH_CHECK(!path.empty(), csv_path, ":", i + 1, ": empty path");
    listing.items.push_back({resolve_relative(dir, path), 0, ""});
    raw.push_back({std::string(trim(fields[*label_col])), i + 1});
  }
  HOTPATH_CHECK(!listing.items.empty(), csv_path, ": no rows after the header");
  const auto labels = resolve_labels(csv_path, raw, class_names, listing.classes);
  for (std::size_t i = 0; i < labels.size(); ++i) listing.items[i].label = labels[i];
  return listing;
}

Listing list_jsonl(const std::string& jsonl_path, const std::vector<std::string>& class_names) {
  const std::string text = read_file(jsonl_path, read_limit::kList, "JSONL list");
  const fs::path dir = fs::path(jsonl_path).parent_path();
  Listing listing;
  std::vector<RawLabel> raw;
  const auto lines = split_lines(text);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = trim(lines[i]);
    if (line.empty()) continue;
    const nlohmann::json record = parse_json(line, detail::concat(jsonl_path, ":", i + 1));
    HOTPATH_CHECK(record.is_object(), jsonl_path, ":", i + 1, ": expected a JSON object {\"path\":..., \"label\":...}");
    const auto path = record.find("path");
    HOTPATH_CHECK(path != record.end() && path->is_string() && !path->get<std::string>().empty(), jsonl_path, ":",
                  i + 1, ": field 'path' missing or not a non-empty string");
    const auto label = record.find("label");
    HOTPATH_CHECK(label != record.end(), jsonl_path, ":", i + 1, ": field 'label' missing");
    std::string label_text;
    if (label->is_number_unsigned()) {
      label_text = std::to_string(label->get<std::uint64_t>());
    } else if (label->is_number_integer()) {
      label_text = std::to_string(label->get<std::int64_t>());
    } else if (label->is_string()) {
      label_text = std::string(trim(label->get<std::string>()));
    } else {
      HOTPATH_CHECK(false, jsonl_path, ":", i + 1, ": bad label ", label->dump(),
                    ": expected an integer or a class name string");
    }
    nlohmann::json extra = record;
    extra.erase("path");
    extra.erase("label");
    listing.items.push_back({resolve_relative(dir, path->get<std::string>()), 0, extra.empty() ? "" : extra.dump()});
    raw.push_back({label_text, i + 1});
  }
  HOTPATH_CHECK(!listing.items.empty(), jsonl_path, ": no records");
  const auto labels = resolve_labels(jsonl_path, raw, class_names, listing.classes);
  for (std::size_t i = 0; i < labels.size(); ++i) listing.items[i].label = labels[i];
  return listing;
}

// ---- turning pixels/bytes into members ---------------------------------------------------------

struct EncodedImage {
  std::vector<std::byte> owned;      // re-encoded bytes (empty when passing the source through)
  std::span<const std::byte> bytes;  // what goes into the shard
  std::string ext;
};

const char* extension_of(ImageFormat format) { return format == ImageFormat::kPng ? "png" : "jpg"; }

// Downscales (aspect kept, longer side → max_side) when the image is larger; no-op otherwise.
Image fit_max_side(Image image, const std::optional<int>& max_side) {
  if (!max_side || std::max(image.width, image.height) <= *max_side) return image;
  const double scale = static_cast<double>(*max_side) / std::max(image.width, image.height);
  Image out;
  out.width = std::max(1, static_cast<int>(std::lround(image.width * scale)));
  out.height = std::max(1, static_cast<int>(std::lround(image.height * scale)));
  out.channels = image.channels;
  out.pixels.resize(static_cast<std::size_t>(out.width) * out.height * out.channels);
  ResampleScratch scratch;
  resample_bilinear(image.pixels.data(), image.width, image.height,
                    static_cast<std::ptrdiff_t>(image.width) * image.channels, image.channels,
                    Box{0, 0, static_cast<double>(image.width), static_cast<double>(image.height)},
                    out.pixels.data(), out.width, out.height, scratch);
  return out;
}

EncodedImage encode(const Image& image, ImageFormat preferred, const PackOptions& options) {
  EncodedImage out;
  if (options.jpeg_quality || preferred == ImageFormat::kJpeg) {
    out.owned = encode_jpeg(image.pixels.data(), image.width, image.height, image.channels,
                            options.jpeg_quality.value_or(kDefaultReencodeQuality));
    out.ext = "jpg";
  } else {
    out.owned = encode_png(image.pixels.data(), image.width, image.height, image.channels);
    out.ext = "png";
  }
  out.bytes = out.owned;
  return out;
}

// Source bytes as-is when no re-encode is needed (checked to be a JPEG/PNG whose header probes);
// otherwise decoded, downscaled if larger than max_side, and encoded. Throws hotpath::Error.
EncodedImage prepare_file_image(std::span<const std::byte> bytes, const PackOptions& options) {
  const ImageFormat format = sniff_format(bytes);
  HOTPATH_CHECK(format != ImageFormat::kUnknown, "not a JPEG or PNG file");
  const ImageInfo info = probe_image(bytes);
  const bool too_big = options.max_side && std::max(info.width, info.height) > *options.max_side;
  if (!too_big && !options.jpeg_quality) return {{}, bytes, extension_of(format)};
  const Image image = decode_image(bytes, info.channels <= 2 ? 1 : 3);
  return encode(fit_max_side(image, options.max_side), format, options);
}

// ---- writing -----------------------------------------------------------------------------------

std::string sample_key(std::size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08zu", index);
  return buf;
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    HOTPATH_CHECK(out.good(), tmp.string(), ": cannot open for writing");
    out << text;
    out.flush();
    HOTPATH_CHECK(out.good(), tmp.string(), ": write error");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  HOTPATH_CHECK(!ec, path.string(), ": cannot rename from ", tmp.string(), ": ", ec.message());
}

enum class SourceKind { kImageFolder, kCsv, kJsonl, kIdx };

const char* kind_name(SourceKind kind) {
  switch (kind) {
    case SourceKind::kImageFolder: return "imagefolder";
    case SourceKind::kCsv: return "csv";
    case SourceKind::kJsonl: return "jsonl";
    case SourceKind::kIdx: return "idx";
  }
  return "?";
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

SourceKind detect_kind(const std::string& source) {
  std::error_code ec;
  HOTPATH_CHECK(fs::exists(source, ec), source, ": no such file or directory");
  if (fs::is_directory(source, ec)) return SourceKind::kImageFolder;
  const std::string ext = ascii_lower(fs::path(source).extension().string());
  if (ext == ".csv") return SourceKind::kCsv;
  if (ext == ".jsonl" || ext == ".ndjson") return SourceKind::kJsonl;
  const auto magic = read_idx_magic(source);
  HOTPATH_CHECK(magic != kIdxLabelsMagic, source,
                ": is an IDX labels file (magic 0x00000801); pass the images file (…-images-idx3-ubyte) as the source");
  HOTPATH_CHECK(magic == kIdxImagesMagic, source,
                ": unrecognised source: expected an ImageFolder directory, a .csv or .jsonl list, or an IDX "
                "images file (magic 0x00000803), found ",
                magic ? "magic " + hex32(*magic) : std::string("fewer than 4 bytes"));
  return SourceKind::kIdx;
}

void check_options(const PackOptions& o, SourceKind kind) {
  HOTPATH_CHECK(!o.output_prefix.empty(), "pack: no output prefix given");
  HOTPATH_CHECK(!fs::path(o.output_prefix).filename().empty(), "pack: output prefix '", o.output_prefix,
                "' must end in a file name stem (e.g. out/train), not a folder");
  HOTPATH_CHECK(!o.jpeg_quality || (*o.jpeg_quality >= 1 && *o.jpeg_quality <= 100), "pack: jpeg_quality ",
                o.jpeg_quality.value_or(0), " is outside 1..100");
  HOTPATH_CHECK(!o.max_side || *o.max_side >= 1, "pack: max_side ", o.max_side.value_or(0), " must be >= 1");
  HOTPATH_CHECK(o.limit != 0 && o.limit >= -1, "pack: limit ", o.limit, " must be positive (or -1 for all)");
  HOTPATH_CHECK(o.labels_path.empty() || kind == SourceKind::kIdx, "pack: a labels file applies to IDX sources only");
  HOTPATH_CHECK(o.class_names.empty() || kind != SourceKind::kImageFolder,
                "pack: class names of an ImageFolder come from its subfolder names; do not pass them");
  for (const auto& name : o.class_names) {
    HOTPATH_CHECK(!name.empty() && name.find('\n') == std::string::npos, "pack: bad class name '", name,
                  "': must be non-empty and on one line");
  }
}

// The state of one pack run: the shard writer plus what the report and metadata need.
class Packer {
 public:
  explicit Packer(const PackOptions& options)
      : options_(options),
        writer_(options.output_prefix + "-%06d.tar",
                formats::ShardWriterOptions{.max_samples = options.max_samples_per_shard,
                                   .max_bytes = options.max_shard_bytes}) {}

  [[nodiscard]] bool full() const {
    return options_.limit >= 0 && report_.samples >= static_cast<std::uint64_t>(options_.limit);
  }

  void add(std::size_t index, const EncodedImage& image, std::int64_t label, const std::string& json) {
    const std::string cls = std::to_string(label);
    formats::SampleToWrite sample{sample_key(index), {{image.ext, image.bytes}, {"cls", std::as_bytes(std::span(cls))}}};
    if (!json.empty()) sample.members.emplace_back("json", std::as_bytes(std::span(json)));
    writer_.write(sample);
    ++report_.samples;
    ++extension_counts_[image.ext];
  }

  // Reasons from MappedFile already start with the path; do not repeat it.
  void skip(const std::string& path, std::string_view reason) {
    if (reason.starts_with(path + ": ")) reason.remove_prefix(path.size() + 2);
    report_.skipped.push_back(path + ": " + std::string(reason));
  }

  PackReport finish(const std::string& source, SourceKind kind, std::vector<std::string> classes,
                    const std::string& labels_path) {
    HOTPATH_CHECK(report_.samples > 0, source, ": nothing to pack: all ", report_.skipped.size(),
                  " inputs were skipped", report_.skipped.empty() ? "" : " (first: " + report_.skipped.front() + ")");
    writer_.close();
    report_.classes = std::move(classes);
    report_.shards = writer_.shards();
    nlohmann::ordered_json shards = nlohmann::ordered_json::array();
    for (const auto& shard : report_.shards) {
      report_.bytes += fs::file_size(shard);
      shards.push_back(fs::path(shard).filename().string());
    }
    formats::remove_stale_shards(options_.output_prefix, report_.shards.size());

    const fs::path prefix(options_.output_prefix);
    const fs::path dir = prefix.parent_path();
    std::string classes_txt;
    for (const auto& name : report_.classes) classes_txt += name + "\n";
    write_text_atomically(dir / "classes.txt", classes_txt);

    nlohmann::ordered_json meta;
    meta["format"] = "webdataset";
    meta["source"] = source;
    meta["source_kind"] = kind_name(kind);
    if (!labels_path.empty()) meta["labels"] = labels_path;
    meta["samples"] = report_.samples;
    meta["skipped"] = report_.skipped.size();
    meta["shards"] = shards;
    meta["bytes"] = report_.bytes;
    meta["classes"] = report_.classes;
    meta["image_members"] = extension_counts_;  // std::map: sorted, deterministic
    nlohmann::ordered_json opts;
    opts["max_samples_per_shard"] = options_.max_samples_per_shard;
    opts["max_shard_bytes"] = options_.max_shard_bytes;
    opts["jpeg_quality"] = options_.jpeg_quality ? nlohmann::ordered_json(*options_.jpeg_quality) : nullptr;
    opts["max_side"] = options_.max_side ? nlohmann::ordered_json(*options_.max_side) : nullptr;
    opts["limit"] = options_.limit;
    meta["options"] = opts;
    // replace: a path that is not UTF-8 must not throw here, after the shards are written.
    write_text_atomically(dir / (prefix.filename().string() + ".json"),
                          meta.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
    return std::move(report_);
  }

 private:
  const PackOptions& options_;
  formats::ShardWriter writer_;
  PackReport report_;
  std::map<std::string, std::uint64_t> extension_counts_;
};

std::vector<std::string> idx_class_names(const std::string& images_path, const std::vector<std::uint8_t>& labels,
                                         const std::vector<std::string>& given, const std::string& labels_path) {
  const int max_label = labels.empty() ? -1 : *std::max_element(labels.begin(), labels.end());
  if (!given.empty()) {
    HOTPATH_CHECK(max_label < static_cast<int>(given.size()), labels_path, ": label ", max_label,
                  " is out of range for the ", given.size(), " given class names");
    return given;
  }
  std::vector<std::string> names;
  if (ascii_lower(images_path).find("fashion") != std::string::npos && max_label < 10) {
    names.assign(std::begin(kFashionMnistClasses), std::end(kFashionMnistClasses));
  } else {
    for (int i = 0; i <= max_label; ++i) names.push_back(std::to_string(i));
  }
  return names;
}

PackReport pack_idx(const std::string& source, const PackOptions& options) {
  const std::string labels_path = options.labels_path.empty() ? idx_labels_path_for(source) : options.labels_path;
  HOTPATH_CHECK(!labels_path.empty(), source,
                ": cannot derive the IDX labels file (the name lacks 'images-idx3'); give it explicitly (--labels)");
  const IdxImages images = read_idx_images(source);
  const std::vector<std::uint8_t> labels = read_idx_labels(labels_path);
  HOTPATH_CHECK(labels.size() == images.count, labels_path, ": field 'count' is ", labels.size(), " labels but ",
                source, " holds ", images.count, " images");
  HOTPATH_CHECK(images.count > 0, source, ": field 'count' is 0: no images to pack");
  std::vector<std::string> classes = idx_class_names(source, labels, options.class_names, labels_path);

  Packer packer(options);
  const auto rows = static_cast<int>(images.rows);
  const auto cols = static_cast<int>(images.cols);
  for (std::size_t i = 0; i < images.count && !packer.full(); ++i) {
    Image image{cols, rows, 1, std::vector<std::uint8_t>(images.image(i), images.image(i) + images.rows * images.cols)};
    packer.add(i, encode(fit_max_side(std::move(image), options.max_side), ImageFormat::kPng, options), labels[i], "");
  }
  return packer.finish(source, SourceKind::kIdx, std::move(classes), labels_path);
}

PackReport pack_listing(const std::string& source, SourceKind kind, const Listing& listing,
                        const PackOptions& options) {
  Packer packer(options);
  for (std::size_t i = 0; i < listing.items.size() && !packer.full(); ++i) {
    const Item& item = listing.items[i];
    std::optional<EncodedImage> image;
    std::optional<MappedFile> file;  // keeps passed-through bytes mapped until written
    try {
      file.emplace(item.path);
      image = prepare_file_image(file->bytes(), options);
    } catch (const Error& e) {
      packer.skip(item.path, e.what());
      continue;
    }
    packer.add(i, *image, item.label, item.json);
  }
  return packer.finish(source, kind, listing.classes, "");
}

}  // namespace

PackReport pack_dataset(const std::string& source, const PackOptions& options) {
  const SourceKind kind = detect_kind(source);
  check_options(options, kind);
  const fs::path dir = fs::path(options.output_prefix).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    HOTPATH_CHECK(!ec, dir.string(), ": cannot create the output folder: ", ec.message());
  }
  switch (kind) {
    case SourceKind::kIdx:
      return pack_idx(source, options);
    case SourceKind::kImageFolder:
      return pack_listing(source, kind, list_image_folder(source), options);
    case SourceKind::kCsv:
      return pack_listing(source, kind, list_csv(source, options.class_names), options);
    case SourceKind::kJsonl:
      return pack_listing(source, kind, list_jsonl(source, options.class_names), options);
  }
  HOTPATH_ASSERT(false);
  return {};
}

}  // namespace hotpath::data
