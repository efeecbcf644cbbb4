// TarWriter / ShardWriter: deterministic ustar bytes, pax for long names, atomic files, rolling.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/formats/tar.h"
#include "hotpath/formats/tar_writer.h"
#include "support/test_support.h"

namespace hotpath::formats {
namespace {

using test::as_bytes;
using test::TempDir;
namespace fs = std::filesystem;

struct Owned {
  std::string key;
  std::vector<std::pair<std::string, std::string>> members;  // ext, bytes
};

SampleToWrite view(const Owned& s) {
  SampleToWrite out{s.key, {}};
  for (const auto& [ext, data] : s.members) out.members.emplace_back(ext, as_bytes(data));
  return out;
}

std::vector<Owned> variety() {
  std::vector<Owned> out;
  for (int i = 0; i < 10; ++i) {
    std::string payload;
    for (int j = 0; j < i * 97; ++j) payload += static_cast<char>((i * 31 + j * 7) & 0xff);  // binary, NULs
    out.push_back({"s" + std::to_string(1000 + i), {{"jpg", payload}, {"cls", std::to_string(i % 3)}}});
  }
  out.push_back({"dots.in.dir/v1.0/img", {{"seg.png", "mask"}, {"json", "{\"a\":1}"}}});
  out.push_back({std::string(140, 'p') + "/" + std::string(90, 'q'), {{"jpg", "ustar prefix split"}}});
  out.push_back({std::string(300, 'L'), {{"jpg", "pax path"}, {"txt", ""}}});
  return out;
}

std::string read_text(const std::string& path) {
  const auto b = test::read_bytes(path);
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

TEST(TarWriter, RoundTripsKeysAndBytes) {
  TempDir dir;
  const auto samples = variety();
  ShardWriter writer(dir.file("rt-%04d.tar"), {.max_samples = 0, .max_bytes = 0});
  for (const Owned& s : samples) writer.write(view(s));
  writer.close();
  ASSERT_EQ(writer.shards(), (std::vector<std::string>{dir.file("rt-0000.tar")}));
  EXPECT_EQ(writer.samples_written(), samples.size());

  const ShardReader shard(writer.shards()[0]);
  ASSERT_TRUE(shard.bad().empty()) << shard.bad()[0].to_string();
  ASSERT_EQ(shard.samples().size(), samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const TarSample& got = shard.samples()[i];
    EXPECT_EQ(got.key, samples[i].key);
    ASSERT_EQ(got.members.size(), samples[i].members.size());
    for (std::size_t j = 0; j < got.members.size(); ++j) {
      EXPECT_EQ(got.members[j].ext, samples[i].members[j].first);
      const auto b = shard.bytes(got.members[j]);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), b.size()), samples[i].members[j].second)
          << got.members[j].name;
    }
  }
}

TEST(TarWriter, SameInputGivesIdenticalBytes) {
  TempDir dir;
  for (const char* name : {"a.tar", "b.tar"}) {
    TarWriter w(dir.file(name));
    for (const Owned& s : variety()) {
      for (const auto& [ext, data] : s.members) w.add(s.key + "." + ext, as_bytes(data));
    }
    w.close();
  }
  const std::string a = read_text(dir.file("a.tar"));
  EXPECT_EQ(a, read_text(dir.file("b.tar")));
  EXPECT_EQ(a.size() % 512, 0U);
}

TEST(TarWriter, WritesFixedUstarFields) {
  TempDir dir;
  TarWriter w(dir.file("h.tar"));
  w.add("k.cls", as_bytes("7"));
  w.close();
  EXPECT_EQ(w.bytes_written(), 512U * 4);  // header, data block, two end blocks
  const std::string t = read_text(dir.file("h.tar"));
  ASSERT_EQ(t.size(), 2048U);
  EXPECT_EQ(t.substr(0, 6), std::string("k.cls\0", 6));
  EXPECT_EQ(t.substr(100, 8), std::string("0000644\0", 8));
  EXPECT_EQ(t.substr(108, 16), std::string("0000000\0" "0000000\0", 16));
  EXPECT_EQ(t.substr(124, 12), std::string("00000000001\0", 12));
  EXPECT_EQ(t.substr(136, 12), std::string("00000000000\0", 12));
  EXPECT_EQ(t[156], '0');
  EXPECT_EQ(t.substr(257, 8), std::string("ustar\0" "00", 8));
  EXPECT_EQ(t.substr(265, 64), std::string(64, '\0'));  // uname, gname empty
  EXPECT_EQ(t[512], '7');
  EXPECT_EQ(t.substr(1024), std::string(1024, '\0'));
  // The checksum: six octal digits, NUL, space; the sum of the header with the field as spaces.
  std::string h = t.substr(0, 512);
  const std::string stored = h.substr(148, 8);
  h.replace(148, 8, 8, ' ');
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  EXPECT_EQ(stored.substr(6), std::string("\0 ", 2));
  EXPECT_EQ(std::stoul(stored.substr(0, 6), nullptr, 8), sum);
}

