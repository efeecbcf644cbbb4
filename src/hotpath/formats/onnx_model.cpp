// ONNX ModelProto from hotpath's plain structs, through Debian's libonnx (checker, shape inference) and
// libprotobuf. This is the only translation unit that includes their headers; it must never see
// LibTorch's include folder (which ships another copy of google/protobuf).
#include "hotpath/formats/onnx_model.h"

// LibTorch's include folder ships its own google/protobuf: with it on the include path, protobuf's
// headers here could silently come from the wheel instead of Debian's libprotobuf that libonnx links.
#if __has_include(<torch/version.h>) || __has_include(<ATen/ATen.h>)
#error "onnx_model.cpp must be built without LibTorch's include folder (hotpath_onnx links no torch target)"
#endif

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
// onnx/checker.h defines a fail_check macro, which would rewrite core/error.h's detail::fail_check.
#undef fail_check

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <unordered_set>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"

namespace hotpath::formats {
namespace {

// External data offsets are aligned so that runtimes can map the weights in place.
constexpr std::uint64_t kExternalAlignment = 4096;
// Tensors smaller than this always stay inline: shape operands (Reshape's shape, axes) must be readable by
// shape inference, and tiny tensors are not worth a seek.
constexpr std::size_t kExternalMinBytes = 1024;

// One line: the checker and shape inference put "\n\n==> Context: ..." into their messages.
std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const char d = (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
    if (d == ' ' && (out.empty() || out.back() == ' ')) continue;
    out.push_back(d);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Strict shape inference reports every node downstream of a bad one ("Input 0 expected to have type but
// instead is null"): keep the first node's error, which is the cause, and count the others.
std::string first_node_error(const std::string& message) {
  constexpr std::string_view kNode = "(op_type:";
  const std::size_t first = message.find(kNode);
  if (first == std::string::npos) return message;
  std::size_t next = message.find(kNode, first + kNode.size());
  if (next == std::string::npos) return message;
  std::string out = message.substr(first, next - first);
  std::size_t more = 0;
  for (; next != std::string::npos; next = message.find(kNode, next + kNode.size())) ++more;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out + " (and " + std::to_string(more) + " node(s) after it that lost their input types)";
}

bool known_dtype(OnnxDtype dtype) {
  switch (dtype) {
    case OnnxDtype::kFloat:
    case OnnxDtype::kUint8:
    case OnnxDtype::kInt8:
    case OnnxDtype::kInt32:
    case OnnxDtype::kInt64:
    case OnnxDtype::kBool:
    case OnnxDtype::kFloat16:
    case OnnxDtype::kDouble:
    case OnnxDtype::kBfloat16:
      return true;
  }
  return false;
}

std::uint64_t element_count(const OnnxTensor& tensor, const std::string& where) {
  std::uint64_t n = 1;
  for (const std::int64_t d : tensor.dims) {
    HOTPATH_CHECK(d >= 0, where, ": initializer '", tensor.name, "' has a negative dimension ", d);
    HOTPATH_CHECK(d == 0 || n <= std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d), where,
                  ": initializer '", tensor.name, "' has too many elements");
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

void check_tensor_bytes(const OnnxTensor& tensor, const std::string& where) {
  HOTPATH_CHECK(!tensor.name.empty(), where, ": an initializer has no name");
  HOTPATH_CHECK(known_dtype(tensor.dtype), where, ": initializer '", tensor.name, "' has unknown dtype ",
                static_cast<int>(tensor.dtype));
  const std::uint64_t expected = element_count(tensor, where) * onnx_dtype_size(tensor.dtype);
  HOTPATH_CHECK(tensor.data.size() == expected, where, ": initializer '", tensor.name, "' holds ", tensor.data.size(),
                " bytes, its dims and dtype ", onnx_dtype_name(tensor.dtype), " need ", expected);
}

void fill_tensor(const OnnxTensor& tensor, onnx::TensorProto* proto, const std::string& where) {
  check_tensor_bytes(tensor, where);
  proto->set_name(tensor.name);
  proto->set_data_type(static_cast<std::int32_t>(tensor.dtype));
  for (const std::int64_t d : tensor.dims) proto->add_dims(d);
  proto->set_raw_data(reinterpret_cast<const char*>(tensor.data.data()), tensor.data.size());
}

void fill_value_info(const OnnxValueInfo& value, onnx::ValueInfoProto* proto, const std::string& where) {
  HOTPATH_CHECK(!value.name.empty(), where, ": a graph input or output has no name");
  HOTPATH_CHECK(known_dtype(value.dtype), where, ": value '", value.name, "' has unknown dtype ",
                static_cast<int>(value.dtype));
  proto->set_name(value.name);
  onnx::TypeProto_Tensor* type = proto->mutable_type()->mutable_tensor_type();
  type->set_elem_type(static_cast<std::int32_t>(value.dtype));
  if (!value.shape) return;
  onnx::TensorShapeProto* shape = type->mutable_shape();
  for (const OnnxDim& dim : *value.shape) {
    onnx::TensorShapeProto_Dimension* d = shape->add_dim();
    if (!dim.name.empty()) {
      d->set_dim_param(dim.name);
    } else {
      HOTPATH_CHECK(dim.size >= 0, where, ": value '", value.name, "' has a dimension ", dim.size,
                    " (a dynamic axis needs a name)");
      d->set_dim_value(dim.size);
    }
  }
}

void fill_attribute(const OnnxAttribute& attr, onnx::AttributeProto* proto, const std::string& where) {
  proto->set_name(attr.name);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::int64_t>) {
          proto->set_type(onnx::AttributeProto::INT);
          proto->set_i(v);
        } else if constexpr (std::is_same_v<T, float>) {
          proto->set_type(onnx::AttributeProto::FLOAT);
          proto->set_f(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          proto->set_type(onnx::AttributeProto::STRING);
          proto->set_s(v);
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          proto->set_type(onnx::AttributeProto::INTS);
          for (const std::int64_t x : v) proto->add_ints(x);
        } else if constexpr (std::is_same_v<T, std::vector<float>>) {
          proto->set_type(onnx::AttributeProto::FLOATS);
          for (const float x : v) proto->add_floats(x);
        } else {
          static_assert(std::is_same_v<T, OnnxTensor>);
          proto->set_type(onnx::AttributeProto::TENSOR);
          fill_tensor(v, proto->mutable_t(), where);
        }
      },
      attr.value);
}

// How the initializers are stored: inline (raw_data), or the large ones in PATH.data.
struct ExternalPlan {
  std::string location;                 // file name relative to the model's folder; "" = all inline
  std::vector<std::uint64_t> offsets;   // per initializer; kInline for those that stay inline
  static constexpr std::uint64_t kInline = std::numeric_limits<std::uint64_t>::max();
};

enum class LargeTensors { kInline, kExternal, kAsInputs };

// The ModelProto of `model`. kAsInputs declares each external initializer as a graph input of its type
// instead: what the 1.12 checker can validate in memory (it stat()s external locations relative to the
// working directory) while shape inference sees the same types.
onnx::ModelProto build_proto(const OnnxModel& model, const ExternalPlan& plan, LargeTensors large,
                             const std::string& where) {
  onnx::ModelProto proto;
  proto.set_ir_version(kOnnxIrVersion);
  proto.set_producer_name(kOnnxProducer);
  if (!model.producer_version.empty()) proto.set_producer_version(model.producer_version);
  onnx::OperatorSetIdProto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);

  onnx::GraphProto* graph = proto.mutable_graph();
  graph->set_name(model.graph_name);
  for (const OnnxValueInfo& v : model.inputs) fill_value_info(v, graph->add_input(), where);
  for (const OnnxValueInfo& v : model.outputs) fill_value_info(v, graph->add_output(), where);
  for (std::size_t i = 0; i < model.initializers.size(); ++i) {
    const OnnxTensor& t = model.initializers[i];
    const bool external = large != LargeTensors::kInline && plan.offsets[i] != ExternalPlan::kInline;
    if (!external) {
      fill_tensor(t, graph->add_initializer(), where);
      continue;
    }
    check_tensor_bytes(t, where);
    if (large == LargeTensors::kAsInputs) {
      std::vector<OnnxDim> dims(t.dims.begin(), t.dims.end());
      fill_value_info({t.name, t.dtype, std::move(dims)}, graph->add_input(), where);
      continue;
    }
    onnx::TensorProto* p = graph->add_initializer();
    p->set_name(t.name);
    p->set_data_type(static_cast<std::int32_t>(t.dtype));
    for (const std::int64_t d : t.dims) p->add_dims(d);
    p->set_data_location(onnx::TensorProto::EXTERNAL);
    const std::pair<const char*, std::string> entries[] = {
        {"location", plan.location},
        {"offset", std::to_string(plan.offsets[i])},
        {"length", std::to_string(t.data.size())},
    };
    for (const auto& [key, value] : entries) {
      onnx::StringStringEntryProto* e = p->add_external_data();
      e->set_key(key);
      e->set_value(value);
    }
  }
  for (const OnnxNode& n : model.nodes) {
    HOTPATH_CHECK(!n.op_type.empty(), where, ": node '", n.name, "' has no op_type");
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type(n.op_type);
    node->set_name(n.name);
    for (const std::string& in : n.inputs) node->add_input(in);
    for (const std::string& out : n.outputs) node->add_output(out);
    for (const OnnxAttribute& a : n.attributes) fill_attribute(a, node->add_attribute(), where + ": node '" + n.name + "'");
  }
  return proto;
}

// Checks our own invariants the 1.12 checker lets through (unique node names, so that each message
// names one node), then strict shape inference, which fills in the graph outputs' shapes (the 1.12 checker
// requires them), then the checker.
void check_and_infer(onnx::ModelProto& proto, const OnnxModel& model, const std::string& where) {
  std::unordered_set<std::string> names;
  for (const OnnxNode& n : model.nodes) {
    HOTPATH_CHECK(!n.name.empty(), where, ": a ", n.op_type, " node has no name");
    HOTPATH_CHECK(names.insert(n.name).second, where, ": node name '", n.name, "' is used twice");
  }
  try {
    const onnx::ShapeInferenceOptions options(/*check_type=*/true, /*strict_mode=*/1, /*data_prop=*/false);
    onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception& e) {
    HOTPATH_CHECK(false, where, ": ONNX shape inference: ", first_node_error(one_line(e.what())));
  }
  // Inference skips nodes it cannot handle (an unknown op, a missing input), so an output may stay
  // shapeless; the checker, which names such nodes, would stop at the missing shape first. So it sees a
  // placeholder, and a shapeless output is reported only when the checker found nothing else.
  std::string shapeless;
  for (onnx::ValueInfoProto& out : *proto.mutable_graph()->mutable_output()) {
    onnx::TypeProto_Tensor* type = out.mutable_type()->mutable_tensor_type();
    if (type->has_shape() || !shapeless.empty()) continue;
    shapeless = out.name();
    type->mutable_shape();
  }
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception& e) {
    HOTPATH_CHECK(false, where, ": ONNX checker: ", one_line(e.what()));
  }
  HOTPATH_CHECK(shapeless.empty(), where, ": graph output '", shapeless,
                "': shape inference found no shape for it (declare one)");
}

std::uint64_t initializer_bytes(const OnnxModel& model) {
  std::uint64_t total = 0;
  for (const OnnxTensor& t : model.initializers) total += t.data.size();
  return total;
}

ExternalPlan plan_external(const OnnxModel& model, const std::string& path, const OnnxWriteOptions& options) {
  ExternalPlan plan;
  plan.offsets.assign(model.initializers.size(), ExternalPlan::kInline);
  if (initializer_bytes(model) <= options.external_data_threshold) return plan;
  plan.location = std::filesystem::path(path).filename().string() + ".data";
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < model.initializers.size(); ++i) {
    const std::size_t n = model.initializers[i].data.size();
    if (n < kExternalMinBytes) continue;
    offset = (offset + kExternalAlignment - 1) / kExternalAlignment * kExternalAlignment;
    plan.offsets[i] = offset;
    offset += n;
  }
  return plan;
}

}  // namespace

