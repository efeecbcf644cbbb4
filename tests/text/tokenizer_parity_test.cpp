// Parity with Hugging Face `tokenizers` (tests/oracles/tokenizer_ref.py, run once for the whole binary):
// token ids, type ids, attention masks and character offsets on > 10,000 real lines (Debian
// fortunes, Weka's Reuters ARFF, generated non-ASCII text), pairs, every truncation strategy,
// padding, the MiniLM tokenizer.json and vocab.txt under four normalizer settings; added tokens in
// the text (special or not, single_word / lstrip / rstrip / normalized), special_tokens_mask,
// overflowing windows with a stride and HF's stride errors; and the normalizer, pre-tokenizer and
// single_word classes of every Unicode code point. Every input HF refuses (an error or a Rust panic)
// hotpath refuses too, with one line. The corpus is read from named files, never a folder's listing,
// so the cases are the same whatever else is installed.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/text/bert_normalizer.h"
#include "hotpath/text/tokenizer.h"
#include "support/test_support.h"

namespace hotpath::text {
namespace {

using nlohmann::json;

// An exclusive flock() on `path` (created if missing) while the object lives; without one (the file
// cannot be created), no lock: parallel processes then each do the work.
class LockFile {
 public:
  explicit LockFile(const std::string& path) : fd_(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) {
    if (fd_ >= 0) (void)::flock(fd_, LOCK_EX);
  }
  ~LockFile() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;

