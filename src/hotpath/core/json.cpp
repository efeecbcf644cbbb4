#include "hotpath/core/json.h"

#include <set>
#include <string>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath {

void check_json_depth(std::string_view text, std::string_view where, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped byte cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        ++depth;
        HOTPATH_CHECK(depth <= max_depth, where, ": JSON nested deeper than ", max_depth, " levels at byte ", i);
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;  // unbalanced: the parser reports it
        break;
      default: break;
    }
  }
}

nlohmann::json parse_json(std::string_view text, std::string_view where, DuplicateKeys duplicates,
                          std::size_t max_depth) {
  check_json_depth(text, where, max_depth);
  using Json = nlohmann::json;
  try {
    if (duplicates == DuplicateKeys::kLastWins) return Json::parse(text.begin(), text.end());
    // One set of keys per open object: O(n log n) in the number of keys.
    std::vector<std::set<std::string>> open_objects;
    const auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
      switch (event) {
        case Json::parse_event_t::object_start: open_objects.emplace_back(); break;
        case Json::parse_event_t::object_end: open_objects.pop_back(); break;
        case Json::parse_event_t::key: {
          const auto& key = parsed.get_ref<const std::string&>();
          HOTPATH_CHECK(open_objects.back().insert(key).second, where, ": duplicate key '", printable(key), "'");
          break;
        }
        default: break;
      }
      return true;
    };
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    HOTPATH_CHECK(false, where, ": not valid JSON: ", e.what());
  }
  return {};  // unreachable: HOTPATH_CHECK(false) throws
}

}  // namespace hotpath
