// hotpath/serve/kserve.h — the KServe v2 inference protocol as Triton speaks it over HTTP/REST: the infer
// request (JSON tensors, flat or nested `data`, and the binary tensor extension: Inference-Header-Content-Length,
// `binary_data_size` inputs whose raw little-endian bytes follow the JSON), and the infer response (JSON `data`
// or raw bytes after the JSON header for outputs asked with `binary_data` / `binary_data_output`). Torch-free:
// tensors are bytes + datatype + shape here; the routes turn them into at::Tensor.
//
//   InferRequest req = parse_infer_request(body, header_length);   // hotpath::Error naming the field
//   for (const RequestInput& in : req.inputs) use(in.name, in.datatype, in.shape, in.bytes);
//   EncodedInferResponse out = encode_infer_response(req, "resnet", "1", {{"logits", "FP32", {1, 10}, bytes}});
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::serve {

// Bytes per element of a KServe datatype (BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64); 0 for
// BYTES and for names that are not datatypes.
std::size_t kserve_element_size(std::string_view datatype);

struct RequestInput {
  std::string name;
  std::string datatype;
  std::vector<std::int64_t> shape;
  std::span<const std::uint8_t> bytes;  // little-endian elements, row-major: into the body or into `owned`
  std::vector<std::uint8_t> owned;      // JSON `data` converted to bytes
  bool binary = false;                  // came from the binary section
};

struct RequestedOutput {
  std::string name;
  std::optional<bool> binary_data;  // the output's own parameters.binary_data
};

struct InferRequest {
  std::string id;                        // echoed in the response (empty: none given)
  std::vector<RequestInput> inputs;      // in request order
  std::vector<RequestedOutput> outputs;  // empty: every output of the model
  bool binary_data_output = false;       // parameters.binary_data_output: default for outputs
};

struct InferLimits {
  std::size_t max_inputs = 64;
  std::size_t max_rank = 8;
  std::int64_t max_elements = std::int64_t{1} << 30;  // per input
};

// Parses a KServe v2 infer request body. `header_length` is Inference-Header-Content-Length when the request
// had one (the JSON is body[0, header_length), the binary tensors follow in input order). The result's binary
// inputs point into `body`: keep it alive. Every malformed case throws hotpath::Error naming the field:
// invalid JSON, a wrong type, an unknown datatype, data count != shape product, a value out of the datatype's
// range, a truncated binary tensor, a header length past the body, bytes left over after the last tensor.
InferRequest parse_infer_request(std::string_view body, std::optional<std::size_t> header_length,
                                 const InferLimits& limits = {});

// Inference-Header-Content-Length's value: a decimal byte count (hotpath::Error otherwise).
std::size_t parse_header_length(std::string_view value);

struct ResponseOutput {
  std::string name;
  std::string datatype;  // "FP32", ...
  std::vector<std::int64_t> shape;
  std::span<const std::uint8_t> bytes;  // little-endian, row-major
};

struct EncodedInferResponse {
  std::string body;                        // JSON, then the binary outputs when any
  std::optional<std::size_t> header_length;  // set when binary outputs follow: Inference-Header-Content-Length
};

// The outputs the request asked for, in the request's order (all of `available` in their order when it asked
// for none); hotpath::Error naming an unknown output or one asked twice.
std::vector<std::string> select_outputs(const InferRequest& request, std::span<const std::string> available);

// The response for `request`: {"model_name", "model_version", "id"?, "outputs": [...]}; each output as JSON
// `data` or, when asked (its binary_data, else the request's binary_data_output), as raw bytes after the JSON.
// `outputs` are the selected ones, in select_outputs() order.
EncodedInferResponse encode_infer_response(const InferRequest& request, std::string_view model_name,
                                           std::string_view model_version, std::span<const ResponseOutput> outputs);

}  // namespace hotpath::serve
