// The WordPiece tokenizer on tiny vocabularies built here: BERT's rules one by one, pairs,
// truncation, padding, offsets, threads, and one-line errors for bad input and bad files.
#include "hotpath/text/tokenizer.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/text/bert_normalizer.h"
#include "support/test_support.h"

namespace hotpath::text {
namespace {

// ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then the words in order from 5.
const std::vector<std::string> kVocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!",
                                         "token", "##izer", "##s",  "a",     "##a",    "b",      "中",   "文",
                                         "hello world", "cafe", "é", "-", "$"};

std::string vocab_text() {
  std::string out;
  for (const std::string& t : kVocab) out += t + "\n";
  return out;
}

Tokenizer tiny(NormalizerOptions normalizer = {}) {
  VocabConfig config;
  config.normalizer = normalizer;
  return Tokenizer::from_vocab(vocab_text(), config);
}

std::int32_t id(const std::string& token) {
  for (std::size_t i = 0; i < kVocab.size(); ++i) {
    if (kVocab[i] == token) return static_cast<std::int32_t>(i);
  }
  throw std::runtime_error("not in kVocab: " + token);
}

std::vector<std::int32_t> ids(std::initializer_list<const char*> tokens) {
  std::vector<std::int32_t> out;
  for (const char* t : tokens) out.push_back(id(t));
  return out;
}

// The message of the hotpath::Error `fn` throws (fails the test if it throws nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no hotpath::Error thrown";
  return {};
}

TEST(Tokenizer, LowercasesAndSplitsPunctuation) {
  const Encoding e = tiny().encode("Hello, WORLD!");
  EXPECT_EQ(e.ids, ids({"[CLS]", "hello", ",", "world", "!", "[SEP]"}));
  EXPECT_EQ(e.type_ids, std::vector<std::int32_t>(6, 0));
  EXPECT_EQ(e.attention_mask, std::vector<std::int32_t>(6, 1));
  EXPECT_TRUE(e.offsets.empty());
}

TEST(Tokenizer, WordPieceTakesTheLongestMatchFirst) {
  const Tokenizer tok = tiny();
  EXPECT_EQ(tok.tokenize("tokenizers tokens"), (std::vector<std::string>{"token", "##izer", "##s", "token", "##s"}));
  // "hello world" is a vocabulary entry but words never contain spaces: two tokens.
  EXPECT_EQ(tok.tokenize("hello world"), (std::vector<std::string>{"hello", "world"}));
}

TEST(Tokenizer, AWordWithAnUnmatchedPartIsOneUnknownToken) {
  const Encoding e = tiny().encode("tokenq world", {.return_offsets = true});
  EXPECT_EQ(e.ids, ids({"[CLS]", "[UNK]", "world", "[SEP]"}));
  EXPECT_EQ(e.offsets[1], (Offset{0, 6}));
}

TEST(Tokenizer, WordsOverMaxInputCharsPerWordAreUnknown) {
  const Tokenizer tok = tiny();
  EXPECT_EQ(tok.tokenize(std::string(100, 'a')).size(), 100u);  // a ##a ##a ...
  EXPECT_EQ(tok.tokenize(std::string(101, 'a')), std::vector<std::string>{"[UNK]"});
}

TEST(Tokenizer, SpecialTokensInTheTextAreNeverSplit) {
  const Tokenizer tok = tiny();
  EXPECT_EQ(tok.tokenize("a[SEP]b [MASK]"), (std::vector<std::string>{"a", "[SEP]", "b", "[MASK]"}));
  // Matched verbatim in the raw text: the lowercase spelling is ordinary text.
  EXPECT_EQ(tok.tokenize("[sep]"), (std::vector<std::string>{"[UNK]", "[UNK]", "[UNK]"}));
}

