// Building a Tokenizer from vocab.txt (+ tokenizer_config.json) or from a tokenizer.json.
// Every rejection names the file, the key and what was expected, on one line.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "tokenizer_impl.h"

namespace hotpath::text {
namespace {

using nlohmann::json;

std::string type_name(const json& j) { return j.is_null() ? "null" : j.type_name(); }

const json& require(const json& obj, const char* key, const std::string& where) {
  HOTPATH_CHECK(obj.is_object(), where, ": expected an object, got ", type_name(obj));
  auto it = obj.find(key);
  HOTPATH_CHECK(it != obj.end(), where, ": missing key \"", key, "\"");
  return *it;
}

const json* optional_member(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string get_string(const json& j, const std::string& where) {
  HOTPATH_CHECK(j.is_string(), where, ": expected a string, got ", type_name(j));
  return j.get<std::string>();
}

bool get_bool(const json& j, const std::string& where) {
  HOTPATH_CHECK(j.is_boolean(), where, ": expected true or false, got ", type_name(j));
  return j.get<bool>();
}

std::int64_t get_int(const json& j, const std::string& where, std::int64_t lo, std::int64_t hi) {
  HOTPATH_CHECK(j.is_number_integer(), where, ": expected an integer, got ", type_name(j));
  const std::int64_t v = j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)
                             ? hi + 1
                             : j.get<std::int64_t>();
  HOTPATH_CHECK(v >= lo && v <= hi, where, ": ", j.dump(), " is outside [", lo, ", ", hi, "]");
  return v;
}

constexpr std::int64_t kMaxId = std::numeric_limits<std::int32_t>::max() - 1;
constexpr std::int64_t kMaxLength = std::numeric_limits<std::uint32_t>::max();

// Depth-bounded, linear-log in the keys (core/json.h).
json parse_json(std::string_view text, std::string_view name) { return hotpath::parse_json(text, name); }

// A special token in tokenizer_config.json: "[CLS]" or {"content": "[CLS]", ...}.
std::string token_name(const json& j, const std::string& where) {
  if (j.is_object()) return get_string(require(j, "content", where), where + ".content");
  return get_string(j, where);
}

// Rust's str::trim_end: trailing Unicode whitespace (the ASCII set plus the few multi-byte ones).
std::string_view trim_end(std::string_view s) {
  while (!s.empty()) {
    const auto b = static_cast<unsigned char>(s.back());
    if (b < 0x80) {
      if (!is_bert_whitespace(b)) break;
      s.remove_suffix(1);
      continue;
    }
    std::size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const std::string_view tail = s.substr(start);
    char32_t c = 0;
    if (tail.size() == 2) c = (tail[0] & 0x1F) << 6 | (tail[1] & 0x3F);
    if (tail.size() == 3) c = (tail[0] & 0x0F) << 12 | (tail[1] & 0x3F) << 6 | (tail[2] & 0x3F);
    if (tail.size() == 4) c = (tail[0] & 0x07) << 18 | (tail[1] & 0x3F) << 12 | (tail[2] & 0x3F) << 6 | (tail[3] & 0x3F);
    if (!is_bert_whitespace(c)) break;
    s = s.substr(0, start);
  }
  return s;
}

// The vocabulary tables from (token, id) pairs; fills id_to_token.
void build_vocab(Tokenizer::Impl& impl, const std::vector<std::pair<std::string_view, std::int32_t>>& entries) {
  std::int32_t max_id = -1;
  for (const auto& entry : entries) max_id = std::max(max_id, entry.second);
  impl.id_to_token.assign(static_cast<std::size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : entries) impl.id_to_token[static_cast<std::size_t>(id)] = std::string(token);
  impl.initial.build(entries);
  std::vector<std::pair<std::string_view, std::int32_t>> continuation;
  const std::string_view prefix = impl.continuing_subword_prefix;
  for (const auto& [token, id] : entries) {
    if (token.size() > prefix.size() && token.substr(0, prefix.size()) == prefix) {
      continuation.emplace_back(token.substr(prefix.size()), id);
    }
  }
  impl.continuation.build(prefix.empty() ? entries : continuation);
}

// The first token with a content wins (HF's added vocabulary maps each content to one id).
void add_token(Tokenizer::Impl& impl, AddedToken token) {
  for (const AddedToken& t : impl.added) {
    if (t.content == token.content) return;
  }
  const auto id = static_cast<std::size_t>(token.id);
  if (id >= impl.id_to_token.size()) impl.id_to_token.resize(id + 1);
  if (impl.id_to_token[id].empty()) impl.id_to_token[id] = token.content;
  impl.added.push_back(std::move(token));
}

// BertWordPieceTokenizer's add_special_tokens: special, never normalized, no flags.
void add_special(Tokenizer::Impl& impl, const std::string& content, std::int32_t id) {
  AddedToken t;
  t.content = content;
  t.id = id;
  t.special = true;
  add_token(impl, std::move(t));
}

TemplateItem special_item(std::int32_t id, std::int32_t type_id) { return {false, 0, type_id, {id}}; }
TemplateItem sequence_item(int which, std::int32_t type_id) { return {true, which, type_id, {}}; }

// BertProcessing: [CLS] A [SEP] and [CLS] A [SEP] B [SEP] with B's part typed 1.
void bert_templates(Tokenizer::Impl& impl, std::int32_t cls, std::int32_t sep) {
  impl.has_post_processor = true;
  impl.single_template = {special_item(cls, 0), sequence_item(0, 0), special_item(sep, 0)};
  impl.pair_template = {special_item(cls, 0), sequence_item(0, 0), special_item(sep, 0), sequence_item(1, 1),
                        special_item(sep, 1)};
}

std::vector<TemplateItem> parse_template(const json& items, const json& specials, const std::string& where) {
  HOTPATH_CHECK(items.is_array(), where, ": expected an array of {\"SpecialToken\"|\"Sequence\": ...}");
  std::vector<TemplateItem> out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& item = items[i];
    HOTPATH_CHECK(item.is_object() && item.size() == 1, at, ": expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    if (const json* seq = optional_member(item, "Sequence")) {
      const std::string which = get_string(require(*seq, "id", at + ".Sequence"), at + ".Sequence.id");
      HOTPATH_CHECK(which == "A" || which == "B", at, ".Sequence.id: expected \"A\" or \"B\", got \"", which, "\"");
      out.push_back(sequence_item(which == "A" ? 0 : 1,
                                  static_cast<std::int32_t>(get_int(require(*seq, "type_id", at + ".Sequence"),
                                                                    at + ".Sequence.type_id", 0, kMaxId))));
    } else if (const json* special = optional_member(item, "SpecialToken")) {
      const std::string id = get_string(require(*special, "id", at + ".SpecialToken"), at + ".SpecialToken.id");
      const auto type_id = static_cast<std::int32_t>(
          get_int(require(*special, "type_id", at + ".SpecialToken"), at + ".SpecialToken.type_id", 0, kMaxId));
      const std::string swhere = "post_processor.special_tokens[\"" + id + "\"]";
      HOTPATH_CHECK(specials.is_object() && specials.contains(id), at, ": special token \"", id,
                    "\" is missing from post_processor.special_tokens");
      const json& ids = require(specials[id], "ids", swhere);
      HOTPATH_CHECK(ids.is_array() && !ids.empty(), swhere, ".ids: expected a non-empty array of ids");
      TemplateItem t{false, 0, type_id, {}};
      for (const json& v : ids) t.ids.push_back(static_cast<std::int32_t>(get_int(v, swhere + ".ids", 0, kMaxId)));
      out.push_back(std::move(t));
    } else {
      HOTPATH_CHECK(false, at, ": expected {\"SpecialToken\": ...} or {\"Sequence\": ...}, got ", item.dump());
    }
  }
  return out;
}

void parse_post_processor(Tokenizer::Impl& impl, const json& pp, const std::string& file) {
  const std::string where = file + ": post_processor";
  const std::string type = get_string(require(pp, "type", where), where + ".type");
  if (type == "BertProcessing") {
    auto pair_of = [&](const char* key) {
      const json& v = require(pp, key, where);
      const std::string at = where + "." + key;
      HOTPATH_CHECK(v.is_array() && v.size() == 2, at, ": expected [\"token\", id]");
      get_string(v[0], at + "[0]");
      return static_cast<std::int32_t>(get_int(v[1], at + "[1]", 0, kMaxId));
    };
    bert_templates(impl, pair_of("cls"), pair_of("sep"));
  } else if (type == "TemplateProcessing") {
    const json& specials = require(pp, "special_tokens", where);
    impl.has_post_processor = true;
    impl.single_template = parse_template(require(pp, "single", where), specials, where + ".single");
    impl.pair_template = parse_template(require(pp, "pair", where), specials, where + ".pair");
  } else {
    HOTPATH_CHECK(false, where, ".type is \"", type,
                  "\"; hotpath supports \"TemplateProcessing\" and \"BertProcessing\" (BERT-style tokenizers)");
  }
}

NormalizerOptions parse_normalizer(const json& n, const std::string& file) {
  const std::string where = file + ": normalizer";
  const std::string type = get_string(require(n, "type", where), where + ".type");
  HOTPATH_CHECK(type == "BertNormalizer", where, ".type is \"", type,
                "\"; hotpath supports \"BertNormalizer\" (WordPiece BERT tokenizers)");
  NormalizerOptions o;
  if (const json* v = optional_member(n, "clean_text")) o.clean_text = get_bool(*v, where + ".clean_text");
  if (const json* v = optional_member(n, "handle_chinese_chars")) {
    o.handle_chinese_chars = get_bool(*v, where + ".handle_chinese_chars");
  }
  if (const json* v = optional_member(n, "strip_accents")) o.strip_accents = get_bool(*v, where + ".strip_accents");
  if (const json* v = optional_member(n, "lowercase")) o.lowercase = get_bool(*v, where + ".lowercase");
  return o;
}

void parse_truncation_and_padding(Tokenizer::Impl& impl, const json& root, const std::string& file) {
  if (const json* t = optional_member(root, "truncation")) {
    const std::string where = file + ": truncation";
    impl.file_options.max_length =
        static_cast<std::size_t>(get_int(require(*t, "max_length", where), where + ".max_length", 0, kMaxLength));
    if (const json* s = optional_member(*t, "strategy")) {
      const std::string strategy = get_string(*s, where + ".strategy");
      if (strategy == "LongestFirst") {
        impl.file_options.truncation = TruncationStrategy::kLongestFirst;
      } else if (strategy == "OnlyFirst") {
        impl.file_options.truncation = TruncationStrategy::kOnlyFirst;
      } else if (strategy == "OnlySecond") {
        impl.file_options.truncation = TruncationStrategy::kOnlySecond;
      } else {
        HOTPATH_CHECK(false, where, ".strategy is \"", strategy, "\"; expected LongestFirst, OnlyFirst or OnlySecond");
      }
    }
    if (const json* d = optional_member(*t, "direction")) {
      const std::string side = get_string(*d, where + ".direction");
      HOTPATH_CHECK(side == "Right" || side == "Left", where, ".direction is \"", side, "\"; expected Right or Left");
      impl.file_options.truncation_side = side == "Right" ? Side::kRight : Side::kLeft;
    }
    if (const json* v = optional_member(*t, "stride")) {
      impl.file_options.stride = static_cast<std::size_t>(get_int(*v, where + ".stride", 0, kMaxLength));
    }
  }
  if (const json* p = optional_member(root, "padding")) {
    const std::string where = file + ": padding";
    const json& strategy = require(*p, "strategy", where);
    if (strategy.is_string()) {
      HOTPATH_CHECK(strategy.get<std::string>() == "BatchLongest", where, ".strategy is ", strategy.dump(),
                    "; expected \"BatchLongest\" or {\"Fixed\": N}");
      impl.file_options.padding = Padding::kLongest;
    } else {
      impl.file_options.padding = Padding::kMaxLength;
      impl.file_options.pad_length = static_cast<std::size_t>(
          get_int(require(strategy, "Fixed", where + ".strategy"), where + ".strategy.Fixed", 0, kMaxLength));
    }
    if (const json* d = optional_member(*p, "direction")) {
      const std::string side = get_string(*d, where + ".direction");
      HOTPATH_CHECK(side == "Right" || side == "Left", where, ".direction is \"", side, "\"; expected Right or Left");
      impl.file_options.padding_side = side == "Right" ? Side::kRight : Side::kLeft;
    }
    if (const json* m = optional_member(*p, "pad_to_multiple_of")) {
      impl.file_options.pad_to_multiple_of =
          static_cast<std::size_t>(get_int(*m, where + ".pad_to_multiple_of", 0, kMaxLength));
    }
    if (const json* v = optional_member(*p, "pad_id")) impl.pad_id = static_cast<std::int32_t>(get_int(*v, where + ".pad_id", 0, kMaxId));
    if (const json* v = optional_member(*p, "pad_type_id")) {
      impl.pad_type_id = static_cast<std::int32_t>(get_int(*v, where + ".pad_type_id", 0, kMaxId));
    }
  }
}

}  // namespace