TEST(TarWriter, UsesUstarPrefixThenPaxForLongNames) {
  TempDir dir;
  const std::string split_name = std::string(150, 'd') + "/" + std::string(99, 'f');
  const std::string pax_name = std::string(101, 'x') + ".jpg";
  TarWriter w(dir.file("l.tar"));
  w.add(split_name, as_bytes("a"));
  w.add(pax_name, as_bytes("b"));
  w.close();
  const std::string t = read_text(dir.file("l.tar"));
  EXPECT_EQ(t.substr(345, 150), std::string(150, 'd'));  // prefix field
  EXPECT_EQ(t[1024 + 156], 'x');                          // pax header before the second member
  const std::string record = "115 path=" + pax_name + "\n";
  EXPECT_EQ(t.substr(1536, record.size()), record);
  const ShardIndex idx = ShardReader::index_bytes("l.tar", as_bytes(t));
  ASSERT_EQ(idx.samples.size(), 1U);  // split_name has no dot: no sample
  EXPECT_EQ(idx.samples[0].members[0].name, pax_name);
}

TEST(TarWriter, TempFileUntilCloseAndRemovedWithoutClose) {
  TempDir dir;
  const std::string path = dir.file("t.tar");
  {
    TarWriter w(path);
    w.add("a.jpg", as_bytes("x"));
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_FALSE(fs::exists(path));
  TarWriter w(path);
  w.add("a.jpg", as_bytes("x"));
  w.close();
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_THROW(w.add("b.jpg", as_bytes("y")), Error);
  EXPECT_THROW(TarWriter(dir.file("no/such/dir/x.tar")), Error);
}

TEST(TarWriter, ShardWriterRollsOnMaxSamples) {
  TempDir dir;
  ShardWriter writer(dir.file("c-%02d.tar"), {.max_samples = 3, .max_bytes = 0});
  for (int i = 0; i < 10; ++i) writer.write(view({"k" + std::to_string(i), {{"cls", "1"}}}));
  writer.close();
  ASSERT_EQ(writer.shards().size(), 4U);
  EXPECT_EQ(writer.shards()[3], dir.file("c-03.tar"));
  const std::vector<std::size_t> expected{3, 3, 3, 1};
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(ShardReader(writer.shards()[i]).samples().size(), expected[i]);
  EXPECT_EQ(writer.samples_written(), 10U);
}

TEST(TarWriter, ShardWriterRollsOnMaxBytes) {
  TempDir dir;
  // Each sample: 512 header + 1024 data = 1536 bytes; a shard holds two (3072 + 1024 end = 4096).
  const std::string kb(1024, 'z');
  const std::string big(10000, 'B');
  ShardWriter writer(dir.file("b-%d.tar"), {.max_samples = 0, .max_bytes = 4096});
  for (int i = 0; i < 5; ++i) writer.write(view({"k" + std::to_string(i), {{"bin", kb}}}));
  writer.write(view({"big", {{"bin", big}}}));  // larger than max_bytes: alone in its shard
  writer.write(view({"after", {{"bin", kb}}}));
  writer.close();
  std::vector<std::size_t> counts;
  for (const std::string& s : writer.shards()) {
    const ShardReader r(s);
    counts.push_back(r.samples().size());
    if (r.samples().size() > 1 || r.samples()[0].key != "big") {
      EXPECT_LE(fs::file_size(s), 4096U) << s;
    }
  }
  EXPECT_EQ(counts, (std::vector<std::size_t>{2, 2, 1, 1, 1}));
  EXPECT_EQ(ShardReader(writer.shards()[3]).samples()[0].key, "big");
}

TEST(TarWriter, ShardWriterChecksPatternAndSamples) {
  TempDir dir;
  EXPECT_THROW(ShardWriter(dir.file("x-%s.tar"), {}), Error);
  EXPECT_THROW(ShardWriter(dir.file("x.tar"), {}), Error);
  EXPECT_THROW(ShardWriter(dir.file("x-%d-%d.tar"), {}), Error);
  ShardWriter ok(dir.file("100%%-%05x.tar"), {.max_samples = 1});
  for (int i = 0; i < 12; ++i) ok.write(view({"k", {{"cls", "1"}}}));
  ok.close();
  EXPECT_EQ(ok.shards().back(), dir.file("100%-0000b.tar"));

  ShardWriter w(dir.file("y-%d.tar"), {});
  EXPECT_THROW(w.write(view({"a.b", {{"jpg", "x"}}})), Error);  // would read back as key "a"
  EXPECT_THROW(w.write(view({"a", {{"JPG", "x"}}})), Error);    // would read back lowercased
  EXPECT_THROW(w.write(view({"a", {{"jpg", "x"}, {"jpg", "y"}}})), Error);
  EXPECT_THROW(w.write(view({"", {{"jpg", "x"}}})), Error);
  EXPECT_THROW(w.write(view({"a", {}})), Error);
  EXPECT_THROW(w.write(view({"__meta__/a", {{"json", "{}"}}})), Error);
  w.close();
  EXPECT_TRUE(w.shards().empty());  // nothing valid was written
}

TEST(TarWriter, ShardWriterWithoutCloseLeavesNoPartialShard) {
  TempDir dir;
  {
    ShardWriter w(dir.file("p-%d.tar"), {.max_samples = 1});
    w.write(view({"a", {{"cls", "1"}}}));
    w.write(view({"b", {{"cls", "2"}}}));
  }
  EXPECT_TRUE(fs::exists(dir.file("p-0.tar")));
  EXPECT_FALSE(fs::exists(dir.file("p-1.tar")));
  EXPECT_FALSE(fs::exists(dir.file("p-1.tar.tmp")));
}

}  // namespace
}  // namespace hotpath::formats