TEST(Tokenizer, CleansControlCharactersAndStripsAccents) {
  const std::string text = "Caf\xC3\xA9\x01 h\xC3\xA9llo\xE2\x80\x8B";  // Café\x01 héllo<ZWSP>
  const Tokenizer tok = tiny();
  const Encoding bytes = tok.encode(text, {.return_offsets = true});
  EXPECT_EQ(bytes.ids, ids({"[CLS]", "cafe", "hello", "[SEP]"}));
  EXPECT_EQ(bytes.offsets[1], (Offset{0, 5}));   // "Café" is 5 bytes
  EXPECT_EQ(bytes.offsets[2], (Offset{7, 13}));  // the ZWSP (3 bytes) is dropped
  const Encoding chars = tok.encode(text, {.return_offsets = true, .offset_unit = OffsetUnit::kChars});
  EXPECT_EQ(chars.offsets[1], (Offset{0, 4}));
  EXPECT_EQ(chars.offsets[2], (Offset{6, 11}));
  // strip_accents=false keeps é a character of its own (not in "cafe").
  EXPECT_EQ(tiny({.strip_accents = false}).tokenize("café"), std::vector<std::string>{"[UNK]"});
  // Cased: no lowercasing, no accent stripping.
  EXPECT_EQ(tiny({.lowercase = false}).tokenize("Hello hello"), (std::vector<std::string>{"[UNK]", "hello"}));
}

TEST(Tokenizer, ChineseCharactersAreWordsOfTheirOwn) {
  EXPECT_EQ(tiny().tokenize("a中文b"), (std::vector<std::string>{"a", "中", "文", "b"}));
  EXPECT_EQ(tiny({.handle_chinese_chars = false}).tokenize("a中文b"), std::vector<std::string>{"[UNK]"});
}

TEST(Tokenizer, PairsGetTypeIdsAndOffsetsIntoTheirOwnText) {
  const Encoding e = tiny().encode_pair("hello", "a world", {.return_offsets = true});
  EXPECT_EQ(e.ids, ids({"[CLS]", "hello", "[SEP]", "a", "world", "[SEP]"}));
  EXPECT_EQ(e.type_ids, (std::vector<std::int32_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(e.offsets[4], (Offset{2, 7}));
  const Encoding plain = tiny().encode_pair("hello", "a", {.add_special_tokens = false});
  EXPECT_EQ(plain.ids, ids({"hello", "a"}));
  EXPECT_EQ(plain.type_ids, (std::vector<std::int32_t>{0, 1}));
}

TEST(Tokenizer, LongestFirstTruncationFollowsHuggingFace) {
  const Tokenizer tok = tiny();
  const std::string six = "a b a b a b";
  const std::string two = "hello world";
  // 6 + 2 tokens into max_length 9 (6 after the 3 specials): the short one keeps 2, the long one 4.
  Encoding e = tok.encode_pair(six, two, {.max_length = 9});
  EXPECT_EQ(e.ids, ids({"[CLS]", "a", "b", "a", "b", "[SEP]", "hello", "world", "[SEP]"}));
  // Both longer than half of 4: 2 and 2.
  e = tok.encode_pair(six, six, {.max_length = 7});
  EXPECT_EQ(e.ids, ids({"[CLS]", "a", "b", "[SEP]", "a", "b", "[SEP]"}));
  // Left side keeps the end.
  e = tok.encode("a b hello", {.max_length = 3, .truncation_side = Side::kLeft});
  EXPECT_EQ(e.ids, ids({"[CLS]", "hello", "[SEP]"}));
  // Only the specials fit.
  e = tok.encode("a b", {.max_length = 2});
  EXPECT_EQ(e.ids, ids({"[CLS]", "[SEP]"}));
}

TEST(Tokenizer, OnlyFirstAndOnlySecondTruncateOneSide) {
  const Tokenizer tok = tiny();
  Encoding e = tok.encode_pair("a b a b", "hello", {.max_length = 6, .truncation = TruncationStrategy::kOnlyFirst});
  EXPECT_EQ(e.ids, ids({"[CLS]", "a", "b", "[SEP]", "hello", "[SEP]"}));
  e = tok.encode_pair("hello", "a b a b", {.max_length = 6, .truncation = TruncationStrategy::kOnlySecond});
  EXPECT_EQ(e.ids, ids({"[CLS]", "hello", "[SEP]", "a", "b", "[SEP]"}));
  // Like HF: an error when the chosen side is too short, or when there is no second text.
  EXPECT_NE(error_of([&] {
              (void)tok.encode_pair("a", "b a b a", {.max_length = 5, .truncation = TruncationStrategy::kOnlyFirst});
            }).find("only_first: the first text has 1 tokens"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)tok.encode("a b a b", {.max_length = 3, .truncation = TruncationStrategy::kOnlySecond});
            }).find("needs a pair"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)tok.encode_pair("a", "b", {.max_length = 2}); }).find("max_length 2 leaves no room"),
            std::string::npos);
}

