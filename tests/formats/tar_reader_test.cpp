// ShardReader: tar formats (ustar, GNU, pax), WebDataset grouping and every bad-input case.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
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

// ---- hand-made tar bytes, for what our writer never produces ---------------------------------

void put_octal(std::string& h, std::size_t offset, std::size_t length, std::uint64_t v) {
  for (std::size_t i = length - 1; i-- > 0;) {
    h[offset + i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  h[offset + length - 1] = '\0';
}

// Recomputes the checksum of a 512-byte header (signed = the old Sun/NeXT variant).
void fix_checksum(std::string& h, bool signed_sum = false) {
  std::memset(h.data() + 148, ' ', 8);
  long long sum = 0;
  for (char c : h) sum += signed_sum ? static_cast<signed char>(c) : static_cast<unsigned char>(c);
  put_octal(h, 148, 7, static_cast<std::uint64_t>(sum));
}

struct Header {
  std::string name{};
  std::uint64_t size = 0;
  char type = '0';
  std::string prefix{};
  bool gnu = false;  // GNU magic "ustar  \0" instead of POSIX "ustar\0" "00"
};

std::string header_block(const Header& spec) {
  std::string h(512, '\0');
  std::memcpy(h.data(), spec.name.data(), std::min<std::size_t>(spec.name.size(), 100));
  put_octal(h, 100, 8, 0644);
  put_octal(h, 108, 8, 0);
  put_octal(h, 116, 8, 0);
  put_octal(h, 124, 12, spec.size);
  put_octal(h, 136, 12, 0);
  h[156] = spec.type;
  std::memcpy(h.data() + 257, spec.gnu ? "ustar  \0" : "ustar\0" "00", 8);
  std::memcpy(h.data() + 345, spec.prefix.data(), spec.prefix.size());
  fix_checksum(h);
  return h;
}

std::string padded(std::string_view data) {
  std::string out(data);
  out.resize((data.size() + 511) / 512 * 512, '\0');
  return out;
}

// A regular member: header + data + padding.
std::string entry(std::string_view name, std::string_view data) {
  return header_block({.name = std::string(name), .size = data.size()}) + padded(data);
}

std::string pax_entry(std::string_view records, char type = 'x') {
  return header_block({.name = "././@PaxHeader", .size = records.size(), .type = type}) + padded(records);
}

std::string end_blocks() { return std::string(1024, '\0'); }

ShardIndex index(std::string_view tar) { return ShardReader::index_bytes("mem.tar", as_bytes(tar)); }

std::string bytes_of(std::string_view tar, const SampleMember& m) {
  return std::string(tar.substr(m.data_offset, m.size));
}

std::vector<std::string> keys(const ShardIndex& idx) {
  std::vector<std::string> out;
  for (const auto& s : idx.samples) out.push_back(s.key);
  return out;
}

std::string reasons(const ShardIndex& idx) {
  std::string out;
  for (const auto& b : idx.bad) out += b.to_string() + "\n";
  return out;
}

// ---- SplitKey ------------------------------------------------------------------------------------

TEST(SplitKey, SplitsAtFirstDotOfBasename) {
  const KeyExt ke = split_key("a.b/c.seg.png");
  EXPECT_TRUE(ke.ok);
  EXPECT_EQ(ke.key, "a.b/c");
  EXPECT_EQ(ke.ext, "seg.png");
  EXPECT_EQ(split_key("x.y.z/w.v/0001.jpg").key, "x.y.z/w.v/0001");
}

TEST(SplitKey, LowercasesExtensionOnly) {
  const KeyExt ke = split_key("Dir/IMG_01.Seg.PNG");
  EXPECT_EQ(ke.key, "Dir/IMG_01");
  EXPECT_EQ(ke.ext, "seg.png");
}

TEST(SplitKey, BasenameWithoutDotHasNoSample) {
  EXPECT_FALSE(split_key("README").ok);
  EXPECT_FALSE(split_key("a.b/c").ok);
  EXPECT_FALSE(split_key("").ok);
  EXPECT_FALSE(split_key(".hidden").ok);
  EXPECT_FALSE(split_key("a.b/.c").ok);
}

TEST(SplitKey, FollowsWebdatasetRegexOnOddNames) {
  // base_plus_ext's regex lets "[^.]+" run across a slash: "a/.hidden" -> ("a/", "hidden").
  const KeyExt hidden = split_key("a/.hidden");
  EXPECT_TRUE(hidden.ok);
  EXPECT_EQ(hidden.key, "a/");
  EXPECT_EQ(hidden.ext, "hidden");
  const KeyExt trailing = split_key("a.");
  EXPECT_TRUE(trailing.ok);
  EXPECT_EQ(trailing.ext, "");
}

TEST(SplitKey, MetaMembersAreRecognised) {
  EXPECT_TRUE(is_meta_member("__index__"));
  EXPECT_TRUE(is_meta_member("__meta__/info.json"));
  EXPECT_FALSE(is_meta_member("__meta__.json"));
  EXPECT_FALSE(is_meta_member("dir/__x__"));
  EXPECT_FALSE(is_meta_member("_a_.jpg"));
}

// ---- grouping ------------------------------------------------------------------------------------

TEST(ShardReader, GroupsMembersByKey) {
  const std::string tar = entry("s1.jpg", "J1") + entry("s1.cls", "3") + entry("s2.jpg", "J2") +
                          entry("s2.cls", "4") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(keys(idx), (std::vector<std::string>{"s1", "s2"})) << reasons(idx);
  EXPECT_TRUE(idx.bad.empty());
  ASSERT_EQ(idx.samples[1].members.size(), 2U);
  EXPECT_EQ(bytes_of(tar, *idx.samples[1].find("jpg")), "J2");
  EXPECT_EQ(bytes_of(tar, *idx.samples[1].find("cls")), "4");
  EXPECT_EQ(idx.samples[1].offset, 1024U * 2);
  EXPECT_EQ(idx.samples[0].find("png"), nullptr);
}

TEST(ShardReader, KeyChangeStartsNewSample) {
  const std::string tar = entry("a.jpg", "1") + entry("b.jpg", "2") + entry("a.cls", "3") + end_blocks();
  const ShardIndex idx = index(tar);
  EXPECT_EQ(keys(idx), (std::vector<std::string>{"a", "b", "a"}));
  EXPECT_TRUE(idx.bad.empty());
}

TEST(ShardReader, DotsInDirectoriesAndMultiDotExtensions) {
  const std::string tar = entry("train.v1/c.x/0001.jpg", "J") + entry("train.v1/c.x/0001.seg.png", "S") +
                          entry("train.v1/c.x/0001.JSON", "{}") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(keys(idx), (std::vector<std::string>{"train.v1/c.x/0001"}));
  const TarSample& s = idx.samples[0];
  ASSERT_NE(s.find("seg.png"), nullptr);
  EXPECT_EQ(bytes_of(tar, *s.find("seg.png")), "S");
  ASSERT_NE(s.find("json"), nullptr);  // uppercase extension read lowercased
  EXPECT_EQ(s.find("json")->name, "train.v1/c.x/0001.JSON");
}

TEST(ShardReader, MembersWithoutDotOrMetaDoNotEndSample) {
  const std::string tar = entry("a.jpg", "1") + entry("README", "x") + entry("__meta__/info.json", "{}") +
                          entry("__index__", "i") + entry("a.cls", "2") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(keys(idx), (std::vector<std::string>{"a"}));
  EXPECT_EQ(idx.samples[0].members.size(), 2U);
  EXPECT_TRUE(idx.bad.empty());
}

TEST(ShardReader, DuplicateExtensionIsCountedAndSkipped) {
  const std::string tar = entry("a.jpg", "first") + entry("a.JPG", "second") + entry("a.cls", "1") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(idx.samples.size(), 1U);
  EXPECT_EQ(idx.samples[0].members.size(), 2U);
  EXPECT_EQ(bytes_of(tar, *idx.samples[0].find("jpg")), "first");  // webdataset keeps the first
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_EQ(idx.bad[0].offset, 1024U);
  EXPECT_EQ(idx.bad[0].member, "a.JPG");
  EXPECT_NE(idx.bad[0].reason.find("duplicate extension 'jpg'"), std::string::npos) << idx.bad[0].reason;
}

TEST(ShardReader, ReservedExtensionAndBadMarkerFollowWebdataset) {
  // "k.__key__" would make webdataset raise; a non-empty "__bad__" member drops the sample.
  const std::string tar = entry("k.jpg", "1") + entry("k.__key__", "x") + entry("m.jpg", "2") +
                          entry("m.__bad__", "yes") + entry("n.jpg", "3") + end_blocks();
  const ShardIndex idx = index(tar);
  EXPECT_EQ(keys(idx), (std::vector<std::string>{"k", "n"}));
  ASSERT_EQ(idx.bad.size(), 2U) << reasons(idx);
  EXPECT_NE(idx.bad[0].reason.find("reserves"), std::string::npos);
  EXPECT_NE(idx.bad[1].reason.find("__bad__"), std::string::npos);
}

TEST(ShardReader, SkipsNonRegularEntriesSilently) {
  std::string link = header_block({.name = "a.lnk", .type = '2'});
  std::memcpy(link.data() + 157, "a.jpg", 5);
  fix_checksum(link);
  // tarfile ignores a directory's size field: the next header follows immediately.
  const std::string dir = header_block({.name = "d.x/", .size = 5000, .type = '5'});
  const std::string v7_dir = header_block({.name = "old.dir/", .type = '\0'});
  const std::string fifo = header_block({.name = "a.fifo", .type = '6'});
  const std::string tar = dir + v7_dir + entry("a.jpg", "J") + link + fifo + entry("a.cls", "1") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(keys(idx), (std::vector<std::string>{"a"})) << reasons(idx);
  EXPECT_EQ(idx.samples[0].members.size(), 2U);
  EXPECT_TRUE(idx.bad.empty()) << reasons(idx);
}

TEST(ShardReader, OldStyleRegularTypeAndContiguousType) {
  const std::string a = header_block({.name = "a.jpg", .size = 1, .type = '\0'}) + padded("A");
  const std::string b = header_block({.name = "a.cls", .size = 1, .type = '7'}) + padded("B");
  const ShardIndex idx = index(a + b + end_blocks());
  ASSERT_EQ(idx.samples.size(), 1U);
  EXPECT_EQ(idx.samples[0].members.size(), 2U);
}

// ---- long names ----------------------------------------------------------------------------------

TEST(ShardReader, UstarPrefixJoinsName) {
  const std::string prefix(120, 'p');
  const std::string tar =
      header_block({.name = "k.jpg", .size = 2, .prefix = prefix}) + padded("JJ") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(idx.samples.size(), 1U);
  EXPECT_EQ(idx.samples[0].key, prefix + "/k");
  EXPECT_EQ(idx.samples[0].members[0].name, prefix + "/k.jpg");
}

TEST(ShardReader, LongNamesViaPax) {
  const std::string name = std::string(300, 'n') + ".seg.png";
  const std::string record = std::to_string(6 + name.size() + 4) + " path=" + name + "\n";
  ASSERT_EQ(record.size(), 6 + name.size() + 4);
  const std::string tar = pax_entry(record) + entry("truncated-name", "DATA") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(idx.samples.size(), 1U) << reasons(idx);
  EXPECT_EQ(idx.samples[0].key, std::string(300, 'n'));
  EXPECT_EQ(idx.samples[0].members[0].ext, "seg.png");
  EXPECT_EQ(idx.samples[0].offset, 0U);  // the member starts at its pax header
  EXPECT_EQ(bytes_of(tar, idx.samples[0].members[0]), "DATA");
}

TEST(ShardReader, PaxSizeOverridesHeaderSize) {
  const std::string tar =
      pax_entry("11 size=10\n") + header_block({.name = "k.bin", .size = 0}) + padded("0123456789") +
      entry("k.cls", "1") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(idx.samples.size(), 1U) << reasons(idx);
  EXPECT_EQ(bytes_of(tar, *idx.samples[0].find("bin")), "0123456789");
  EXPECT_NE(idx.samples[0].find("cls"), nullptr);
}

TEST(ShardReader, GlobalPaxHeaderDoesNotRenameMembers) {
  const std::string tar = pax_entry("23 comment=hello there\n", 'g') + pax_entry("16 path=other.x\n", 'g') +
                          entry("a.jpg", "1") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(keys(idx), (std::vector<std::string>{"a"})) << reasons(idx);
  EXPECT_TRUE(idx.bad.empty()) << reasons(idx);
  // A malformed global header is counted but changes nothing else.
  const ShardIndex bad = index(pax_entry("22 comment=hello there\n", 'g') + entry("a.jpg", "1") + end_blocks());
  EXPECT_EQ(keys(bad), (std::vector<std::string>{"a"}));
  ASSERT_EQ(bad.bad.size(), 1U);
  EXPECT_NE(bad.bad[0].reason.find("global pax header: malformed pax record"), std::string::npos);
}

TEST(ShardReader, LongNamesViaGnuLongNameBlocks) {
  // Hand-made GNU 'L' member, as GNU tar and tarfile's GNU_FORMAT write it.
  const std::string name = "gnu.dir/" + std::string(200, 'g') + ".jpg";
  const std::string long_name = name + '\0';
  std::string tar = header_block({.name = "././@LongLink", .size = long_name.size(), .type = 'L', .gnu = true}) +
                    padded(long_name) + header_block({.name = name.substr(0, 100), .size = 3, .gnu = true}) +
                    padded("GNU") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(idx.samples.size(), 1U) << reasons(idx);
  EXPECT_EQ(idx.samples[0].members[0].name, name);
  EXPECT_EQ(bytes_of(tar, idx.samples[0].members[0]), "GNU");
}

TEST(ShardReader, LongNamesFromPythonGnuAndPaxTarfile) {
  TempDir dir;
  const std::string script = dir.file("make.py");
  test::write_file(script, std::string_view(R"PY(
import io, sys, tarfile
out, fmt = sys.argv[1], getattr(tarfile, sys.argv[2])
with tarfile.open(out, "w", format=fmt) as tar:
    for name, data in [("x" * 180 + ".jpg", b"one"), ("x" * 180 + ".cls", b"1"),
                       ("dir.d/" + "y" * 150 + ".seg.png", b"two" * 300)]:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    info = tarfile.TarInfo("some/dir")
    info.type = tarfile.DIRTYPE
    tar.addfile(info)
)PY"));
  for (const char* format : {"GNU_FORMAT", "PAX_FORMAT"}) {
    const std::string path = dir.file(std::string(format) + ".tar");
    test::run_python(script, {path, format});
    const ShardReader shard(path);
    ASSERT_TRUE(shard.bad().empty()) << format << ": " << shard.bad()[0].to_string();
    ASSERT_EQ(shard.samples().size(), 2U) << format;
    EXPECT_EQ(shard.samples()[0].key, std::string(180, 'x'));
    EXPECT_EQ(shard.samples()[0].members.size(), 2U);
    const TarSample& s = shard.samples()[1];
    EXPECT_EQ(s.key, "dir.d/" + std::string(150, 'y'));
    ASSERT_NE(s.find("seg.png"), nullptr);
    const auto b = shard.bytes(*s.find("seg.png"));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), b.size()), [] {
      std::string t;
      for (int i = 0; i < 300; ++i) t += "two";
      return t;
    }());
  }
}

