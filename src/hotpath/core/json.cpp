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

}  // namespace hotpath