TEST(Tokenizer, PaddingToLongestMultipleAndFixedLength) {
  const Tokenizer tok = tiny();
  const std::vector<std::string_view> lines = {"hello", "a b a b a"};
  auto batch = tok.encode_batch(lines, {.padding = Padding::kLongest, .return_offsets = true});
  ASSERT_EQ(batch[0].size(), 7u);
  EXPECT_EQ(batch[0].ids, ids({"[CLS]", "hello", "[SEP]", "[PAD]", "[PAD]", "[PAD]", "[PAD]"}));
  EXPECT_EQ(batch[0].attention_mask, (std::vector<std::int32_t>{1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(batch[0].offsets[5], (Offset{0, 0}));
  batch = tok.encode_batch(lines, {.padding = Padding::kLongest, .pad_to_multiple_of = 4});
  EXPECT_EQ(batch[0].size(), 8u);
  EXPECT_EQ(batch[1].size(), 8u);
  batch = tok.encode_batch(lines, {.max_length = 4, .padding = Padding::kMaxLength, .padding_side = Side::kLeft});
  EXPECT_EQ(batch[0].ids, ids({"[PAD]", "[CLS]", "hello", "[SEP]"}));
  EXPECT_EQ(batch[1].ids, ids({"[CLS]", "a", "b", "[SEP]"}));
}

TEST(Tokenizer, InvalidUtf8IsAnErrorNamingTheByteAndLine) {
  const Tokenizer tok = tiny();
  const std::string bad = "ab\xC3\x28";
  std::string message = error_of([&] { (void)tok.encode(bad); });
  EXPECT_EQ(message, "invalid UTF-8 in the text at byte 2 (0xc3 0x28)");
  const std::vector<std::string_view> lines = {"fine", "also fine", bad, "\xFF"};
  message = error_of([&] { (void)tok.encode_batch(lines, {.threads = 3}); });
  EXPECT_EQ(message, "line 2: invalid UTF-8 in the text at byte 2 (0xc3 0x28)");
  message = error_of([&] { (void)tok.encode_pair("ok", "\xED\xA0\x80", {}); });
  EXPECT_NE(message.find("second text at byte 0"), std::string::npos);
}

TEST(Utf8, RejectsOverlongsSurrogatesAndTruncation) {
  EXPECT_EQ(find_invalid_utf8("plain ascii text, long enough for the 8-byte path"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("\xC0\x80"), 0u);              // overlong NUL
  EXPECT_EQ(find_invalid_utf8("ab\xE0\x80\xAF"), 2u);        // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xED\xA0\x80"), 0u);          // a surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);      // past U+10FFFF
  EXPECT_EQ(find_invalid_utf8("12345678\xE4\xB8"), 8u);      // cut short
  EXPECT_EQ(find_invalid_utf8("\x80"), 0u);                  // a lone continuation byte
}

TEST(Tokenizer, BatchEncodingIsTheSameOnAnyNumberOfThreads) {
  std::mt19937 rng(5);
  const std::vector<std::string> words = {"hello", "World", "token", "izers", ",", "中", "café", "\t", "[SEP]", "zz"};
  std::vector<std::string> lines(500);
  for (std::string& line : lines) {
    for (int k = static_cast<int>(rng() % 30); k > 0; --k) line += words[rng() % words.size()] + " ";
  }
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  const Tokenizer tok = tiny();
  const EncodeOptions base{.max_length = 24, .padding = Padding::kLongest, .return_offsets = true};
  const auto one = tok.encode_batch(views, base);
  for (const unsigned threads : {2u, 4u, 0u}) {
    EncodeOptions o = base;
    o.threads = threads;
    const auto many = tok.encode_batch(views, o);
    ASSERT_EQ(many.size(), one.size());
    for (std::size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(many[i].ids, one[i].ids) << "line " << i << " threads " << threads;
      ASSERT_EQ(many[i].offsets, one[i].offsets) << "line " << i << " threads " << threads;
    }
  }
}

// A tokenizer.json for kVocab, with top-level keys replaced by `patches` (key -> JSON text).
std::string tiny_json(const std::map<std::string, std::string>& patches = {}) {
  std::string vocab;
  for (std::size_t i = 0; i < kVocab.size(); ++i) {
    vocab += (i ? "," : "") + nlohmann::json(kVocab[i]).dump() + ":" + std::to_string(i);
  }
  std::map<std::string, std::string> parts = {
      {"version", R"("1.0")"},
      {"truncation", "null"},
      {"padding", "null"},
      {"added_tokens", R"([{"id":0,"content":"[PAD]","special":true},{"id":3,"content":"[SEP]","special":true}])"},
      {"normalizer", R"({"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true})"},
      {"pre_tokenizer", R"({"type":"BertPreTokenizer"})"},
      {"post_processor", R"({"type":"BertProcessing","sep":["[SEP]",3],"cls":["[CLS]",2]})"},
      {"model", R"({"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,"vocab":{)" +
                    vocab + "}}"},
  };
  for (const auto& [key, value] : patches) parts[key] = value;
  std::string out = "{";
  for (const auto& [key, value] : parts) out += (out.size() > 1 ? "," : "") + ("\"" + key + "\":" + value);
  return out + "}";
}

TEST(TokenizerJson, LoadsLikeTheSameVocabTxt) {
  const Tokenizer from_json = Tokenizer::from_json(tiny_json());
  const Tokenizer from_vocab = tiny();
  for (const char* text : {"Hello, WORLD!", "tokenizers [SEP] café 中文", "zzz"}) {
    EXPECT_EQ(from_json.encode(text).ids, from_vocab.encode(text).ids) << text;
  }
  EXPECT_EQ(from_json.token_to_id("##izer"), 10);
  EXPECT_EQ(from_json.id_to_token(5), "hello");
  EXPECT_EQ(from_json.vocab_size(), kVocab.size());
  EXPECT_EQ(from_json.num_special_tokens(true), 3u);
}

TEST(TokenizerJson, ReadsTruncationAndPaddingDefaults) {
  const Tokenizer tok = Tokenizer::from_json(tiny_json({
      {"truncation", R"({"max_length":8,"strategy":"OnlySecond","stride":2,"direction":"Left"})"},
      {"padding", R"({"strategy":{"Fixed":16},"direction":"Left","pad_to_multiple_of":null,"pad_id":0,"pad_type_id":0})"},
  }));
  const EncodeOptions& o = tok.file_options();
  EXPECT_EQ(o.max_length, 8u);
  EXPECT_EQ(o.truncation, TruncationStrategy::kOnlySecond);
  EXPECT_EQ(o.truncation_side, Side::kLeft);
  EXPECT_EQ(o.stride, 2u);
  EXPECT_FALSE(o.return_overflowing_tokens);  // HF keeps the windows; hotpath only when asked
  EXPECT_EQ(o.padding, Padding::kMaxLength);
  EXPECT_EQ(o.pad_length, 16u);
  EXPECT_EQ(o.padding_side, Side::kLeft);
}

TEST(TokenizerJson, MalformedFilesAreOneLineErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "tokenizer.json: invalid JSON"},
      {"[1,2]", "tokenizer.json: expected a JSON object, got array"},
      {tiny_json({{"model", R"({"type":"BPE","vocab":{},"merges":[]})"}}), R"(model.type is "BPE"; hotpath supports "WordPiece")"},
      {tiny_json({{"model", R"({"type":"WordPiece","unk_token":"[UNK]","vocab":[1,2]})"}}), "model.vocab: expected a non-empty object"},
      {tiny_json({{"model", R"({"type":"WordPiece","unk_token":"[UNK]","vocab":{"a":-1}})"}}), R"(model.vocab["a"]: -1 is outside)"},
      {tiny_json({{"model", R"({"type":"WordPiece","unk_token":"<unk>","vocab":{"a":0}})"}}), R"(model.unk_token "<unk>" is not in model.vocab)"},
      {tiny_json({{"model", R"({"type":"WordPiece","vocab":{"a":0}})"}}), R"(model: missing key "unk_token")"},
      {tiny_json({{"model", R"({"type":"WordPiece","unk_token":"a","vocab":{"a":2000000000}})"}}), "ids are far larger"},
      {tiny_json({{"normalizer", R"({"type":"NFKC"})"}}), R"(normalizer.type is "NFKC"; hotpath supports "BertNormalizer")"},
      {tiny_json({{"normalizer", R"({"type":"BertNormalizer","lowercase":"yes"})"}}), "normalizer.lowercase: expected true or false, got string"},
      {tiny_json({{"pre_tokenizer", R"({"type":"Whitespace"})"}}), R"(pre_tokenizer.type is "Whitespace")"},
      {tiny_json({{"pre_tokenizer", "null"}}), "pre_tokenizer is missing or null"},
      {tiny_json({{"post_processor", R"({"type":"RobertaProcessing"})"}}), R"(post_processor.type is "RobertaProcessing")"},
      {tiny_json({{"post_processor", R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}}],"pair":[],"special_tokens":{}})"}}),
       R"(special token "<s>" is missing from post_processor.special_tokens)"},
      {tiny_json({{"post_processor", R"({"type":"BertProcessing","sep":["[SEP]",999],"cls":["[CLS]",2]})"}}), "post_processor uses id 999"},
      {tiny_json({{"added_tokens", R"([{"id":4,"content":"[MASK]","lstrip":1}])"}}), "added_tokens[0].lstrip: expected true or false"},
      {tiny_json({{"added_tokens", R"([{"id":4,"content":""}])"}}), "added_tokens[0].content: expected a non-empty UTF-8 string"},
      {tiny_json({{"truncation", R"({"max_length":8,"strategy":"Sideways"})"}}), R"(truncation.strategy is "Sideways")"},
      {tiny_json({{"padding", R"({"strategy":"Random"})"}}), R"(padding.strategy is "Random")"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message = error_of([&] { (void)Tokenizer::from_json(text); });
    EXPECT_NE(message.find(expected), std::string::npos) << "got: " << message << "\nexpected: " << expected;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("tokenizer.json: ", 0), 0u) << message;
  }
}

