// The one translation unit that sees ProcessGroupGloo.hpp (and so gloo's headers, Debian's libgloo-dev):
// libtorch_cpu.so exports gloo's symbols, so nothing links Debian's libgloo.so. hotpath never creates
// gloo objects itself (the Debian headers are older than the wheel's gloo: only c10d's calls are safe).
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "dist_impl.h"

namespace hotpath::train {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout, int threads) {
  // create_default picks the device from GLOO_SOCKET_IFNAME (multi-host runs must set it) or the hostname.
  auto options = c10d::ProcessGroupGloo::Options::create_default(timeout);
  options->threads = threads;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
}

}  // namespace hotpath::train