 private:
  int fd_;
};

// The reference JSON. ctest runs each TEST in its own process, so the file is cached in $TMPDIR
// under a hash of the script and the venv that ran it (the resolved path: its name carries the
// hash of requirements.txt): python runs once per change of either, in one process while the
// others (ctest -j) wait on the lock.
const json& reference() {
  static const std::unique_ptr<json> ref = [] {
    const std::string script = test::source_path("tests/oracles/tokenizer_ref.py");
    std::error_code ec;
    // The bin/ folder, not python itself: a venv's python links to the base interpreter.
    const std::filesystem::path venv = std::filesystem::canonical(std::filesystem::path(test::python()).parent_path(), ec);
    const std::size_t key = std::hash<std::string>{}(read_file(script) + "\n" + (ec ? test::python() : venv.string()));
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("hotpath-tokenizer-ref-" + std::to_string(key) + ".json");
    if (const LockFile lock(path.string() + ".lock"); !std::filesystem::exists(path)) {
      const std::string partial = path.string() + "." + std::to_string(::getpid()) + ".partial";
      test::run_python(script, {"parity", partial});
      std::filesystem::rename(partial, path);  // atomic: parallel test processes never see half a file
    }
    return std::make_unique<json>(json::parse(read_file(path.string())));
  }();
  return *ref;
}

Tokenizer load(const std::string& name) {
  const json& spec = reference()["tokenizers"].at(name);
  if (spec.contains("json")) return Tokenizer::from_json_file(spec["json"].get<std::string>());
  if (spec.contains("json_text")) return Tokenizer::from_json(spec["json_text"].get<std::string>(), name);
  VocabConfig config;
  if (spec.contains("lowercase")) config.normalizer.lowercase = spec["lowercase"].get<bool>();
  if (spec.contains("strip_accents")) config.normalizer.strip_accents = spec["strip_accents"].get<bool>();
  if (spec.contains("clean_text")) config.normalizer.clean_text = spec["clean_text"].get<bool>();
  if (spec.contains("handle_chinese_chars")) config.normalizer.handle_chinese_chars = spec["handle_chinese_chars"].get<bool>();
  return Tokenizer::from_vocab(read_file(spec["vocab"].get<std::string>()), config);
}

EncodeOptions options_of(const json& c, const Tokenizer& tok) {
  EncodeOptions o;
  if (c.value("file_defaults", false)) o = tok.file_options();
  o.return_offsets = true;
  o.offset_unit = OffsetUnit::kChars;
  o.threads = 2;
  o.return_overflowing_tokens = c.value("overflow", false);
  o.return_special_tokens_mask = c.contains("overflow");  // the cases written with extra=True
  if (c.contains("truncation") && !c["truncation"].is_null()) {
    const json& t = c["truncation"];
    o.max_length = t["max_length"].get<std::size_t>();
    o.stride = t.value("stride", std::size_t{0});
    const std::string strategy = t.value("strategy", "longest_first");
    o.truncation = strategy == "only_first"    ? TruncationStrategy::kOnlyFirst
                   : strategy == "only_second" ? TruncationStrategy::kOnlySecond
                                               : TruncationStrategy::kLongestFirst;
    o.truncation_side = t.value("direction", "right") == "left" ? Side::kLeft : Side::kRight;
  }
  if (c.contains("padding") && !c["padding"].is_null()) {
    const json& p = c["padding"];
    o.padding = p.contains("length") && !p["length"].is_null() ? Padding::kMaxLength : Padding::kLongest;
    if (o.padding == Padding::kMaxLength) o.pad_length = p["length"].get<std::size_t>();
    if (p.contains("pad_to_multiple_of")) o.pad_to_multiple_of = p["pad_to_multiple_of"].get<std::size_t>();
    o.padding_side = p.value("direction", "right") == "left" ? Side::kLeft : Side::kRight;
  }
  return o;
}

std::string escaped(std::string_view s) { return json(std::string(s)).dump(); }

std::string tokens_of(const Tokenizer& tok, const std::vector<std::int32_t>& ids) {
  std::string out;
  for (const std::int32_t id : ids) out += std::string(out.empty() ? "" : " ") + std::string(tok.id_to_token(id));
  return out;
}

// Where HF refuses an input (an error, or a Rust panic), hotpath must refuse it too: a hotpath::Error
// (HOTPATH_CHECK) whose message is one line, never a crash or an output.
void expect_one_line_refusal(const std::function<void()>& run, const std::string& hf_message) {
  try {
    run();
    ADD_FAILURE() << "HF refuses (" << hf_message << "), hotpath encoded it";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_FALSE(what.empty()) << "HF: " << hf_message;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
  }
}

struct Checked {
  std::size_t compared = 0;  // encodings (and overflowing windows) equal to HF's
  std::size_t refused = 0;   // inputs HF refuses that hotpath refused too
};

// Runs every case whose name starts with `prefix`. An input HF refuses ({"refused": ...}) must be
// refused by hotpath alone and within the batch (HF refuses the whole batch); the other inputs are
// encoded as one batch, as the reference did, and compared.
Checked check_cases(const std::string& prefix) {
  const json& ref = reference();
  const json& lines = ref["lines"];
  Checked checked;
  std::size_t& compared = checked.compared;
  for (const json& c : ref["cases"]) {
    const std::string name = c["name"].get<std::string>();
    if (name.rfind(prefix, 0) != 0) continue;
    SCOPED_TRACE(name);
    const Tokenizer tok = load(c["tokenizer"].get<std::string>());
    const EncodeOptions o = options_of(c, tok);
    const auto text = [&](const json& index) -> std::string_view {
      return lines[index.get<std::size_t>()].get_ref<const std::string&>();
    };
    const auto encode = [&](std::span<const std::string_view> a, std::span<const std::string_view> b) {
      return b.empty() ? tok.encode_batch(a, o) : tok.encode_pair_batch(a, b, o);
    };
    std::vector<std::string_view> all_firsts;
    std::vector<std::string_view> all_seconds;
    std::vector<std::string_view> firsts;  // the inputs HF encodes
    std::vector<std::string_view> seconds;
    std::vector<const json*> wanted;
    const json& inputs = c["inputs"];
    const json& rows = c["encodings"];
    EXPECT_EQ(inputs.size(), rows.size());
    if (inputs.size() != rows.size()) continue;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const json& input = inputs[i];
      const std::string_view first = text(input.is_array() ? input[0] : input);
      const std::string_view second = input.is_array() ? text(input[1]) : std::string_view();
      all_firsts.push_back(first);
      if (input.is_array()) all_seconds.push_back(second);
      if (rows[i].contains("refused")) {
        SCOPED_TRACE("input " + std::to_string(i) + ": " + escaped(first) +
                     (input.is_array() ? " + " + escaped(second) : std::string()));
        const std::span<const std::string_view> one_second(&second, input.is_array() ? 1 : 0);
        expect_one_line_refusal([&] { (void)encode({&first, 1}, one_second); }, rows[i]["refused"].get<std::string>());
        ++checked.refused;
        continue;
      }
      firsts.push_back(first);
      if (input.is_array()) seconds.push_back(second);
      wanted.push_back(&rows[i]);
    }
    if (wanted.size() < inputs.size()) {
      expect_one_line_refusal([&] { (void)encode(all_firsts, all_seconds); }, "the batch holds an input HF refuses");
    }
    const bool pair = !seconds.empty();
    const std::vector<Encoding> got = encode(firsts, seconds);
    EXPECT_EQ(got.size(), wanted.size());
    int failures = 0;
    for (std::size_t i = 0; i < std::min(got.size(), wanted.size()) && failures < 5; ++i) {
      // The encoding, then its overflowing windows (when the case has them), each against HF's.
      const json& want = *wanted[i];
      std::vector<std::pair<const Encoding*, const json*>> windows = {{&got[i], &want}};
      if (want.contains("overflowing")) {
        EXPECT_EQ(got[i].overflowing.size(), want["overflowing"].size()) << "input " << i;
        for (std::size_t k = 0; k < std::min(got[i].overflowing.size(), want["overflowing"].size()); ++k) {
          windows.emplace_back(&got[i].overflowing[k], &want["overflowing"][k]);
        }
      }
      for (std::size_t r = 0; r < windows.size(); ++r) {
        const Encoding& e = *windows[r].first;
        const json& w = *windows[r].second;
        std::vector<Offset> offsets;
        for (const json& off : w["offsets"]) offsets.push_back({off[0].get<std::uint32_t>(), off[1].get<std::uint32_t>()});
        const auto ids = w["ids"].get<std::vector<std::int32_t>>();
        bool same = e.ids == ids && e.type_ids == w["type_ids"].get<std::vector<std::int32_t>>() &&
                    e.attention_mask == w["attention_mask"].get<std::vector<std::int32_t>>() && e.offsets == offsets;
        if (w.contains("special_tokens_mask")) {
          same = same && e.special_tokens_mask == w["special_tokens_mask"].get<std::vector<std::int32_t>>();
        }
        if (!same) {
          ++failures;
          std::ostringstream msg;
          msg << "input " << i << (r ? " overflowing window " + std::to_string(r - 1) : std::string()) << ": "
              << escaped(firsts[i]) << (pair ? " + " + escaped(seconds[i]) : "") << "\n  hf:      " << tokens_of(tok, ids)
              << "\n  hotpath: " << tokens_of(tok, e.ids) << "\n  hf offsets:     ";
          for (const Offset& off : offsets) msg << off.begin << "-" << off.end << " ";
          msg << "\n  hotpath offsets: ";
          for (const Offset& off : e.offsets) msg << off.begin << "-" << off.end << " ";
          if (w.contains("special_tokens_mask")) {
            msg << "\n  hf mask: " << w["special_tokens_mask"].dump() << "\n  hotpath mask: " << json(e.special_tokens_mask).dump();
          }
          msg << "\n  hf type ids: " << w["type_ids"].dump() << "\n  hotpath type ids: " << json(e.type_ids).dump();
          ADD_FAILURE() << msg.str();
        }
        ++compared;
      }
    }
  }
  return checked;
}

TEST(TokenizerParity, CorpusHasOverTenThousandRealAndNonAsciiLines) {
  const json& ref = reference();
  EXPECT_GE(ref["lines"].size(), 10000u);
  const json& sources = ref["sources"];
  EXPECT_GE(sources["fortune_lines"].get<int>() + sources["fortunes"].get<int>() + sources["reuters_lines"].get<int>() +
                sources["reuters_documents"].get<int>(),
            10000);
  EXPECT_GE(sources["generated"].get<int>(), 2000);
}

TEST(TokenizerParity, SinglesMatchOnEveryLineUnderEveryNormalizerSetting) {
  EXPECT_GE(check_cases("singles/").compared, 2 * 13000u);
}

// only_first / only_second where the text to cut is too short: HF refuses those pairs, and so must hotpath.
TEST(TokenizerParity, PairsAndEveryTruncationStrategyMatch) {
  const Checked checked = check_cases("pairs/");
  EXPECT_GE(checked.compared, 10000u);
  EXPECT_GT(checked.refused, 100u);
}

TEST(TokenizerParity, PaddingMatches) { EXPECT_GE(check_cases("padding/").compared, 2000u); }

TEST(TokenizerParity, TokenizerJsonTruncationAndPaddingApplyLikeHf) {
  EXPECT_GE(check_cases("file_defaults/").compared, 1000u);
  const Tokenizer tok = load("minilm_json");
  EXPECT_EQ(tok.file_options().max_length, 128u);
  EXPECT_EQ(tok.file_options().padding, Padding::kMaxLength);
  // The model directory: tokenizer.json wins over vocab.txt; tokenizer_config.json adds the limit.
  const Tokenizer dir = Tokenizer::from_directory(reference()["model_dir"].get<std::string>());
  EXPECT_EQ(dir.model_max_length(), 512u);
  EXPECT_EQ(dir.file_options().max_length, 128u);
  EXPECT_EQ(dir.vocab_size(), 30522u);
}

// "[MASK]" in the text is one token, "[mask]" is not (special tokens are not normalized), and
// tokens with every added-token flag match HF on crafted lines, real lines with tokens injected
// anywhere (inside words too), and every corpus line through the normalized-token path.
TEST(TokenizerParity, AddedTokensInTheTextMatch) { EXPECT_GE(check_cases("added/").compared, 13000u + 4 * 2000u); }

// Questions so long that the context keeps no more than the stride: HF panics, hotpath refuses with one line.
TEST(TokenizerParity, OverflowingWindowsWithStrideMatch) {
  const Checked checked = check_cases("overflow/");
  EXPECT_GE(checked.compared, 5000u);
  EXPECT_GT(checked.refused, 10u);
}

// transformers' AutoTokenizer(questions, contexts, truncation="only_second", max_length=64,
// stride=16, return_overflowing_tokens=True, padding="max_length"): the same rows, masks and
// overflow_to_sample_mapping as flatten_overflowing.
TEST(TokenizerParity, TransformersOverflowRowsMatchFlattenOverflowing) {
  const json& want = reference()["transformers_qa"];
  const json& lines = reference()["lines"];
  std::vector<std::string_view> questions;
  std::vector<std::string_view> contexts;
  for (const json& pair : want["inputs"]) {
    questions.push_back(lines[pair[0].get<std::size_t>()].get_ref<const std::string&>());
    contexts.push_back(lines[pair[1].get<std::size_t>()].get_ref<const std::string&>());
  }
  ASSERT_GT(questions.size(), 200u);
  const Tokenizer tok = Tokenizer::from_directory(reference()["model_dir"].get<std::string>());
  const FlatEncodings flat = flatten_overflowing(tok.encode_pair_batch(
      questions, contexts,
      {.max_length = 64, .truncation = TruncationStrategy::kOnlySecond, .stride = 16, .return_overflowing_tokens = true,
       .padding = Padding::kMaxLength, .return_special_tokens_mask = true, .threads = 2}));
  EXPECT_EQ(flat.overflow_to_sample_mapping, want["overflow_to_sample_mapping"].get<std::vector<std::size_t>>());
  EXPECT_GT(flat.encodings.size(), questions.size() + 100);  // long contexts: many windows
  ASSERT_EQ(flat.encodings.size(), want["input_ids"].size());
  int failures = 0;
  for (std::size_t r = 0; r < flat.encodings.size() && failures < 5; ++r) {
    const Encoding& e = flat.encodings[r];
    const bool same = e.ids == want["input_ids"][r].get<std::vector<std::int32_t>>() &&
                      e.type_ids == want["token_type_ids"][r].get<std::vector<std::int32_t>>() &&
                      e.attention_mask == want["attention_mask"][r].get<std::vector<std::int32_t>>() &&
                      e.special_tokens_mask == want["special_tokens_mask"][r].get<std::vector<std::int32_t>>();
    if (!same && ++failures) ADD_FAILURE() << "row " << r << ": transformers " << want["input_ids"][r].dump();
  }
}

// Where HF refuses a stride (or panics on one), hotpath refuses with one line; elsewhere the windows are equal.
TEST(TokenizerParity, StrideErrorsAreHfErrors) {
  const Tokenizer tok = load("minilm_json");
  std::size_t errors = 0;
  std::size_t compared = 0;
  for (const json& c : reference()["stride_errors"]) {
    EncodeOptions o;
    o.max_length = c["max_length"].get<std::size_t>();
    o.stride = c["stride"].get<std::size_t>();
    const std::string strategy = c["strategy"].get<std::string>();
    o.truncation = strategy == "only_first"    ? TruncationStrategy::kOnlyFirst
                   : strategy == "only_second" ? TruncationStrategy::kOnlySecond
                                               : TruncationStrategy::kLongestFirst;
    o.truncation_side = c["direction"].get<std::string>() == "left" ? Side::kLeft : Side::kRight;
    o.return_overflowing_tokens = true;
    const json& input = c["input"];
    SCOPED_TRACE(c.dump());
    const auto run = [&] {
      return input.is_array() ? tok.encode_pair(input[0].get<std::string>(), input[1].get<std::string>(), o)
                              : tok.encode(input.get<std::string>(), o);
    };
    if (o.max_length < tok.num_special_tokens(input.is_array())) {
      // hotpath refuses this max_length whatever the stride (HF wraps around and skips truncation).
      expect_one_line_refusal([&] { (void)run(); }, "(HF does not: a max_length below the special tokens)");
      continue;
    }
    if (c.contains("refused")) {
      ++errors;
      expect_one_line_refusal([&] { (void)run(); }, c["refused"].get<std::string>());
      continue;
    }
    const Encoding e = run();
    EXPECT_EQ(e.ids, c["ids"].get<std::vector<std::int32_t>>());
    std::vector<std::vector<std::int32_t>> windows;
    for (const Encoding& w : e.overflowing) windows.push_back(w.ids);
    EXPECT_EQ(windows, c["overflowing"].get<std::vector<std::vector<std::int32_t>>>());
    ++compared;
  }
  EXPECT_GT(errors, 20u);
  EXPECT_GT(compared, 100u);
}

// HF's single_word test (regex \w before and after the match) on every code point: a single_word
// token right after the code point is matched exactly when HF matches it.
TEST(TokenizerParity, SingleWordBoundariesMatchOnEveryCodePoint) {
  std::set<char32_t> word;
  for (const json& run : reference()["word_characters"]) {
    for (auto c = run[0].get<char32_t>(); c <= run[1].get<char32_t>(); ++c) word.insert(c);
  }
  EXPECT_GT(word.size(), 100000u);
  const std::string snowman = "\xE2\x98\x83";  // U+2603
  const Tokenizer tok = Tokenizer::from_json(R"({"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"[UNK]":0}},
      "pre_tokenizer":{"type":"BertPreTokenizer"},"added_tokens":[{"id":1,"content":")" + snowman +
                                             R"(","single_word":true,"normalized":false}]})");
  std::string text;
  std::vector<char32_t> cps;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if ((c >= 0xD800 && c < 0xE000) || c == 0x2603) continue;
    cps.push_back(c);
    append_utf8(text, c);
    text += snowman + " ";
  }
  const Encoding e = tok.encode(text, {.return_offsets = true, .offset_unit = OffsetUnit::kChars});
  std::set<std::uint32_t> matched;
  for (std::size_t i = 0; i < e.ids.size(); ++i) {
    if (e.ids[i] == 1) matched.insert(e.offsets[i].begin);
  }
  int failures = 0;
  for (std::size_t k = 0; k < cps.size(); ++k) {
    const bool hotpath_word = !matched.contains(static_cast<std::uint32_t>(3 * k + 1));
    if (hotpath_word != word.contains(cps[k]) && ++failures <= 40) {
      ADD_FAILURE() << std::hex << "U+" << static_cast<std::uint32_t>(cps[k]) << ": hf word character "
                    << word.contains(cps[k]);
    }
  }
  EXPECT_EQ(failures, 0);
}

