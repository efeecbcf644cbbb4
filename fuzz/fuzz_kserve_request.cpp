// libFuzzer target: the KServe v2 infer request parser of `hotpath serve` (JSON tensors and the binary tensor
// extension). The first byte picks the framing: 0 → the whole rest is JSON (no Inference-Header-Content-Length);
// otherwise the next two bytes (little-endian) are the header length, as a client would send it.
// Bad input must end in hotpath::Error (never a crash, hang, or another exception); a request that parses must
// keep the invariants the routes rely on (every input's bytes = shape product × element size, binary inputs inside
// the body), and its response must encode.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/serve/kserve.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_kserve_request: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::optional<std::size_t> header_length;
  std::size_t skip = 1;
  if (data[0] != 0) {
    if (size < 3) return 0;
    header_length = static_cast<std::size_t>(data[1]) | (static_cast<std::size_t>(data[2]) << 8);
    skip = 3;
  }
  const std::string body(reinterpret_cast<const char*>(data + skip), size - skip);
  using namespace hotpath::serve;
  InferRequest request;
  try {
    request = parse_infer_request(body, header_length, {.max_inputs = 16, .max_rank = 6, .max_elements = 1 << 20});
  } catch (const hotpath::Error&) {
    return 0;
  }
  const auto* begin = reinterpret_cast<const std::uint8_t*>(body.data());
  std::vector<ResponseOutput> outputs;
  for (const RequestInput& in : request.inputs) {
    std::int64_t elements = 1;
    for (const std::int64_t d : in.shape) {
      if (d < 0) fail("negative dimension accepted");
      elements *= d;
    }
    if (in.bytes.size() != static_cast<std::size_t>(elements) * kserve_element_size(in.datatype)) {
      fail("input bytes != shape product x element size");
    }
    if (in.binary && !in.bytes.empty() && (in.bytes.data() < begin || in.bytes.data() + in.bytes.size() > begin + body.size())) {
      fail("binary input outside the body");
    }
    if (!in.binary && in.bytes.data() != in.owned.data()) fail("JSON input not backed by its own bytes");
    if (in.datatype == "FP32" || in.datatype == "INT64" || in.datatype == "INT32" || in.datatype == "BOOL") {
      outputs.push_back({in.name, in.datatype, in.shape, in.bytes});
    }
  }
  // The inputs echoed as outputs: every requested name is either known or refused, and the response encodes.
  std::vector<std::string> names;
  for (const ResponseOutput& o : outputs) names.push_back(o.name);
  try {
    const std::vector<std::string> selected = select_outputs(request, names);
    std::vector<ResponseOutput> chosen;
    for (const std::string& s : selected) {
      for (const ResponseOutput& o : outputs) {
        if (o.name == s) chosen.push_back(o);
      }
    }
    const EncodedInferResponse r = encode_infer_response(request, "m", "1", chosen);
    if (r.header_length && *r.header_length > r.body.size()) fail("response header length past its body");
  } catch (const hotpath::Error&) {
  }
  return 0;
}
