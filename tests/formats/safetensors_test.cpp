#include "hotpath/formats/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "support/test_support.h"

namespace hotpath::formats {
namespace {

using test::TempDir;
using Json = nlohmann::json;

// An owned tensor for fixtures: deterministic bytes that differ per tensor (`salt`).
struct Owned {
  std::string name;
  Dtype dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;

  [[nodiscard]] TensorToWrite to_write() const { return {name, dtype, shape, bytes}; }
};

Owned make(std::string name, Dtype dtype, std::vector<std::int64_t> shape, unsigned salt) {
  std::uint64_t bits = dtype_bits(dtype);
  for (const auto d : shape) bits *= static_cast<std::uint64_t>(d);
  std::vector<std::byte> bytes(bits / 8);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const unsigned v = (static_cast<unsigned>(i) * 131U + salt * 17U + 7U) & 0xFFU;
    bytes[i] = static_cast<std::byte>(dtype == Dtype::BOOL ? v & 1U : v);
  }
  return {std::move(name), dtype, std::move(shape), std::move(bytes)};
}

std::vector<TensorToWrite> to_write(const std::vector<Owned>& tensors) {
  std::vector<TensorToWrite> out;
  for (const auto& t : tensors) out.push_back(t.to_write());
  return out;
}

// One tensor of every dtype (sub-byte ones with whole-byte shapes), a scalar and empty tensors.
std::vector<Owned> every_dtype() {
  std::vector<Owned> out;
  const std::vector<std::pair<Dtype, std::vector<std::int64_t>>> cases = {
      {Dtype::BOOL, {5}},       {Dtype::F4, {3, 2}},        {Dtype::F6_E2M3, {4}},     {Dtype::F6_E3M2, {2, 4}},
      {Dtype::U8, {3, 2}},      {Dtype::I8, {7}},           {Dtype::F8_E5M2, {3}},     {Dtype::F8_E4M3, {2, 2}},
      {Dtype::F8_E8M0, {4}},    {Dtype::F8_E4M3FNUZ, {5}},  {Dtype::F8_E5M2FNUZ, {1}}, {Dtype::I16, {3}},
      {Dtype::U16, {2, 1}},     {Dtype::F16, {3, 3}},       {Dtype::BF16, {4, 2}},     {Dtype::I32, {2}},
      {Dtype::U32, {1, 1, 3}},  {Dtype::F32, {2, 3}},       {Dtype::C64, {2}},         {Dtype::F64, {3}},
      {Dtype::I64, {2, 2}},     {Dtype::U64, {1}},
  };
  unsigned salt = 0;
  for (const auto& [dtype, shape] : cases) {
    out.push_back(make(std::string("t.") + std::string(dtype_name(dtype)), dtype, shape, salt++));
  }
  out.push_back(make("scalar", Dtype::F32, {}, salt++));
  out.push_back(make("empty", Dtype::F32, {0}, salt++));
  out.push_back(make("empty2d", Dtype::I64, {3, 0}, salt++));
  return out;
}

void expect_matches(const SafetensorsFile& file, const std::vector<Owned>& expected) {
  ASSERT_EQ(file.tensors().size(), expected.size());
  for (const auto& e : expected) {
    SCOPED_TRACE(e.name);
    const TensorView* t = file.find(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->dtype, e.dtype);
    EXPECT_EQ(t->shape, e.shape);
    EXPECT_EQ(std::vector<std::byte>(t->data.begin(), t->data.end()), e.bytes);
  }
}

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const auto b : bytes) {
    out.push_back(kDigits[std::to_integer<unsigned>(b) >> 4]);
    out.push_back(kDigits[std::to_integer<unsigned>(b) & 15]);
  }
  return out;
}

// Writes the spec tests/oracles/safetensors_ref.py's `write` command reads.
std::string write_spec(const TempDir& dir, const std::vector<Owned>& tensors, const Json& metadata,
                       const std::string& name = "spec.json") {
  Json spec{{"tensors", Json::array()}, {"metadata", metadata}};
  for (const auto& t : tensors) {
    spec["tensors"].push_back(
        {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"hex", hex(t.bytes)}});
  }
  const std::string path = dir.file(name);
  test::write_file(path, spec.dump());
  return path;
}

std::string ref_script() { return test::source_path("tests/oracles/safetensors_ref.py"); }

