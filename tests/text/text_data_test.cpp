// Text datasets: ARFF / JSONL / fortune / plain-text importers, pack_text shards, the batcher and
// the TextLoader (dynamic padding, bucketing, token budget, determinism, exact resume).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/core/random.h"
#include "hotpath/formats/tar.h"
#include "hotpath/text/text_data.h"
#include "hotpath/text/text_loader.h"
#include "hotpath/text/tokenizer.h"
#include "support/test_support.h"

namespace hotpath::text {
namespace {

using test::TempDir;
using test::write_file;

// The message of the hotpath::Error `fn` throws ("" when it does not throw).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr std::string_view kArff =
    "% a comment line\n"
    "@RELATION 'test set'\n"
    "\n"
    "@attribute Text string\n"
    "@attribute 'class att' {neg, 'pos itive'}\n"
    "@data\n"
    "'it\\'s \\\"quoted\\\"\\nnext line', neg\n"
    "% comment between instances\n"
    "\"double, with comma\",'pos itive'   % trailing comment\n"
    "plain words , ?\n";

TEST(Arff, ParsesQuotesEscapesAndComments) {
  const TextSource s = parse_arff(kArff, "t.arff");
  ASSERT_EQ(s.records.size(), 3U);
  EXPECT_EQ(s.classes, (std::vector<std::string>{"neg", "pos itive"}));
  EXPECT_EQ(s.records[0].text, "it's \"quoted\"\nnext line");
  EXPECT_EQ(s.records[0].label, 0);
  EXPECT_EQ(s.records[1].text, "double, with comma");
  EXPECT_EQ(s.records[1].label, 1);
  EXPECT_EQ(s.records[2].text, "plain words");
  EXPECT_EQ(s.records[2].label, -1);  // '?' = missing
  EXPECT_EQ(s.records[2].line, 10U);
}

TEST(Arff, RejectsSparseAndMalformedInstancesNamingTheLine) {
  const std::string header = "@relation r\n@attribute t string\n@attribute c {0,1}\n@data\n";
  EXPECT_NE(error_of([&] { (void)parse_arff(header + "{0 'x', 1 1}\n", "s.arff"); })
                .find("s.arff:5: sparse ARFF"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)parse_arff(header + "'a',0\n'b'\n", "s.arff"); }).find("s.arff:6: expected 2 values, found 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)parse_arff(header + "'unterminated,0\n", "s.arff"); }).find("s.arff:5: unterminated"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)parse_arff(header + "'a',2\n", "s.arff"); }).find("s.arff:5: '2' is not a value of c"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)parse_arff("@relation r\n@attribute c {0,1}\n@data\n0\n", "n.arff"); })
                .find("no string attribute"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)parse_arff(header + "'a\xff',0\n", "u.arff"); }).find("u.arff:5: invalid UTF-8"),
            std::string::npos);
}

TEST(Arff, ReadsTheRealReutersFileWhenPresent) {
  const std::string path = "/usr/share/doc/weka/examples/ReutersCorn-train.arff";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not installed";
  const TextSource s = read_text_source(path, {.format = TextFormat::kArff});
  EXPECT_EQ(s.classes, (std::vector<std::string>{"0", "1"}));
  EXPECT_GT(s.records.size(), 1000U);
  EXPECT_TRUE(s.records[0].text.starts_with("BAHIA COCOA REVIEW"));
  EXPECT_NE(s.records[0].text.find('\n'), std::string::npos);  // \n escapes decoded
}

TEST(Fortunes, SplitsOnPercentLinesAndDropsBlankEntries) {
  const auto r = parse_fortunes("first line\nsecond\n%\n%\n\n%\nthird 100% sure\n%\n", "f");
  ASSERT_EQ(r.size(), 2U);
  EXPECT_EQ(r[0].text, "first line\nsecond");
  EXPECT_EQ(r[0].line, 1U);
  EXPECT_EQ(r[1].text, "third 100% sure");
  EXPECT_EQ(r[1].line, 7U);
  EXPECT_NE(error_of([] { (void)parse_fortunes("ok\n%\nbad \xc0\xaf\n", "bad"); }).find("bad:3: invalid UTF-8"),
            std::string::npos);
}