TEST(ShardReader, Base256SizeField) {
  std::string h = header_block({.name = "k.bin"});
  std::memset(h.data() + 124, 0, 12);
  h[124] = static_cast<char>(0x80);
  h[135] = 7;  // big-endian 7
  fix_checksum(h);
  const std::string tar = h + padded("seven!!") + end_blocks();
  const ShardIndex idx = index(tar);
  ASSERT_EQ(idx.samples.size(), 1U) << reasons(idx);
  EXPECT_EQ(bytes_of(tar, idx.samples[0].members[0]), "seven!!");
}

TEST(ShardReader, AcceptsSignedChecksum) {
  std::string h = header_block({.name = "\xe9t\xe9.jpg", .size = 1});
  fix_checksum(h, /*signed_sum=*/true);
  const ShardIndex idx = index(h + padded("x") + end_blocks());
  EXPECT_EQ(idx.samples.size(), 1U) << reasons(idx);
  EXPECT_TRUE(idx.bad.empty());
}

// ---- end of archive -------------------------------------------------------------------------------

TEST(ShardReader, EndOfArchiveVariants) {
  const std::string body = entry("a.jpg", "1") + entry("a.cls", "2");
  for (const std::string& tail : {end_blocks(), std::string(512, '\0'), std::string(), std::string(100, '\0'),
                                  std::string(1024, '\0') + "trailing junk after the end"}) {
    const ShardIndex idx = index(body + tail);
    EXPECT_EQ(idx.samples.size(), 1U);
    EXPECT_TRUE(idx.bad.empty()) << "tail of " << tail.size() << " bytes: " << reasons(idx);
  }
}