void Tokenizer::Impl::finish() {
  for (int b = 0; b < 128; ++b) {
    const NormalizedChar nc = normalizer.apply(static_cast<char32_t>(b));
    AsciiAction action = AsciiAction::kKeep;
    char lower = static_cast<char>(b);
    if (nc.kind == CharKind::kRemoved || nc.count == 0) {
      action = AsciiAction::kDrop;
    } else {
      HOTPATH_ASSERT(nc.count == 1 && nc.cps[0] < 0x80);  // ASCII stays one ASCII character
      lower = static_cast<char>(nc.cps[0]);
      if (nc.kind == CharKind::kSpace || is_bert_whitespace(nc.cps[0])) {
        action = AsciiAction::kSplit;
      } else if (is_bert_punctuation(nc.cps[0])) {
        action = AsciiAction::kPunct;
      }
    }
    ascii_action[static_cast<std::size_t>(b)] = action;
    ascii_lower[static_cast<std::size_t>(b)] = lower;
  }
  raw_added = {};
  normalized_added = {};
  std::vector<std::pair<std::string_view, std::int32_t>> entries;
  for (AddedToken& t : added) {
    entries.emplace_back(t.content, t.id);
    // HF matches a normalized token by its content run through the tokenizer's normalizer.
    t.pattern = t.normalized ? normalizer.normalize(t.content) : t.content;
    if (t.pattern.empty()) continue;  // normalized away: it can never match
    AddedTokenSet& set = t.normalized ? normalized_added : raw_added;
    set.tokens.push_back(t);
    const auto first = static_cast<unsigned char>(t.pattern[0]);
    if (!set.first_byte[first]) set.first_bytes.push_back(static_cast<char>(first));
    set.first_byte[first] = true;
  }
  for (AddedTokenSet* set : {&raw_added, &normalized_added}) {
    // Leftmost-longest matching tries the longest pattern first.
    std::stable_sort(set->tokens.begin(), set->tokens.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.pattern.size() > b.pattern.size(); });
  }
  added_lookup.build(entries);
  vocab_size = static_cast<std::size_t>(
      std::count_if(id_to_token.begin(), id_to_token.end(), [](const std::string& t) { return !t.empty(); }));
  if (!has_post_processor) {
    single_template = {sequence_item(0, 0)};
    pair_template = {sequence_item(0, 0), sequence_item(1, 1)};
  }
}

