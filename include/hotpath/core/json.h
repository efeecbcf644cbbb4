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
#include <string_view>

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

}  // namespace hotpath