// A raw file: length prefix, `header` verbatim, `data_bytes` zero bytes.
std::vector<std::byte> raw_file(const std::string& header, std::size_t data_bytes) {
  std::vector<std::byte> out;
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out.push_back(static_cast<std::byte>(n & 0xFF));
  for (const char c : header) out.push_back(static_cast<std::byte>(c));
  out.resize(out.size() + data_bytes);
  return out;
}

std::string rejection(std::vector<std::byte> bytes) {
  try {
    (void)SafetensorsFile::from_bytes(std::move(bytes), "bad.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "<accepted>";
}

#define EXPECT_REJECTED(bytes, needle)                                                   \
  do {                                                                                   \
    const std::string message_ = rejection(bytes);                                       \
    EXPECT_NE(message_.find("bad.safetensors: "), std::string::npos) << message_;       \
    EXPECT_NE(message_.find(needle), std::string::npos) << "expected '" << (needle)      \
                                                        << "' in: " << message_;         \
  } while (0)

TEST(Safetensors, DtypeNamesSizesAndBits) {
  EXPECT_EQ(dtype_name(Dtype::F8_E4M3FNUZ), "F8_E4M3FNUZ");
  EXPECT_EQ(parse_dtype("BF16"), Dtype::BF16);
  EXPECT_EQ(parse_dtype("bf16"), std::nullopt);
  EXPECT_EQ(dtype_size(Dtype::C64), 8U);
  EXPECT_EQ(dtype_size(Dtype::BOOL), 1U);
  EXPECT_EQ(dtype_bits(Dtype::F6_E3M2), 6U);
  EXPECT_THROW((void)dtype_size(Dtype::F4), Error);
  for (int i = 0; i <= static_cast<int>(Dtype::U64); ++i) {
    const auto d = static_cast<Dtype>(i);
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
}

TEST(Safetensors, RoundTripsEveryDtypeScalarAndEmptyTensors) {
  const TempDir dir;
  const auto tensors = every_dtype();
  write_safetensors(dir.file("all.safetensors"), to_write(tensors));
  const SafetensorsFile file(dir.file("all.safetensors"));
  expect_matches(file, tensors);
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(file.at("scalar").numel(), 1);
  EXPECT_EQ(file.at("empty2d").numel(), 0);
  // File order is python's: largest dtype first, then by name.
  EXPECT_EQ(file.tensors().front().dtype, Dtype::U64);
  EXPECT_EQ(file.tensors().back().dtype, Dtype::BOOL);
  EXPECT_FALSE(std::filesystem::exists(dir.file("all.safetensors.tmp")));
}

TEST(Safetensors, RoundTripsMetadata) {
  const TempDir dir;
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"quote\"back\\slash", "line\nbreak\ttab\x01"}, {"ünïcode", "日本"}, {"empty", ""}};
  const auto tensors = std::vector<Owned>{make("w", Dtype::F16, {2}, 1)};
  write_safetensors(dir.file("m.safetensors"), to_write(tensors), metadata);
  const SafetensorsFile file(dir.file("m.safetensors"));
  EXPECT_EQ(file.metadata(), metadata);
  expect_matches(file, tensors);
}

TEST(Safetensors, SerializeMatchesWrittenFileAndParsesZeroCopy) {
  const TempDir dir;
  const auto tensors = every_dtype();
  write_safetensors(dir.file("a.safetensors"), to_write(tensors), {{"k", "v"}});
  auto bytes = serialize_safetensors(to_write(tensors), {{"k", "v"}});
  EXPECT_EQ(bytes, test::read_bytes(dir.file("a.safetensors")));
  const std::byte* begin = bytes.data();
  const std::byte* end = begin + bytes.size();
  const auto file = SafetensorsFile::from_bytes(std::move(bytes));
  for (const auto& t : file.tensors()) {
    EXPECT_TRUE(t.data.empty() || (t.data.data() >= begin && t.data.data() + t.data.size() <= end)) << t.name;
  }
  expect_matches(file, tensors);
}

TEST(Safetensors, FindAndAtLookUpByName) {
  const auto file = SafetensorsFile::from_bytes(serialize_safetensors(to_write({make("a", Dtype::U8, {1}, 0)})),
                                                "x.safetensors");
  EXPECT_NE(file.find("a"), nullptr);
  EXPECT_EQ(file.find("b"), nullptr);
  try {
    (void)file.at("fc.weight");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "x.safetensors: no tensor named 'fc.weight' (the file has 1 tensors)");
  }
}

