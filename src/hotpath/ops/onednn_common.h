// Internal to hotpath_onednn (built only with Debian's libdnnl): the CPU engine and the per-thread user-mode
// scratchpad every directly called oneDNN primitive shares (onednn_conv.cpp, onednn_matmul.cpp).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <memory>
#include <new>
#include <string>

namespace hotpath::ops::onednn {

inline const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A user-mode scratchpad per calling thread, grown to the largest primitive it has run.
struct Scratch {
  struct Free {
    void operator()(void* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<void, Free> data;
  std::size_t bytes = 0;

  void* at_least(std::size_t n) {
    if (n > bytes) {
      data.reset(::operator new(n, std::align_val_t{64}));
      bytes = n;
    }
    return data.get();
  }
};

// Debian's libdnnl and LibTorch's oneDNN both define the std::call_once thunks of their GEMM kernels' jit_init()
// with vague linkage; LibTorch comes first in load order (cmake/HotpathTorch.cmake), so libdnnl's GEMM kernels
// are never generated and its GEMM-based implementations fail to execute. Those and the reference ones (slow)
// are never used here.
inline bool usable_implementation(const std::string& impl) {
  return impl.find("gemm:") == std::string::npos && impl.rfind("ref", 0) != 0;
}

}  // namespace hotpath::ops::onednn
