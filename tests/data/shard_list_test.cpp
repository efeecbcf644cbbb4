// Shard lists: braceexpand-compatible expansion and glob resolution with clear errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/data/shard_list.h"
#include "support/test_support.h"

namespace hotpath::data {
namespace {

using Names = std::vector<std::string>;
using test::TempDir;

// The message of the hotpath::Error `fn` throws, or "" if it does not throw.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(ShardList, ZeroPaddedRangesKeepWidth) {
  const Names got = expand_braces("train-{000..010}.tar");
  ASSERT_EQ(got.size(), 11U);
  EXPECT_EQ(got.front(), "train-000.tar");
  EXPECT_EQ(got.back(), "train-010.tar");
  EXPECT_EQ(expand_braces("{8..10}"), (Names{"8", "9", "10"}));
  EXPECT_EQ(expand_braces("{08..10}"), (Names{"08", "09", "10"}));
  EXPECT_EQ(expand_braces("{0..2}"), (Names{"0", "1", "2"}));
}

TEST(ShardList, RangesWithStepsDirectionsAndLetters) {
  EXPECT_EQ(expand_braces("{4..1}"), (Names{"4", "3", "2", "1"}));
  EXPECT_EQ(expand_braces("{1..10..3}"), (Names{"1", "4", "7", "10"}));
  EXPECT_EQ(expand_braces("{2..-1}"), (Names{"2", "1", "0", "-1"}));
  EXPECT_EQ(expand_braces("{-01..1}"), (Names{"-01", "000", "001"}));
  EXPECT_EQ(expand_braces("{a..g..2}"), (Names{"a", "c", "e", "g"}));
  EXPECT_EQ(expand_braces("{c..a}"), (Names{"c", "b", "a"}));
  EXPECT_EQ(expand_braces("{Y..b}"), (Names{"Y", "Z", "a", "b"}));
}

TEST(ShardList, CommaListsAndNesting) {
  EXPECT_EQ(expand_braces("a{b,c}d"), (Names{"abd", "acd"}));
  EXPECT_EQ(expand_braces("python{2.{5..7},3.{2,3}}"),
            (Names{"python2.5", "python2.6", "python2.7", "python3.2", "python3.3"}));
  EXPECT_EQ(expand_braces("{a,b}{1,2}"), (Names{"a1", "a2", "b1", "b2"}));
  EXPECT_EQ(expand_braces("x{,.bak}"), (Names{"x", "x.bak"}));
  EXPECT_EQ(expand_braces("plain.tar"), (Names{"plain.tar"}));
}

TEST(ShardList, NonExpandingBracesAndEscapesStayLiteral) {
  EXPECT_EQ(expand_braces("{a}"), (Names{"{a}"}));
  EXPECT_EQ(expand_braces("{}"), (Names{"{}"}));
  EXPECT_EQ(expand_braces("{1..}"), (Names{"{1..}"}));
  EXPECT_EQ(expand_braces("{1\\{2,3}"), (Names{"1{2", "3"}));
  EXPECT_EQ(expand_braces("{1\\,2,3}"), (Names{"1,2", "3"}));
}

TEST(ShardList, RejectsUnbalancedAndExplosivePatterns) {
  EXPECT_NE(error_of([] { expand_braces("{1{2,3}"); }).find("unbalanced braces"), std::string::npos);
  EXPECT_NE(error_of([] { expand_braces("a}"); }).find("'a}'"), std::string::npos);
  EXPECT_NE(error_of([] { expand_braces("{0..99999999}"); }).find("expands to more than"), std::string::npos);
  EXPECT_NE(error_of([] { expand_braces("{0..99}{0..99}{0..999}"); }).find("expands to more than"),
            std::string::npos);
  EXPECT_NE(error_of([] { expand_braces("{0..99999999999999999999}"); }).find("too large"), std::string::npos);
}

TEST(ShardList, ResolvesExistingFilesInPatternOrder) {
  TempDir dir;
  for (const char* n : {"s-002.tar", "s-000.tar", "s-001.tar"}) test::write_file(dir.file(n), std::string_view("x"));
  const Names got = resolve_shards({dir.file("s-{002,000}.tar"), dir.file("s-001.tar")});
  EXPECT_EQ(got, (Names{dir.file("s-002.tar"), dir.file("s-000.tar"), dir.file("s-001.tar")}));
}

TEST(ShardList, GlobResultsAreSorted) {
  TempDir dir;
  for (const char* n : {"b-10.tar", "b-02.tar", "b-01.tar", "other.txt"}) {
    test::write_file(dir.file(n), std::string_view("x"));
  }
  std::filesystem::create_directory(dir.file("b-dir.tar"));
  EXPECT_EQ(resolve_shards({dir.file("b-*.tar")}),
            (Names{dir.file("b-01.tar"), dir.file("b-02.tar"), dir.file("b-10.tar")}));
  EXPECT_EQ(resolve_shards({dir.file("b-0?.tar")}), (Names{dir.file("b-01.tar"), dir.file("b-02.tar")}));
  EXPECT_EQ(resolve_shards({dir.file("{b-1*,o*}")}), (Names{dir.file("b-10.tar"), dir.file("other.txt")}));
}

TEST(ShardList, MissingFilesNameThePattern) {
  TempDir dir;
  test::write_file(dir.file("m-0.tar"), std::string_view("x"));
  const std::string missing = error_of([&] { resolve_shards({dir.file("m-{0..1}.tar")}); });
  EXPECT_NE(missing.find("shard '" + dir.file("m-1.tar") + "' (from pattern '" + dir.file("m-{0..1}.tar") +
                         "') does not exist"),
            std::string::npos)
      << missing;
  const std::string nomatch = error_of([&] { resolve_shards({dir.file("z-*.tar")}); });
  EXPECT_NE(nomatch.find("shard pattern '" + dir.file("z-*.tar") + "' matches no files"), std::string::npos)
      << nomatch;
  EXPECT_NE(error_of([&] { resolve_shards({dir.path().string()}); }).find("is a directory"), std::string::npos);
  EXPECT_NE(error_of([] { resolve_shards({""}); }).find("empty shard pattern"), std::string::npos);
  EXPECT_TRUE(resolve_shards({}).empty());
}

}  // namespace
}  // namespace hotpath::data