TEST(Safetensors, ReadsWhatPythonWrites) {
  const TempDir dir;
  // numpy dtypes through safetensors.numpy.save_file (with metadata) ...
  std::vector<Owned> numpy_tensors;
  std::vector<Owned> other_tensors;
  for (auto& t : every_dtype()) {
    const bool numpy = t.dtype >= Dtype::I16 ? t.dtype != Dtype::BF16
                                              : (t.dtype == Dtype::BOOL || t.dtype == Dtype::U8 || t.dtype == Dtype::I8);
    if (numpy) numpy_tensors.push_back(std::move(t));
    else if (t.dtype != Dtype::F6_E2M3 && t.dtype != Dtype::F6_E3M2) other_tensors.push_back(std::move(t));
  }
  // ... and bf16/fp8/fp4 through serialize_file (python cannot write F6).
  test::run_python(ref_script(), {"write", write_spec(dir, numpy_tensors, {{"format", "np"}}, "np.json"),
                                  dir.file("np.safetensors"), write_spec(dir, other_tensors, nullptr, "other.json"),
                                  dir.file("other.safetensors")});
  const SafetensorsFile np_file(dir.file("np.safetensors"));
  expect_matches(np_file, numpy_tensors);
  EXPECT_EQ(np_file.metadata(), (std::map<std::string, std::string>{{"format", "np"}}));
  expect_matches(SafetensorsFile(dir.file("other.safetensors")), other_tensors);
}

TEST(Safetensors, PythonReadsWhatWeWrite) {
  const TempDir dir;
  const auto tensors = every_dtype();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünï \"q\""}};
  write_safetensors(dir.file("ours.safetensors"), to_write(tensors), metadata);
  // The expected digests come from python's hashlib over the bytes we meant to write (the spec).
  const Json summary = Json::parse(test::run_python(
      ref_script(), {"summary", dir.file("ours.safetensors"), write_spec(dir, tensors, nullptr)}));
  using Metadata = std::map<std::string, std::string>;
  EXPECT_EQ(summary["metadata"].get<Metadata>(), metadata);
  ASSERT_EQ(summary["tensors"].size(), tensors.size());
  std::map<std::string, Json> by_name;
  for (const auto& t : summary["tensors"]) by_name[t["name"].get<std::string>()] = t;
  const Json& digests = summary["expected"];
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(by_name.contains(t.name));
    const Json& got = by_name[t.name];
    EXPECT_EQ(got["dtype"], dtype_name(t.dtype));
    EXPECT_EQ(got["shape"].get<std::vector<std::int64_t>>(), t.shape);
    EXPECT_EQ(got["sha256"], digests[t.name]);
  }
}

TEST(Safetensors, WritesTheSameBytesAsPython) {
  const TempDir dir;
  // Names that exercise the dtype-then-name order and JSON escaping.
  std::vector<Owned> tensors = {
      make("b", Dtype::F32, {2, 2}, 1),        make("a", Dtype::F32, {3}, 2),
      make("z", Dtype::I64, {1}, 3),           make("Z", Dtype::U8, {5}, 4),
      make("q\"uote\\back", Dtype::F16, {3}, 5), make("ctl\n\t\x01\x7f", Dtype::I8, {1}, 6),
      make("ünï.日本", Dtype::BF16, {2}, 7),    make("e", Dtype::F64, {0}, 8),
      make("s", Dtype::F8_E4M3, {}, 9),
  };
  const std::vector<Json> metadatas = {nullptr, {{"format", "pt"}}};
  std::vector<std::string> args = {"write"};
  for (std::size_t i = 0; i < metadatas.size(); ++i) {
    args.push_back(write_spec(dir, tensors, metadatas[i], "spec" + std::to_string(i) + ".json"));
    args.push_back(dir.file("py" + std::to_string(i) + ".safetensors"));
  }
  test::run_python(ref_script(), args);
  for (std::size_t i = 0; i < metadatas.size(); ++i) {
    SCOPED_TRACE(metadatas[i].dump());
    const auto ours = serialize_safetensors(
        to_write(tensors), metadatas[i].is_null() ? std::map<std::string, std::string>{}
                                                  : metadatas[i].get<std::map<std::string, std::string>>());
    const auto theirs = test::read_bytes(dir.file("py" + std::to_string(i) + ".safetensors"));
    const auto text = [](const std::vector<std::byte>& b) {
      return std::string(reinterpret_cast<const char*>(b.data()), std::min<std::size_t>(b.size(), 400));
    };
    EXPECT_EQ(ours, theirs) << text(ours) << "\nvs\n" << text(theirs);
  }
}

