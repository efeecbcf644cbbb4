// libFuzzer target: the text dataset parsers. The first byte picks the parser for the rest:
//   0: Weka ARFF   1: JSONL (default fields)   2: JSONL (pair field "p", label field "y")   3: fortune file
// Bad input must end in hotpath::Error (never a crash, hang or a JSON exception escaping); what
// parses must keep its invariants: labels inside the class list, texts valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/text/bert_normalizer.h"
#include "hotpath/text/text_data.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_text_data: %s\n", what);
  std::abort();
}

void check(const std::vector<hotpath::text::TextRecord>& records, std::size_t classes) {
  for (const auto& r : records) {
    if (r.label < -1 || (r.label >= 0 && static_cast<std::size_t>(r.label) >= classes)) fail("label out of range");
    if (hotpath::text::find_invalid_utf8(r.text) != std::string_view::npos ||
        hotpath::text::find_invalid_utf8(r.text_pair) != std::string_view::npos) {
      fail("invalid UTF-8 accepted");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] & 3) {
      case 0: {
        const auto s = hotpath::text::parse_arff(input, "fuzz.arff");
        check(s.records, s.classes.size());
        break;
      }
      case 1: {
        const auto s = hotpath::text::parse_jsonl(input, "fuzz.jsonl");
        check(s.records, s.classes.size());
        break;
      }
      case 2: {
        hotpath::text::TextSourceOptions o;
        o.pair_field = "p";
        o.label_field = "y";
        const auto s = hotpath::text::parse_jsonl(input, "fuzz.jsonl", o);
        check(s.records, s.classes.size());
        break;
      }
      default:
        check(hotpath::text::parse_fortunes(input, "fuzz"), 0);
        break;
    }
  } catch (const hotpath::Error&) {
    return 0;  // rejected with a message
  }
  return 0;
}