VocabConfig VocabConfig::from_config_json(std::string_view json_text, std::string_view name) {
  const json root = parse_json(json_text, name);
  const std::string file(name);
  HOTPATH_CHECK(root.is_object(), file, ": expected a JSON object, got ", type_name(root));
  VocabConfig c;
  if (const json* v = optional_member(root, "do_lower_case")) c.normalizer.lowercase = get_bool(*v, file + ": do_lower_case");
  if (const json* v = optional_member(root, "strip_accents")) {
    c.normalizer.strip_accents = get_bool(*v, file + ": strip_accents");
  }
  if (const json* v = optional_member(root, "tokenize_chinese_chars")) {
    c.normalizer.handle_chinese_chars = get_bool(*v, file + ": tokenize_chinese_chars");
  }
  if (const json* v = optional_member(root, "clean_up_tokenization_spaces")) get_bool(*v, file + ": clean_up_tokenization_spaces");
  const std::pair<const char*, std::string*> tokens[] = {{"unk_token", &c.unk_token}, {"sep_token", &c.sep_token},
                                                         {"cls_token", &c.cls_token}, {"pad_token", &c.pad_token},
                                                         {"mask_token", &c.mask_token}};
  for (const auto& [key, target] : tokens) {
    if (const json* v = optional_member(root, key)) *target = token_name(*v, file + ": " + key);
  }
  if (const json* v = optional_member(root, "model_max_length")) {
    // transformers writes a huge sentinel (1e30) when the model has no limit.
    if (v->is_number_integer() && v->get<std::int64_t>() > 0 && v->get<std::int64_t>() <= kMaxLength) {
      c.model_max_length = static_cast<std::size_t>(v->get<std::int64_t>());
    } else {
      HOTPATH_CHECK(v->is_number(), file, ": model_max_length: expected a number, got ", type_name(*v));
    }
  }
  return c;
}