// Every code point through the normalizer, as HF's BertNormalizer.normalize_str sees it.
TEST(TokenizerParity, NormalizerMatchesOnEveryCodePoint) {
  const json& probe = reference()["codepoints"];
  const std::pair<const char*, NormalizerOptions> configs[] = {
      {"default", {true, true, std::nullopt, true}},
      {"cased", {true, false, std::nullopt, false}},
      {"strip_only", {false, false, true, false}},
      {"lower_only", {false, false, false, true}},
  };
  for (const auto& [name, options] : configs) {
    SCOPED_TRACE(name);
    const std::string kSpaced = "\xff";         // never valid UTF-8, so never an output
    std::map<char32_t, std::string> expected;  // absent: unchanged; kSpaced: " c "
    for (const json& run : probe[name]) {
      for (auto c = run[0].get<char32_t>(); c <= run[1].get<char32_t>(); ++c) {
        expected[c] = run[2].is_null() ? kSpaced : run[2].get<std::string>();
      }
    }
    const BertNormalizer normalizer(options);
    int failures = 0;
    for (char32_t c = 0; c < 0x110000; ++c) {
      if ((c >= 0xD800 && c < 0xE000) || c == '#') continue;
      std::string in;
      append_utf8(in, c);
      auto it = expected.find(c);
      std::string want = it == expected.end() ? in : it->second;
      if (want == kSpaced) want = " " + in + " ";
      const std::string got = normalizer.normalize(in);
      if (got != want && ++failures <= 40) {
        ADD_FAILURE() << std::hex << "U+" << static_cast<std::uint32_t>(c) << ": hf " << escaped(want) << ", hotpath "
                      << escaped(got);
      }
    }
    EXPECT_EQ(failures, 0);
  }
}

TEST(TokenizerParity, PreTokenizerClassesMatchOnEveryCodePoint) {
  const json& probe = reference()["codepoints"];
  const auto punct = probe["punctuation"].get<std::set<char32_t>>();
  const auto space = probe["whitespace"].get<std::set<char32_t>>();
  EXPECT_GT(punct.size(), 500u);
  int failures = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if ((c >= 0xD800 && c < 0xE000) || c == '#') continue;
    if (is_bert_punctuation(c) != punct.contains(c) && ++failures <= 40) {
      ADD_FAILURE() << std::hex << "U+" << static_cast<std::uint32_t>(c) << ": hf punctuation " << punct.contains(c);
    }
    if (is_bert_whitespace(c) != space.contains(c) && ++failures <= 40) {
      ADD_FAILURE() << std::hex << "U+" << static_cast<std::uint32_t>(c) << ": hf whitespace " << space.contains(c);
    }
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace hotpath::text