// ---- bad input ------------------------------------------------------------------------------------

TEST(ShardReader, BadHeaderChecksumStopsShard) {
  std::string tar = entry("a.jpg", "1") + entry("b.jpg", "2") + entry("c.jpg", "3") + end_blocks();
  tar[1024 + 5] = 'X';  // corrupt the second header's name
  const ShardIndex idx = index(tar);
  EXPECT_EQ(keys(idx), (std::vector<std::string>{"a"}));
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_EQ(idx.bad[0].offset, 1024U);
  EXPECT_NE(idx.bad[0].reason.find("bad header checksum"), std::string::npos) << idx.bad[0].reason;
  EXPECT_EQ(idx.bad[0].to_string().rfind("mem.tar:1024:b.jpgX: bad header checksum", 0), 0U) << idx.bad[0].to_string();
}

TEST(ShardReader, TruncatedMidDataIsCounted) {
  const std::string full = entry("a.jpg", "1") + entry("b.jpg", std::string(2000, 'b')) + end_blocks();
  const ShardIndex idx = index(std::string_view(full).substr(0, 1024 + 512 + 700));
  EXPECT_EQ(keys(idx), (std::vector<std::string>{"a"}));
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_EQ(idx.bad[0].member, "b.jpg");
  EXPECT_NE(idx.bad[0].reason.find("truncated archive: member data needs 2000 bytes"), std::string::npos)
      << idx.bad[0].reason;
}

