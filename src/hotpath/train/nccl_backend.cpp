// The one translation unit that sees ProcessGroupNCCL.hpp (compiled only under HOTPATH_TORCH_CUDA, with
// USE_C10D_NCCL): c10d's NCCL backend from the wheel's libtorch_cuda.so, nccl.h from the venv's nvidia-nccl
// wheel and the CUDA runtime headers from its nvidia-* wheels (src/hotpath/train/CMakeLists.txt).
//
// Error handling, set explicitly rather than left to c10d's defaults: TORCH_NCCL_BLOCKING_WAIT=1 makes a
// collective's wait() block on the host and throw once `timeout` passes (so a dead or hung peer surfaces in
// DistContext::fail like a Gloo error, naming the rank), and TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (CleanUpOnly)
// makes the watchdog abort the communicators on an NCCL error or timeout without killing the process, so the
// error reaches that wait() instead of a SIGABRT. A value the user exported keeps its say.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdlib>

#include "dist_impl.h"

namespace hotpath::train {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout,
                                                     at::Device device) {
  // Read by ProcessGroupNCCL's constructor; setenv(..., 0) leaves a user's own value alone.
  ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
  ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
  // This rank's GPU: the communicator is created for it at once (eager init), so a rank that cannot reach the
  // others fails here, at start-up, within the timeout, not at the first gradient bucket.
  backend->setBoundDeviceId(device);
  backend->eagerConnectSingleDevice(device);
  return backend;
}

}  // namespace hotpath::train
