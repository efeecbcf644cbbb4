// Readers for labelled text datasets: plain text lines, JSONL, fortune files and Weka ARFF.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "hotpath/core/strings.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/text/bert_normalizer.h"
#include "hotpath/text/text_data.h"

namespace fs = std::filesystem;

namespace hotpath::text {
namespace {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 BOM
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

void check_utf8(std::string_view text, std::string_view name, std::size_t line) {
  const std::size_t bad = find_invalid_utf8(text);
  HOTPATH_CHECK(bad == std::string_view::npos, name, ":", line, ": invalid UTF-8 at byte ", bad, " of the text");
}

// A label as written: an integer class id or a class name.
using RawLabel = std::variant<std::monostate, std::int64_t, std::string>;

// Integers are class ids (classes "0".."max"); names become classes in sorted order. Mixing is an error.
std::vector<std::string> resolve_labels(std::string_view name, const std::vector<RawLabel>& raw,
                                        std::vector<TextRecord>& records) {
  bool any_int = false;
  bool any_name = false;
  std::int64_t max_id = -1;
  std::set<std::string> names;
  for (const auto& label : raw) {
    if (const auto* id = std::get_if<std::int64_t>(&label)) {
      any_int = true;
      max_id = std::max(max_id, *id);
    } else if (const auto* s = std::get_if<std::string>(&label)) {
      any_name = true;
      names.insert(*s);
    }
  }
  HOTPATH_CHECK(!(any_int && any_name), name, ": labels mix integers and names; use one or the other");
  // Checked before the class list (one name per id) is built: 10^17 must not mean 10^17 strings.
  constexpr std::int64_t kMaxClasses = 1'000'000;
  HOTPATH_CHECK(max_id < kMaxClasses, name, ": label ", max_id, " is outside [0, ", kMaxClasses,
                "): too large for a class id");
  for (const std::string& n : names) {
    HOTPATH_CHECK(n.find_first_of("\n\r") == std::string::npos, name, ": label '", printable(n),
                  "' holds a line break (class names are one line each)");
  }
  std::vector<std::string> classes;
  if (any_int) {
    for (std::int64_t i = 0; i <= max_id; ++i) classes.push_back(std::to_string(i));
  } else {
    classes.assign(names.begin(), names.end());
  }
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (const auto* id = std::get_if<std::int64_t>(&raw[i])) {
      records[i].label = *id;
    } else if (const auto* s = std::get_if<std::string>(&raw[i])) {
      records[i].label = std::distance(classes.begin(), std::lower_bound(classes.begin(), classes.end(), *s));
    }
  }
  return classes;
}

// A label from a text field: a non-negative decimal integer is a class id, anything else a name.
RawLabel label_from_text(std::string_view text) {
  if (text.empty()) return std::monostate{};
  if (text.size() <= 18 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return static_cast<std::int64_t>(std::stoll(std::string(text)));
  }
  return std::string(text);
}

// ---- ARFF -------------------------------------------------------------------------------------

struct ArffAttribute {
  std::string name;
  enum class Kind { kNumeric, kString, kNominal, kDate } kind = Kind::kNumeric;
  std::vector<std::string> values;  // nominal
};

// Splits `s` into comma-separated values; quoted values ('...' or "...") take Weka's backslash
// escapes. A bare '%' outside quotes starts a comment. nullopt marks a missing value ('?').
std::vector<std::optional<std::string>> split_values(std::string_view s, std::string_view name, std::size_t line) {
  std::vector<std::optional<std::string>> values;
  std::size_t i = 0;
  const auto skip_space = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
  };
  skip_space();
  if (i == s.size() || s[i] == '%') return values;
  while (true) {
    skip_space();
    HOTPATH_CHECK(i < s.size() && s[i] != ',', name, ":", line, ": empty value at column ", i + 1,
                  " (expected a value or '?')");
    if (s[i] == '\'' || s[i] == '"') {
      const char quote = s[i++];
      std::string value;
      bool closed = false;
      while (i < s.size()) {
        const char c = s[i++];
        if (c == quote) {
          closed = true;
          break;
        }
        if (c != '\\') {
          value += c;
          continue;
        }
        HOTPATH_CHECK(i < s.size(), name, ":", line, ": backslash at the end of the line inside a quoted value");
        const char e = s[i++];
        switch (e) {
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case 'r': value += '\r'; break;
          case '\\': case '\'': case '"': case '%': value += e; break;
          default: value += '\\'; value += e; break;  // Weka keeps unknown escapes as written
        }
      }
      HOTPATH_CHECK(closed, name, ":", line, ": unterminated ", quote == '\'' ? "'single'" : "\"double\"",
                    " quoted value (quoted values cannot span lines)");
      values.emplace_back(std::move(value));
    } else {
      const std::size_t start = i;
      while (i < s.size() && s[i] != ',' && s[i] != '%') ++i;
      const std::string_view raw = trim(s.substr(start, i - start));
      if (raw == "?") {
        values.emplace_back(std::nullopt);
      } else {
        values.emplace_back(std::string(raw));
      }
    }
    skip_space();
    if (i == s.size() || s[i] == '%') break;
    HOTPATH_CHECK(s[i] == ',', name, ":", line, ": expected ',' between values at column ", i + 1, ", found '", s[i],
                  "'");
    ++i;
  }
  return values;
}