TEST(VocabTxt, MissingSpecialTokensAndEmptyFilesAreErrors) {
  EXPECT_EQ(error_of([] { (void)Tokenizer::from_vocab(""); }), "vocab.txt: empty vocabulary (expected one token per line)");
  EXPECT_EQ(error_of([] { (void)Tokenizer::from_vocab("[UNK]\n[CLS]\nhello\n"); }),
            R"(vocab.txt: the separator token "[SEP]" is not in the vocabulary)");
  EXPECT_EQ(error_of([] { (void)Tokenizer::from_vocab("a\nb\n"); }),
            R"(vocab.txt: the unknown token "[UNK]" is not in the vocabulary)");
  EXPECT_NE(error_of([] { (void)Tokenizer::from_vocab("[UNK]\n\xC3\n"); }).find("invalid UTF-8 at byte 6"), std::string::npos);
  // Windows line ends and trailing blanks are trimmed, as HF's reader does.
  const Tokenizer tok = Tokenizer::from_vocab("[UNK]\r\n[CLS] \r\n[SEP]\r\nhello\r\n");
  EXPECT_EQ(tok.encode("hello").ids, (std::vector<std::int32_t>{1, 3, 2}));
}

TEST(VocabTxt, DirectoryWithTokenizerConfig) {
  const test::TempDir dir;
  test::write_file(dir.file("vocab.txt"), vocab_text());
  test::write_file(dir.file("tokenizer_config.json"),
                   R"({"do_lower_case": false, "tokenize_chinese_chars": true, "strip_accents": null,
                       "unk_token": {"content": "[UNK]"}, "model_max_length": 512})");
  const Tokenizer tok = Tokenizer::from_directory(dir.path());
  EXPECT_FALSE(tok.normalizer().lowercase);
  EXPECT_EQ(tok.model_max_length(), 512u);
  EXPECT_EQ(tok.tokenize("Hello hello"), (std::vector<std::string>{"[UNK]", "hello"}));
  test::write_file(dir.file("tokenizer_config.json"), R"({"do_lower_case": 1})");
  EXPECT_NE(error_of([&] { (void)Tokenizer::from_directory(dir.path()); })
                .find("tokenizer_config.json: do_lower_case: expected true or false, got number"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)Tokenizer::from_directory("/nonexistent-dir"); }).find("not a directory"),
            std::string::npos);
}

