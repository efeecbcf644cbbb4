// KServe v2 infer request/response codec (torch-free; fuzzed by fuzz/fuzz_kserve_request.cpp).
#include "hotpath/serve/kserve.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "hotpath/core/error.h"
#include "hotpath/core/json.h"

namespace hotpath::serve {
namespace {

static_assert(std::endian::native == std::endian::little, "the binary tensor extension is little-endian");

using Json = nlohmann::json;

std::string type_name(const Json& j) { return j.type_name(); }

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Flattens nested arrays into `out` (depth is bounded by parse_json).
void flatten(const Json& data, std::vector<const Json*>& out, std::size_t max_elements, const std::string& where) {
  if (!data.is_array()) {
    out.push_back(&data);
    return;
  }
  for (const Json& v : data) {
    flatten(v, out, max_elements, where);
    HOTPATH_CHECK(out.size() <= max_elements, where, ".data: more than ", max_elements, " elements");
  }
}

template <typename T>
void append(std::vector<std::uint8_t>& bytes, T value) {
  const auto at = bytes.size();
  bytes.resize(at + sizeof(T));
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

template <typename T>
void append_integer(std::vector<std::uint8_t>& bytes, const Json& v, const std::string& where, std::size_t index,
                    std::string_view datatype) {
  HOTPATH_CHECK(v.is_number_integer(), where, ".data[", index, "]: expected an integer for ", datatype, ", got ",
                v.is_number() ? "a fractional number" : type_name(v));
  bool in_range = false;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    in_range = u <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  } else {
    const auto s = v.get<std::int64_t>();
    if constexpr (std::is_signed_v<T>) {
      in_range = s >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                 s <= static_cast<std::int64_t>(std::numeric_limits<T>::max());
    } else {
      in_range = s >= 0 && static_cast<std::uint64_t>(s) <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    }
  }
  HOTPATH_CHECK(in_range, where, ".data[", index, "]: ", v.dump(), " is out of range for ", datatype);
  append<T>(bytes, v.is_number_unsigned() ? static_cast<T>(v.get<std::uint64_t>()) : static_cast<T>(v.get<std::int64_t>()));
}

template <typename T>
void append_float(std::vector<std::uint8_t>& bytes, const Json& v, const std::string& where, std::size_t index,
                  std::string_view datatype) {
  HOTPATH_CHECK(v.is_number(), where, ".data[", index, "]: expected a number for ", datatype, ", got ", type_name(v));
  const double d = v.get<double>();
  if constexpr (std::is_same_v<T, float>) {
    HOTPATH_CHECK(!std::isfinite(d) || std::fabs(d) <= std::numeric_limits<float>::max(), where, ".data[", index,
                  "]: ", v.dump(), " is out of range for FP32");
  }
  append<T>(bytes, static_cast<T>(d));
}

// JSON `data` (already flattened) as little-endian bytes of `datatype`.
std::vector<std::uint8_t> encode_json_data(const std::vector<const Json*>& values, std::string_view datatype,
                                           const std::string& where) {
  std::vector<std::uint8_t> bytes;
  bytes.reserve(values.size() * kserve_element_size(datatype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const Json& v = *values[i];
    if (datatype == "BOOL") {
      HOTPATH_CHECK(v.is_boolean(), where, ".data[", i, "]: expected true or false for BOOL, got ", type_name(v));
      append<std::uint8_t>(bytes, v.get<bool>() ? 1 : 0);
    } else if (datatype == "UINT8") {
      append_integer<std::uint8_t>(bytes, v, where, i, datatype);
    } else if (datatype == "UINT16") {
      append_integer<std::uint16_t>(bytes, v, where, i, datatype);
    } else if (datatype == "UINT32") {
      append_integer<std::uint32_t>(bytes, v, where, i, datatype);
    } else if (datatype == "UINT64") {
      append_integer<std::uint64_t>(bytes, v, where, i, datatype);
    } else if (datatype == "INT8") {
      append_integer<std::int8_t>(bytes, v, where, i, datatype);
    } else if (datatype == "INT16") {
      append_integer<std::int16_t>(bytes, v, where, i, datatype);
    } else if (datatype == "INT32") {
      append_integer<std::int32_t>(bytes, v, where, i, datatype);
    } else if (datatype == "INT64") {
      append_integer<std::int64_t>(bytes, v, where, i, datatype);
    } else if (datatype == "FP32") {
      append_float<float>(bytes, v, where, i, datatype);
    } else if (datatype == "FP64") {
      append_float<double>(bytes, v, where, i, datatype);
    } else {  // FP16 / BF16: as Triton, binary only
      HOTPATH_CHECK(false, where, ": datatype ", datatype, " is accepted only as binary data (binary_data_size)");
    }
  }
  return bytes;
}

const Json* member(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// `field` is "inputs[i].shape", `who` names the input (" (input 'x')"). The product of the non-zero dims is
// bounded too: [0, 2^30, 2^30, 2^30] holds no element, yet its strides overflow int64 (LibTorch refuses it deep in
// at::empty with a backtrace), so a zero dim does not excuse the others.
std::vector<std::int64_t> parse_shape(const Json& j, const std::string& field, const std::string& who,
                                      const InferLimits& limits, std::int64_t& elements) {
  HOTPATH_CHECK(j.is_array(), field, ": expected an array of non-negative integers, got ", type_name(j), who);
  HOTPATH_CHECK(j.size() <= limits.max_rank, field, ": rank ", j.size(), " exceeds ", limits.max_rank, who);
  std::vector<std::int64_t> shape;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const Json& d = j[i];
    HOTPATH_CHECK(d.is_number_integer() && (d.is_number_unsigned() || d.get<std::int64_t>() >= 0), field, "[", i,
                  "]: expected a non-negative integer, got ", d.dump(), who);
    HOTPATH_CHECK(!d.is_number_unsigned() || d.get<std::uint64_t>() <= static_cast<std::uint64_t>(limits.max_elements),
                  field, "[", i, "]: ", d.dump(), " exceeds ", limits.max_elements, who);
    const std::int64_t dim = d.get<std::int64_t>();
    HOTPATH_CHECK(dim <= limits.max_elements, field, "[", i, "]: ", dim, " exceeds ", limits.max_elements, who);
    shape.push_back(dim);
  }
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  std::int64_t nonzero_product = 1;  // each factor <= max_elements, checked before multiplying: no overflow
  for (const std::int64_t dim : shape) {
    if (dim == 0) continue;
    HOTPATH_CHECK(nonzero_product <= limits.max_elements / dim, field, " ", shape_text(shape),
                  empty ? ": its non-zero dims multiply past " : ": more than ", limits.max_elements, " elements", who);
    nonzero_product *= dim;
  }
  elements = empty ? 0 : nonzero_product;
  return shape;
}

}  // namespace

std::size_t kserve_element_size(std::string_view t) {
  if (t == "BOOL" || t == "UINT8" || t == "INT8") return 1;
  if (t == "UINT16" || t == "INT16" || t == "FP16" || t == "BF16") return 2;
  if (t == "UINT32" || t == "INT32" || t == "FP32") return 4;
  if (t == "UINT64" || t == "INT64" || t == "FP64") return 8;
  return 0;
}

std::size_t parse_header_length(std::string_view value) {
  HOTPATH_CHECK(!value.empty() && value.size() <= 18 && value.find_first_not_of("0123456789") == std::string_view::npos,
                "Inference-Header-Content-Length: expected a decimal byte count, got '", printable(value), "'");
  std::size_t n = 0;
  for (const char c : value) n = n * 10 + static_cast<std::size_t>(c - '0');
  return n;
}

InferRequest parse_infer_request(std::string_view body, std::optional<std::size_t> header_length,
                                 const InferLimits& limits) {
  if (header_length) {
    HOTPATH_CHECK(*header_length <= body.size(), "Inference-Header-Content-Length ", *header_length,
                  " is past the end of the body (", body.size(), " bytes)");
  }
  const std::string_view json_text = header_length ? body.substr(0, *header_length) : body;
  const Json j = parse_json(json_text, "infer request", DuplicateKeys::kReject);
  HOTPATH_CHECK(j.is_object(), "infer request: expected a JSON object, got ", type_name(j));

  InferRequest request;
  if (const Json* id = member(j, "id")) {
    HOTPATH_CHECK(id->is_string(), "infer request: id: expected a string, got ", type_name(*id));
    request.id = id->get<std::string>();
  }
  if (const Json* params = member(j, "parameters")) {
    HOTPATH_CHECK(params->is_object(), "infer request: parameters: expected an object, got ", type_name(*params));
    if (const Json* b = member(*params, "binary_data_output")) {
      HOTPATH_CHECK(b->is_boolean(), "infer request: parameters.binary_data_output: expected true or false, got ",
                    b->dump());
      request.binary_data_output = b->get<bool>();
    }
  }

  const Json* inputs = member(j, "inputs");
  HOTPATH_CHECK(inputs != nullptr, "infer request: missing 'inputs'");
  HOTPATH_CHECK(inputs->is_array() && !inputs->empty(), "infer request: inputs: expected a non-empty array, got ",
                inputs->is_array() ? "an empty array" : type_name(*inputs));
  HOTPATH_CHECK(inputs->size() <= limits.max_inputs, "infer request: ", inputs->size(), " inputs, at most ",
                limits.max_inputs);

  std::size_t binary_offset = header_length.value_or(body.size());
  for (std::size_t i = 0; i < inputs->size(); ++i) {
    const Json& in = (*inputs)[i];
    std::string where = "inputs[" + std::to_string(i) + "]";
    HOTPATH_CHECK(in.is_object(), where, ": expected an object, got ", type_name(in));
    const Json* name = member(in, "name");
    HOTPATH_CHECK(name && name->is_string(), where, ".name: expected a string");
    RequestInput r;
    r.name = name->get<std::string>();
    where += " ('" + printable(r.name, 64) + "')";
    for (const auto& other : request.inputs) HOTPATH_CHECK(other.name != r.name, where, ": input given twice");
    const Json* datatype = member(in, "datatype");
    HOTPATH_CHECK(datatype && datatype->is_string(), where, ".datatype: expected a string");
    r.datatype = datatype->get<std::string>();
    HOTPATH_CHECK(r.datatype != "BYTES", where, ".datatype: BYTES tensors are not supported (text goes to "
                  "POST /v1/models/NAME/classify or /embed)");
    const std::size_t element_size = kserve_element_size(r.datatype);
    HOTPATH_CHECK(element_size > 0, where, ".datatype: unknown datatype '", printable(r.datatype, 32),
                  "' (expected BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32 or FP64)");
    const Json* shape = member(in, "shape");
    HOTPATH_CHECK(shape != nullptr, where, ": missing 'shape'");
    std::int64_t elements = 0;
    r.shape = parse_shape(*shape, "inputs[" + std::to_string(i) + "].shape", " (input '" + printable(r.name, 64) + "')",
                          limits, elements);

    std::optional<std::size_t> binary_size;
    if (const Json* params = member(in, "parameters")) {
      HOTPATH_CHECK(params->is_object(), where, ".parameters: expected an object");
      if (const Json* size = member(*params, "binary_data_size")) {
        HOTPATH_CHECK(size->is_number_unsigned() || (size->is_number_integer() && size->get<std::int64_t>() >= 0),
                      where, ".parameters.binary_data_size: expected a non-negative integer, got ", size->dump());
        binary_size = size->get<std::uint64_t>();
      }
    }
    const Json* data = member(in, "data");
    const std::size_t expected_bytes = static_cast<std::size_t>(elements) * element_size;
    if (binary_size) {
      HOTPATH_CHECK(data == nullptr, where, ": has both 'data' and parameters.binary_data_size");
      HOTPATH_CHECK(header_length.has_value(), where, ": parameters.binary_data_size without an "
                    "Inference-Header-Content-Length header");
      HOTPATH_CHECK(*binary_size == expected_bytes, where, ": binary_data_size ", *binary_size, " != ", expected_bytes,
                    " bytes (", r.datatype, " shape ", shape_text(r.shape), ")");
      const std::size_t left = body.size() - binary_offset;
      HOTPATH_CHECK(*binary_size <= left, where, ": binary tensor truncated: ", *binary_size, " bytes expected at body offset ",
                    binary_offset, ", only ", left, " left");
      r.bytes = {reinterpret_cast<const std::uint8_t*>(body.data()) + binary_offset, *binary_size};
      r.binary = true;
      binary_offset += *binary_size;
    } else {
      HOTPATH_CHECK(data != nullptr, where, ": missing 'data' (or parameters.binary_data_size)");
      std::vector<const Json*> values;
      flatten(*data, values, static_cast<std::size_t>(limits.max_elements), where);
      HOTPATH_CHECK(static_cast<std::int64_t>(values.size()) == elements, where, ": ", values.size(),
                    " data elements, shape ", shape_text(r.shape), " needs ", elements);
      r.owned = encode_json_data(values, r.datatype, where);
      r.bytes = r.owned;
    }
    request.inputs.push_back(std::move(r));
  }
  if (header_length) {
    HOTPATH_CHECK(binary_offset == body.size(), "infer request: ", body.size() - binary_offset,
                  " bytes after the last binary tensor (Inference-Header-Content-Length ", *header_length,
                  ", body ", body.size(), " bytes)");
  }
  // The owned vectors moved with their RequestInput; re-point the spans at them.
  for (RequestInput& r : request.inputs) {
    if (!r.binary) r.bytes = r.owned;
  }

  if (const Json* outputs = member(j, "outputs")) {
    HOTPATH_CHECK(outputs->is_array(), "infer request: outputs: expected an array, got ", type_name(*outputs));
    HOTPATH_CHECK(outputs->size() <= limits.max_inputs, "infer request: ", outputs->size(), " outputs, at most ",
                  limits.max_inputs);
    for (std::size_t i = 0; i < outputs->size(); ++i) {
      const Json& out = (*outputs)[i];
      const std::string where = "outputs[" + std::to_string(i) + "]";
      HOTPATH_CHECK(out.is_object(), where, ": expected an object, got ", type_name(out));
      const Json* name = member(out, "name");
      HOTPATH_CHECK(name && name->is_string(), where, ".name: expected a string");
      RequestedOutput o;
      o.name = name->get<std::string>();
      if (const Json* params = member(out, "parameters")) {
        HOTPATH_CHECK(params->is_object(), where, ".parameters: expected an object");
        if (const Json* b = member(*params, "binary_data")) {
          HOTPATH_CHECK(b->is_boolean(), where, ".parameters.binary_data: expected true or false, got ", b->dump());
          o.binary_data = b->get<bool>();
        }
        HOTPATH_CHECK(member(*params, "classification") == nullptr, where,
                      ".parameters.classification: not supported (POST /v1/models/NAME/classify gives top-k labels)");
      }
      request.outputs.push_back(std::move(o));
    }
  }
  return request;
}

std::vector<std::string> select_outputs(const InferRequest& request, std::span<const std::string> available) {
  if (request.outputs.empty()) return {available.begin(), available.end()};
  std::vector<std::string> selected;
  for (const RequestedOutput& o : request.outputs) {
    bool known = false;
    for (const std::string& a : available) known = known || a == o.name;
    std::string names;
    for (const std::string& a : available) names += (names.empty() ? "" : ", ") + a;
    HOTPATH_CHECK(known, "outputs: unknown output '", printable(o.name, 64), "' (the model has: ", names, ")");
    for (const std::string& s : selected) HOTPATH_CHECK(s != o.name, "outputs: '", printable(o.name, 64), "' asked twice");
    selected.push_back(o.name);
  }
  return selected;
}

namespace {

template <typename T>
Json json_values(std::span<const std::uint8_t> bytes) {
  Json data = Json::array();
  const std::size_t n = bytes.size() / sizeof(T);
  data.get_ref<Json::array_t&>().reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      data.push_back(static_cast<double>(v));
    } else {
      data.push_back(v);
    }
  }
  return data;
}

Json json_data(const ResponseOutput& out) {
  const std::string_view t = out.datatype;
  if (t == "FP32") return json_values<float>(out.bytes);
  if (t == "FP64") return json_values<double>(out.bytes);
  if (t == "INT64") return json_values<std::int64_t>(out.bytes);
  if (t == "INT32") return json_values<std::int32_t>(out.bytes);
  if (t == "UINT8") return json_values<std::uint8_t>(out.bytes);
  if (t == "BOOL") {
    Json data = Json::array();
    for (const std::uint8_t b : out.bytes) data.push_back(b != 0);
    return data;
  }
  HOTPATH_CHECK(false, "output '", out.name, "': datatype ", out.datatype, " can only be returned as binary data");
  return {};
}

}  // namespace