// "@attribute NAME TYPE": NAME may be quoted; TYPE is numeric/real/integer/string/date/{...}.
ArffAttribute parse_attribute(std::string_view rest, std::string_view name, std::size_t line) {
  ArffAttribute attr;
  rest = trim(rest);
  HOTPATH_CHECK(!rest.empty(), name, ":", line, ": @attribute without a name");
  std::size_t i = 0;
  if (rest[0] == '\'' || rest[0] == '"') {
    const char quote = rest[0];
    const std::size_t end = rest.find(quote, 1);
    HOTPATH_CHECK(end != std::string_view::npos, name, ":", line, ": unterminated quoted attribute name");
    attr.name = std::string(rest.substr(1, end - 1));
    i = end + 1;
  } else {
    while (i < rest.size() && rest[i] != ' ' && rest[i] != '\t' && rest[i] != '{') ++i;
    attr.name = std::string(rest.substr(0, i));
  }
  std::string_view type = trim(rest.substr(i));
  HOTPATH_CHECK(!type.empty(), name, ":", line, ": @attribute ", attr.name, " has no type");
  if (type.front() == '{') {
    const std::size_t close = type.rfind('}');
    HOTPATH_CHECK(close != std::string_view::npos, name, ":", line, ": nominal attribute ", attr.name,
                  " lacks its closing '}'");
    attr.kind = ArffAttribute::Kind::kNominal;
    for (auto& v : split_values(type.substr(1, close - 1), name, line)) {
      HOTPATH_CHECK(v.has_value(), name, ":", line, ": '?' is not a nominal value of ", attr.name);
      attr.values.push_back(std::move(*v));
    }
    return attr;
  }
  const std::string word = ascii_lower(type.substr(0, type.find_first_of(" \t")));
  if (word == "numeric" || word == "real" || word == "integer") {
    attr.kind = ArffAttribute::Kind::kNumeric;
  } else if (word == "string") {
    attr.kind = ArffAttribute::Kind::kString;
  } else if (word == "date") {
    attr.kind = ArffAttribute::Kind::kDate;
  } else {
    HOTPATH_CHECK(false, name, ":", line, ": attribute ", attr.name, " has unsupported type '", type,
                  "' (expected numeric, real, integer, string, date or {nominal values})");
  }
  return attr;
}

bool starts_with_keyword(std::string_view line, std::string_view keyword) {
  return line.size() >= keyword.size() && ascii_lower(line.substr(0, keyword.size())) == keyword &&
         (line.size() == keyword.size() || line[keyword.size()] == ' ' || line[keyword.size()] == '\t');
}

std::string inflate_gzip(std::string_view data, const std::string& path) {
  z_stream zs{};
  HOTPATH_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, path, ": zlib init failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    HOTPATH_CHECK(rc == Z_OK || rc == Z_STREAM_END, path, ": corrupt gzip data at compressed byte ", zs.total_in);
    out.append(buf, sizeof buf - zs.avail_out);
    HOTPATH_CHECK(rc == Z_STREAM_END || zs.avail_in > 0 || zs.avail_out == 0, path, ": truncated gzip data");
  }
  return out;
}

std::string read_maybe_gzip(const std::string& path) {
  std::string data = read_file(path, read_limit::kList, "text input");
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b) {
    return inflate_gzip(data, path);
  }
  return data;
}