TEST(ShardReader, TruncatedMidHeaderIsCounted) {
  const std::string full = entry("a.jpg", "1") + entry("b.jpg", "2") + end_blocks();
  const ShardIndex idx = index(std::string_view(full).substr(0, 1024 + 300));
  EXPECT_EQ(keys(idx), (std::vector<std::string>{"a"}));
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_EQ(idx.bad[0].offset, 1024U);
  EXPECT_NE(idx.bad[0].reason.find("truncated archive: a header needs 512 bytes, only 300"), std::string::npos);
}

TEST(ShardReader, TruncatedInsidePaddingKeepsCompleteMember) {
  const std::string full = entry("a.jpg", "complete") + end_blocks();
  const ShardIndex idx = index(std::string_view(full).substr(0, 512 + 20));
  ASSERT_EQ(idx.samples.size(), 1U);
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_NE(idx.bad[0].reason.find("padding"), std::string::npos);
}

TEST(ShardReader, TruncatedAfterExtendedHeaderIsCounted) {
  const ShardIndex idx = index(pax_entry("14 path=a.jpg\n"));
  EXPECT_TRUE(idx.samples.empty());
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_NE(idx.bad[0].reason.find("extended header"), std::string::npos);
}

TEST(ShardReader, GarbagePaxRecordSkipsMember) {
  for (const std::string& records : {std::string("garbage without structure\n"), std::string("99 path=a.jpg\n"),
                                    std::string("13 path=a.jpg\n"), std::string("11 noequal\n"),
                                    std::string("11 size=1x\n")}) {
    const std::string tar = entry("a.jpg", "1") + pax_entry(records) + entry("a.cls", "2") + entry("b.jpg", "3") +
                            end_blocks();
    const ShardIndex idx = index(tar);
    EXPECT_EQ(keys(idx), (std::vector<std::string>{"a", "b"})) << records;
    EXPECT_EQ(idx.samples[0].members.size(), 1U) << records;
    ASSERT_EQ(idx.bad.size(), 1U) << records;
    EXPECT_EQ(idx.bad[0].offset, 1024U);
    EXPECT_EQ(idx.bad[0].member, "a.cls");
    EXPECT_NE(idx.bad[0].reason.find("pax record"), std::string::npos) << idx.bad[0].reason;
  }
}