EncodedInferResponse encode_infer_response(const InferRequest& request, std::string_view model_name,
                                           std::string_view model_version, std::span<const ResponseOutput> outputs) {
  nlohmann::ordered_json j;
  j["model_name"] = model_name;
  j["model_version"] = model_version;
  if (!request.id.empty()) j["id"] = request.id;
  j["outputs"] = nlohmann::ordered_json::array();
  std::vector<std::span<const std::uint8_t>> binary;
  for (const ResponseOutput& out : outputs) {
    bool as_binary = request.binary_data_output;
    for (const RequestedOutput& o : request.outputs) {
      if (o.name == out.name && o.binary_data) as_binary = *o.binary_data;
    }
    nlohmann::ordered_json o;
    o["name"] = out.name;
    o["datatype"] = out.datatype;
    o["shape"] = out.shape;
    if (as_binary) {
      o["parameters"] = {{"binary_data_size", out.bytes.size()}};
      binary.push_back(out.bytes);
    } else {
      o["data"] = json_data(out);
    }
    j["outputs"].push_back(std::move(o));
  }
  EncodedInferResponse response;
  response.body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (!binary.empty()) {
    response.header_length = response.body.size();
    std::size_t total = response.body.size();
    for (const auto& b : binary) total += b.size();
    response.body.reserve(total);
    for (const auto& b : binary) response.body.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return response;
}

}  // namespace hotpath::serve