TextSource read_txt(const std::string& path, const TextSourceOptions& options) {
  const std::string text = read_maybe_gzip(path);
  const auto lines = split_lines(text);
  std::string labels_text;
  std::vector<std::string_view> label_lines;
  if (!options.labels_path.empty()) {
    labels_text = read_maybe_gzip(options.labels_path);
    label_lines = split_lines(labels_text);
    HOTPATH_CHECK(label_lines.size() == lines.size(), options.labels_path, ": has ", label_lines.size(),
                  " lines but ", path, " has ", lines.size(), " (expected one label per text line)");
  }
  TextSource source;
  std::vector<RawLabel> raw;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (trim(lines[i]).empty()) continue;
    check_utf8(lines[i], path, i + 1);
    source.records.push_back({std::string(lines[i]), "", -1, i + 1});
    if (!label_lines.empty()) {
      const std::string_view label = trim(label_lines[i]);
      HOTPATH_CHECK(!label.empty(), options.labels_path, ":", i + 1, ": empty label for a non-empty text line");
      raw.push_back(label_from_text(label));
    } else {
      raw.emplace_back(std::monostate{});
    }
  }
  HOTPATH_CHECK(!source.records.empty(), path, ": no non-empty lines");
  source.classes = resolve_labels(options.labels_path, raw, source.records);
  return source;
}

TextSource read_fortunes(const std::string& path) {
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::directory_iterator(path)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || ext == ".dat" || ext == ".u8") continue;  // is_regular_file follows links
      if (entry.path().filename().string().starts_with('.')) continue;
      files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.emplace_back(path);
  }
  HOTPATH_CHECK(!files.empty(), path, ": no fortune files (*.dat, *.u8 and subdirectories are skipped)");
  TextSource source;
  for (const auto& file : files) {
    const std::string content = read_maybe_gzip(file.string());
    auto records = parse_fortunes(content, file.string());
    if (records.empty()) continue;
    const auto label = static_cast<std::int64_t>(source.classes.size());
    source.classes.push_back(file.filename().string());
    for (auto& r : records) {
      r.label = label;
      source.records.push_back(std::move(r));
    }
  }
  HOTPATH_CHECK(!source.records.empty(), path, ": no fortunes found");
  return source;
}

}  // namespace

TextFormat parse_text_format(std::string_view name) {
  if (name == "txt") return TextFormat::kTxt;
  if (name == "jsonl") return TextFormat::kJsonl;
  if (name == "fortunes") return TextFormat::kFortunes;
  if (name == "arff") return TextFormat::kArff;
  HOTPATH_CHECK(false, "unknown text format '", name, "' (expected txt, jsonl, fortunes or arff)");
  return TextFormat::kTxt;
}

const char* text_format_name(TextFormat format) {
  switch (format) {
    case TextFormat::kTxt: return "txt";
    case TextFormat::kJsonl: return "jsonl";
    case TextFormat::kFortunes: return "fortunes";
    case TextFormat::kArff: return "arff";
  }
  return "?";
}

TextSource parse_jsonl(std::string_view content, std::string_view name, const TextSourceOptions& options) {
  TextSource source;
  std::vector<RawLabel> raw;
  const auto lines = split_lines(content);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::size_t line = i + 1;
    if (trim(lines[i]).empty()) continue;
    const nlohmann::json record = parse_json(lines[i], detail::concat(name, ":", line));
    HOTPATH_CHECK(record.is_object(), name, ":", line, ": expected a JSON object {\"", options.text_field,
                  "\": ..., \"", options.label_field, "\": ...}");
    const auto text = record.find(options.text_field);
    HOTPATH_CHECK(text != record.end() && text->is_string(), name, ":", line, ": field '", options.text_field,
                  "' missing or not a string");
    TextRecord r{text->get<std::string>(), "", -1, line};
    check_utf8(r.text, name, line);
    if (const auto pair = record.find(options.pair_field); pair != record.end() && !pair->is_null()) {
      HOTPATH_CHECK(pair->is_string(), name, ":", line, ": field '", options.pair_field, "' is not a string");
      r.text_pair = pair->get<std::string>();
      check_utf8(r.text_pair, name, line);
    }
    RawLabel label;
    if (const auto l = record.find(options.label_field); l != record.end() && !l->is_null()) {
      if (l->is_number_integer() && l->get<std::int64_t>() >= 0) {
        label = l->get<std::int64_t>();
      } else if (l->is_string() && !l->get<std::string>().empty()) {
        label = l->get<std::string>();
      } else {
        HOTPATH_CHECK(false, name, ":", line, ": field '", options.label_field, "' is ", l->dump(),
                      ": expected a non-negative integer or a class name");
      }
    }
    source.records.push_back(std::move(r));
    raw.push_back(std::move(label));
  }
  HOTPATH_CHECK(!source.records.empty(), name, ": no records");
  source.classes = resolve_labels(name, raw, source.records);
  return source;
}

