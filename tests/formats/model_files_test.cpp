// The torch-free parsers of a model directory (hotpath_formats): config.json, modules.json,
// 1_Pooling/config.json, adapter_config.json, and pytorch_model.bin's zip container and pickle.
// Zips are written here byte by byte (STORED, with or without ZIP64 records) so every field can be
// broken on purpose; parity with real torch.save files is torch_bin_parity_test.cpp.
#include <gtest/gtest.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/formats/bert_config.h"
#include "hotpath/formats/lora_config.h"
#include "hotpath/formats/torch_pickle.h"
#include "hotpath/formats/torch_zip.h"
#include "support/test_support.h"

namespace hotpath::formats {
namespace {

using namespace std::string_literals;  // "...\x00..."s keeps the NUL bytes of a pickle

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_ERROR(expr, text)                                                         \
  do {                                                                                   \
    const std::string what_ = error_of([&] { (void)(expr); });                          \
    EXPECT_NE(what_.find(text), std::string::npos) << what_;                             \
    EXPECT_EQ(what_.find('\n'), std::string::npos) << "not one line: " << what_;         \
  } while (0)

std::span<const std::byte> bytes_of(const std::string& s) { return test::as_bytes(s); }

// ---- a zip writer for the tests -------------------------------------------------------------------

void put(std::string& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

struct ZipEntry {
  std::string name;
  std::string data;
  std::uint16_t method = 0;
  std::uint16_t flags = 0x0808;  // data descriptor + UTF-8, as torch's miniz writes
  bool zip64_extra = false;      // sizes and offset in a ZIP64 extra field (all-ones in the header)
  bool bad_crc = false;
};

// torch.save's layout: local headers with zero sizes and 64-byte alignment padding, the central
// directory, then (zip64 = true) ZIP64 end record + locator, then the end record.
std::string make_zip(const std::vector<ZipEntry>& entries, bool zip64 = true) {
  std::string out;
  std::vector<std::uint64_t> offsets;
  for (const ZipEntry& e : entries) {
    offsets.push_back(out.size());
    const std::size_t header_end = out.size() + 30 + e.name.size() + 4;
    const std::size_t pad = (64 - header_end % 64) % 64;
    put(out, 0x04034b50, 4);
    put(out, 20, 2);
    put(out, e.flags, 2);
    put(out, e.method, 2);
    put(out, 0, 4);  // time, date
    put(out, 0, 4);  // crc (in the data descriptor)
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, e.name.size(), 2);
    put(out, 4 + pad, 2);
    out += e.name;
    put(out, 0x4246, 2);  // "FB" padding field, as PyTorchStreamWriter
    put(out, pad, 2);
    out += std::string(pad, 'Z');
    out += e.data;
  }
  const std::uint64_t cd_offset = out.size();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const ZipEntry& e = entries[i];
    const auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(e.data.data()), static_cast<uInt>(e.data.size())) ^ (e.bad_crc ? 1 : 0));
    put(out, 0x02014b50, 4);
    put(out, 0x031e, 2);
    put(out, 45, 2);
    put(out, e.flags, 2);
    put(out, e.method, 2);
    put(out, 0, 4);
    put(out, crc, 4);
    put(out, e.zip64_extra ? 0xffffffff : e.data.size(), 4);
    put(out, e.zip64_extra ? 0xffffffff : e.data.size(), 4);
    put(out, e.name.size(), 2);
    put(out, e.zip64_extra ? 28 : 0, 2);
    put(out, 0, 2);  // comment
    put(out, 0, 2);  // disk
    put(out, 0, 2);
    put(out, 0, 4);
    put(out, e.zip64_extra ? 0xffffffff : offsets[i], 4);
    out += e.name;
    if (e.zip64_extra) {
      put(out, 0x0001, 2);
      put(out, 24, 2);
      put(out, e.data.size(), 8);
      put(out, e.data.size(), 8);
      put(out, offsets[i], 8);
    }
  }
  const std::uint64_t cd_size = out.size() - cd_offset;
  if (zip64) {
    const std::uint64_t end64 = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 0x031e, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, entries.size(), 8);
    put(out, entries.size(), 8);
    put(out, cd_size, 8);
    put(out, cd_offset, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, end64, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, zip64 ? 0xffff : entries.size(), 2);
  put(out, zip64 ? 0xffff : entries.size(), 2);
  put(out, zip64 ? 0xffffffff : cd_size, 4);
  put(out, zip64 ? 0xffffffff : cd_offset, 4);
  put(out, 0, 2);
  return out;
}

