// Shared by the model tests: one intra-op thread, and parameter counting.
#pragma once

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <cstdint>

namespace hotpath::models::model_test {

// Two intra-op threads on a 2-core machine shared with other jobs spin at OpenMP barriers and run
// convolutions ~30x slower; one thread keeps the tests quick and the results independent of load.
class SingleThread : public ::testing::Environment {
 public:
  void SetUp() override { at::set_num_threads(1); }
};
// `inline`: registered once per test binary, however many test files include this header.
inline ::testing::Environment* const kSingleThread = ::testing::AddGlobalTestEnvironment(new SingleThread);

inline std::int64_t parameter_count(const torch::nn::Module& module) {
  std::int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace hotpath::models::model_test