Tokenizer Tokenizer::from_vocab(std::string_view vocab_text, const VocabConfig& config, std::string_view name) {
  auto impl = std::make_shared<Impl>();
  impl->name = std::string(name);
  impl->normalizer = BertNormalizer(config.normalizer);
  impl->continuing_subword_prefix = config.continuing_subword_prefix;
  impl->max_input_chars_per_word = config.max_input_chars_per_word;
  impl->model_max_length = config.model_max_length;

  HOTPATH_CHECK(find_invalid_utf8(vocab_text) == std::string_view::npos, name, ": invalid UTF-8 at byte ",
                find_invalid_utf8(vocab_text));
  std::vector<std::pair<std::string_view, std::int32_t>> entries;
  std::size_t pos = 0;
  while (pos < vocab_text.size()) {
    std::size_t end = vocab_text.find('\n', pos);
    if (end == std::string_view::npos) end = vocab_text.size();
    HOTPATH_CHECK(entries.size() < static_cast<std::size_t>(kMaxId), name, ": more than ", kMaxId, " lines");
    entries.emplace_back(trim_end(vocab_text.substr(pos, end - pos)), static_cast<std::int32_t>(entries.size()));
    pos = end + 1;
  }
  HOTPATH_CHECK(!entries.empty(), name, ": empty vocabulary (expected one token per line)");
  build_vocab(*impl, entries);

  const auto id_of = [&](const std::string& token) { return impl->initial.find(token.data(), token.size()); };
  const std::int32_t unk = id_of(config.unk_token);
  HOTPATH_CHECK(unk >= 0, name, ": the unknown token \"", config.unk_token, "\" is not in the vocabulary");
  impl->unk_id = unk;
  // BertWordPieceTokenizer: the special tokens that are in the vocabulary are never split.
  for (const std::string* t : {&config.unk_token, &config.sep_token, &config.cls_token, &config.pad_token, &config.mask_token}) {
    if (!t->empty() && id_of(*t) >= 0) add_special(*impl, *t, id_of(*t));
  }
  const std::int32_t sep = id_of(config.sep_token);
  const std::int32_t cls = id_of(config.cls_token);
  HOTPATH_CHECK(sep >= 0, name, ": the separator token \"", config.sep_token, "\" is not in the vocabulary");
  HOTPATH_CHECK(cls >= 0, name, ": the classifier token \"", config.cls_token, "\" is not in the vocabulary");
  bert_templates(*impl, cls, sep);
  impl->pad_id = std::max(id_of(config.pad_token), 0);
  impl->finish();
  return Tokenizer(std::move(impl));
}

