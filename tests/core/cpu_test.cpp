// CPU dispatch: ISA names, the cap (HOTPATH_MAX_ISA, set_max_isa, ScopedMaxIsa), skip reasons, an
// op's choice under each cap, the overriding environment variable, the text and JSON reports and
// HOTPATH_VERBOSE=dispatch. Tests that set environment variables run in a fresh process (threadsafe
// death tests re-execute the binary), since the variables are read once per process.
#include "hotpath/core/cpu.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "hotpath/core/error.h"

namespace hotpath::cpu {
namespace {

// Three variants, as an op with AVX-512, AVX2 and portable loops declares them.
const OpDispatch kWide{"test.wide", {{"avx512", Isa::kAvx512}, {"avx2", Isa::kAvx2}, {"portable", Isa::kScalar}}};
// A variant this build "did not compile" is skipped with that reason whatever the cap.
const OpDispatch kMissing{"test.missing", {{"fancy", Isa::kScalar, false}, {"plain", Isa::kScalar}}, {.note = "a note"}};
// A variant forced from the environment (read once).
const OpDispatch kForced{"test.forced",
                         {{"native", Isa::kAvx512}, {"emulated", Isa::kScalar}},
                         {.override_env = "HOTPATH_TEST_FORCE"}};

Choice choice_of(const std::string& op) {
  for (Choice& c : dispatch_choices()) {
    if (c.op == op) return c;
  }
  ADD_FAILURE() << op << " is not registered";
  return {};
}

class Cpu : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    reset_max_isa();
  }
  void TearDown() override { reset_max_isa(); }
};

TEST_F(Cpu, IsaNamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    EXPECT_EQ(parse_isa(isa_name(isa)), isa) << isa_name(isa);
  }
  EXPECT_EQ(std::string(isa_name(Isa::kAvx512Bf16)), "avx512_bf16");
  EXPECT_FALSE(parse_isa("AVX2"));
  EXPECT_FALSE(parse_isa("avx"));
  EXPECT_FALSE(parse_isa(""));
}

TEST_F(Cpu, DetectsOnceAndNamesTheFeatures) {
  EXPECT_EQ(detected_isa(), detected_isa());
  const std::string features = detected_features();
  if (detected_isa() >= Isa::kAvx2) {
    EXPECT_NE(features.find("avx2"), std::string::npos) << features;
  }
  if (detected_isa() >= Isa::kAvx512) {
    EXPECT_NE(features.find("avx512bw"), std::string::npos) << features;
  }
  if (detected_isa() < Isa::kAvx512Bf16) {
    EXPECT_EQ(features.find("avx512bf16"), std::string::npos) << features;
  }
}

