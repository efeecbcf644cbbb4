// OneDnnInt8Matmul (oneDNN's brgemm int8 kernels, AMX or AVX512_VNNI, called directly) against the exact int64
// product, bit for bit: every row count it runs, the fallback past its row counts and for counts AMX has no kernel
// for, threads at once. On a CPU without either (or with oneDNN capped below them: onednn_conv_tests.onednn_avx2,
// the QEMU Haswell run) the constructor must refuse with one line, which is what the tests check there.
#include "hotpath/ops/onednn_matmul.h"

#include <ATen/ATen.h>
#include <ATen/cpu/Utils.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"

namespace hotpath::ops {
namespace {

at::Tensor random_int8(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  at::manual_seed(seed);
  return at::randint(-127, 128, {rows, cols}, at::kChar);
}

// The matmul for weight, or nullopt after checking the refusal says why (no brgemm kernel here).
std::optional<OneDnnInt8Matmul> make_or_explain(const at::Tensor& weight) {
  try {
    return OneDnnInt8Matmul(weight.size(0), weight.size(1), weight.const_data_ptr<std::int8_t>());
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("no brgemm") != std::string::npos || what.find("built without") != std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return std::nullopt;
  }
}

at::Tensor exact(const at::Tensor& a, const at::Tensor& w) { return a.to(at::kLong).mm(w.to(at::kLong)).to(at::kInt); }

TEST(OneDnnInt8Matmul, EqualsTheExactProductAtEveryRowCountItRuns) {
  for (const auto& [k, n] : {std::pair<std::int64_t, std::int64_t>{768, 768}, {64, 48}, {100, 37}, {3072, 96}}) {
    const at::Tensor w = random_int8(k, n, static_cast<std::uint64_t>(k * n));
    auto mm = make_or_explain(w);
    if (!mm) GTEST_SKIP() << "no brgemm kernel here: the refusal was checked";
    EXPECT_EQ(mm->implementation().rfind("brg:", 0), 0U) << mm->implementation();
    for (std::int64_t m : {1, 2, 3, 16, 128, 257}) {
      SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n));
      const at::Tensor a = random_int8(m, k, static_cast<std::uint64_t>(m));
      at::Tensor c = at::full({m, n}, -7, at::kInt);
      if (mm->try_run(a.const_data_ptr<std::int8_t>(), m, c.data_ptr<std::int32_t>())) {
        EXPECT_TRUE(at::equal(c, exact(a, w)));
      } else {
        // oneDNN 2.6 has no AMX kernel for a handful of rows (1-3 at some shapes): the caller's product runs.
        EXPECT_NE(mm->implementation().find("amx"), std::string::npos) << "declined by " << mm->implementation();
        EXPECT_LT(m, 16) << "declined " << m << " rows";
        EXPECT_TRUE(at::equal(c, at::full({m, n}, -7, at::kInt)));  // nothing written where it did not run
      }
    }
  }
}

TEST(OneDnnInt8Matmul, RowCountsPastTheLimitAreLeftToTheCaller) {
  const at::Tensor w = random_int8(64, 32, 5);
  auto mm = make_or_explain(w);
  if (!mm) GTEST_SKIP() << "no brgemm kernel here: the refusal was checked";
  int ran = 0, declined = 0;
  for (std::int64_t m = 16; m < 16 + OneDnnInt8Matmul::kMaxRowCounts + 8; ++m) {
    const at::Tensor a = random_int8(m, 64, static_cast<std::uint64_t>(m));
    at::Tensor c = at::zeros({m, 32}, at::kInt);
    if (mm->try_run(a.const_data_ptr<std::int8_t>(), m, c.data_ptr<std::int32_t>())) {
      ++ran;
      EXPECT_TRUE(at::equal(c, exact(a, w)));
    } else {
      ++declined;
    }
  }
  EXPECT_LE(ran, OneDnnInt8Matmul::kMaxRowCounts);
  EXPECT_GE(declined, 8);
  // A row count it has stays served.
  const at::Tensor a = random_int8(16, 64, 16);
  at::Tensor c = at::zeros({16, 32}, at::kInt);
  EXPECT_TRUE(mm->try_run(a.const_data_ptr<std::int8_t>(), 16, c.data_ptr<std::int32_t>()));
  EXPECT_TRUE(at::equal(c, exact(a, w)));
}

TEST(OneDnnInt8Matmul, ThreadsAtOnceGiveTheSerialResult) {
  const at::Tensor w = random_int8(256, 128, 9);
  auto mm = make_or_explain(w);
  if (!mm) GTEST_SKIP() << "no brgemm kernel here: the refusal was checked";
  std::vector<at::Tensor> inputs, outputs;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(random_int8(32 + 16 * t, 256, 100 + static_cast<std::uint64_t>(t)));
    outputs.push_back(at::zeros({inputs.back().size(0), 128}, at::kInt));
  }
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        ok[t] += mm->try_run(inputs[t].const_data_ptr<std::int8_t>(), inputs[t].size(0),
                             outputs[t].data_ptr<std::int32_t>())
                     ? 1
                     : 0;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(ok[t], 20);
    EXPECT_TRUE(at::equal(outputs[t], exact(inputs[t], w)));
  }
}

// Where the CPU has AVX512_VNNI and oneDNN is not capped below it, the kernel must be there: a refusal would
// silently leave every int8 product to at::_int_mm.
TEST(OneDnnInt8Matmul, TakesABrgemmKernelWhereTheCpuHasAvx512Vnni) {
  if (!OneDnnInt8Matmul::unavailable().empty()) GTEST_SKIP() << OneDnnInt8Matmul::unavailable();
  if (!at::cpu::is_avx512_vnni_supported() || !cpu::onednn_cap_below_vnni().empty()) {
    GTEST_SKIP() << "no AVX512_VNNI here, or oneDNN capped below it";
  }
  const at::Tensor w = random_int8(768, 768, 1);
  const OneDnnInt8Matmul mm(768, 768, w.const_data_ptr<std::int8_t>());
  EXPECT_EQ(mm.implementation().rfind("brg:avx512_core_", 0), 0U) << mm.implementation();
}

TEST(OneDnnInt8Matmul, RefusesBadArgumentsWithOneLine) {
  const std::int8_t w[4] = {1, 2, 3, 4};
  EXPECT_THROW(OneDnnInt8Matmul(0, 4, w), Error);
  EXPECT_THROW(OneDnnInt8Matmul(2, 2, nullptr), Error);
}

}  // namespace
}  // namespace hotpath::ops