TEST(Safetensors, ReportsShapeAndOffsetMismatchPrecisely) {
  auto bytes = raw_file(R"({"fc.weight":{"dtype":"F32","shape":[10,4],"data_offsets":[0,100]}})", 100);
  try {
    (void)SafetensorsFile::from_bytes(std::move(bytes), "model.safetensors");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "model.safetensors: tensor 'fc.weight': data_offsets [0, 100] hold 100 bytes but shape [10, 4] of "
                 "F32 needs 160");
  }
}

TEST(Safetensors, RejectsTruncatedFiles) {
  const auto good = serialize_safetensors(to_write({make("w", Dtype::F32, {4, 4}, 0)}));
  EXPECT_REJECTED(std::vector<std::byte>(good.begin(), good.end() - 1), "truncated: the tensors need 64 bytes");
  EXPECT_REJECTED(std::vector<std::byte>(good.begin(), good.begin() + 20), "runs past the end of the file");
  EXPECT_REJECTED(std::vector<std::byte>(good.begin(), good.begin() + 5), "too short for the 8-byte header length");
  EXPECT_REJECTED(std::vector<std::byte>{}, "file is 0 bytes");
}

TEST(Safetensors, RejectsBadHeaderLengthAndJson) {
  auto huge = raw_file("{}", 0);
  huge[5] = std::byte{1};  // length 2^40 + 2
  EXPECT_REJECTED(huge, "exceeds the format's limit of 100000000 bytes");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"F32",)", 0), "header: invalid JSON");
  EXPECT_REJECTED(raw_file("", 0), "header: invalid JSON");
  EXPECT_REJECTED(raw_file("{\"\xff\":1}", 0), "header: invalid JSON");  // not UTF-8
  EXPECT_REJECTED(raw_file("[1, 2]", 0), "header is a JSON array, expected an object");
  EXPECT_REJECTED(raw_file(R"({"a":[1]})", 0), "tensor 'a': entry is a JSON array");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{}})", 1),
                  "duplicate key 'a'");
  EXPECT_REJECTED(raw_file(R"({"__metadata__":{"n":1}})", 0), "__metadata__ 'n' is 1, expected a string");
  EXPECT_REJECTED(raw_file(R"({"__metadata__":[]})", 0), "__metadata__ is a JSON array");
}

TEST(Safetensors, RejectsBadTensorEntries) {
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","data_offsets":[0,0]}})", 0), "tensor 'a': missing field 'shape'");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"F33","shape":[],"data_offsets":[0,4]}})", 4),
                  "tensor 'a': unknown dtype 'F33' (known: BOOL, F4,");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":5,"shape":[],"data_offsets":[0,4]}})", 4), "dtype is 5");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[2,-4],"data_offsets":[0,0]}})", 0),
                  "tensor 'a': shape[1] is -4, expected a non-negative integer");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})", 2), "shape[0] is 2.0");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,2]}})", 2),
                  "shape[0] is 1e+20");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[9223372036854775808,0],"data_offsets":[0,0]}})", 0),
                  "larger than the int64 sizes");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
                  "shape [4294967296, 4294967296] of F64 overflows 64 bits");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", 1),
                  "shape [3] of F4 holds 12 bits, not a whole number of bytes");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1),
                  "data_offsets is [0,1,2], expected [begin, end]");
  // Values in messages are cut short.
  std::string long_offsets = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0)";
  for (int i = 0; i < 1000; ++i) long_offsets += ",1";
  const std::string message = rejection(raw_file(long_offsets + "]}}", 1));
  EXPECT_NE(message.find("data_offsets is [0,1,1,"), std::string::npos) << message;
  EXPECT_LT(message.size(), 200U) << message;
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[4,3]}})", 4),
                  "data_offsets [4, 3] end before they begin");
}

TEST(Safetensors, RejectsOverlapsGapsAndUncoveredBytes) {
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                           6),
                  "tensor 'b': data_offsets [2, 6] overlap: it starts at 2 but the previous tensor 'a' ends at 4");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                           10),
                  "tensor 'b': data_offsets [6, 10] leave a gap: it starts at 6 but the previous tensor 'a' ends at 4");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6),
                  "leave a gap: it starts at 2 but the data buffer starts at 0");
  EXPECT_REJECTED(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 7),
                  "the tensors cover 4 bytes of data but the file holds 7 after the header (3 unaccounted");
}

