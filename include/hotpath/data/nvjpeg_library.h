// hotpath/data/nvjpeg_library.h — nvJPEG, opened at run time with dlopen (hotpath has no link
// dependency on it): the loader's CUDA mode with data.decode: nvjpeg decodes through it.
//
//   auto lib = NvjpegLibrary::open(NvjpegLibrary::default_candidates());  // throws one line if none fits
//   std::cout << lib->describe();   // "/…/nvidia/cu13/lib/libnvjpeg.so.13 (nvJPEG 13.3.2)"
//
// The function table is private (nvjpeg_table.h, declarations from the real nvjpeg.h of the PyPI
// `nvidia-nvjpeg` wheel that scripts/setup unpacks). A hotpath built without that header still builds
// and links; open() then says so.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace hotpath::data {

struct NvjpegTable;  // the resolved functions (src/hotpath/data/cuda/nvjpeg_table.h)

class NvjpegLibrary {
 public:
  // Where nvJPEG is looked for, in order: $HOTPATH_NVJPEG_LIBRARY (a file) if set; the `nvidia-nvjpeg` wheels
  // next to LibTorch's own nvidia/* libraries (site-packages/nvidia/cu13/lib/libnvjpeg.so.13,
  // nvidia/nvjpeg/lib/libnvjpeg.so.12); then the sonames through the system loader path. The CUDA major of
  // LibTorch's runtime comes first.
  static std::vector<std::string> default_candidates();

  // dlopen()s the first candidate that loads and resolves every function hotpath calls. Throws
  // hotpath::Error with one line: each candidate and why it failed (not found, or the missing symbol), or
  // that this hotpath was built without nvjpeg.h.
  static std::shared_ptr<const NvjpegLibrary> open(const std::vector<std::string>& candidates);

  // True when hotpath was compiled with nvjpeg.h (else open() always throws, saying so).
  static bool compiled_in();

  ~NvjpegLibrary();
  NvjpegLibrary(const NvjpegLibrary&) = delete;
  NvjpegLibrary& operator=(const NvjpegLibrary&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string describe() const;  // path and version
  [[nodiscard]] const NvjpegTable& table() const { return *table_; }

 private:
  NvjpegLibrary() = default;
  void* handle_ = nullptr;
  std::string path_;
  int version_[3] = {0, 0, 0};
  std::unique_ptr<NvjpegTable> table_;
};

}  // namespace hotpath::data
