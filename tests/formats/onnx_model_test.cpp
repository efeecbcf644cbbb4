// The ONNX writer (formats/onnx_model.h), torch-free: what it writes parses back into the ModelProto it
// meant (opset, IR version, producer, dynamic axes, raw initializers, inferred output shapes); every bad
// model is refused with one line naming the node or tensor, and nothing is written; large models put
// their initializers in PATH.data.
#include "hotpath/formats/onnx_model.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "support/test_support.h"

namespace hotpath::formats {
namespace {

using test::TempDir;

OnnxTensor float_tensor(std::string name, std::vector<std::int64_t> dims, const std::vector<float>& values) {
  OnnxTensor t{std::move(name), OnnxDtype::kFloat, std::move(dims), {}};
  t.data.resize(values.size() * sizeof(float));
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

std::vector<float> iota(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale;
  return v;
}

// y = relu(x @ w + b), x [batch, 4] → y [batch, 3].
OnnxModel tiny_mlp() {
  OnnxModel m;
  m.producer_version = "0.1.0";
  m.inputs = {{"x", OnnxDtype::kFloat, std::vector<OnnxDim>{"batch", 4}}};
  m.outputs = {{"y", OnnxDtype::kFloat, std::nullopt}};
  m.initializers = {float_tensor("w", {4, 3}, iota(12, 0.1f)), float_tensor("b", {3}, {1.0f, -1.0f, 0.5f})};
  m.nodes = {{"MatMul", "fc.matmul", {"x", "w"}, {"xw"}, {}},
             {"Add", "fc.bias", {"xw", "b"}, {"xwb"}, {}},
             {"Relu", "fc.relu", {"xwb"}, {"y"}, {}}};
  return m;
}

onnx::ModelProto parse(const std::string& path) {
  const std::vector<std::byte> bytes = test::read_bytes(path);
  onnx::ModelProto proto;
  EXPECT_TRUE(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) << path;
  return proto;
}

// The message of the hotpath::Error `write` throws (fails the test when it does not throw).
template <typename F>
std::string error_of(F&& write) {
  try {
    write();
  } catch (const Error& e) {
    std::cout << "error: " << e.what() << '\n';
    return e.what();
  }
  ADD_FAILURE() << "no hotpath::Error thrown";
  return {};
}

TEST(OnnxModel, WritesOpsetIrProducerAndDynamicAxes) {
  TempDir dir;
  const std::string path = dir.file("mlp.onnx");
  write_onnx(tiny_mlp(), path);
  const onnx::ModelProto proto = parse(path);
  EXPECT_EQ(proto.ir_version(), 8);
  EXPECT_EQ(proto.producer_name(), "hotpath");
  EXPECT_EQ(proto.producer_version(), "0.1.0");
  ASSERT_EQ(proto.opset_import_size(), 1);
  EXPECT_EQ(proto.opset_import(0).domain(), "");
  EXPECT_EQ(proto.opset_import(0).version(), 17);
  const onnx::GraphProto& g = proto.graph();
  ASSERT_EQ(g.input_size(), 1);
  const auto& in_shape = g.input(0).type().tensor_type().shape();
  ASSERT_EQ(in_shape.dim_size(), 2);
  EXPECT_EQ(in_shape.dim(0).dim_param(), "batch");
  EXPECT_EQ(in_shape.dim(1).dim_value(), 4);
  // Shape inference filled in the output's shape, the dynamic axis carried through.
  const auto& out_type = g.output(0).type().tensor_type();
  EXPECT_EQ(out_type.elem_type(), onnx::TensorProto::FLOAT);
  ASSERT_EQ(out_type.shape().dim_size(), 2);
  EXPECT_EQ(out_type.shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(out_type.shape().dim(1).dim_value(), 3);
  ASSERT_EQ(g.node_size(), 3);
  EXPECT_EQ(g.node(0).op_type(), "MatMul");
  EXPECT_EQ(g.node(2).name(), "fc.relu");
  ASSERT_EQ(g.initializer_size(), 2);
  const onnx::TensorProto& w = g.initializer(0);
  EXPECT_EQ(w.name(), "w");
  ASSERT_EQ(w.raw_data().size(), 12 * sizeof(float));
  float w5 = 0;
  std::memcpy(&w5, w.raw_data().data() + 5 * sizeof(float), sizeof(float));
  EXPECT_FLOAT_EQ(w5, 0.5f);
  EXPECT_FALSE(std::filesystem::exists(path + ".data"));
}

TEST(OnnxModel, WritesEveryAttributeKind) {
  TempDir dir;
  OnnxModel m;
  m.inputs = {{"x", OnnxDtype::kFloat, std::vector<OnnxDim>{1, 2, 5, 5}}};
  m.outputs = {{"y", OnnxDtype::kFloat, std::nullopt}, {"c", OnnxDtype::kFloat, std::nullopt}};
  m.nodes = {{"MaxPool", "pool", {"x"}, {"y"},
              {{"kernel_shape", std::vector<std::int64_t>{3, 3}}, {"auto_pad", std::string("NOTSET")},
               {"ceil_mode", std::int64_t{0}}}},
             {"Constant", "const", {}, {"c"}, {{"value", float_tensor("v", {2}, {1.5f, 2.5f})}}}};
  write_onnx(m, dir.file("pool.onnx"));
  const onnx::GraphProto g = parse(dir.file("pool.onnx")).graph();
  EXPECT_EQ(g.node(0).attribute(0).type(), onnx::AttributeProto::INTS);
  EXPECT_EQ(g.node(0).attribute(1).s(), "NOTSET");
  EXPECT_EQ(g.node(1).attribute(0).type(), onnx::AttributeProto::TENSOR);
  EXPECT_EQ(g.output(0).type().tensor_type().shape().dim(2).dim_value(), 3);
}

TEST(OnnxModel, CheckerFailureNamesTheNodeInOneLineAndWritesNothing) {
  TempDir dir;
  OnnxModel m = tiny_mlp();
  m.nodes[1].inputs = {"xw"};  // Add with one input
  const std::string path = dir.file("bad.onnx");
  const std::string msg = error_of([&] { write_onnx(m, path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc.bias"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(OnnxModel, ShapeInferenceFailureNamesTheNode) {
  TempDir dir;
  OnnxModel m = tiny_mlp();
  m.initializers[0] = float_tensor("w", {5, 3}, iota(15, 0.1f));  // x [batch, 4] @ [5, 3]
  const std::string msg = error_of([&] { write_onnx(m, dir.file("bad.onnx")); });
  EXPECT_NE(msg.find("shape inference"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc.matmul"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(OnnxModel, UnknownOpNamesOpAndNode) {
  OnnxModel m = tiny_mlp();
  m.nodes[2].op_type = "Frobnicate";
  const std::string msg = error_of([&] { check_onnx(m, "model"); });
  EXPECT_NE(msg.find("Frobnicate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc.relu"), std::string::npos) << msg;
}

TEST(OnnxModel, UndefinedInputNamesTheNode) {
  OnnxModel m = tiny_mlp();
  m.nodes[1].inputs[1] = "no_such_value";
  const std::string msg = error_of([&] { check_onnx(m, "model"); });
  EXPECT_NE(msg.find("no_such_value"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc.bias"), std::string::npos) << msg;
}

TEST(OnnxModel, RefusesInitializerWhoseBytesDoNotMatchItsDims) {
  OnnxModel m = tiny_mlp();
  m.initializers[1].data.pop_back();
  const std::string msg = error_of([&] { check_onnx(m, "model"); });
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("11 bytes"), std::string::npos) << msg;
}

TEST(OnnxModel, RefusesDuplicateNodeNamesAndUnnamedDynamicAxes) {
  OnnxModel m = tiny_mlp();
  m.nodes[1].name = "fc.matmul";
  EXPECT_NE(error_of([&] { check_onnx(m, "model"); }).find("'fc.matmul' is used twice"), std::string::npos);
  m = tiny_mlp();
  m.inputs[0].shape = std::vector<OnnxDim>{-1, 4};
  EXPECT_NE(error_of([&] { check_onnx(m, "model"); }).find("needs a name"), std::string::npos);
}

TEST(OnnxModel, FailedWriteLeavesThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("m.onnx");
  write_onnx(tiny_mlp(), path);
  const std::vector<std::byte> before = test::read_bytes(path);
  OnnxModel bad = tiny_mlp();
  bad.nodes[2].op_type = "Frobnicate";
  EXPECT_THROW(write_onnx(bad, path), Error);
  EXPECT_EQ(test::read_bytes(path), before);
}

TEST(OnnxModel, LargeModelsKeepInitializersInExternalData) {
  TempDir dir;
  const std::string path = dir.file("big.onnx");
  OnnxModel m = tiny_mlp();
  m.initializers[0] = float_tensor("w", {4, 300}, iota(1200, 0.01f));  // 4800 bytes: external
  m.initializers[1] = float_tensor("b", {300}, iota(300, 1.0f));       // 1200 bytes: external
  write_onnx(m, path, {.external_data_threshold = 1000});
  const onnx::GraphProto g = parse(path).graph();
  ASSERT_EQ(g.initializer_size(), 2);
  EXPECT_EQ(g.output(0).type().tensor_type().shape().dim(1).dim_value(), 300);
  const std::vector<std::byte> data = test::read_bytes(path + ".data");
  for (int i = 0; i < 2; ++i) {
    const onnx::TensorProto& t = g.initializer(i);
    SCOPED_TRACE(t.name());
    EXPECT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL);
    EXPECT_TRUE(t.raw_data().empty());
    std::map<std::string, std::string> entries;
    for (const auto& e : t.external_data()) entries[e.key()] = e.value();
    EXPECT_EQ(entries["location"], "big.onnx.data");
    const std::size_t offset = std::stoul(entries["offset"]);
    const std::size_t length = std::stoul(entries["length"]);
    EXPECT_EQ(offset % 4096, 0u);
    ASSERT_LE(offset + length, data.size());
    const std::vector<std::byte>& expected = m.initializers[static_cast<std::size_t>(i)].data;
    ASSERT_EQ(length, expected.size());
    EXPECT_EQ(std::memcmp(data.data() + offset, expected.data(), length), 0);
  }
}

TEST(OnnxModel, SmallTensorsStayInlineInAnExternalModel) {
  TempDir dir;
  const std::string path = dir.file("mixed.onnx");
  OnnxModel m = tiny_mlp();
  m.initializers[0] = float_tensor("w", {4, 300}, iota(1200, 0.01f));
  m.initializers[1] = float_tensor("b", {300}, iota(300, 1.0f));
  m.initializers.push_back(float_tensor("tiny", {1}, {2.0f}));
  m.nodes[2] = {"Mul", "fc.scale", {"xwb", "tiny"}, {"y"}, {}};
  write_onnx(m, path, {.external_data_threshold = 0});
  const onnx::GraphProto g = parse(path).graph();
  EXPECT_EQ(g.initializer(2).data_location(), onnx::TensorProto::DEFAULT);
  EXPECT_EQ(g.initializer(2).raw_data().size(), sizeof(float));
}

TEST(OnnxModel, DtypeSizesAndNames) {
  EXPECT_EQ(onnx_dtype_size(OnnxDtype::kFloat), 4u);
  EXPECT_EQ(onnx_dtype_size(OnnxDtype::kInt64), 8u);
  EXPECT_EQ(onnx_dtype_size(OnnxDtype::kBfloat16), 2u);
  EXPECT_STREQ(onnx_dtype_name(OnnxDtype::kInt8), "int8");
  // The enum is ONNX's own numbering.
  EXPECT_EQ(static_cast<int>(OnnxDtype::kInt64), onnx::TensorProto::INT64);
  EXPECT_EQ(static_cast<int>(OnnxDtype::kBfloat16), onnx::TensorProto::BFLOAT16);
}

}  // namespace
}  // namespace hotpath::formats
