// For tests labelled `gpu`: skip with one line where LibTorch sees no CUDA device.
//
//   TEST(EngineCuda, Fp16MatchesTheCpu) {
//     HOTPATH_REQUIRE_CUDA();
//     ...
#pragma once

#include <gtest/gtest.h>
#include <torch/cuda.h>

#define HOTPATH_REQUIRE_CUDA()                                                           \
  do {                                                                                   \
    if (!torch::cuda::is_available()) {                                                  \
      GTEST_SKIP() << "no CUDA device: torch::cuda::is_available() is false";            \
    }                                                                                    \
  } while (false)