std::shared_ptr<Tokenizer::Impl> Tokenizer::json_impl(std::string_view json_text, std::string_view name) {
  const json root = parse_json(json_text, name);
  const std::string file(name);
  HOTPATH_CHECK(root.is_object(), file, ": expected a JSON object, got ", type_name(root));
  auto impl = std::make_shared<Impl>();
  impl->name = file;

  // model: WordPiece only.
  const json& model = require(root, "model", file);
  const std::string mwhere = file + ": model";
  const json* model_type = optional_member(model, "type");
  const std::string type = model_type ? get_string(*model_type, mwhere + ".type") : std::string("WordPiece");
  HOTPATH_CHECK(type == "WordPiece", mwhere, ".type is \"", type, "\"; hotpath supports \"WordPiece\" (BERT-style tokenizers)");
  if (const json* v = optional_member(model, "continuing_subword_prefix")) {
    impl->continuing_subword_prefix = get_string(*v, mwhere + ".continuing_subword_prefix");
  }
  if (const json* v = optional_member(model, "max_input_chars_per_word")) {
    impl->max_input_chars_per_word =
        static_cast<std::size_t>(get_int(*v, mwhere + ".max_input_chars_per_word", 0, kMaxLength));
  }
  const json& vocab = require(model, "vocab", mwhere);
  HOTPATH_CHECK(vocab.is_object() && !vocab.empty(), mwhere, ".vocab: expected a non-empty object {token: id}, got ",
                type_name(vocab));
  std::vector<std::pair<std::string_view, std::int32_t>> entries;
  entries.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    entries.emplace_back(it.key(), static_cast<std::int32_t>(get_int(it.value(), mwhere + ".vocab[\"" + it.key() + "\"]", 0, kMaxId)));
  }
  HOTPATH_CHECK(entries.size() <= static_cast<std::size_t>(kMaxId), mwhere, ".vocab: too many tokens");
  // nlohmann orders object keys alphabetically: sort by id so a duplicate id resolves like HF (last wins).
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  HOTPATH_CHECK(entries.back().second < 16 * static_cast<std::int32_t>(entries.size()) + 1024, mwhere,
                ".vocab: ids are far larger than the vocabulary (max id ", entries.back().second, " for ",
                entries.size(), " tokens)");
  build_vocab(*impl, entries);
  const std::string unk = get_string(require(model, "unk_token", mwhere), mwhere + ".unk_token");
  impl->unk_id = impl->initial.find(unk.data(), unk.size());
  HOTPATH_CHECK(impl->unk_id >= 0, mwhere, ".unk_token \"", unk, "\" is not in model.vocab");

  // normalizer / pre_tokenizer: BERT's.
  if (const json* n = optional_member(root, "normalizer")) {
    impl->normalizer = BertNormalizer(parse_normalizer(*n, file));
  } else {
    impl->normalizer = BertNormalizer(NormalizerOptions{false, false, false, false});
  }
  const json* pre = optional_member(root, "pre_tokenizer");
  HOTPATH_CHECK(pre != nullptr, file, ": pre_tokenizer is missing or null; expected {\"type\": \"BertPreTokenizer\"}");
  const std::string pre_type = get_string(require(*pre, "type", file + ": pre_tokenizer"), file + ": pre_tokenizer.type");
  HOTPATH_CHECK(pre_type == "BertPreTokenizer", file, ": pre_tokenizer.type is \"", pre_type,
                "\"; hotpath supports \"BertPreTokenizer\"");

  // added_tokens: found in the text before pre-tokenization, never split. Like HF's loader, the
  // id is not the file's: a content the model has keeps the model's id, a new one gets the next id
  // past the vocabulary (HF warns when that differs from the file; files HF wrote always agree).
  if (const json* added = optional_member(root, "added_tokens")) {
    HOTPATH_CHECK(added->is_array(), file, ": added_tokens: expected an array, got ", type_name(*added));
    const auto model_vocab_size = static_cast<std::int64_t>(entries.size());
    std::int64_t max_added = -1;
    for (std::size_t i = 0; i < added->size(); ++i) {
      const std::string at = file + ": added_tokens[" + std::to_string(i) + "]";
      const json& t = (*added)[i];
      const std::string content = get_string(require(t, "content", at), at + ".content");
      HOTPATH_CHECK(!content.empty() && find_invalid_utf8(content) == std::string_view::npos, at,
                    ".content: expected a non-empty UTF-8 string");
      const auto file_id = get_int(require(t, "id", at), at + ".id", 0, kMaxId);
      HOTPATH_CHECK(static_cast<std::size_t>(file_id) < impl->id_to_token.size() + (std::size_t{1} << 20), at, ".id ",
                    file_id, " is far past the vocabulary");
      std::int64_t id = -1;
      for (const AddedToken& previous : impl->added) {
        if (previous.content == content) id = previous.id;
      }
      if (id < 0) id = impl->initial.find(content.data(), content.size());
      if (id < 0) id = max_added < 0 ? model_vocab_size : (max_added >= model_vocab_size ? max_added + 1 : model_vocab_size);
      HOTPATH_CHECK(id <= kMaxId, at, ": too many added tokens");
      max_added = std::max(max_added, id);
      AddedToken token;
      token.content = content;
      token.id = static_cast<std::int32_t>(id);
      const auto flag = [&](const char* key, bool fallback) {
        const json* v = optional_member(t, key);
        return v ? get_bool(*v, at + "." + key) : fallback;
      };
      token.special = flag("special", false);
      token.single_word = flag("single_word", false);
      token.lstrip = flag("lstrip", false);
      token.rstrip = flag("rstrip", false);
      token.normalized = flag("normalized", !token.special);  // HF's AddedToken::from default
      add_token(*impl, std::move(token));
    }
  }

  if (const json* pp = optional_member(root, "post_processor")) parse_post_processor(*impl, *pp, file);
  for (const auto* tmpl : {&impl->single_template, &impl->pair_template}) {
    for (const TemplateItem& item : *tmpl) {
      for (const std::int32_t id : item.ids) {
        HOTPATH_CHECK(static_cast<std::size_t>(id) < impl->id_to_token.size() && !impl->id_to_token[id].empty(), file,
                      ": post_processor uses id ", id, ", which no token in model.vocab or added_tokens has");
      }
    }
  }
  impl->pad_id = std::max(impl->initial.find("[PAD]", 5), 0);
  parse_truncation_and_padding(*impl, root, file);
  impl->finish();
  return impl;
}

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view name) {
  return Tokenizer(json_impl(json_text, name));
}