std::string text_of(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

TEST(TorchZip, ReadsStoredRecordsWithAndWithoutZip64) {
  for (const bool zip64 : {false, true}) {
    const std::string zip = make_zip({{.name = "archive/data.pkl", .data = "pickle"},
                                      {.name = "archive/data/0", .data = std::string(100, 'x'), .zip64_extra = zip64},
                                      {.name = "archive/byteorder", .data = "little"}},
                                     zip64);
    const TorchZip reader(bytes_of(zip), "m.bin");
    EXPECT_EQ(reader.archive_name(), "archive");
    EXPECT_EQ(reader.names(), (std::vector<std::string>{"byteorder", "data.pkl", "data/0"}));
    EXPECT_EQ(text_of(reader.record("data.pkl")), "pickle");
    EXPECT_EQ(text_of(reader.record("data/0")), std::string(100, 'x'));
    EXPECT_FALSE(reader.has("data/1"));
    EXPECT_ERROR(reader.record("data/1"), "m.bin: cannot read as a weights-only torch.save zip checkpoint: no record "
                                          "archive/data/1");
  }
}

TEST(TorchZip, RefusesWhatTorchSaveNeverWrites) {
  const auto zip_error = [](const std::string& zip) {
    return error_of([&] { (void)TorchZip(bytes_of(zip), "m.bin").record("data.pkl"); });
  };
  EXPECT_NE(zip_error(make_zip({{.name = "archive/data.pkl", .data = "x", .method = 8}})).find(
                "record archive/data.pkl is compressed (method 8)"),
            std::string::npos);
  EXPECT_NE(zip_error(make_zip({{.name = "archive/data.pkl", .data = "x", .flags = 0x0809}}))
                .find("record archive/data.pkl is encrypted"),
            std::string::npos);
  EXPECT_NE(zip_error(make_zip({{.name = "archive/data.pkl", .data = "x", .bad_crc = true}}))
                .find("fails its CRC-32 check"),
            std::string::npos);
  EXPECT_NE(zip_error(make_zip({{.name = "archive/data.pkl", .data = "x"}, {.name = "archive/data.pkl", .data = "y"}}))
                .find("appears twice"),
            std::string::npos);
  EXPECT_NE(zip_error(make_zip({{.name = "data.pkl", .data = "x"}})).find("is not inside a folder"), std::string::npos);
  EXPECT_NE(zip_error("\x80\x02}q\x00."s).find("legacy non-zip torch.save"), std::string::npos);
  EXPECT_NE(zip_error(std::string(100, '\0')).find("no zip end-of-central-directory record"), std::string::npos);
  // A name with a newline stays on one line in the message.
  const std::string what = zip_error(make_zip({{.name = "archive/a\nb", .data = "x", .method = 8}}));
  EXPECT_NE(what.find("archive/a\\x0ab"), std::string::npos) << what;
}

TEST(TorchZip, EveryTruncationAndEveryFlippedByteIsAnErrorOrReadsInBounds) {
  const std::string zip = make_zip({{.name = "archive/data.pkl", .data = "pickle"},
                                    {.name = "archive/data/0", .data = std::string(70, 'x'), .zip64_extra = true}});
  for (std::size_t n = 0; n < zip.size(); ++n) {
    const std::string cut = zip.substr(0, n);
    EXPECT_NE(error_of([&] { (void)TorchZip(bytes_of(cut), "m.bin").record("data/0"); }), "<no error>") << n;
  }
  for (std::size_t i = 0; i < zip.size(); ++i) {
    std::string bad = zip;
    bad[i] = static_cast<char>(bad[i] ^ 0xff);
    // A flip in the padding or an unused field may still read; then the record lies inside the file.
    try {
      const TorchZip reader(bytes_of(bad), "m.bin");
      for (const std::string& name : reader.names()) {
        const auto r = reader.record(name);
        EXPECT_GE(r.data(), reinterpret_cast<const std::byte*>(bad.data()));
        EXPECT_LE(r.data() + r.size(), reinterpret_cast<const std::byte*>(bad.data() + bad.size()));
      }
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// ---- data.pkl ------------------------------------------------------------------------------------

std::string pickle_str(const std::string& s) {
  std::string out = "X";
  put(out, s.size(), 4);
  return out + s;
}
std::string pickle_int(int v) { return std::string("K") + static_cast<char>(v); }
std::string tuple_of(const std::vector<int>& v) {
  std::string out = "(";
  for (const int x : v) out += pickle_int(x);
  return out + "t";
}
// _rebuild_tensor_v2(storage `key` (`numel` elements of `type`), offset, sizes, strides).
std::string pickle_tensor(const std::string& key, int numel, int offset, const std::vector<int>& sizes,
                          const std::vector<int>& strides, const std::string& type = "FloatStorage") {
  return "ctorch._utils\n_rebuild_tensor_v2\n((" + pickle_str("storage") + "ctorch\n" + type + "\n" + pickle_str(key) +
         pickle_str("cpu") + pickle_int(numel) + "tQ" + pickle_int(offset) + tuple_of(sizes) + tuple_of(strides) +
         "\x89" + "ccollections\nOrderedDict\n)R" + "tR";
}
// {items} as torch.save writes a plain dict: EMPTY_DICT MARK ... SETITEMS.
std::string dict_pickle(const std::string& items) { return std::string("\x80\x02}(") + items + "u."; }

TEST(TorchPickle, ReadsNestedDictsAndSkipsOtherValues) {
  const std::string pickle = dict_pickle(
      pickle_str("a") + pickle_tensor("0", 8, 2, {2, 3}, {1, 2}) + pickle_str("epoch") + pickle_int(3) +
      pickle_str("model") + "}(" + pickle_str("w") + pickle_tensor("1", 4, 0, {4}, {1}, "HalfStorage") +
      pickle_str("inner") + "}(" + pickle_str("b") + pickle_tensor("0", 8, 0, {}, {}) + "u" + "u" +
      pickle_str("names") + "](" + pickle_str("x") + "e");
  const auto records = parse_torch_pickle(bytes_of(pickle), "m.bin");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].key, "a");
  EXPECT_EQ(records[0].storage, "0");
  EXPECT_EQ(records[0].offset, 2);
  EXPECT_EQ(records[0].sizes, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(records[0].strides, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(records[1].key, "model.w");
  EXPECT_EQ(records[1].dtype, TorchDtype::kFloat16);
  EXPECT_EQ(records[2].key, "model.inner.b");
  EXPECT_EQ(records[2].numel(), 1);  // 0-d
}

TEST(TorchPickle, MalformedPicklesAreOneLineErrors) {
  const auto pickle_error = [](const std::string& p) { return error_of([&] { (void)parse_torch_pickle(bytes_of(p), "m.bin"); }); };
  const std::string t = pickle_tensor("0", 6, 0, {2, 3}, {3, 1});
  EXPECT_NE(pickle_error(dict_pickle(pickle_str("a") + t + pickle_str("a") + t)).find("state_dict key \"a\" appears twice"),
            std::string::npos);
  EXPECT_NE(pickle_error(dict_pickle(pickle_str("a\nb") + t)).find("\"a\\x0ab\" holds control characters"),
            std::string::npos);
  EXPECT_NE(pickle_error(dict_pickle(pickle_int(1) + t)).find("a state_dict key is an integer"), std::string::npos);
  // One storage named with two dtypes.
  EXPECT_NE(pickle_error(dict_pickle(pickle_str("a") + t + pickle_str("b") +
                                     pickle_tensor("0", 6, 0, {6}, {1}, "LongStorage")))
                .find("named twice with different types or sizes"),
            std::string::npos);
  // A broadcast (stride 0) view would expand past the file's data.
  EXPECT_NE(pickle_error(dict_pickle(pickle_str("a") + pickle_tensor("0", 1, 0, {200, 200}, {0, 0})))
                .find("more than its storage's 1"),
            std::string::npos);
  std::vector<int> many(65, 1);
  EXPECT_NE(pickle_error(dict_pickle(pickle_str("a") + pickle_tensor("0", 1, 0, many, many))).find("64 dimensions"),
            std::string::npos);
  // A dict inside itself (through the memo) and a list appended to itself: errors or skipped, no loop, no leak.
  EXPECT_NE(pickle_error("\x80\x02}q\x00("s + pickle_str("self") + "h\x00u."s).find("a dict appears twice"),
            std::string::npos);
  EXPECT_EQ(parse_torch_pickle(bytes_of("\x80\x02}(" + pickle_str("l") + "]q\x01h\x01" + "au."), "m.bin").size(), 0u);
  EXPECT_NE(pickle_error("\x80\x02\x81."), "<no error>");  // NEWOBJ: not in a weights-only pickle
  EXPECT_NE(pickle_error("\x80\x02" + pickle_str("os") + pickle_str("system") + "\x93.").find("refusing global os.system"),
            std::string::npos);
}

TEST(TorchCheckpoint, StorageSizesMustMatchThePickle) {
  const std::string pickle = dict_pickle(pickle_str("a") + pickle_tensor("0", 6, 0, {2, 3}, {3, 1}));
  const auto checkpoint = [&](const std::string& storage, const std::string& order = "little") {
    return make_zip({{.name = "archive/data.pkl", .data = pickle},
                     {.name = "archive/byteorder", .data = order},
                     {.name = "archive/data/0", .data = storage}});
  };
  const std::string good = checkpoint(std::string(24, '\0'));
  const TorchCheckpoint c = read_torch_checkpoint(bytes_of(good), "m.bin");
  ASSERT_EQ(c.tensors.size(), 1u);
  EXPECT_EQ(c.storages.at("0").size(), 24u);
  EXPECT_ERROR(read_torch_checkpoint(bytes_of(checkpoint(std::string(20, '\0'))), "m.bin"),
               "storage data/0 has 20 bytes, expected 6 × 4 (float32)");
  EXPECT_ERROR(read_torch_checkpoint(bytes_of(checkpoint(std::string(24, '\0'), "big")), "m.bin"),
               "big-endian byte order are not supported");
  const std::string no_storage = make_zip({{.name = "archive/data.pkl", .data = pickle}});
  EXPECT_ERROR(read_torch_checkpoint(bytes_of(no_storage), "m.bin"),
               "m.bin: tensor \"a\": storage record archive/data/0 is missing from the archive");
}

// ---- config.json and friends -----------------------------------------------------------------------

TEST(BertConfigFile, RefusesSizesBeyondTheLimitAndHugeNumbers) {
  const std::string base = R"({"model_type": "bert", "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 24)";
  EXPECT_NO_THROW((void)BertConfig::from_json(base + "}"));
  EXPECT_ERROR(BertConfig::from_json(base + R"(, "num_labels": 1000000000000})"),
               "config.json: field \"num_labels\" must be <= 16777216, found 1000000000000");
  EXPECT_ERROR(BertConfig::from_json(base + R"(, "max_position_embeddings": 18446744073709551615})"),
               "field \"max_position_embeddings\" must be <= 16777216");
  EXPECT_ERROR(BertConfig::from_json(base + R"(, "layer_norm_eps": 1e300})"),
               "field \"layer_norm_eps\" must be a number in [0, 1e+30], found 1e+300");
  EXPECT_ERROR(BertConfig::from_json(base + R"(, "layer_norm_eps": 1e999})"), "config.json: invalid JSON");
  EXPECT_ERROR(BertConfig::from_json(base + R"(, "hidden_dropout_prob": 1.5})"),
               "dropout probability \"hidden_dropout_prob\" must be below 1");
  // A deeply nested value is refused before parsing (core/json.h), naming the file.
  EXPECT_ERROR(BertConfig::from_json(base + R"(, "hidden_act": )" + std::string(5000, '[') + std::string(5000, ']') + "}"),
               "config.json: JSON nested deeper than 100 levels");
  // An array in an error message is named by its type, not dumped.
  EXPECT_ERROR(BertConfig::from_json(base + R"(, "hidden_act": )" + std::string(50, '[') + std::string(50, ']') + "}"),
               "field \"hidden_act\" must be a string, found an array");
}

TEST(BertConfigFile, Id2LabelNamesEachIdOnce) {
  const std::string base = R"({"model_type": "bert", "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 24, )";
  const BertConfig c = BertConfig::from_json(base + R"("id2label": {"1": "pos", "0": "neg"}})");
  EXPECT_EQ(c.id2label, (std::vector<std::string>{"neg", "pos"}));
  EXPECT_ERROR(BertConfig::from_json(base + R"("id2label": {"1": "pos", "01": "neg"}})"), "key \"01\" is not an id");
  EXPECT_ERROR(BertConfig::from_json(base + R"("id2label": {" 1": "pos", "0": "neg"}})"), "key \" 1\" is not an id");
  EXPECT_ERROR(BertConfig::from_json(base + R"("id2label": {}})"), "field \"id2label\" is empty");
}

TEST(SentencePipeline, ReadsModulesAndPooling) {
  SentencePipeline p;
  parse_sentence_modules(R"([{"type": "sentence_transformers.models.Transformer"},
    {"type": "sentence_transformers.models.Pooling"}])", "modules.json", p);
  EXPECT_FALSE(p.normalize);
  parse_sentence_pooling(R"({"word_embedding_dimension": 384, "pooling_mode_mean_tokens": true,
    "pooling_mode_cls_token": false})", "1_Pooling/config.json", p);
  EXPECT_EQ(p.dimension, 384);
  EXPECT_ERROR(parse_sentence_pooling(R"({"pooling_mode_mean_tokens": "yes"})", "pool.json", p),
               "pool.json: \"pooling_mode_mean_tokens\" must be true or false, found \"yes\"");
  EXPECT_ERROR(parse_sentence_pooling(R"({"pooling_mode_cls_token": false})", "pool.json", p),
               "\"pooling_mode_mean_tokens\" is not set");
  EXPECT_ERROR(parse_sentence_modules(R"([{"type": "sentence_transformers.models.Dense"}])", "modules.json", p),
               "module type \"sentence_transformers.models.Dense\" is not supported");
  EXPECT_ERROR(parse_sentence_modules("[", "modules.json", p), "modules.json: invalid JSON");
}

