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

namespace {

// SAX pass that refuses a key repeated within one object: O(n log n). (nlohmann's callback parser,
// the documented way to see keys, is quadratic in the keys of one object: 100,000 took minutes.)
class DuplicateKeyCheck : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit DuplicateKeyCheck(std::string_view where) : where_(where) {}
  bool null() override { return true; }
  bool boolean(bool /*val*/) override { return true; }
  bool number_integer(number_integer_t /*val*/) override { return true; }
  bool number_unsigned(number_unsigned_t /*val*/) override { return true; }
  bool number_float(number_float_t /*val*/, const string_t& /*s*/) override { return true; }
  bool string(string_t& /*val*/) override { return true; }
  bool binary(binary_t& /*val*/) override { return true; }
  bool start_object(std::size_t /*elements*/) override {
    open_objects_.emplace_back();
    return true;
  }
  bool key(string_t& val) override {
    HOTPATH_CHECK(open_objects_.back().insert(val).second, where_, ": duplicate key '", printable(val), "'");
    return true;
  }
  bool end_object() override {
    open_objects_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& /*ex*/) override {
    return false;  // the DOM pass that follows reports it with nlohmann's message
  }

 private:
  std::string_view where_;
  std::vector<std::set<std::string>> open_objects_;
};

}  // namespace

nlohmann::json parse_json(std::string_view text, std::string_view where, DuplicateKeys duplicates,
                          std::size_t max_depth) {
  check_json_depth(text, where, max_depth);
  using Json = nlohmann::json;
  try {
    if (duplicates == DuplicateKeys::kReject) {
      DuplicateKeyCheck check(where);
      Json::sax_parse(text.begin(), text.end(), &check);
    }
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    HOTPATH_CHECK(false, where, ": invalid JSON: ", e.what());
  }
  return {};  // unreachable: HOTPATH_CHECK(false) throws
}

std::string json_brief(const nlohmann::json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array of " + std::to_string(value.size());
  std::string s = value.dump(-1, ' ', /*ensure_ascii=*/true);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

bool JsonFields::has(const char* key) const { return json.contains(key) && !json.at(key).is_null(); }

std::int64_t JsonFields::integer(const char* key, std::optional<std::int64_t> fallback, std::int64_t min,
                                 std::int64_t max) const {
  if (!has(key)) {
    HOTPATH_CHECK(fallback.has_value(), name, ": missing required field \"", key, "\"");
    return *fallback;
  }
  const nlohmann::json& v = json.at(key);
  HOTPATH_CHECK(v.is_number_integer(), name, ": field \"", key, "\" must be an integer, found ", json_brief(v));
  // An unsigned value above INT64_MAX would wrap to a negative one: refuse it as too large.
  HOTPATH_CHECK(!v.is_number_unsigned() || v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max), name,
                ": field \"", key, "\" must be <= ", max, ", found ", json_brief(v));
  const std::int64_t x = v.get<std::int64_t>();
  HOTPATH_CHECK(x >= min, name, ": field \"", key, "\" must be >= ", min, ", found ", x);
  HOTPATH_CHECK(x <= max, name, ": field \"", key, "\" must be <= ", max, ", found ", x);
  return x;
}

double JsonFields::real(const char* key, double fallback, double min, double max) const {
  if (!has(key)) return fallback;
  const nlohmann::json& v = json.at(key);
  HOTPATH_CHECK(v.is_number(), name, ": field \"", key, "\" must be a number, found ", json_brief(v));
  const double x = v.get<double>();
  HOTPATH_CHECK(x >= min && x <= max, name, ": field \"", key, "\" must be a number in [", min, ", ", max,
                "], found ", x);
  return x;
}

std::string JsonFields::text(const char* key, const char* fallback) const {
  if (!has(key)) return fallback;
  const nlohmann::json& v = json.at(key);
  HOTPATH_CHECK(v.is_string(), name, ": field \"", key, "\" must be a string, found ", json_brief(v));
  return v.get<std::string>();
}

bool JsonFields::boolean(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  const nlohmann::json& v = json.at(key);
  HOTPATH_CHECK(v.is_boolean(), name, ": field \"", key, "\" must be true or false, found ", json_brief(v));
  return v.get<bool>();
}

std::vector<std::string> JsonFields::texts(const char* key) const {
  if (!has(key)) return {};
  const nlohmann::json& v = json.at(key);
  HOTPATH_CHECK(v.is_array(), name, ": field \"", key, "\" must be a list of strings, found ", json_brief(v));
  std::vector<std::string> out;
  for (const nlohmann::json& s : v) {
    HOTPATH_CHECK(s.is_string(), name, ": field \"", key, "\" must be a list of strings, found ", json_brief(s));
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace hotpath