TEST(Tokenizer, WritesOneJsonObjectPerEncoding) {
  std::string out;
  append_json(out, tiny().encode("hello", {.return_offsets = true}));
  EXPECT_EQ(out, R"({"input_ids":[2,5,3],"token_type_ids":[0,0,0],"attention_mask":[1,1,1],"offset_mapping":[[0,0],[0,5],[0,0]]})");
}

TEST(Tokenizer, SpecialTokensMaskMarksTemplateTokensAndPadding) {
  const Tokenizer tok = tiny();
  const std::vector<std::string_view> firsts = {"hello [MASK]", "a"};
  const std::vector<std::string_view> seconds = {"world", "b a b"};
  const auto batch = tok.encode_pair_batch(firsts, seconds, {.padding = Padding::kLongest, .return_special_tokens_mask = true});
  EXPECT_EQ(batch[0].ids, ids({"[CLS]", "hello", "[MASK]", "[SEP]", "world", "[SEP]", "[PAD]"}));
  // A special token written in the text is text: 0, as HF's encoding.special_tokens_mask.
  EXPECT_EQ(batch[0].special_tokens_mask, (std::vector<std::int32_t>{1, 0, 0, 1, 0, 1, 1}));
  EXPECT_EQ(batch[1].special_tokens_mask, (std::vector<std::int32_t>{1, 0, 1, 0, 0, 0, 1}));
  EXPECT_TRUE(tok.encode("hello").special_tokens_mask.empty());  // only when asked
  EXPECT_EQ(tok.encode("hello", {.add_special_tokens = false, .return_special_tokens_mask = true}).special_tokens_mask,
            std::vector<std::int32_t>{0});
}