Tokenizer Tokenizer::from_json_file(const std::filesystem::path& path) {
  return from_json(read_file(path.string(), read_limit::kTokenizer, "tokenizer file"), path.string());
}

Tokenizer Tokenizer::from_vocab_file(const std::filesystem::path& vocab, const std::filesystem::path& config) {
  VocabConfig c;
  if (!config.empty()) c = VocabConfig::from_config_json(read_file(config.string(), read_limit::kConfig, "config"), config.string());
  return from_vocab(read_file(vocab.string(), read_limit::kTokenizer, "vocabulary"), c, vocab.string());
}

Tokenizer Tokenizer::from_directory(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  HOTPATH_CHECK(fs::is_directory(dir), dir.string(), ": not a directory (expected tokenizer.json or vocab.txt inside)");
  if (fs::exists(dir / "tokenizer.json")) {
    const fs::path file = dir / "tokenizer.json";
    std::shared_ptr<Impl> impl = json_impl(read_file(file.string(), read_limit::kTokenizer, "tokenizer file"), file.string());
    if (fs::exists(dir / "tokenizer_config.json")) {  // only model_max_length: tokenizer.json rules the rest
      const fs::path config = dir / "tokenizer_config.json";
      impl->model_max_length = VocabConfig::from_config_json(read_file(config.string(), read_limit::kConfig, "config"), config.string()).model_max_length;
    }
    return Tokenizer(std::move(impl));
  }
  HOTPATH_CHECK(fs::exists(dir / "vocab.txt"), dir.string(), ": has neither tokenizer.json nor vocab.txt");
  return from_vocab_file(dir / "vocab.txt",
                         fs::exists(dir / "tokenizer_config.json") ? dir / "tokenizer_config.json" : fs::path());
}

}  // namespace hotpath::text
