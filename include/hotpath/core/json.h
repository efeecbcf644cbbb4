// hotpath/core/json.h — JSON from files, parsed with the bounds nlohmann's parser lacks.
//
//   const nlohmann::json j = hotpath::parse_json(text, path);   // depth <= 100, else one line
//   const auto header = hotpath::parse_json(text, path, hotpath::DuplicateKeys::kReject);
//   hotpath::check_json_depth(line, "list.jsonl:7");             // before handing text elsewhere
//
// Every JSON input hotpath reads (config.json, model.json, trainer.json, tokenizer.json, safetensors
// headers, JSONL lines) goes through parse_json: a linear pre-scan bounds the nesting depth before
// the parser sees a byte (a 100,000-deep line crashed the recursive code that walks it), and objects
// are std::map-backed (nlohmann::json), so 200,000 keys or duplicated keys cost O(n log n), never
// the O(n²) of ordered_json's vector lookup. Parse errors name `where`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotpath {

inline constexpr std::size_t kMaxJsonDepth = 100;

// What to do when one object names a key twice: keep the last value (like Python's json, HF) or
// refuse the document, naming the key.
enum class DuplicateKeys { kLastWins, kReject };

// Throws hotpath::Error ("<where>: JSON nested deeper than N levels at byte B") when arrays/objects
// nest deeper than `max_depth`. Linear; strings (with escapes) are skipped.
void check_json_depth(std::string_view text, std::string_view where, std::size_t max_depth = kMaxJsonDepth);

// check_json_depth, then nlohmann's parser; errors become hotpath::Error naming `where`.
nlohmann::json parse_json(std::string_view text, std::string_view where,
                          DuplicateKeys duplicates = DuplicateKeys::kLastWins,
                          std::size_t max_depth = kMaxJsonDepth);

// A value for an error message: scalars as JSON (cut at 60 characters), containers by type only, so a
// deeply nested or huge value neither recurses through dump() nor floods the one-line message.
std::string json_brief(const nlohmann::json& value);

// Typed fields of one JSON object (a config file): absent and null keys take the fallback, or are an
// error when there is none; every error is one line naming `name` (the file) and the key.
//
//   const JsonFields f{j, "adapter_config.json"};
//   std::int64_t n = f.integer("num_virtual_tokens", std::nullopt, 1, 4096);   // required, in [1, 4096]
struct JsonFields {
  const nlohmann::json& json;
  std::string_view name;

  [[nodiscard]] bool has(const char* key) const;
  // An integer in [min, max]; values above INT64_MAX are refused as too large, not wrapped.
  [[nodiscard]] std::int64_t integer(const char* key, std::optional<std::int64_t> fallback, std::int64_t min,
                                     std::int64_t max) const;
  // A finite number in [min, max].
  [[nodiscard]] double real(const char* key, double fallback, double min = std::numeric_limits<double>::lowest(),
                            double max = std::numeric_limits<double>::max()) const;
  [[nodiscard]] std::string text(const char* key, const char* fallback) const;
  [[nodiscard]] bool boolean(const char* key, bool fallback) const;
  // A list of strings (absent: empty).
  [[nodiscard]] std::vector<std::string> texts(const char* key) const;
};

}  // namespace hotpath