std::vector<std::vector<std::int32_t>> window_ids(const Encoding& e) {
  std::vector<std::vector<std::int32_t>> out = {e.ids};
  for (const Encoding& w : e.overflowing) out.push_back(w.ids);
  return out;
}

TEST(Tokenizer, OverflowingWindowsOverlapByStride) {
  const Tokenizer tok = tiny();
  // 7 words, 3 per window (max_length 5 less [CLS] [SEP]), overlapping by 1: steps of 2.
  const std::string text = "a b hello world token , !";
  EncodeOptions o{.max_length = 5, .stride = 1, .return_overflowing_tokens = true, .return_offsets = true};
  Encoding e = tok.encode(text, o);
  EXPECT_EQ(window_ids(e), (std::vector<std::vector<std::int32_t>>{ids({"[CLS]", "a", "b", "hello", "[SEP]"}),
                                                                   ids({"[CLS]", "hello", "world", "token", "[SEP]"}),
                                                                   ids({"[CLS]", "token", ",", "!", "[SEP]"})}));
  EXPECT_EQ(e.overflowing[0].offsets[1], (Offset{4, 9}));  // offsets still point into the text
  // Left truncation keeps the end first and walks back.
  o.truncation_side = Side::kLeft;
  e = tok.encode(text, o);
  EXPECT_EQ(window_ids(e), (std::vector<std::vector<std::int32_t>>{ids({"[CLS]", "token", ",", "!", "[SEP]"}),
                                                                   ids({"[CLS]", "hello", "world", "token", "[SEP]"}),
                                                                   ids({"[CLS]", "a", "b", "hello", "[SEP]"})}));
  // Without return_overflowing_tokens the same truncation keeps one window.
  EXPECT_TRUE(tok.encode(text, {.max_length = 5, .stride = 1}).overflowing.empty());
  // max_length with room for the special tokens only: HF overflows the whole text.
  e = tok.encode("a b", {.max_length = 2, .return_overflowing_tokens = true});
  EXPECT_EQ(window_ids(e), (std::vector<std::vector<std::int32_t>>{ids({"[CLS]", "[SEP]"}), ids({"[CLS]", "a", "b", "[SEP]"})}));
}

