// Input bounded by construction: files checked before they are opened (core/input_file.h), JSON depth
// (core/json.h), integers parsed strictly and doubles converted with overflow checks (core/bounded.h).
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "support/test_support.h"

namespace hotpath {
namespace {

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(InputFile, RefusesAFifoWithoutBlockingNamingIt) {
  test::TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever opens it: a blocking open would hang this test.
  EXPECT_EQ(error_of([&] { (void)read_file(fifo, read_limit::kConfig, "config"); }),
            fifo + ": is a FIFO (named pipe), not a regular file");
  EXPECT_NE(error_of([&] { MappedFile m(fifo); }).find("is a FIFO"), std::string::npos);
}

TEST(InputFile, RefusesDirectoriesAndDevices) {
  test::TempDir dir;
  EXPECT_NE(error_of([&] { (void)read_file(dir.path().string(), 100, "x"); }).find("is a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)read_file("/dev/zero", 100, "x"); }).find("/dev/zero: is a character device"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_regular_file("/dev/null"); }).find("character device"), std::string::npos);
}

TEST(InputFile, RefusesAFileOverItsKindsLimitBeforeReading) {
  test::TempDir dir;
  const std::string path = dir.file("big.json");
  test::write_file(path, std::string(1000, 'x'));
  EXPECT_EQ(read_file(path, 1000, "config").size(), 1000U);
  EXPECT_EQ(error_of([&] { (void)read_file(path, 999, "config"); }),
            path + ": config of 1000 bytes exceeds the limit of 999 bytes");
}

TEST(InputFile, NamesAMissingFile) {
  EXPECT_NE(error_of([] { (void)read_file("/nonexistent/x.yaml", 10, "recipe"); }).find("/nonexistent/x.yaml: cannot open"),
            std::string::npos);
}

TEST(Json, RefusesNestingDeeperThanTheLimitBeforeParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(error_of([&] { (void)parse_json(deep, "x.json"); }),
            "x.json: JSON nested deeper than 100 levels at byte 100");
  const std::string ok = std::string(100, '[') + std::string(100, ']');
  EXPECT_TRUE(parse_json(ok, "ok.json").is_array());
}

TEST(Json, BracketsInsideStringsDoNotCount) {
  const std::string text = R"({"a": ")" + std::string(500, '[') + R"(\"]"})";
  EXPECT_EQ(parse_json(text, "s.json").at("a").get<std::string>().size(), 502U);
}

TEST(Json, DuplicateKeysLastWinsOrRefusedNamingTheKey) {
  EXPECT_EQ(parse_json(R"({"k": 1, "k": 2})", "d.json").at("k"), 2);
  EXPECT_EQ(error_of([] { (void)parse_json(R"({"k": 1, "k": 2})", "d.json", DuplicateKeys::kReject); }),
            "d.json: duplicate key 'k'");
}

TEST(Json, ManyKeysParse) {
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  EXPECT_EQ(parse_json(text, "wide.json").size(), 200000U);
}

TEST(Json, ParseErrorsNameTheInput) {
  EXPECT_EQ(error_of([] { (void)parse_json("{\"a\":", "t.json"); }).rfind("t.json: invalid JSON: ", 0), 0U);
}

TEST(Bounded, ParseIntIsStrictAndOverflowChecked) {
  EXPECT_EQ(parse_int("42", 0, 100, "f"), 42);
  EXPECT_EQ(parse_int("-7", -10, 0, "f"), -7);
  for (const char* bad : {"", "-", "+1", " 1", "1 ", "0x10", "12abc", "99999999999999999999", "101", "1e3"}) {
    EXPECT_NE(error_of([&] { (void)parse_int(bad, 0, 100, "field"); }).rfind("field: expected an integer in [0, 100]", 0),
              std::string::npos)
        << bad;
  }
}

TEST(Bounded, DoubleToIntRefusesWhatWouldWrap) {
  EXPECT_EQ(double_to_int(2.6, 0, 10, "x"), 3);
  EXPECT_EQ(double_to_int(1e18, 0, std::numeric_limits<std::int64_t>::max(), "x"), 1000000000000000000);
  for (const double bad : {1e19, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_NE(error_of([&] { (void)double_to_int(bad, 0, std::int64_t{1} << 62, "steps"); }).find("steps: expected"),
              std::string::npos)
        << bad;
  }
  // INT64_MAX rounds up to 2^63 as a double: in range, converted without undefined behaviour.
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(double_to_int(static_cast<double>(kMax), 0, kMax, "x"), kMax);
  EXPECT_NE(error_of([] { (void)double_to_int(9.3e18, 0, kMax, "x"); }).find("x: expected"), std::string::npos);
}

TEST(Bounded, ThreadLimitIsAMultipleOfTheCores) {
  EXPECT_GE(max_threads(), 64);
  EXPECT_EQ(error_of([] { check_int_in(100000, 0, max_threads(), "train.threads"); }).rfind("train.threads: ", 0), 0U);
}

}  // namespace
}  // namespace hotpath
