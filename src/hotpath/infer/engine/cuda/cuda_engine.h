// infer/engine/cuda/cuda_engine.h (private to hotpath_infer) — what Engine does differently on a CUDA device:
// the device and dtype checks, pinned input staging, the describe() line. engine.cpp calls these at
// its few device-dependent points; the ops themselves are the same ATen calls (cuDNN, cuBLAS, SDPA).
//
//   const at::ScalarType compute = prepare_cuda_engine(graph, options);   // checks, cuDNN benchmark on
//   at::Tensor x = stage_input(cpu_batch, options.device);                // pinned + non_blocking copy
//   os << cuda_engine_description(options);
//
// ATen only: builds and links without CUDA (the checks then fail with one line at Engine::load).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>

#include "hotpath/infer/engine.h"
#include "hotpath/infer/graph.h"

namespace hotpath::infer {

// For a CUDA options.device: checks that LibTorch sees the device, that the graph has no int8 node (the
// int8 kernels are oneDNN's, CPU only) and that cuda_dtype is fp16, bf16 or fp32; turns cuDNN benchmark
// mode on; returns the compute dtype (options.cuda_dtype).
at::ScalarType prepare_cuda_engine(const Graph& graph, const EngineOptions& options);

// A CPU input on `device`: copied into pinned memory, then non_blocking to the device (stream-ordered
// before the graph's first op). A tensor already on the device is returned as is.
at::Tensor stage_input(const at::Tensor& input, const at::Device& device);

// "device: cuda:0, fp16 compute, convs cuDNN (benchmark, channels-last), attention SDPA (memory-efficient
// for [8, 12, 128, 64] fp16 with a mask)".
std::string cuda_engine_description(const EngineOptions& options);

}  // namespace hotpath::infer
