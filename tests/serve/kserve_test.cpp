// The KServe v2 codec: JSON and binary-extension requests as tritonclient writes them, responses as it
// reads them, and every malformed request refused with a message naming the field.
#include "hotpath/serve/kserve.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::serve {
namespace {

template <typename T>
std::vector<T> values(const RequestInput& in) {
  std::vector<T> out(in.bytes.size() / sizeof(T));
  std::memcpy(out.data(), in.bytes.data(), out.size() * sizeof(T));
  return out;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The message of the hotpath::Error that parsing `body` throws ("" when it parses).
std::string parse_error(const std::string& body, std::optional<std::size_t> header_length = std::nullopt) {
  try {
    (void)parse_infer_request(body, header_length);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KServeRequest, ParsesJsonTensorsFlatAndNested) {
  const std::string body = R"({"id": "req-7", "inputs": [
      {"name": "input", "shape": [2, 3], "datatype": "FP32", "data": [[1.5, 2, -3], [4, 5, 6.25]]},
      {"name": "ids", "shape": [1, 4], "datatype": "INT64", "data": [101, 7, -1, 9007199254740993]},
      {"name": "flags", "shape": [2], "datatype": "BOOL", "data": [true, false]}],
    "outputs": [{"name": "logits", "parameters": {"binary_data": true}}],
    "parameters": {"binary_data_output": false, "priority": 3}})";
  const InferRequest r = parse_infer_request(body, std::nullopt);
  EXPECT_EQ(r.id, "req-7");
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[0].name, "input");
  EXPECT_EQ(r.inputs[0].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(values<float>(r.inputs[0]), (std::vector<float>{1.5f, 2, -3, 4, 5, 6.25f}));
  EXPECT_EQ(values<std::int64_t>(r.inputs[1]), (std::vector<std::int64_t>{101, 7, -1, 9007199254740993}));
  EXPECT_EQ(values<std::uint8_t>(r.inputs[2]), (std::vector<std::uint8_t>{1, 0}));
  EXPECT_FALSE(r.inputs[0].binary);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].name, "logits");
  EXPECT_EQ(r.outputs[0].binary_data, true);
  EXPECT_FALSE(r.binary_data_output);
}

TEST(KServeRequest, ParsesBinaryTensorsAfterTheJsonHeader) {
  const std::vector<float> image{0.25f, -1.0f, 3.5f, 8.0f};
  const std::vector<std::int32_t> ids{5, 6, 7};
  const std::string header = R"({"inputs": [
      {"name": "image", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
      {"name": "ids", "shape": [1, 3], "datatype": "INT32", "parameters": {"binary_data_size": 12}}],
    "parameters": {"binary_data_output": true}})";
  const std::string body = header + raw(image) + raw(ids);
  const InferRequest r = parse_infer_request(body, header.size());
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_TRUE(r.inputs[0].binary);
  EXPECT_EQ(values<float>(r.inputs[0]), image);
  EXPECT_EQ(values<std::int32_t>(r.inputs[1]), ids);
  EXPECT_TRUE(r.binary_data_output);
  // Binary inputs point into the body: no copy.
  EXPECT_EQ(reinterpret_cast<const char*>(r.inputs[0].bytes.data()), body.data() + header.size());
}

TEST(KServeRequest, MixesJsonAndBinaryInputs) {
  const std::vector<std::int64_t> mask{1, 1, 0};
  const std::string header = R"({"inputs": [
      {"name": "ids", "shape": [1, 3], "datatype": "INT64", "data": [1, 2, 3]},
      {"name": "mask", "shape": [1, 3], "datatype": "INT64", "parameters": {"binary_data_size": 24}}]})";
  const InferRequest r = parse_infer_request(header + raw(mask), header.size());
  EXPECT_EQ(values<std::int64_t>(r.inputs[0]), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(values<std::int64_t>(r.inputs[1]), mask);
}

TEST(KServeRequest, RefusesMalformedRequestsNamingTheField) {
  struct Case {
    std::string body;
    std::string expected;  // a part of the message
  };
  const std::vector<Case> cases = {
      {R"({"inputs": [)", "infer request"},
      {R"([1, 2])", "expected a JSON object"},
      {R"({})", "missing 'inputs'"},
      {R"({"inputs": []})", "non-empty array"},
      {R"({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]})", "inputs[0].name"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FLOAT", "data": [1]}]})", "unknown datatype 'FLOAT'"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["a"]}]})", "BYTES"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]})", "missing 'shape'"},
      {R"({"inputs": [{"name": "x", "shape": [2, -1], "datatype": "FP32", "data": [1]}]})", "shape[1]"},
      {R"({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3]}]})",
       "3 data elements, shape [2, 2] needs 4"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]})", "missing 'data'"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [1.5]}]})", "data[0]: expected an integer"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [3000000000]}]})", "out of range for INT32"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "UINT8", "data": [-1]}]})", "out of range for UINT8"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": ["1"]}]})", "expected a number"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1e300]}]})", "out of range for FP32"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "BOOL", "data": [1]}]})", "true or false"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP16", "data": [1]}]})", "only as binary data"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
                      {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]})", "given twice"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]})",
       "without an Inference-Header-Content-Length"},
      {R"({"id": 5, "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]})", "id: expected a string"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "outputs": {}})", "outputs: expected an array"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
           "outputs": [{"name": "y", "parameters": {"classification": 3}}]})", "classification"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "inputs": []})", "inputs"},
      {R"({"inputs": [{"name": "x", "shape": [4294967296, 1], "datatype": "FP32", "data": []}]})", "shape[0]: 4294967296 exceeds"},
      {R"({"inputs": [{"name": "x", "shape": [65536, 65536], "datatype": "FP32", "data": []}]})",
       "more than 1073741824 elements"},
      // No element, but strides past int64: refused as a 400 before LibTorch sees it (was a 500 with a backtrace).
      {R"({"inputs": [{"name": "x", "shape": [0, 1073741824, 1073741824, 1073741824], "datatype": "FP32", "data": []}]})",
       "inputs[0].shape [0, 1073741824, 1073741824, 1073741824]: its non-zero dims multiply past 1073741824 elements"},
  };
  for (const Case& c : cases) {
    const std::string message = parse_error(c.body);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.body << "\n  gave: '" << message << "'";
  }
}