std::size_t onnx_dtype_size(OnnxDtype dtype) {
  switch (dtype) {
    case OnnxDtype::kUint8:
    case OnnxDtype::kInt8:
    case OnnxDtype::kBool:
      return 1;
    case OnnxDtype::kFloat16:
    case OnnxDtype::kBfloat16:
      return 2;
    case OnnxDtype::kFloat:
    case OnnxDtype::kInt32:
      return 4;
    case OnnxDtype::kInt64:
    case OnnxDtype::kDouble:
      return 8;
  }
  HOTPATH_CHECK(false, "unknown ONNX dtype ", static_cast<int>(dtype));
  return 0;
}

const char* onnx_dtype_name(OnnxDtype dtype) {
  switch (dtype) {
    case OnnxDtype::kFloat: return "float";
    case OnnxDtype::kUint8: return "uint8";
    case OnnxDtype::kInt8: return "int8";
    case OnnxDtype::kInt32: return "int32";
    case OnnxDtype::kInt64: return "int64";
    case OnnxDtype::kBool: return "bool";
    case OnnxDtype::kFloat16: return "float16";
    case OnnxDtype::kDouble: return "double";
    case OnnxDtype::kBfloat16: return "bfloat16";
  }
  return "unknown";
}

void check_onnx(const OnnxModel& model, const std::string& where) {
  onnx::ModelProto proto = build_proto(model, ExternalPlan{}, LargeTensors::kInline, where);
  check_and_infer(proto, model, where);
}

