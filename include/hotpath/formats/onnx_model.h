// hotpath/formats/onnx_model.h — write ONNX model files (opset 17, IR version 8) from plain structs,
// checked by ONNX's own checker and shape inference before a byte is written. Torch-free.
//
//   OnnxModel m;  m.inputs = {{"x", OnnxDtype::kFloat, {OnnxDim{"batch"}, OnnxDim{4}}}};
//   m.nodes = {{"Relu", "act", {"x"}, {"y"}}};  m.outputs = {{"y", OnnxDtype::kFloat}};
//   write_onnx(m, "relu.onnx");   // throws hotpath::Error naming the file and the node on a bad model
//
// The protobuf and ONNX headers stay inside onnx_model.cpp (Debian's libonnx 1.12 + libprotobuf 3.21):
// LibTorch's include folder ships its own google/protobuf headers, so no translation unit that sees
// LibTorch may include them. Initializers are raw little-endian bytes; a model whose initializers
// exceed OnnxWriteOptions::external_data_threshold stores them in PATH.data beside it (ONNX external
// data, 4 KiB aligned), since protobuf refuses messages of 2 GiB and more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hotpath::formats {

inline constexpr std::int64_t kOnnxOpset = 17;      // ai.onnx opset the files import (LayerNormalization)
inline constexpr std::int64_t kOnnxIrVersion = 8;   // the IR version of opset 17
inline constexpr const char* kOnnxProducer = "hotpath";

// Values are ONNX's TensorProto.DataType numbers.
enum class OnnxDtype : std::int32_t {
  kFloat = 1,
  kUint8 = 2,
  kInt8 = 3,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kBfloat16 = 16,
};
std::size_t onnx_dtype_size(OnnxDtype dtype);
const char* onnx_dtype_name(OnnxDtype dtype);  // "float", "int64", ...

// One dimension of a graph input/output: a fixed size, or a name for a dynamic axis ("batch").
struct OnnxDim {
  OnnxDim(std::int64_t fixed) : size(fixed) {}  // NOLINT: implicit, {1, 3} reads as a shape
  OnnxDim(std::string symbol) : name(std::move(symbol)) {}  // NOLINT
  OnnxDim(const char* symbol) : name(symbol) {}  // NOLINT
  std::int64_t size = -1;
  std::string name;  // non-empty: a dynamic axis
};

struct OnnxValueInfo {
  std::string name;
  OnnxDtype dtype = OnnxDtype::kFloat;
  // nullopt: shape not declared (shape inference fills in graph outputs' shapes when it can).
  std::optional<std::vector<OnnxDim>> shape;
};

// A constant: dims plus dtype-sized little-endian bytes in C order (size checked when written).
struct OnnxTensor {
  std::string name;
  OnnxDtype dtype = OnnxDtype::kFloat;
  std::vector<std::int64_t> dims;
  std::vector<std::byte> data;
};

struct OnnxAttribute {
  std::string name;
  std::variant<std::int64_t, float, std::string, std::vector<std::int64_t>, std::vector<float>, OnnxTensor> value;
};

struct OnnxNode {
  std::string op_type;
  std::string name;  // unique in the graph; named by every error about the node
  std::vector<std::string> inputs;  // "" = an absent optional input
  std::vector<std::string> outputs;
  std::vector<OnnxAttribute> attributes;
};

struct OnnxModel {
  std::string graph_name = "hotpath";
  std::string producer_version;  // hotpath's version, optional
  std::vector<OnnxValueInfo> inputs;
  std::vector<OnnxValueInfo> outputs;
  std::vector<OnnxNode> nodes;  // in topological order
  std::vector<OnnxTensor> initializers;
};

struct OnnxWriteOptions {
  // Initializer bytes above which all initializers go to PATH.data. Protobuf's limit is 2 GiB for the
  // whole message; 1 GiB leaves room for the graph and for the parser's own limits downstream.
  std::uint64_t external_data_threshold = std::uint64_t{1} << 30;
};

// Builds the ModelProto, runs onnx::checker::check_model and strict shape inference (types checked,
// node-level errors thrown), and writes PATH atomically (core/atomic_file.h). Every error is one line
// "PATH: ..." naming the node (or value) at fault; on error nothing is written.
void write_onnx(const OnnxModel& model, const std::string& path, const OnnxWriteOptions& options = {});

// The same checks without writing; `where` starts the message.
void check_onnx(const OnnxModel& model, const std::string& where);

}  // namespace hotpath::formats
