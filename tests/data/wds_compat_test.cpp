// Parity with python webdataset 1.0.2: shards either side writes are read identically by the
// other (keys, extensions, bytes), and the key split and brace expansion agree name for name.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hotpath/data/shard_list.h"
#include "hotpath/formats/tar.h"
#include "hotpath/formats/tar_writer.h"
#include "support/test_support.h"

namespace hotpath::data {
namespace {

using nlohmann::json;
using test::TempDir;

std::string tool() { return test::source_path("tests/oracles/write_wds_fixture.py"); }

std::string base64_decode(const std::string& in) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const std::size_t v = kAlphabet.find(c);
    if (v == std::string::npos) throw std::runtime_error("bad base64");
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  return out;
}

// One sample as both sides describe it.
struct Seen {
  std::string shard;
  std::string key;
  std::map<std::string, std::string> members;  // ext -> bytes
  bool operator==(const Seen&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Seen& s) {
  os << s.shard << " key='" << s.key << "' {";
  for (const auto& [ext, bytes] : s.members) os << ext << ":" << bytes.size() << "B ";
  return os << "}";
}

std::vector<Seen> from_manifest(const std::string& text, const char* field = "samples") {
  const json j = json::parse(text);
  std::vector<Seen> out;
  for (const json& s : j.at(field)) {
    Seen seen{s.at("shard").get<std::string>(), s.at("key").get<std::string>(), {}};
    for (const auto& [ext, b64] : s.at("members").items()) seen.members[ext] = base64_decode(b64.get<std::string>());
    out.push_back(std::move(seen));
  }
  return out;
}

std::vector<Seen> read_with_hotpath(const std::vector<std::string>& shards, std::vector<std::string>& bad) {
  std::vector<Seen> out;
  for (const std::string& path : shards) {
    const formats::ShardReader reader(path);
    for (const formats::BadRecord& r : reader.bad()) bad.push_back(r.to_string());
    for (const formats::TarSample& s : reader.samples()) {
      Seen seen{path, s.key, {}};
      for (const formats::SampleMember& m : s.members) {
        const auto b = reader.bytes(m);
        seen.members[m.ext] = std::string(reinterpret_cast<const char*>(b.data()), b.size());
      }
      out.push_back(std::move(seen));
    }
  }
  return out;
}

TEST(ShardReader, ReadsShardsWrittenByPythonWebdataset) {
  TempDir dir;
  const std::string manifest = test::run_python(tool(), {"write", dir.path().string()});
  const std::vector<Seen> expected = from_manifest(manifest);
  ASSERT_EQ(expected.size(), 20U);
  // ustar shards from formats::ShardWriter (by brace pattern, as users name them), then pax and GNU ones.
  std::vector<std::string> shards = resolve_shards({dir.file("wds-{000000..000003}.tar")});
  shards.push_back(dir.file("wds-pax.tar"));
  shards.push_back(dir.file("wds-gnu.tar"));
  std::vector<std::string> bad;
  const std::vector<Seen> got = read_with_hotpath(shards, bad);
  EXPECT_TRUE(bad.empty()) << bad.front();
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "sample " << i;
  // Python's own reader agrees with the manifest its writer printed.
  EXPECT_EQ(from_manifest(manifest, "read_back"), expected);
}

TEST(TarWriter, ShardsAreReadByPythonWebdataset) {
  TempDir dir;
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> samples;
  for (int i = 0; i < 8; ++i) {
    std::string payload;
    for (int j = 0; j < 211 * i; ++j) payload += static_cast<char>((j * 13 + i) & 0xff);
    samples.push_back({"k" + std::to_string(i), {{"jpg", payload}, {"cls", std::to_string(i)}, {"json", "{}"}}});
  }
  samples.push_back({"dotted.dir/v.2/x", {{"seg.png", "mask"}, {"jpg", ""}}});
  samples.push_back({std::string(130, 'u') + "/" + std::string(80, 'v'), {{"jpg", "ustar prefix"}}});
  samples.push_back({std::string(250, 'w'), {{"jpg", "pax path"}, {"cls", "9"}}});

  formats::ShardWriter writer(dir.file("ours-%06d.tar"), {.max_samples = 3});
  std::vector<Seen> expected;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    formats::SampleToWrite s{samples[i].first, {}};
    Seen seen{dir.file("ours-00000" + std::to_string(i / 3) + ".tar"), samples[i].first, {}};
    for (const auto& [ext, data] : samples[i].second) {
      s.members.emplace_back(ext, test::as_bytes(data));
      seen.members[ext] = data;
    }
    writer.write(s);
    expected.push_back(std::move(seen));
  }
  writer.close();
  ASSERT_EQ(writer.shards().size(), 4U);
  std::vector<std::string> args{"read"};
  args.insert(args.end(), writer.shards().begin(), writer.shards().end());
  const std::vector<Seen> got = from_manifest(test::run_python(tool(), args));
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "sample " << i;
}

TEST(SplitKey, MatchesWebdatasetBasePlusExt) {
  // Every name up to 5 characters over {a, A, ., /, newline}, plus realistic ones.
  std::vector<std::string> names{"a.b/c.seg.png", "x/IMG.JPG", "__meta__.json", "dir.d/.hidden",
                                 "a/b/.c", "a.b/c", "a\n/b.c", "\n/b.c", "a/b\n.c", "k.tar.gz"};
  const std::string alphabet = "aA./\n";
  std::vector<std::string> level{""};
  for (int len = 1; len <= 5; ++len) {
    std::vector<std::string> next;
    for (const std::string& s : level) {
      for (char c : alphabet) next.push_back(s + c);
    }
    names.insert(names.end(), next.begin(), next.end());
    level = std::move(next);
  }
  std::vector<std::string> args{"split"};
  args.insert(args.end(), names.begin(), names.end());
  const json expected = json::parse(test::run_python(tool(), args));
  ASSERT_EQ(expected.size(), names.size());
  int mismatches = 0;
  for (std::size_t i = 0; i < names.size() && mismatches < 10; ++i) {
    const formats::KeyExt got = formats::split_key(names[i]);
    const bool ok = !expected[i].is_null();
    const bool same = got.ok == ok && (!ok || (got.key == expected[i].at("key").get<std::string>() &&
                                               got.ext == expected[i].at("ext").get<std::string>()));
    if (!same) ++mismatches;
    EXPECT_TRUE(same) << json(names[i]).dump() << ": python " << expected[i].dump() << ", hotpath ok=" << got.ok
                      << " key=" << json(got.key).dump() << " ext=" << json(got.ext).dump();
  }
}

TEST(ShardList, MatchesPythonBraceexpand) {
  const std::vector<std::string> patterns{
      "train-{000000..000012}.tar", "{8..11}", "{08..11}", "{-3..3..2}", "{10..1..3}", "{a..e}", "{e..a..2}",
      "{X..c}", "a{b,c{d,e},}f", "{a}", "{}", "{1..}", "{a,b}{1,2}{x,y}", "{1\\{2,3}", "{1\\,2,3}",
      "pre{0..2}mid{a,b}post", "{0..0}", "{-0..2}", "{00..2}", "{1..1..0}", "{,}", "{{a,b}}", "\\x{1,2}"};
  std::vector<std::string> args{"braces"};
  args.insert(args.end(), patterns.begin(), patterns.end());
  const json expected = json::parse(test::run_python(tool(), args));
  ASSERT_EQ(expected.size(), patterns.size());
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    EXPECT_EQ(json(expand_braces(patterns[i])), expected[i]) << patterns[i];
  }
}

}  // namespace
}  // namespace hotpath::data
