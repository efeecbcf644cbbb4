// NvjpegLibrary (nvjpeg_library.h): dlopen + dlsym of nvJPEG, so hotpath links without it and a machine
// without nvJPEG only loses data.decode: nvjpeg, with one line saying why.
#include "hotpath/data/nvjpeg_library.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "hotpath/core/error.h"
#include "nvjpeg_table.h"

namespace hotpath::data {
namespace {

// site-packages of the LibTorch this process runs: the folder above torch/lib/libtorch_cpu.so.
std::filesystem::path torch_site_packages() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::detail::getCUDAHooks), &info) == 0 || info.dli_fname == nullptr) return {};
  return std::filesystem::path(info.dli_fname).parent_path().parent_path().parent_path();
}

// The CUDA runtime major LibTorch was built with (12, 13), or 0 when it has no CUDA backend.
int torch_cuda_major() {
  try {
    return static_cast<int>(at::detail::getCUDAHooks().versionCUDART() / 1000);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

std::vector<std::string> NvjpegLibrary::default_candidates() {
  std::vector<std::string> out;
  if (const char* explicit_path = std::getenv("HOTPATH_NVJPEG_LIBRARY"); explicit_path && *explicit_path) {
    out.emplace_back(explicit_path);
  }
  const std::filesystem::path site = torch_site_packages();
  // Wheel layouts: nvidia-nvjpeg (CUDA 13) and nvidia-nvjpeg-cu12.
  const std::string wheel13 = site.empty() ? "" : (site / "nvidia/cu13/lib/libnvjpeg.so.13").string();
  const std::string wheel12 = site.empty() ? "" : (site / "nvidia/nvjpeg/lib/libnvjpeg.so.12").string();
  const bool twelve_first = torch_cuda_major() == 12;
  for (const std::string& p : twelve_first ? std::vector{wheel12, wheel13} : std::vector{wheel13, wheel12}) {
    if (!p.empty()) out.push_back(p);
  }
  if (twelve_first) {
    out.insert(out.end(), {"libnvjpeg.so.12", "libnvjpeg.so.13"});
  } else {
    out.insert(out.end(), {"libnvjpeg.so.13", "libnvjpeg.so.12"});
  }
  return out;
}

bool NvjpegLibrary::compiled_in() {
#ifdef HOTPATH_HAVE_NVJPEG_H
  return true;
#else
  return false;
#endif
}

std::shared_ptr<const NvjpegLibrary> NvjpegLibrary::open(const std::vector<std::string>& candidates) {
#ifndef HOTPATH_HAVE_NVJPEG_H
  (void)candidates;
  HOTPATH_CHECK(false, "nvjpeg: this hotpath was built without nvjpeg.h (scripts/setup unpacks the nvidia-nvjpeg "
                "wheel into ~/.cache/hotpath/nvjpeg; reconfigure, or set HOTPATH_NVJPEG_INCLUDE_DIR)");
  return nullptr;
#else
  HOTPATH_CHECK(!candidates.empty(), "nvjpeg: no library to try");
  std::ostringstream tried;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried << (tried.tellp() > 0 ? "; " : "") << path << ": " << (why ? why : "cannot be loaded");
      continue;
    }
    std::shared_ptr<NvjpegLibrary> lib(new NvjpegLibrary());
    lib->handle_ = handle;  // closed by the destructor from here on
    lib->path_ = path;
    lib->table_ = std::make_unique<NvjpegTable>();
    NvjpegTable& t = *lib->table_;
    const char* missing = nullptr;
#define HOTPATH_NVJPEG_RESOLVE(name)                                              \
  if (missing == nullptr) {                                                       \
    t.name = reinterpret_cast<decltype(t.name)>(dlsym(handle, #name));            \
    if (t.name == nullptr) missing = #name;                                       \
  }
    HOTPATH_NVJPEG_FUNCTIONS(HOTPATH_NVJPEG_RESOLVE)
#undef HOTPATH_NVJPEG_RESOLVE
    if (missing != nullptr) {
      tried << (tried.tellp() > 0 ? "; " : "") << path << ": has no " << missing;
      continue;  // lib's destructor dlclose()s it
    }
    for (int i = 0; i < 3; ++i) {
      t.nvjpegGetProperty(i == 0 ? MAJOR_VERSION : i == 1 ? MINOR_VERSION : PATCH_LEVEL, &lib->version_[i]);
    }
    return lib;
  }
  HOTPATH_CHECK(false, "nvjpeg: no usable nvJPEG library (install the nvidia-nvjpeg wheel matching LibTorch's CUDA, "
                "or set HOTPATH_NVJPEG_LIBRARY); tried ", tried.str());
  return nullptr;
#endif
}

NvjpegLibrary::~NvjpegLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::string NvjpegLibrary::describe() const {
  return path_ + " (nvJPEG " + std::to_string(version_[0]) + "." + std::to_string(version_[1]) + "." +
         std::to_string(version_[2]) + ")";
}

}  // namespace hotpath::data