// The int8 probes LibTorch and oneDNN make for themselves: the CPU's VNNI (never capped) and oneDNN's own cap.
TEST_F(Cpu, VnniIsTheCpusAndOnednnsCapIsReadFromItsVariables) {
  if (detected_features().find("avx512vnni") != std::string::npos) {
    EXPECT_TRUE(detected_vnni());
  }
  {
    const ScopedMaxIsa cap(Isa::kScalar);  // hotpath's cap does not hide the CPU's VNNI from LibTorch
    EXPECT_EQ(detected_vnni(), detected_vnni());
  }
  EXPECT_EXIT(
      {
        unsetenv("DNNL_MAX_CPU_ISA");
        setenv("ONEDNN_MAX_CPU_ISA", "avx2", 1);
        const bool capped = onednn_cap_below_vnni() == "ONEDNN_MAX_CPU_ISA=avx2";
        setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI", 1);
        const bool vnni_level = onednn_cap_below_vnni().empty();
        unsetenv("ONEDNN_MAX_CPU_ISA");
        setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE", 1);
        const bool old_name = onednn_cap_below_vnni() == "DNNL_MAX_CPU_ISA=AVX512_CORE";
        unsetenv("DNNL_MAX_CPU_ISA");
        std::exit(capped && vnni_level && old_name && onednn_cap_below_vnni().empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(Cpu, CapLowersTheLevelAndSaysWhy) {
  if (std::getenv("HOTPATH_MAX_ISA") != nullptr) GTEST_SKIP() << "HOTPATH_MAX_ISA is set";
  EXPECT_EQ(max_isa(), detected_isa());
  EXPECT_TRUE(allows(Isa::kScalar));
  EXPECT_EQ(isa_skip_reason(Isa::kScalar), "");
  {
    const ScopedMaxIsa cap(Isa::kScalar);
    EXPECT_EQ(max_isa(), Isa::kScalar);
    EXPECT_FALSE(allows(Isa::kAvx2));
    if (detected_isa() >= Isa::kAvx2) {
      EXPECT_EQ(isa_skip_reason(Isa::kAvx2), "capped by set_max_isa(scalar)");
    }
    {
      const ScopedMaxIsa inner(Isa::kAvx512Bf16);  // above the CPU: the CPU is the limit
      EXPECT_EQ(max_isa(), detected_isa());
    }
    EXPECT_EQ(max_isa(), Isa::kScalar);
  }
  EXPECT_EQ(max_isa(), detected_isa());
  if (detected_isa() < Isa::kAvx512Bf16) {
    EXPECT_EQ(isa_skip_reason(Isa::kAvx512Bf16), "this CPU lacks AVX512_BF16");
  }
  if (detected_isa() < Isa::kAvx2) {
    EXPECT_EQ(isa_skip_reason(Isa::kAvx2), "this CPU lacks AVX2+FMA");
  }
}

TEST_F(Cpu, OpTakesTheWidestVariantTheCapAllows) {
  if (std::getenv("HOTPATH_MAX_ISA") != nullptr) GTEST_SKIP() << "HOTPATH_MAX_ISA is set";
  const char* names[] = {"portable", "avx2", "avx512", "avx512"};
  for (Isa level : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (level > detected_isa()) continue;
    const ScopedMaxIsa cap(level);
    SCOPED_TRACE(isa_name(level));
    const std::size_t want = level == Isa::kScalar ? 2 : level == Isa::kAvx2 ? 1 : 0;
    EXPECT_EQ(kWide.select(), want);
    const Choice c = choice_of("test.wide");
    EXPECT_EQ(c.variant, names[static_cast<int>(level)]);
    if (level == Isa::kScalar) {
      // A variant the CPU lacks is skipped for that reason, whatever the cap; one it has, for the cap.
      const std::string avx512 = detected_isa() >= Isa::kAvx512 ? "capped by set_max_isa(scalar)"
                                                                : "this CPU lacks AVX-512 F/BW/DQ/VL";
      EXPECT_EQ(c.reason, "avx512: " + avx512 + "; avx2: capped by set_max_isa(scalar)");
    }
    if (level == Isa::kAvx2) {
      EXPECT_EQ(c.reason, detected_isa() >= Isa::kAvx512 ? "avx512: capped by set_max_isa(avx2)"
                                                         : "avx512: this CPU lacks AVX-512 F/BW/DQ/VL");
    }
    if (level >= Isa::kAvx512) {
      EXPECT_EQ(c.reason, "");
    }
  }
}

TEST_F(Cpu, VariantsLeftOutOfTheBuildAreSkippedWithTheReason) {
  const Choice c = choice_of("test.missing");
  EXPECT_EQ(c.variant, "plain");
  EXPECT_EQ(c.reason, "fancy: not compiled in this build (needs GCC on x86-64)");
  EXPECT_EQ(c.note, "a note");
  EXPECT_EQ(std::string(kMissing.describe()), "plain (fancy: not compiled in this build (needs GCC on x86-64)), a note");
  EXPECT_EQ(kMissing.describe(), kMissing.describe());  // interned: the pointer stays valid
}

TEST_F(Cpu, ReportListsEveryOpInTextAndJson) {
  const std::string text = dispatch_report_text();
  EXPECT_EQ(text.rfind(std::string("cpu: ") + isa_name(detected_isa()), 0), 0U) << text;
  for (const char* op : {"test.wide", "test.missing", "test.forced"}) {
    EXPECT_NE(text.find(std::string("  ") + op + " "), std::string::npos) << text;
  }
  const nlohmann::json json = nlohmann::json::parse(dispatch_report_json());
  EXPECT_EQ(json["detected"], isa_name(detected_isa()));
  EXPECT_EQ(json["max_isa"], isa_name(max_isa()));
  EXPECT_EQ(json["ops"]["test.missing"]["variant"], "plain");
  EXPECT_EQ(json["ops"]["test.missing"]["note"], "a note");
  EXPECT_TRUE(json["ops"]["test.wide"].contains("reason"));
  if (std::getenv("HOTPATH_MAX_ISA") == nullptr) {
    EXPECT_TRUE(json["cap"].is_null());
    const ScopedMaxIsa cap(Isa::kScalar);
    const nlohmann::json capped = nlohmann::json::parse(dispatch_report_json());
    EXPECT_EQ(capped["cap"], "scalar");
    EXPECT_EQ(capped["cap_source"], "set_max_isa(scalar)");
    EXPECT_EQ(capped["ops"]["test.wide"]["variant"], "portable");
  }
}

// The environment's cap: honoured by every op, the ceiling set_max_isa() cannot raise, named in reasons.
TEST_F(Cpu, EnvironmentCapIsTheCeiling) {
  EXPECT_EXIT(
      {
        setenv("HOTPATH_MAX_ISA", "scalar", 1);
        const ScopedMaxIsa cap(Isa::kAvx512);
        const Choice c = choice_of("test.wide");
        const bool ok = max_isa() == Isa::kScalar && c.variant == "portable" &&
                        (detected_isa() < Isa::kAvx2 || isa_skip_reason(Isa::kAvx2) == "capped by HOTPATH_MAX_ISA=scalar");
        std::fprintf(stderr, "%s\n", dispatch_report_text().c_str());
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "cap scalar \\(HOTPATH_MAX_ISA=scalar\\)");
}

TEST_F(Cpu, BadEnvironmentCapIsOneClearError) {
  EXPECT_EXIT(
      {
        setenv("HOTPATH_MAX_ISA", "avx3", 1);
        try {
          (void)max_isa();
        } catch (const Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(2);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(2), "HOTPATH_MAX_ISA: expected scalar, avx2, avx512 or avx512_bf16, got 'avx3'");
}

TEST_F(Cpu, EnvironmentForcesAVariantOrIsRefused) {
  EXPECT_EXIT(
      {
        setenv("HOTPATH_TEST_FORCE", "emulated", 1);
        const Choice c = choice_of("test.forced");
        std::fprintf(stderr, "%s: %s\n", c.variant.c_str(), c.reason.c_str());
        std::exit(c.variant == "emulated" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "emulated: forced by HOTPATH_TEST_FORCE=emulated");
  EXPECT_EXIT(
      {
        setenv("HOTPATH_TEST_FORCE", "fast", 1);
        try {
          (void)kForced.select();
        } catch (const Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(2);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(2), "HOTPATH_TEST_FORCE: expected native or emulated, got 'fast'");
}

// HOTPATH_VERBOSE=dispatch: one line per op the first time each choice is made, not on every call.
TEST_F(Cpu, VerbosePrintsEachChoiceOnce) {
  const std::string path = ::testing::TempDir() + "cpu_test_verbose.txt";
  EXPECT_EXIT(
      {
        setenv("HOTPATH_VERBOSE", "trace,dispatch", 1);
        if (std::freopen(path.c_str(), "w", stderr) == nullptr) std::exit(3);
        for (int i = 0; i < 3; ++i) (void)kMissing.select();
        std::fflush(stderr);
        std::exit(verbose_dispatch() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  std::FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string printed(4096, '\0');
  printed.resize(std::fread(printed.data(), 1, printed.size(), f));
  std::fclose(f);
  std::remove(path.c_str());
  EXPECT_EQ(printed, "hotpath: dispatch: test.missing -> plain (fancy: not compiled in this build (needs GCC on x86-64)), "
                     "a note\n");
}

}  // namespace
}  // namespace hotpath::cpu
