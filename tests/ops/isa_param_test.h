// A test fixture parameterised by ISA level for a kernel picked by the CPU dispatch (core/cpu.h): each test runs
// with the cap at its level — an AVX-512 machine also runs the AVX2 and portable loops — after checking that the
// op really chose that level (kernel_name() starts with it), and is skipped on levels this CPU lacks.
//   class SlidingIsaTest : public test::IsaParamTest<&ops::sliding_attention_kernel_name> {};
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "hotpath/core/cpu.h"

namespace hotpath::test {

template <const char* (*KernelName)()>
class IsaParamTest : public ::testing::TestWithParam<cpu::Isa> {
 protected:
  void SetUp() override {
    cpu::reset_max_isa();
    if (const std::string why = cpu::isa_skip_reason(GetParam()); !why.empty()) GTEST_SKIP() << why;
    cpu::set_max_isa(GetParam());
    const std::string want = GetParam() == cpu::Isa::kScalar ? "portable" : cpu::isa_name(GetParam());
    if (cpu::kX86Kernels) {
      ASSERT_EQ(std::string(KernelName()).rfind(want, 0), 0U) << KernelName();
    }
  }
  void TearDown() override { cpu::reset_max_isa(); }
};

// The levels to instantiate with, named by their ISA.
inline auto isa_levels() { return ::testing::Values(cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512); }
inline std::string isa_test_name(const ::testing::TestParamInfo<cpu::Isa>& info) { return cpu::isa_name(info.param); }

}  // namespace hotpath::test
