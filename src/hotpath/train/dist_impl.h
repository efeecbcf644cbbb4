// Private to train/: what DistContext holds (c10d types stay out of the public header).
#pragma once

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "hotpath/train/distributed.h"

namespace hotpath::train {

struct DistContext::Impl {
  c10::intrusive_ptr<c10d::Store> store;  // prefixed "hotpath/<restart count>/"
  int store_socket = -1;  // the TCPStore client's socket (owned by c10d), to bound its calls; -1: none found
  c10::intrusive_ptr<c10d::Backend> backend;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{0};
  at::Device device{at::kCPU};  // where collectives' tensors live: CPU (Gloo) or this rank's GPU (NCCL)
  const char* backend_name = "gloo";
};

// The Gloo backend (gloo_backend.cpp, the one translation unit that includes ProcessGroupGloo.hpp).
// Its device follows GLOO_SOCKET_IFNAME (else the hostname's address); `threads` Gloo worker threads.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout, int threads);

#ifdef HOTPATH_WITH_NCCL
// The NCCL backend (nccl_backend.cpp, the one translation unit that includes ProcessGroupNCCL.hpp), bound to
// `device` (this rank's GPU), its communicator created at once; waits throw after `timeout`.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout,
                                                     at::Device device);
#endif

// The text of an exception from c10d (c10::Error without its backtrace), first line only.
std::string exception_line(const std::exception& e);

}  // namespace hotpath::train