TextSource parse_arff(std::string_view content, std::string_view name, const TextSourceOptions& options) {
  const auto lines = split_lines(content);
  std::vector<ArffAttribute> attrs;
  std::size_t i = 0;
  bool saw_data = false;
  for (; i < lines.size() && !saw_data; ++i) {
    const std::string_view line = trim(lines[i]);
    if (line.empty() || line.front() == '%') continue;
    if (starts_with_keyword(line, "@relation")) continue;
    if (starts_with_keyword(line, "@attribute")) {
      attrs.push_back(parse_attribute(line.substr(10), name, i + 1));
    } else if (starts_with_keyword(line, "@data")) {
      saw_data = true;
    } else {
      HOTPATH_CHECK(false, name, ":", i + 1, ": expected @relation, @attribute or @data in the header, found '",
                    line.substr(0, 40), "'");
    }
  }
  HOTPATH_CHECK(saw_data, name, ": no @data section");
  std::optional<std::size_t> text_col;
  std::optional<std::size_t> label_col;
  for (std::size_t a = 0; a < attrs.size(); ++a) {
    if (options.text_attribute.empty() ? (!text_col && attrs[a].kind == ArffAttribute::Kind::kString)
                                       : attrs[a].name == options.text_attribute) {
      text_col = a;
    }
    if (options.label_attribute.empty() ? attrs[a].kind == ArffAttribute::Kind::kNominal
                                        : attrs[a].name == options.label_attribute) {
      label_col = a;
    }
  }
  HOTPATH_CHECK(text_col.has_value(), name, ": no ",
                options.text_attribute.empty() ? "string attribute" : "attribute '" + options.text_attribute + "'",
                " for the text");
  HOTPATH_CHECK(attrs[*text_col].kind == ArffAttribute::Kind::kString, name, ": text attribute ",
                attrs[*text_col].name, " is not of type string");
  HOTPATH_CHECK(options.label_attribute.empty() || label_col.has_value(), name, ": no attribute '",
                options.label_attribute, "' for the label");
  if (label_col) {
    HOTPATH_CHECK(attrs[*label_col].kind == ArffAttribute::Kind::kNominal, name, ": label attribute ",
                  attrs[*label_col].name, " is not nominal");
  }

  TextSource source;
  if (label_col) source.classes = attrs[*label_col].values;
  for (; i < lines.size(); ++i) {
    const std::size_t line = i + 1;
    const std::string_view text = trim(lines[i]);
    if (text.empty() || text.front() == '%') continue;
    HOTPATH_CHECK(text.front() != '{', name, ":", line, ": sparse ARFF instances ({index value, ...}) are not supported");
    auto values = split_values(text, name, line);
    HOTPATH_CHECK(values.size() == attrs.size(), name, ":", line, ": expected ", attrs.size(), " values, found ",
                  values.size());
    TextRecord r{values[*text_col].value_or(""), "", -1, line};
    check_utf8(r.text, name, line);
    if (label_col && values[*label_col]) {
      const auto& classes = source.classes;
      const auto it = std::find(classes.begin(), classes.end(), *values[*label_col]);
      HOTPATH_CHECK(it != classes.end(), name, ":", line, ": '", *values[*label_col], "' is not a value of ",
                    attrs[*label_col].name);
      r.label = std::distance(classes.begin(), it);
    }
    source.records.push_back(std::move(r));
  }
  HOTPATH_CHECK(!source.records.empty(), name, ": no instances after @data");
  return source;
}

std::vector<TextRecord> parse_fortunes(std::string_view content, std::string_view name) {
  std::vector<TextRecord> records;
  const auto lines = split_lines(content);
  std::string entry;
  std::size_t first_line = 0;
  const auto flush = [&] {
    while (!entry.empty() && entry.back() == '\n') entry.pop_back();
    if (!trim(entry).empty() && entry.find_first_not_of(" \t\n") != std::string::npos) {
      records.push_back({entry, "", -1, first_line});
    }
    entry.clear();
    first_line = 0;
  };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i] == "%") {
      flush();
      continue;
    }
    check_utf8(lines[i], name, i + 1);
    if (first_line == 0) first_line = i + 1;
    entry.append(lines[i]);
    entry += '\n';
  }
  flush();
  return records;
}

TextSource read_text_source(const std::string& path, const TextSourceOptions& options) {
  switch (options.format) {
    case TextFormat::kTxt: return read_txt(path, options);
    case TextFormat::kJsonl: return parse_jsonl(read_maybe_gzip(path), path, options);
    case TextFormat::kFortunes: return read_fortunes(path);
    case TextFormat::kArff: return parse_arff(read_maybe_gzip(path), path, options);
  }
  return {};
}

}  // namespace hotpath::text