TEST(ShardReader, NonOctalSizeFieldStopsShard) {
  std::string h = header_block({.name = "b.jpg", .size = 5});
  std::memcpy(h.data() + 124, "0000000x005", 11);
  fix_checksum(h);
  const std::string tar = entry("a.jpg", "1") + h + padded("12345") + end_blocks();
  const ShardIndex idx = index(tar);
  EXPECT_EQ(keys(idx), (std::vector<std::string>{"a"}));
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_EQ(idx.bad[0].member, "b.jpg");
  EXPECT_NE(idx.bad[0].reason.find("size field '0000000x005\\x00' is not an octal number"), std::string::npos)
      << idx.bad[0].reason;
}

TEST(ShardReader, HugeSizeFieldIsTruncationNotAllocation) {
  std::string h = header_block({.name = "a.jpg"});
  std::memset(h.data() + 124, 0xff, 12);
  h[124] = static_cast<char>(0x80);
  fix_checksum(h);  // 2^88 - 1: does not fit 64 bits
  const ShardIndex overflow = index(h + end_blocks());
  EXPECT_TRUE(overflow.samples.empty());
  ASSERT_EQ(overflow.bad.size(), 1U);
  EXPECT_NE(overflow.bad[0].reason.find("overflows 64 bits"), std::string::npos) << overflow.bad[0].reason;
  std::memset(h.data() + 125, 0, 3);  // 2^64 - 1: fits, but not in the file
  fix_checksum(h);
  const ShardIndex idx = index(h + end_blocks());
  EXPECT_TRUE(idx.samples.empty());
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_NE(idx.bad[0].reason.find("truncated"), std::string::npos) << idx.bad[0].reason;
}