TEST(Safetensors, AcceptsWhatTheReferenceAccepts) {
  // Unpadded header, whitespace around it, null metadata, unknown fields, empty tensors sharing an offset,
  // tensors listed out of offset order.
  const auto file = SafetensorsFile::from_bytes(
      raw_file(" \n{\"__metadata__\":null,\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3],\"x\":{}},"
               "\"e1\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]},"
               "\"e2\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
               "\"a\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[0,1]}}\t ",
               3));
  EXPECT_TRUE(file.metadata().empty());
  std::vector<std::string> order;
  for (const auto& t : file.tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"e1", "e2", "a", "b"}));
  EXPECT_EQ(file.at("b").data.size(), 2U);
}

// Every malformed fixture above that the reference also rejects, checked against python's deserialize;
// the two intentional differences (duplicate keys, dims above INT64_MAX) are listed.
TEST(Safetensors, AgreesWithPythonOnWhatIsMalformed) {
  const TempDir dir;
  const std::vector<std::pair<std::string, std::vector<std::byte>>> cases = {
      {"truncated", raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 15)},
      {"trailing", raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 17)},
      {"size", raw_file(R"({"a":{"dtype":"F32","shape":[10,4],"data_offsets":[0,100]}})", 100)},
      {"dtype", raw_file(R"({"a":{"dtype":"F33","shape":[],"data_offsets":[0,4]}})", 4)},
      {"negative", raw_file(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0)},
      {"overflow", raw_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0)},
      {"overlap", raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                           6)},
      {"gap", raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6)},
      {"subbyte", raw_file(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", 1)},
      {"json", raw_file(R"({"a":)", 0)},
      {"entry", raw_file(R"({"a":[1]})", 0)},
      {"metadata", raw_file(R"({"__metadata__":{"n":1}})", 0)},
      {"ok", raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4)},
  };
  std::vector<std::string> args = {"check"};
  for (const auto& [name, bytes] : cases) {
    test::write_file(dir.file(name), bytes);
    args.push_back(dir.file(name));
  }
  const Json results = Json::parse(test::run_python(ref_script(), args));
  ASSERT_EQ(results.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].first);
    const bool we_accept = rejection(cases[i].second) == "<accepted>";
    EXPECT_EQ(results[i]["ok"].get<bool>(), we_accept) << results[i]["error"];
  }
}

TEST(Safetensors, WriterRejectsInconsistentTensorsAndKeepsTheOldFile) {
  const TempDir dir;
  const std::string path = dir.file("w.safetensors");
  write_safetensors(path, to_write({make("keep", Dtype::U8, {2}, 0)}));
  const auto before = test::read_bytes(path);
  const std::vector<std::byte> six(6);
  const auto expect_write_error = [&](const std::vector<TensorToWrite>& tensors, const std::string& needle) {
    try {
      write_safetensors(path, tensors);
      ADD_FAILURE() << "no throw for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(test::read_bytes(path), before);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  };
  expect_write_error({{"w", Dtype::F32, {2}, six}},
                     path + ": tensor 'w': data holds 6 bytes but shape [2] of F32 needs 8");
  expect_write_error({{"w", Dtype::U8, {6}, six}, {"w", Dtype::U8, {6}, six}}, "tensor 'w': duplicate tensor name");
  expect_write_error({{"__metadata__", Dtype::U8, {6}, six}}, "reserved for the metadata entry");
  expect_write_error({{"w", Dtype::U8, {-6}, six}}, "tensor 'w': shape[0] is -6, expected >= 0");
  expect_write_error({{"w", Dtype::F4, {3}, six}}, "holds 12 bits, not a whole number of bytes");
  expect_write_error({{"bad\xff", Dtype::U8, {6}, six}}, "tensor name 'bad\xff' is not valid UTF-8");
  // A directory in the way of the temp file: the write fails and PATH stays as it was.
  std::filesystem::create_directory(path + ".tmp");
  try {
    write_safetensors(path, {{"w", Dtype::U8, {6}, six}});
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".tmp: cannot create"), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::read_bytes(path), before);
}

}  // namespace
}  // namespace hotpath::formats