TEST(Tokenizer, PairOverflowFollowsHuggingFaceOrder) {
  const Tokenizer tok = tiny();
  // only_second: the question stays, the context is windowed (type ids stay 0 / 1).
  Encoding e = tok.encode_pair("hello", "a b a b a", {.max_length = 6, .truncation = TruncationStrategy::kOnlySecond,
                                                      .stride = 1, .return_overflowing_tokens = true});
  EXPECT_EQ(window_ids(e), (std::vector<std::vector<std::int32_t>>{
                               ids({"[CLS]", "hello", "[SEP]", "a", "b", "[SEP]"}),
                               ids({"[CLS]", "hello", "[SEP]", "b", "a", "[SEP]"}),
                               ids({"[CLS]", "hello", "[SEP]", "a", "b", "[SEP]"}),
                               ids({"[CLS]", "hello", "[SEP]", "b", "a", "[SEP]"})}));
  EXPECT_EQ(e.overflowing[2].type_ids, (std::vector<std::int32_t>{0, 0, 0, 1, 1, 1}));
  // longest_first truncating both: A's windows with B and B's windows, then A with B's windows.
  e = tok.encode_pair("a b a", "hello world token", {.max_length = 7, .return_overflowing_tokens = true});
  const std::vector<std::vector<std::int32_t>> want = {
      ids({"[CLS]", "a", "b", "[SEP]", "hello", "world", "[SEP]"}),
      ids({"[CLS]", "a", "[SEP]", "hello", "world", "[SEP]"}),
      ids({"[CLS]", "a", "[SEP]", "token", "[SEP]"}),
      ids({"[CLS]", "a", "b", "[SEP]", "token", "[SEP]"})};
  EXPECT_EQ(window_ids(e), want);
  // Padding reaches every window.
  const std::vector<std::string_view> firsts = {"hello"};
  const std::vector<std::string_view> seconds = {"a b a b a"};
  const auto batch = tok.encode_pair_batch(firsts, seconds,
                                           {.max_length = 7, .truncation = TruncationStrategy::kOnlySecond, .stride = 1,
                                            .return_overflowing_tokens = true, .padding = Padding::kMaxLength,
                                            .return_special_tokens_mask = true});
  ASSERT_EQ(batch[0].overflowing.size(), 1u);
  EXPECT_EQ(batch[0].overflowing[0].ids, ids({"[CLS]", "hello", "[SEP]", "a", "b", "a", "[SEP]"}));
  const auto padded = tok.encode_batch(firsts, {.max_length = 3, .stride = 0, .return_overflowing_tokens = true,
                                                .padding = Padding::kLongest, .return_special_tokens_mask = true});
  ASSERT_EQ(padded[0].overflowing.size(), 0u);
  const auto two = tok.encode_batch(seconds, {.max_length = 4, .return_overflowing_tokens = true,
                                              .padding = Padding::kMaxLength, .return_special_tokens_mask = true});
  ASSERT_EQ(two[0].overflowing.size(), 2u);
  EXPECT_EQ(two[0].overflowing[1].ids, ids({"[CLS]", "a", "[SEP]", "[PAD]"}));
  EXPECT_EQ(two[0].overflowing[1].special_tokens_mask, (std::vector<std::int32_t>{1, 0, 1, 1}));
}

TEST(Tokenizer, StrideTooLargeIsAnErrorAsInHuggingFace) {
  const Tokenizer tok = tiny();
  // max_length 5 leaves 3 tokens after [CLS] [SEP]: stride 3 is refused up front (HF's with_truncation) ...
  EXPECT_NE(error_of([&] { (void)tok.encode("a", {.max_length = 5, .stride = 4}); }).find("stride 4 is greater than"),
            std::string::npos);
  // ... and a stride not below what a truncated sequence keeps fails when truncating (HF panics).
  EXPECT_NE(error_of([&] { (void)tok.encode("a b a b a", {.max_length = 5, .stride = 3}); }).find("stride 3 must be below"),
            std::string::npos);
  EXPECT_NO_THROW((void)tok.encode("a b", {.max_length = 5, .stride = 3}));  // nothing to truncate
  EXPECT_NE(error_of([&] {
              (void)tok.encode_pair("a b a b", "b a b a", {.max_length = 7, .stride = 2, .return_overflowing_tokens = true});
            }).find("must be below the 2 tokens"),
            std::string::npos);
}

TEST(Tokenizer, FlattenOverflowingGivesOneRowPerWindow) {
  const Tokenizer tok = tiny();
  const std::vector<std::string_view> lines = {"a b a b a", "hello", "a b a"};
  FlatEncodings flat = flatten_overflowing(tok.encode_batch(lines, {.max_length = 4, .return_overflowing_tokens = true}));
  EXPECT_EQ(flat.overflow_to_sample_mapping, (std::vector<std::size_t>{0, 0, 0, 1, 2, 2}));
  ASSERT_EQ(flat.encodings.size(), 6u);
  EXPECT_EQ(flat.encodings[2].ids, ids({"[CLS]", "a", "[SEP]"}));
  for (const Encoding& e : flat.encodings) EXPECT_TRUE(e.overflowing.empty());
  std::string out;
  append_json(out, tok.encode("hello", {.return_special_tokens_mask = true}), {.length = true, .overflow_to_sample_mapping = 7});
  EXPECT_EQ(out, R"({"input_ids":[2,5,3],"token_type_ids":[0,0,0],"attention_mask":[1,1,1],"special_tokens_mask":[1,0,1],"length":3,"overflow_to_sample_mapping":7})");
}

