// Label fast: which library a binary linked with LibTorch runs std::filesystem from. The torch wheels export their
// own statically linked copy of libstdc++'s std::filesystem (libtorch_cpu.so in 2.15, libtorch.so in 2.11), and ELF
// symbol lookup binds each call to the first library in load order that defines the symbol. With LibTorch ahead of
// libstdc++ in a binary's DT_NEEDED, hotpath's calls ran torch's copy, and torch 2.11's remove_all jumps to address 0:
// on the GPU machine every CUDA trainer test died in prune_checkpoints / swap_in_best, every loader test at the
// temporary folder's removal, and `bench train` / `bench text` at exit (gpu-check's backtraces.txt, issue 24). The
// fix (cmake/HotpathTorch.cmake) puts libstdc++ first; this test shows the binding on any machine, GPU or not.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace {

// The file name of the shared object that defines the function `fn` resolves to in this process.
std::string defining_object(void* fn) {
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

TEST(LinkOrder, StdFilesystemRunsFromLibstdcxxNotFromLibTorchsCopy) {
  // LibTorch is loaded and in use (its own copy is there to bind to).
  ASSERT_EQ(at::ones({2}).sum().item<float>(), 2.0F);
  namespace fs = std::filesystem;
  const std::pair<const char*, void*> functions[] = {
      {"remove_all(path)", reinterpret_cast<void*>(static_cast<std::uintmax_t (*)(const fs::path&)>(&fs::remove_all))},
      {"remove_all(path, error_code)",
       reinterpret_cast<void*>(static_cast<std::uintmax_t (*)(const fs::path&, std::error_code&)>(&fs::remove_all))},
      {"create_directories(path)",
       reinterpret_cast<void*>(static_cast<bool (*)(const fs::path&)>(&fs::create_directories))},
      {"temp_directory_path()", reinterpret_cast<void*>(static_cast<fs::path (*)()>(&fs::temp_directory_path))},
  };
  for (const auto& [name, fn] : functions) {
    const std::string where = defining_object(fn);
    EXPECT_EQ(where.find("libtorch"), std::string::npos) << "std::filesystem::" << name << " binds to " << where;
    EXPECT_NE(where.find("libstdc++"), std::string::npos) << "std::filesystem::" << name << " binds to " << where;
  }
}

}  // namespace