TEST(ShardReader, EmptyAndCompressedFilesAreCounted) {
  EXPECT_EQ(index("").bad.size(), 1U);
  std::string gz = "\x1f\x8b\x08";
  gz.resize(2048, 'z');
  const ShardIndex idx = index(gz);
  ASSERT_EQ(idx.bad.size(), 1U);
  EXPECT_NE(idx.bad[0].reason.find("gzip-compressed"), std::string::npos) << idx.bad[0].reason;
  EXPECT_NE(index(std::string(700, 'q')).bad.size(), 0U);
}

TEST(ShardReader, BadRecordFormat) {
  const BadRecord r{"s.tar", 1536, "k.jpg", "bad header checksum"};
  EXPECT_EQ(r.to_string(), "s.tar:1536:k.jpg: bad header checksum");
  const BadRecord odd{"s.tar", 0, "a\nb", "x"};
  EXPECT_EQ(odd.to_string(), "s.tar:0:a\\x0ab: x");
}

// ---- the file-backed reader --------------------------------------------------------------------------

TEST(ShardReader, MapsFileAndReturnsZeroCopySpans) {
  TempDir dir;
  const std::string tar = entry("k.jpg", "payload") + end_blocks();
  test::write_file(dir.file("s.tar"), std::string_view(tar));
  const ShardReader shard(dir.file("s.tar"));
  EXPECT_EQ(shard.path(), dir.file("s.tar"));
  ASSERT_EQ(shard.samples().size(), 1U);
  const auto b = shard.bytes(shard.samples()[0].members[0]);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), b.size()), "payload");
  const auto b2 = shard.bytes(shard.samples()[0].members[0]);
  EXPECT_EQ(b.data(), b2.data());  // a view into the mapping, not a copy
  EXPECT_THROW(ShardReader(dir.file("missing.tar")), Error);
}

}  // namespace
}  // namespace hotpath::formats
