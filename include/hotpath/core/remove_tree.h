// hotpath/core/remove_tree.h — delete a file or a directory with everything in it (what rm -r does), in
// POSIX calls, for every place hotpath would call std::filesystem::remove_all.
//
//   remove_tree("run/checkpoints/step-00000040.tmp");        // throws hotpath::Error naming the path
//   std::error_code ec; remove_tree(stale_dir, ec);          // or reports, for best-effort cleanup
//
// Why not std::filesystem::remove_all: the torch wheels export their own statically linked copy of
// libstdc++'s std::filesystem, and in torch 2.11 (the GPU machine's) that copy's remove_all calls address 0.
// A binary whose symbol lookup reaches LibTorch before libstdc++ runs it and dies with SIGSEGV: on the H200
// every CUDA trainer test (checkpoint pruning), every loader test (its temporary folder) and `bench train` /
// `bench text` at exit did (issue 24; tests/train/link_order_test.cpp). Symlinks are removed, never followed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <system_error>

namespace hotpath {

// Removes `path` (a file, a symlink, or a directory and its contents). Returns how many entries were removed;
// 0 and no error when `path` does not exist. On failure `ec` holds the first error and the rest stays.
std::uintmax_t remove_tree(const std::filesystem::path& path, std::error_code& ec) noexcept;
// The same; a failure throws hotpath::Error naming the path and the reason.
std::uintmax_t remove_tree(const std::filesystem::path& path);

}  // namespace hotpath