TEST(Fortunes, DirectoryIsOneClassPerFileSkippingDatU8AndSubdirs) {
  TempDir dir;
  write_file(dir.file("zen"), "a\n%\nb\n");
  write_file(dir.file("art"), "c\n");
  write_file(dir.file("art.dat"), "\x01\x02");
  write_file(dir.file("art.u8"), "x\n%\ny\n");
  std::filesystem::create_directory(dir.path() / "off");
  write_file(dir.file("off/rude"), "no\n");
  const TextSource s = read_text_source(dir.path().string(), {.format = TextFormat::kFortunes});
  EXPECT_EQ(s.classes, (std::vector<std::string>{"art", "zen"}));
  ASSERT_EQ(s.records.size(), 3U);
  EXPECT_EQ(s.records[0].label, 0);
  EXPECT_EQ(s.records[2].text, "b");
  EXPECT_EQ(s.records[2].label, 1);
}

TEST(Jsonl, ReadsConfigurableFieldsPairsAndNamedLabels) {
  TextSourceOptions o;
  o.text_field = "q";
  o.pair_field = "a";
  o.label_field = "y";
  const TextSource s = parse_jsonl("{\"q\":\"hi\",\"a\":\"there\",\"y\":\"pos\"}\n\n{\"q\":\"yo\",\"y\":\"neg\"}\n", "d.jsonl", o);
  EXPECT_EQ(s.classes, (std::vector<std::string>{"neg", "pos"}));
  ASSERT_EQ(s.records.size(), 2U);
  EXPECT_EQ(s.records[0].text_pair, "there");
  EXPECT_EQ(s.records[0].label, 1);
  EXPECT_EQ(s.records[1].label, 0);
  EXPECT_EQ(s.records[1].line, 3U);
  const TextSource ints = parse_jsonl("{\"text\":\"a\",\"label\":2}\n{\"text\":\"b\"}\n", "i.jsonl");
  EXPECT_EQ(ints.classes, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(ints.records[1].label, -1);
}

TEST(Jsonl, MalformedLinesNameFileAndLine) {
  EXPECT_NE(error_of([] { (void)parse_jsonl("{\"text\":\"a\"}\n{\"text\": \n", "m.jsonl"); }).find("m.jsonl:2: invalid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)parse_jsonl("[1]\n", "m.jsonl"); }).find("m.jsonl:1: expected a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)parse_jsonl("{\"txt\":\"a\"}\n", "m.jsonl"); }).find("m.jsonl:1: field 'text' missing"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)parse_jsonl("{\"text\":\"a\",\"label\":-3}\n", "m.jsonl"); }).find("m.jsonl:1: field 'label'"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)parse_jsonl("{\"text\":\"a\",\"label\":1}\n{\"text\":\"b\",\"label\":\"x\"}\n", "m.jsonl"); })
                .find("mix integers and names"),
            std::string::npos);
}

TEST(TextSource, PlainTextLinesWithLabelFileAndUtf8Errors) {
  TempDir dir;
  write_file(dir.file("t.txt"), "alpha\n\nbeta\ngamma\n");
  write_file(dir.file("l.txt"), "b\n\na\nb\n");
  const TextSource s = read_text_source(dir.file("t.txt"), {.format = TextFormat::kTxt, .labels_path = dir.file("l.txt")});
  ASSERT_EQ(s.records.size(), 3U);
  EXPECT_EQ(s.classes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.records[1].text, "beta");
  EXPECT_EQ(s.records[1].label, 0);
  write_file(dir.file("bad.txt"), "ok\nstill ok\nnot \xed\xa0\x80 ok\n");  // a UTF-16 surrogate
  EXPECT_NE(error_of([&] { (void)read_text_source(dir.file("bad.txt"), {}); }).find("bad.txt:3: invalid UTF-8 at byte 4"),
            std::string::npos);
}

// A tiny WordPiece vocabulary in `dir`, so tests can pass a tokenizer directory.
std::string make_tokenizer_dir(const TempDir& dir) {
  std::filesystem::create_directories(dir.path() / "tok");
  write_file(dir.file("tok/vocab.txt"),
             "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\ndog\nran\n.\na\nbig\nred\n");
  return dir.file("tok");
}

