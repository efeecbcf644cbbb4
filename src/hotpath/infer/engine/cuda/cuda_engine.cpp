// Engine on CUDA (cuda_engine.h). ATen only: builds and links without CUDA.
#include "cuda_engine.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "hotpath/core/error.h"
#include "hotpath/ops/attention.h"

namespace hotpath::infer {
namespace {

const char* dtype_name(at::ScalarType t) {
  return t == at::kHalf ? "fp16" : t == at::kBFloat16 ? "bf16" : t == at::kFloat ? "fp32" : "unsupported";
}

}  // namespace

at::ScalarType prepare_cuda_engine(const Graph& graph, const EngineOptions& options) {
  const at::Device& device = options.device;
  HOTPATH_CHECK(device.is_cuda(), "engine: prepare_cuda_engine needs a CUDA device, got ", device.str());
  HOTPATH_CHECK(at::hasCUDA(), "engine: device ", device.str(), " was asked for but no CUDA device is available");
  HOTPATH_CHECK(options.cuda_dtype == at::kHalf || options.cuda_dtype == at::kBFloat16 ||
                    options.cuda_dtype == at::kFloat,
                "engine: cuda_dtype is ", options.cuda_dtype, ", expected fp16, bf16 or fp32");
  HOTPATH_CHECK(options.precision != Precision::kInt8, "engine: an int8 package runs on the CPU only (its kernels "
                "are oneDNN's); export the model with --precision fp32 or bf16 for --device cuda");
  for (const Node& n : graph.nodes) {
    HOTPATH_CHECK(n.attr_str("quant", "").empty(), "engine: node ", n.name, " is quantized (",
                  n.attr_str("quant", ""), "); int8 graphs run on the CPU only");
  }
  HOTPATH_CHECK(options.cuda_dtype != at::kBFloat16 || at::detail::getCUDAHooks().supportsBFloat16ConvolutionWithCuDNNv8(),
                "engine: bf16 on ", device.str(), " needs compute capability 8.0+ (Ampere or newer); use fp16");
  at::globalContext().setBenchmarkCuDNN(true);
  return options.cuda_dtype;
}

at::Tensor stage_input(const at::Tensor& input, const at::Device& device) {
  if (input.device() == device) return input;
  HOTPATH_CHECK(input.device().is_cpu(), "engine: an input is on ", input.device().str(), ", expected the CPU or ",
                device.str());
  at::Tensor pinned = at::empty(input.sizes(), input.options().pinned_memory(true));
  pinned.copy_(input);
  return pinned.to(device, /*non_blocking=*/true);
}

std::string cuda_engine_description(const EngineOptions& options) {
  const at::Tensor q = at::zeros({8, 12, 128, 64}, at::TensorOptions(options.device).dtype(options.cuda_dtype));
  const at::Tensor mask = at::ones({8, 128}, at::TensorOptions(options.device).dtype(at::kLong));
  return std::string("device: ") + options.device.str() + ", " + dtype_name(options.cuda_dtype) +
         " compute, convs cuDNN (benchmark mode" + (options.channels_last ? ", channels-last" : "") +
         "), attention SDPA (" + ops::sdpa_backend_name(q, q, q, mask) + " for [8, 12, 128, 64] " +
         dtype_name(options.cuda_dtype) + " with a key padding mask), inputs staged through pinned memory";
}

}  // namespace hotpath::infer
