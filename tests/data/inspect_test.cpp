// inspect_shards: good samples are described, and each bad-sample case (missing .cls,
// non-numeric label, corrupt image header, truncated tar) is counted with its reason.
#include "hotpath/data/inspect.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar_writer.h"
#include "support/test_support.h"

namespace hotpath::data {
namespace {

using test::as_bytes;
using test::TempDir;

std::vector<std::byte> small_png(int seed) {
  std::vector<std::uint8_t> px(8 * 6 * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 5 + seed);
  return encode_png(px.data(), 8, 6, 3);
}

std::vector<std::byte> small_jpeg() {
  std::vector<std::uint8_t> px(16 * 16 * 3, 128);
  return encode_jpeg(px.data(), 16, 16, 3, 90);
}

struct Collected {
  std::vector<InspectedSample> samples;
  InspectSummary summary;
};

Collected inspect(const std::vector<std::string>& shards) {
  Collected c;
  c.summary = inspect_shards(shards, [&](const InspectedSample& x) { c.samples.push_back(x); });
  return c;
}

TEST(Inspect, DescribesGoodSamples) {
  TempDir dir;
  const auto png = small_png(1);
  const auto jpg = small_jpeg();
  {
    formats::TarWriter tar(dir.file("good.tar"));
    tar.add("00000000.png", png);
    tar.add("00000000.cls", as_bytes("3\n"));
    tar.add("00000001.jpg", jpg);
    tar.add("00000001.cls", as_bytes(" 12 "));
    tar.add("00000001.json", as_bytes("{}"));
    tar.close();
  }
  const Collected c = inspect({dir.file("good.tar")});
  EXPECT_EQ(c.summary.samples, 2u);
  EXPECT_EQ(c.summary.bad, 0u);
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_EQ(c.samples[0].key, "00000000");
  EXPECT_EQ(c.samples[0].shard, dir.file("good.tar"));
  EXPECT_EQ(c.samples[0].offset, 0u);
  EXPECT_EQ(c.samples[0].members,
            (std::vector<std::pair<std::string, std::uint64_t>>{{"png", png.size()}, {"cls", 2}}));
  EXPECT_EQ(c.samples[0].label, 3);
  EXPECT_TRUE(c.samples[0].bad_reason.empty());
  EXPECT_EQ(c.samples[1].label, 12);
  EXPECT_EQ(c.samples[1].members.size(), 3u);
  EXPECT_GT(c.samples[1].offset, 0u);
}

TEST(Inspect, CountsEachBadSampleWithItsReason) {
  TempDir dir;
  const auto png = small_png(2);
  auto corrupt = small_jpeg();
  corrupt[2] = std::byte{0x00};  // SOI kept, first marker destroyed
  {
    formats::TarWriter tar(dir.file("bad.tar"));
    tar.add("a.png", png);  // no .cls
    tar.add("b.png", png);
    tar.add("b.cls", as_bytes("abc"));
    tar.add("c.jpg", corrupt);
    tar.add("c.cls", as_bytes("1"));
    tar.add("d.cls", as_bytes("2"));  // no image
    tar.add("e.png", png);
    tar.add("e.cls", as_bytes("4"));
    tar.close();
  }
  const std::string shard = dir.file("bad.tar");
  const Collected c = inspect({shard});
  EXPECT_EQ(c.summary.samples, 5u);
  EXPECT_EQ(c.summary.bad, 4u);
  ASSERT_EQ(c.samples.size(), 5u);
  EXPECT_EQ(c.samples[0].bad_reason, shard + ":0:a: missing .cls");
  // b.cls is the 3rd member: headers at 0 (a.png), 512 + padded data (b.png), then b.cls.
  const std::uint64_t png_blocks = (png.size() + 511) / 512;
  const std::uint64_t b_cls = 2 * (512 + png_blocks * 512);
  EXPECT_EQ(c.samples[1].bad_reason, shard + ":" + std::to_string(b_cls) + ":b.cls: non-numeric label 'abc'");
  EXPECT_FALSE(c.samples[1].label.has_value());
  EXPECT_TRUE(c.samples[2].bad_reason.starts_with(shard + ":" + std::to_string(c.samples[2].offset) + ":c.jpg: "))
      << c.samples[2].bad_reason;
  EXPECT_EQ(c.samples[2].label, 1);
  EXPECT_NE(c.samples[3].bad_reason.find(":d: no image member"), std::string::npos) << c.samples[3].bad_reason;
  EXPECT_TRUE(c.samples[4].bad_reason.empty());
}

TEST(Inspect, NonNumericLabelsAreShownEscaped) {
  TempDir dir;
  {
    formats::TarWriter tar(dir.file("x.tar"));
    tar.add("k.png", small_png(3));
    tar.add("k.cls", as_bytes("1.5\x01"));
    tar.add("m.png", small_png(3));
    tar.add("m.cls", as_bytes(""));
    tar.close();
  }
  const Collected c = inspect({dir.file("x.tar")});
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_NE(c.samples[0].bad_reason.find("non-numeric label '1.5\\x01'"), std::string::npos) << c.samples[0].bad_reason;
  EXPECT_NE(c.samples[1].bad_reason.find("non-numeric label ''"), std::string::npos) << c.samples[1].bad_reason;
  EXPECT_EQ(c.summary.bad, 2u);
}

TEST(Inspect, TruncatedTarIsCountedBad) {
  TempDir dir;
  {
    formats::TarWriter tar(dir.file("t.tar"));
    for (int i = 0; i < 4; ++i) {
      tar.add("s" + std::to_string(i) + ".png", small_png(i));
      tar.add("s" + std::to_string(i) + ".cls", as_bytes("0"));
    }
    tar.close();
  }
  auto bytes = test::read_bytes(dir.file("t.tar"));
  bytes.resize(bytes.size() / 2 + 100);  // cut inside a member
  test::write_file(dir.file("t.tar"), bytes);
  const Collected c = inspect({dir.file("t.tar")});
  EXPECT_GE(c.summary.bad, 1u);
  EXPECT_LT(c.summary.samples, 4u);
  bool reported = false;
  for (const auto& s : c.samples) {
    if (!s.bad_reason.empty() && s.bad_reason.starts_with(dir.file("t.tar") + ":")) reported = true;
  }
  EXPECT_TRUE(reported);
}

TEST(Inspect, VisitsShardsInOrderAndThrowsOnAMissingOne) {
  TempDir dir;
  for (const char* name : {"a.tar", "b.tar"}) {
    formats::TarWriter tar(dir.file(name));
    tar.add("k.png", small_png(0));
    tar.add("k.cls", as_bytes("0"));
    tar.close();
  }
  const Collected c = inspect({dir.file("a.tar"), dir.file("b.tar")});
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_EQ(c.samples[0].shard, dir.file("a.tar"));
  EXPECT_EQ(c.samples[1].shard, dir.file("b.tar"));
  EXPECT_THROW(inspect({dir.file("missing.tar")}), Error);
}

}  // namespace
}  // namespace hotpath::data