std::string jsonl_corpus(int n, std::uint64_t seed) {
  const char* words[] = {"the", "cat", "sat", "on", "mat", "dog", "ran", "a", "big", "red"};
  Rng rng(seed);
  std::string out;
  for (int i = 0; i < n; ++i) {
    const auto len = rng.uniform_int(1, i % 7 == 0 ? 40 : 8);  // skewed: a few long ones
    std::string text;
    for (std::int64_t w = 0; w < len; ++w) text += std::string(w ? " " : "") + words[rng.uniform_int(0, 9)];
    out += nlohmann::json{{"text", text}, {"label", i % 3}}.dump() + "\n";
  }
  return out;
}

TEST(TextPack, RoundTripsTextPairsLabelsAndReport) {
  TempDir dir;
  write_file(dir.file("d.jsonl"),
             "{\"text\":\"hello\",\"text_pair\":\"world\",\"label\":\"b\"}\n{\"text\":\"caf\xc3\xa9\",\"label\":\"a\"}\n"
             "{\"text\":\"x\",\"label\":\"b\"}\n");
  const TextPackReport r = pack_text(dir.file("d.jsonl"), {.source = {.format = TextFormat::kJsonl},
                                                           .output_prefix = dir.file("out/train"),
                                                           .max_samples_per_shard = 2});
  ASSERT_EQ(r.shards.size(), 2U);
  EXPECT_EQ(r.class_counts, (std::vector<std::uint64_t>{1, 2}));
  const formats::ShardReader shard(r.shards[0]);
  ASSERT_EQ(shard.samples().size(), 2U);
  const auto& s0 = shard.samples()[0];
  EXPECT_EQ(s0.key, "00000000");
  const auto text = [&](const formats::SampleMember* m) {
    const auto b = shard.bytes(*m);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  };
  EXPECT_EQ(text(s0.find("txt")), "hello");
  EXPECT_EQ(text(s0.find("pair.txt")), "world");
  EXPECT_EQ(text(s0.find("cls")), "1");
  EXPECT_EQ(text(shard.samples()[1].find("txt")), "caf\xc3\xa9");
  const auto meta = nlohmann::json::parse(read_file(dir.file("out/train.json")));
  EXPECT_EQ(meta["classes"], (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(meta["samples"], 3);
  EXPECT_EQ(meta["shards"][1], "train-000001.tar");
  // Deterministic bytes; a smaller re-pack removes the stale second shard.
  const auto first = test::read_bytes(r.shards[0]);
  const TextPackReport again = pack_text(dir.file("d.jsonl"), {.source = {.format = TextFormat::kJsonl},
                                                               .output_prefix = dir.file("out/train"),
                                                               .max_samples_per_shard = 2});
  EXPECT_EQ(test::read_bytes(again.shards[0]), first);
  (void)pack_text(dir.file("d.jsonl"), {.source = {.format = TextFormat::kJsonl}, .output_prefix = dir.file("out/train")});
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/train-000001.tar")));
}

TEST(TextPack, TokenizedSamplesAreLittleEndianInt32Ids) {
  TempDir dir;
  const std::string tok_dir = make_tokenizer_dir(dir);
  write_file(dir.file("d.jsonl"), "{\"text\":\"the cat sat\",\"text_pair\":\"on a mat\",\"label\":0}\n{\"text\":\"big dog\"}\n");
  const TextPackReport r = pack_text(dir.file("d.jsonl"), {.source = {.format = TextFormat::kJsonl},
                                                           .output_prefix = dir.file("ids"),
                                                           .tokenizer_dir = tok_dir});
  const formats::ShardReader shard(r.shards.at(0));
  const auto bytes = shard.bytes(*shard.samples()[0].find("ids"));
  // [CLS] the cat sat [SEP] on a mat [SEP] = 2 5 6 7 3 8 13 9 3
  const std::vector<unsigned char> expected_head = {2, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0};
  ASSERT_EQ(bytes.size(), 9U * 4);
  EXPECT_EQ(std::memcmp(bytes.data(), expected_head.data(), expected_head.size()), 0);
  const auto types = shard.bytes(*shard.samples()[0].find("type.ids"));
  EXPECT_EQ(static_cast<int>(types[4 * 5]), 1);  // "on" is in the second sequence
  EXPECT_EQ(shard.samples()[1].find("type.ids"), nullptr);
  EXPECT_EQ(shard.samples()[1].find("cls"), nullptr);  // unlabelled
  EXPECT_EQ(r.tokens, 13U);
  const TextCorpus c = read_text_corpus(r.shards, "", 0, 1);
  EXPECT_EQ(std::vector<std::int32_t>(c.ids.begin(), c.ids.begin() + 9), (std::vector<std::int32_t>{2, 5, 6, 7, 3, 8, 13, 9, 3}));
  EXPECT_EQ(c.type_ids[5], 1);
  EXPECT_EQ(c.labels, (std::vector<std::int64_t>{0, -1}));
  const TextCorpus truncated = read_text_corpus(r.shards, "", 4, 1);
  EXPECT_EQ(std::vector<std::int32_t>(truncated.ids.begin(), truncated.ids.begin() + 4), (std::vector<std::int32_t>{2, 5, 6, 3}));
}

TextCorpus synthetic_corpus(const std::vector<std::uint32_t>& lengths) {
  TextCorpus c;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    std::vector<std::int32_t> ids(lengths[i], static_cast<std::int32_t>(100 + i));
    c.add(ids, {}, static_cast<std::int64_t>(i % 5));
  }
  return c;
}

std::vector<std::uint32_t> skewed_lengths(std::size_t n) {
  Rng rng(7);
  std::vector<std::uint32_t> lengths(n);
  for (auto& l : lengths) l = static_cast<std::uint32_t>(rng.bernoulli(0.1) ? rng.uniform_int(60, 128) : rng.uniform_int(4, 20));
  return lengths;
}

TEST(Batcher, DynamicPaddingPadsToTheLongestInTheBatch) {
  const TextCorpus c = synthetic_corpus({3, 5, 2});
  const std::vector<std::uint32_t> rows = {0, 1, 2};
  const TextBatch b = collate(c, rows, {}, -7);
  EXPECT_EQ(b.batch_size, 3);
  EXPECT_EQ(b.length, 5);
  EXPECT_EQ(b.input_ids.size(), 15U);
  EXPECT_EQ(b.input_ids[0 * 5 + 2], 100);
  EXPECT_EQ(b.input_ids[0 * 5 + 3], -7);
  EXPECT_EQ(b.attention_mask, (std::vector<std::int32_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(b.labels, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(b.real_tokens, 10);
  EXPECT_EQ(b.padded_tokens, 15);
  EXPECT_NEAR(b.padding_fraction(), 1.0 / 3.0, 1e-12);
}

TEST(Batcher, PadToMultipleOfAndFixedLength) {
  const TextCorpus c = synthetic_corpus({3, 9});
  const std::vector<std::uint32_t> rows = {0, 1};
  EXPECT_EQ(collate(c, rows, {.pad_to_multiple_of = 8}, 0).length, 16);
  EXPECT_EQ(collate(c, std::vector<std::uint32_t>{0}, {.pad_to_multiple_of = 8}, 0).length, 8);
  EXPECT_EQ(collate(c, rows, {.fixed_length = 12}, 0).length, 12);
  EXPECT_EQ(collate(c, rows, {.pad_to_multiple_of = 8, .fixed_length = 12}, 0).length, 16);
}

TEST(Batcher, BucketingReducesPaddingOnSkewedLengths) {
  const auto lengths = skewed_lengths(3200);
  const BatchPlanOptions random{.batch_size = 32, .seed = 3};
  BatchPlanOptions bucketed = random;
  bucketed.bucket_batches = 20;
  const auto p_random = padding_stats(lengths, plan_batches(lengths, random, 0), random);
  const auto plan = plan_batches(lengths, bucketed, 0);
  const auto p_bucket = padding_stats(lengths, plan, bucketed);
  EXPECT_EQ(p_bucket.samples, 3200);
  EXPECT_EQ(p_bucket.batches, 100);
  EXPECT_GT(p_random.padding_fraction(), 0.5);
  EXPECT_LT(p_bucket.padding_fraction(), p_random.padding_fraction() / 3);
  // Every sample exactly once, and the batches are shuffled (not in length order).
  std::vector<std::uint32_t> all;
  for (const auto& b : plan) all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  for (std::uint32_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i);
  std::vector<std::uint32_t> maxima;
  for (const auto& b : plan) maxima.push_back(lengths[b.back()]);
  EXPECT_FALSE(std::is_sorted(maxima.begin(), maxima.end()));
}

TEST(Batcher, ComparePaddingRanksTheStrategiesOnOneEpoch) {
  const TextCorpus c = synthetic_corpus(skewed_lengths(640));
  const PaddingComparison cmp = compare_padding(c, {.max_length = 128, .batch_size = 32, .bucket_batches = 5});
  EXPECT_EQ(cmp.samples, 640U);
  EXPECT_EQ(cmp.tokens, c.ids.size());
  EXPECT_LE(cmp.longest, 128U);
  ASSERT_EQ(cmp.rows.size(), 5U);
  for (const PaddingComparisonRow& row : cmp.rows) {
    EXPECT_EQ(row.stats.samples, 640) << row.batching;
    EXPECT_EQ(row.stats.real_tokens, static_cast<std::int64_t>(c.ids.size())) << row.batching;
  }
  const auto fraction = [&](std::size_t i) { return cmp.rows[i].stats.padding_fraction(); };
  EXPECT_EQ(cmp.rows[0].batching, "fixed (pad to max_length)");
  EXPECT_EQ(cmp.rows[0].stats.padded_tokens, 640 * 128);  // every row padded to max_length
  EXPECT_LT(fraction(1), fraction(0));                     // dynamic beats fixed
  EXPECT_GE(fraction(2), fraction(1));                     // a multiple of 8 only adds padding
  EXPECT_EQ(cmp.rows[2].batching, "dynamic, multiple of 8");
  EXPECT_LT(fraction(3), fraction(1));                     // bucketing beats plain dynamic
  EXPECT_EQ(cmp.rows[4].options.max_tokens, 32 * 128);     // default budget: batch × max_length
}

TEST(Batcher, TokenBudgetIsNeverExceededAndAnOverlongSampleGetsABatchOfOne) {
  auto lengths = skewed_lengths(2000);
  lengths[17] = 900;  // longer than the budget on its own
  for (const int bucket : {0, 10}) {
    const BatchPlanOptions o{.batch_size = 32, .max_tokens = 512, .pad_to_multiple_of = 8, .bucket_batches = bucket};
    const auto plan = plan_batches(lengths, o, 1);
    std::size_t samples = 0;
    std::set<std::size_t> sizes;
    for (const auto& b : plan) {
      std::size_t longest = 0;
      for (const auto i : b) longest = std::max<std::size_t>(longest, lengths[i]);
      const std::size_t tokens = padded_length(longest, o) * b.size();
      if (std::find(b.begin(), b.end(), 17U) != b.end()) {
        EXPECT_EQ(b.size(), 1U);
      } else {
        EXPECT_LE(tokens, 512U);
      }
      samples += b.size();
      sizes.insert(b.size());
    }
    EXPECT_EQ(samples, lengths.size());
    EXPECT_GT(sizes.size(), 2U) << "batch size should vary with the token budget";
  }
}

TEST(Batcher, RanksTakeDisjointEqualShares) {
  const auto lengths = skewed_lengths(101);
  std::vector<std::uint32_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    const auto plan = plan_batches(lengths, {.batch_size = 4, .seed = 9, .rank = rank, .world_size = 3}, 2);
    std::size_t n = 0;
    for (const auto& b : plan) {
      seen.insert(seen.end(), b.begin(), b.end());
      n += b.size();
    }
    EXPECT_EQ(n, 33U);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
  // Epochs differ, the same epoch repeats.
  const BatchPlanOptions o{.batch_size = 4, .seed = 9};
  EXPECT_EQ(plan_batches(lengths, o, 4), plan_batches(lengths, o, 4));
  EXPECT_NE(plan_batches(lengths, o, 4), plan_batches(lengths, o, 5));
  // A token budget gives each rank the same number of batches (the fewest any rank has).
  std::set<std::size_t> counts;
  for (int rank = 0; rank < 3; ++rank) {
    counts.insert(plan_batches(lengths, {.batch_size = 4, .max_tokens = 64, .seed = 9, .rank = rank, .world_size = 3}, 2).size());
  }
  EXPECT_EQ(counts.size(), 1U);
  const BatchPlanOptions drop{.batch_size = 4, .drop_last = true};
  EXPECT_EQ(plan_batches(lengths, drop, 0).size(), 25U);
}

std::vector<TextBatch> all_batches(TextLoader& loader, std::int64_t epoch) {
  std::vector<TextBatch> out;
  loader.seek({epoch, 0});
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

void expect_same(const std::vector<TextBatch>& a, const std::vector<TextBatch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].input_ids, b[i].input_ids) << "batch " << i;
    EXPECT_EQ(a[i].attention_mask, b[i].attention_mask) << "batch " << i;
    EXPECT_EQ(a[i].labels, b[i].labels) << "batch " << i;
    EXPECT_EQ(a[i].index, b[i].index);
  }
}

TEST(TextLoader, TokenizesTextShardsIdenticallyForAnyThreadCount) {
  TempDir dir;
  const std::string tok_dir = make_tokenizer_dir(dir);
  write_file(dir.file("d.jsonl"), jsonl_corpus(300, 1));
  const auto r = pack_text(dir.file("d.jsonl"), {.source = {.format = TextFormat::kJsonl},
                                                 .output_prefix = dir.file("txt"),
                                                 .max_samples_per_shard = 70});
  const auto ids = pack_text(dir.file("d.jsonl"), {.source = {.format = TextFormat::kJsonl},
                                                   .output_prefix = dir.file("ids"),
                                                   .tokenizer_dir = tok_dir,
                                                   .max_length = 16,
                                                   .threads = 2});
  TextLoaderOptions o{.shards = r.shards, .tokenizer_dir = tok_dir, .max_length = 16, .workers = 1,
                      .batching = {.batch_size = 16, .bucket_batches = 4, .seed = 5}};
  TextLoader one(o);
  o.workers = 3;
  TextLoader three(o);
  const auto a = all_batches(one, 1);
  expect_same(a, all_batches(three, 1));
  EXPECT_EQ(a.size(), 19U);  // 300 / 16, last partial kept
  for (const auto& b : a) EXPECT_LE(b.length, 16);
  // Pre-tokenized shards (same tokenizer, same max_length) give the same batches.
  o.shards = ids.shards;
  o.tokenizer_dir.clear();
  TextLoader pretokenized(o);
  expect_same(a, all_batches(pretokenized, 1));
}

TEST(TextLoader, SeekResumesExactlyLikeAnUninterruptedEpoch) {
  const auto lengths = skewed_lengths(500);
  const TextLoaderOptions o{.shards = {}, .batching = {.batch_size = 8, .max_tokens = 400, .bucket_batches = 5, .seed = 11}};
  TextLoader full(synthetic_corpus(lengths), o);
  const auto expected = all_batches(full, 3);
  ASSERT_GT(expected.size(), 10U);
  EXPECT_EQ(full.batches_in_epoch(3), static_cast<std::int64_t>(expected.size()));

  TextLoader first(synthetic_corpus(lengths), o);
  first.seek({3, 0});
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(first.next().has_value());
  const BatchPosition saved = first.position();
  EXPECT_EQ(saved.epoch, 3);
  EXPECT_EQ(saved.batch, 7);

  TextLoader resumed(synthetic_corpus(lengths), o);
  (void)all_batches(resumed, 0);  // a different epoch first: the plan must be rebuilt
  resumed.seek(saved);
  std::vector<TextBatch> rest;
  while (auto b = resumed.next()) rest.push_back(std::move(*b));
  expect_same(std::vector<TextBatch>(expected.begin() + 7, expected.end()), rest);
  EXPECT_GT(resumed.stats().padded_tokens, resumed.stats().real_tokens);
  EXPECT_NE(error_of([&] { resumed.seek({3, 100000}); }).find("past the"), std::string::npos);
}

}  // namespace
}  // namespace hotpath::text