// tiny_json with `added` appended to its added tokens (new contents get ids 22, 23, ... as in HF).
Tokenizer with_added(const std::string& added) {
  return Tokenizer::from_json(tiny_json({{"added_tokens",
                                          R"([{"id":0,"content":"[PAD]","special":true},{"id":3,"content":"[SEP]","special":true},
                                              {"id":4,"content":"[MASK]","special":true,"normalized":false},)" + added + "]"}}));
}

TEST(TokenizerJson, AddedTokenFlagsMatchLikeHuggingFace) {
  // normalized: matched in the lowercased text; not normalized: verbatim only.
  Tokenizer tok = with_added(R"({"id":22,"content":"Hello World","normalized":true},{"id":23,"content":"WoW","normalized":false})");
  Encoding e = tok.encode("HELLO  world wow WoW", {.add_special_tokens = false, .return_offsets = true});
  EXPECT_EQ(e.ids, (std::vector<std::int32_t>{5, 6, 1, 23}));  // two spaces: no match
  e = tok.encode("HELLO world!", {.add_special_tokens = false, .return_offsets = true});
  EXPECT_EQ(e.ids, (std::vector<std::int32_t>{22, 8}));
  EXPECT_EQ(e.offsets[0], (Offset{0, 11}));
  EXPECT_EQ(tok.token_to_id("Hello World"), 22);
  // single_word: not inside a word; lstrip/rstrip take the spaces into the token's offsets.
  tok = with_added(R"({"id":22,"content":"ab","single_word":true,"normalized":false},{"id":23,"content":"<m>","lstrip":true,"rstrip":true,"normalized":false})");
  e = tok.encode("ab xab ab_ (ab) a  <m>  b", {.add_special_tokens = false, .return_offsets = true});
  // ab | xab ab _ ( | ab | ) a | "  <m>  " | b   (the vocabulary has no "xab", "##b", "_" or "(")
  EXPECT_EQ(e.ids, (std::vector<std::int32_t>{22, 1, 1, 1, 1, 22, 1, 12, 23, 14}));
  ASSERT_EQ(e.offsets.size(), 10u);
  EXPECT_EQ(e.offsets[5], (Offset{12, 14}));
  EXPECT_EQ(e.offsets[8], (Offset{17, 24}));
  // HF's loader ignores a file's ids: a content the model has keeps its id, a new one the next free id.
  tok = with_added(R"({"id":40,"content":"hello","special":true},{"id":7,"content":"<new>"})");
  EXPECT_EQ(tok.token_to_id("hello"), 5);
  EXPECT_EQ(tok.token_to_id("<new>"), 22);
  EXPECT_EQ(tok.encode("hello<new>", {.add_special_tokens = false}).ids, (std::vector<std::int32_t>{5, 22}));
  // [MASK] stays verbatim: "[mask]" is ordinary text.
  EXPECT_EQ(tok.tokenize("[MASK][mask]"), (std::vector<std::string>{"[MASK]", "[UNK]", "[UNK]", "[UNK]"}));
}

TEST(BertNormalizer, NormalizesLikeHuggingFace) {
  EXPECT_EQ(BertNormalizer().normalize("H\xC3\xA9llo\tW\xC3\x96RLD\xEF\xBF\xBD"), "hello world");  // U+FFFD dropped
  EXPECT_EQ(BertNormalizer().normalize("\xC4\xB0"), "i");                                     // İ: NFD, strip, lower
  EXPECT_EQ(BertNormalizer({.strip_accents = false}).normalize("\xC4\xB0"), "i\xCC\x87");     // İ -> i + U+0307
  EXPECT_EQ(BertNormalizer().normalize("a\xE4\xB8\xAD"), "a \xE4\xB8\xAD ");
  EXPECT_TRUE(is_bert_punctuation(U'$'));   // ASCII symbols count, as in BERT
  EXPECT_TRUE(is_bert_punctuation(U'\u00BF'));
  EXPECT_FALSE(is_bert_punctuation(U'\u2E43'));  // assigned after HF's Unicode tables
  EXPECT_TRUE(is_bert_whitespace(U'\u3000'));
  EXPECT_FALSE(is_bert_whitespace(U'\u200B'));
}

}  // namespace
}  // namespace hotpath::text