void write_onnx(const OnnxModel& model, const std::string& path, const OnnxWriteOptions& options) {
  const ExternalPlan plan = plan_external(model, path, options);
  if (plan.location.empty()) {
    onnx::ModelProto proto = build_proto(model, plan, LargeTensors::kInline, path);
    check_and_infer(proto, model, path);
    HOTPATH_CHECK(proto.ByteSizeLong() < static_cast<std::size_t>(INT_MAX), path, ": the model is ",
                  proto.ByteSizeLong(), " bytes, over protobuf's 2 GiB limit: lower external_data_threshold");
    std::string bytes;
    HOTPATH_CHECK(proto.SerializeToString(&bytes), path, ": protobuf could not serialize the model");
    write_file_atomic(path, bytes);
    return;
  }

  // Large model: check a twin whose big initializers are graph inputs, then write PATH.data and PATH.
  onnx::ModelProto checked = build_proto(model, plan, LargeTensors::kAsInputs, path);
  check_and_infer(checked, model, path);
  onnx::ModelProto proto = build_proto(model, plan, LargeTensors::kExternal, path);
  // Shapes that inference found for the outputs and intermediate values.
  proto.mutable_graph()->mutable_output()->CopyFrom(checked.graph().output());
  proto.mutable_graph()->mutable_value_info()->CopyFrom(checked.graph().value_info());
  std::string bytes;
  HOTPATH_CHECK(proto.SerializeToString(&bytes), path, ": protobuf could not serialize the model");

  static const std::byte kZeros[kExternalAlignment] = {};
  std::vector<std::span<const std::byte>> chunks;
  std::uint64_t written = 0;
  for (std::size_t i = 0; i < model.initializers.size(); ++i) {
    if (plan.offsets[i] == ExternalPlan::kInline) continue;
    chunks.emplace_back(kZeros, plan.offsets[i] - written);
    chunks.emplace_back(model.initializers[i].data.data(), model.initializers[i].data.size());
    written = plan.offsets[i] + model.initializers[i].data.size();
  }
  const std::string data_path = (std::filesystem::path(path).parent_path() / plan.location).string();
  write_file_atomic(data_path, chunks);
  write_file_atomic(path, bytes);
}

}  // namespace hotpath::formats
