// internal/package_layouts.h (private to hotpath_infer) — the readers of package.h's two layouts, behind
// read_package: package_dir.cpp reads a model package, package.cpp a training run directory.
#pragma once

#include <filesystem>

#include "hotpath/infer/package.h"

namespace hotpath::infer::internal {

Package read_model_package(const std::filesystem::path& dir);   // config.json with "hotpath_package"
Package read_run_directory(const std::filesystem::path& dir);   // model.json

}  // namespace hotpath::infer::internal