TEST(KServeRequest, RefusesBadBinarySections) {
  const std::string header = R"({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                              "parameters": {"binary_data_size": 16}}]})";
  const std::string full = header + std::string(16, '\0');
  EXPECT_EQ(parse_error(full, header.size()), "");
  // A truncated tensor: names the input, the offset and what is left.
  const std::string truncated = parse_error(full.substr(0, full.size() - 3), header.size());
  EXPECT_NE(truncated.find("inputs[0] ('x'): binary tensor truncated: 16 bytes expected at body offset " +
                           std::to_string(header.size()) + ", only 13 left"),
            std::string::npos)
      << truncated;
  // A header length past the body.
  EXPECT_NE(parse_error(full, full.size() + 1).find("is past the end of the body"), std::string::npos);
  // Extra bytes after the last tensor.
  EXPECT_NE(parse_error(full + "xy", header.size()).find("2 bytes after the last binary tensor"), std::string::npos);
  // A header length that cuts the JSON.
  EXPECT_NE(parse_error(full, header.size() - 5).find("infer request"), std::string::npos);
  // binary_data_size that does not match the shape.
  const std::string wrong = R"({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                             "parameters": {"binary_data_size": 12}}]})";
  EXPECT_NE(parse_error(wrong + std::string(12, '\0'), wrong.size()).find("binary_data_size 12 != 16 bytes"),
            std::string::npos);
  // Both data and binary_data_size.
  const std::string both = R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1],
                                            "parameters": {"binary_data_size": 4}}]})";
  EXPECT_NE(parse_error(both + std::string(4, '\0'), both.size()).find("both 'data' and"), std::string::npos);
}

TEST(KServeRequest, HeaderLengthIsADecimalCount) {
  EXPECT_EQ(parse_header_length("123"), 123u);
  EXPECT_THROW(parse_header_length(""), Error);
  EXPECT_THROW(parse_header_length("-1"), Error);
  EXPECT_THROW(parse_header_length("12a"), Error);
  EXPECT_THROW(parse_header_length("99999999999999999999"), Error);
}

TEST(KServeResponse, SelectsOutputsInRequestOrder) {
  const std::vector<std::string> available{"logits", "pooled"};
  InferRequest r;
  EXPECT_EQ(select_outputs(r, available), available);
  r.outputs = {{"pooled", std::nullopt}, {"logits", true}};
  EXPECT_EQ(select_outputs(r, available), (std::vector<std::string>{"pooled", "logits"}));
  r.outputs = {{"nope", std::nullopt}};
  EXPECT_THROW(
      {
        try {
          (void)select_outputs(r, available);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("unknown output 'nope' (the model has: logits, pooled)"), std::string::npos);
          throw;
        }
      },
      Error);
  r.outputs = {{"logits", std::nullopt}, {"logits", std::nullopt}};
  EXPECT_THROW((void)select_outputs(r, available), Error);
}

TEST(KServeResponse, EncodesJsonDataExactly) {
  const std::vector<float> logits{0.1f, -2.75f, 3.4028235e38f, 1e-45f};
  InferRequest r;
  r.id = "abc";
  const ResponseOutput out{"logits", "FP32", {2, 2}, {reinterpret_cast<const std::uint8_t*>(logits.data()), 16}};
  const EncodedInferResponse e = encode_infer_response(r, "m", "1", std::span(&out, 1));
  EXPECT_FALSE(e.header_length.has_value());
  const auto j = nlohmann::json::parse(e.body);
  EXPECT_EQ(j["model_name"], "m");
  EXPECT_EQ(j["model_version"], "1");
  EXPECT_EQ(j["id"], "abc");
  EXPECT_EQ(j["outputs"][0]["name"], "logits");
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json({2, 2}));
  ASSERT_EQ(j["outputs"][0]["data"].size(), 4u);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    EXPECT_EQ(static_cast<float>(j["outputs"][0]["data"][i].get<double>()), logits[i]) << i;  // bit-exact round trip
  }
}

TEST(KServeResponse, EncodesBinaryOutputsAfterTheHeader) {
  const std::vector<float> a{1, 2, 3}, b{4, 5};
  const std::vector<ResponseOutput> outs{
      {"a", "FP32", {1, 3}, {reinterpret_cast<const std::uint8_t*>(a.data()), 12}},
      {"b", "FP32", {1, 2}, {reinterpret_cast<const std::uint8_t*>(b.data()), 8}}};
  InferRequest r;
  r.binary_data_output = true;
  r.outputs = {{"a", std::nullopt}, {"b", false}};  // b's own flag wins over binary_data_output
  const EncodedInferResponse e = encode_infer_response(r, "m", "1", outs);
  ASSERT_TRUE(e.header_length.has_value());
  const auto j = nlohmann::json::parse(e.body.substr(0, *e.header_length));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 12);
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  EXPECT_EQ(j["outputs"][1]["data"], nlohmann::json({4.0, 5.0}));
  EXPECT_EQ(e.body.substr(*e.header_length), raw(a));
}

}  // namespace
}  // namespace hotpath::serve