TEST(LoraConfigFile, RefusesHugeRanksSlowOrLongRegexesAndOverflowingNumbers) {
  const std::string base = R"({"peft_type": "LORA", "target_modules": ["query"], )";
  EXPECT_EQ(LoraConfig::from_json(base + R"("r": 4})").r, 4);
  EXPECT_ERROR(LoraConfig::from_json(base + R"("r": 18446744073709551615})"), "\"r\" must be a positive integer");
  EXPECT_ERROR(LoraConfig::from_json(base + R"("r": 4, "lora_alpha": 1e999})"), "adapter_config.json: invalid JSON");
  const std::string regex(kLoraMaxRegex + 1, 'a');
  EXPECT_ERROR(LoraConfig::from_json(R"({"peft_type": "LORA", "r": 4, "target_modules": ")" + regex + "\"}"),
               "regex of 1001 characters is longer than the 1000 supported");
  // Regexes std::regex would take exponential (or high polynomial) time to match are refused.
  const auto regex_config = [](const std::string& re) {
    return LoraConfig::from_json(nlohmann::json{{"peft_type", "LORA"}, {"r", 4}, {"target_modules", re}}.dump());
  };
  for (const char* slow : {"(.*)*x", "(query|value)+", R"((a\.)*(b*)+)", ".*.*.*.*x", "x{1,2}y{3}z*w+", ".***x", "a?*",
                           "a{99999999999999999999}", "a{2,1001}",
                           R"((a)\99999999999999999999)"}) {
    EXPECT_ERROR(regex_config(slow), "which std::regex can take exponential time to match");
  }
  for (const char* fine : {R"(.*\.(query|value))", R"(.*layer\.1\..*(query|key))", R"([(*+]*\(x\)+)", "(a|b)?c*", "a*?b", "x{2,1000}"}) {
    EXPECT_EQ(regex_config(fine).target_regex, fine);
  }
  EXPECT_TRUE(lora_target_matches(regex_config(R"(.*\.(query|value))"), "bert.encoder.layer.0.attention.self.query"));
  EXPECT_ERROR(LoraConfig::from_json(base + R"("r": 4, "rank_pattern": {"a": 2}})"),
               "\"rank_pattern\" is not supported (got an object)");
}

}  // namespace
}  // namespace hotpath::formats
