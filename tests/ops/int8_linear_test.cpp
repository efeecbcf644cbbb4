// Dynamic INT8 Linear (ops/int8_linear.h): the row quantizer and the fused epilogue against their ATen
// twin at every ISA level this CPU has, int8 against fp32, every activation, residual, odd shapes, bf16,
// the 7-bit weight mode of non-VNNI CPUs, and bad inputs.
#include "hotpath/ops/int8_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"

namespace hotpath::ops {
namespace {

using cpu::Isa;

constexpr std::string_view kActs[] = {"none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"};

std::vector<Isa> levels() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (cpu::allows(isa)) out.push_back(isa);
  }
  return out;
}

double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor fa = a.to(at::kFloat), fb = b.to(at::kFloat);
  return (fa - fb).abs().max().item<double>() / std::max(1.0, fb.abs().max().item<double>());
}

double rel_norm_error(const at::Tensor& y, const at::Tensor& ref) {
  return (y.to(at::kFloat) - ref.to(at::kFloat)).norm().item<double>() / ref.to(at::kFloat).norm().item<double>();
}

struct Layer {
  at::Tensor weight;  // f32 [O, I]
  at::Tensor bias;    // f32 [O]
  Int8Linear op;
};

// kAuto: the weights the engine would run here (7-bit where oneDNN lacks VNNI).
Layer make_layer(std::int64_t in, std::int64_t out, bool with_bias, std::uint64_t seed,
                 Int8MatmulMode mode = Int8MatmulMode::kAuto) {
  at::manual_seed(seed);
  at::Tensor w = at::randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in)));
  at::Tensor b = with_bias ? at::randn({out}) * 0.1 : at::Tensor();
  auto [w8, scale] = Int8Linear::quantize_weight(w);
  return {w, b, Int8Linear::prepare(w8, scale, b, mode)};
}

TEST(Int8QuantizeRows, MatchesTheAtenTwinBitForBitAtEveryIsa) {
  for (const std::int64_t k : {1, 7, 64, 100, 768}) {
    at::manual_seed(k);
    at::Tensor x = at::randn({9, k}) * 3.0;
    x[2].zero_();  // an all-zero row: scale 1, q 0
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      const at::Tensor xd = x.to(dtype);
      const at::Tensor xf = xd.to(at::kFloat);
      at::Tensor absmax = xf.abs().amax(1);
      const at::Tensor qmax = at::full_like(absmax, 127.0);
      absmax = at::where(absmax == 0, qmax, absmax);
      const at::Tensor ref_q = at::round(xf * (qmax / absmax).unsqueeze(1)).clamp(-127, 127).to(at::kChar);
      for (const Isa isa : levels()) {
        const cpu::ScopedMaxIsa cap(isa);
        const auto [q, scale] = int8_quantize_rows(xd);
        SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " k=" + std::to_string(k) + " " + c10::toString(dtype));
        EXPECT_TRUE(at::equal(q, ref_q));
        EXPECT_TRUE(at::equal(scale, absmax / qmax));
        EXPECT_EQ(scale[2].item<float>(), 1.0F);
      }
    }
  }
}

// Every activation × residual × bias × shape × ISA against forward_reference (same quantization, ATen's
// float math): exact for the piecewise-linear activations, 2e-6 for the transcendental ones.
TEST(Int8Linear, MatchesItsReferenceTwinForEveryActivationShapeAndIsa) {
  struct Shape {
    std::int64_t m, k, n;
  };
  for (const Shape s : {Shape{1, 768, 768}, Shape{3, 13, 1}, Shape{17, 100, 33}, Shape{16, 768, 1024}}) {
    for (const bool with_bias : {false, true}) {
      const Layer layer = make_layer(s.k, s.n, with_bias, static_cast<std::uint64_t>(s.m * 1000 + s.k));
      const at::Tensor x = at::randn({s.m, s.k}) * 2.0;
      const at::Tensor residual = at::randn({s.m, s.n});
      for (const std::string_view act : kActs) {
        for (const bool with_residual : {false, true}) {
          const at::Tensor r = with_residual ? residual : at::Tensor();
          const at::Tensor ref = layer.op.forward_reference(x, act, r);
          for (const Isa isa : levels()) {
            const cpu::ScopedMaxIsa cap(isa);
            SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " act=" + std::string(act) + " m=" + std::to_string(s.m) +
                         " k=" + std::to_string(s.k) + " n=" + std::to_string(s.n) + " bias=" +
                         std::to_string(with_bias) + " residual=" + std::to_string(with_residual));
            const at::Tensor y = layer.op.forward(x, act, r);
            ASSERT_EQ(y.sizes(), ref.sizes());
            ASSERT_EQ(y.scalar_type(), at::kFloat);
            const bool linear_pieces = act == "none" || act == "relu" || act == "relu6";
            if (linear_pieces) {
              EXPECT_TRUE(at::equal(y, ref)) << max_rel_diff(y, ref);
            } else {
              EXPECT_LE(max_rel_diff(y, ref), 2e-6);
            }
          }
        }
      }
    }
  }
}

TEST(Int8Linear, StaysCloseToFp32Linear) {
  for (const auto& [k, n] : {std::pair<std::int64_t, std::int64_t>{768, 768}, {3072, 768}, {100, 33}}) {
    const Layer layer = make_layer(k, n, true, 7);
    const at::Tensor x = at::randn({32, k});
    const at::Tensor fp32 = at::linear(x, layer.weight, layer.bias);
    // Two 8-bit roundings: ~1 % of the output's norm on Gaussian data (~2 % with 7-bit weights).
    const double bound = layer.op.weight_bits() == 8 ? 0.02 : 0.03;
    EXPECT_LT(rel_norm_error(layer.op.forward(x), fp32), bound) << k << "x" << n;
    const at::Tensor fp32_gelu = at::gelu(fp32 + 0.5);
    const at::Tensor residual = at::full({32, n}, 0.5);
    EXPECT_LT(rel_norm_error(layer.op.forward(x, "gelu", residual), fp32_gelu), bound);
  }
}

TEST(Int8Linear, TakesBf16InputAndReturnsBf16) {
  const Layer layer = make_layer(96, 40, true, 11);
  const at::Tensor x = at::randn({2, 5, 96}).to(at::kBFloat16);
  const at::Tensor residual = at::randn({2, 5, 40}).to(at::kBFloat16);
  for (const Isa isa : levels()) {
    const cpu::ScopedMaxIsa cap(isa);
    const at::Tensor y = layer.op.forward(x, "none", residual);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{2, 5, 40}));
    EXPECT_TRUE(at::equal(y, layer.op.forward_reference(x, "none", residual))) << cpu::isa_name(isa);
    EXPECT_LE(max_rel_diff(layer.op.forward(x, "silu"), layer.op.forward_reference(x, "silu")), 8e-3);
  }
  const at::Tensor fp32 = at::linear(x.to(at::kFloat), layer.weight, layer.bias) + residual.to(at::kFloat);
  EXPECT_LT(rel_norm_error(layer.op.forward(x, "none", residual), fp32), 0.02);
}

TEST(Int8Linear, SevenBitWeightsStayExactAndCloseToFp32) {
  const Layer eight = make_layer(768, 256, true, 3, Int8MatmulMode::kEightBit);
  const Layer seven = make_layer(768, 256, true, 3, Int8MatmulMode::kSevenBitWeights);
  EXPECT_EQ(eight.op.weight_bits(), 8);
  EXPECT_EQ(seven.op.weight_bits(), 7);
  EXPECT_LE(seven.op.weight_kn().abs().max().item<int>(), 63);
  EXPECT_EQ(seven.op.weight_kn().abs().max().item<int>(), 63);  // 127 maps to 63: the range is used
  const at::Tensor x = at::randn({16, 768});
  const at::Tensor fp32 = at::linear(x, eight.weight, eight.bias);
  const double e8 = rel_norm_error(eight.op.forward(x), fp32);
  const double e7 = rel_norm_error(seven.op.forward(x), fp32);
  EXPECT_LT(e7, 0.03);
  // Per CPU: at::_int_mm is oneDNN with VNNI (exact), oneDNN capped below VNNI by ONEDNN_MAX_CPU_ISA (its u8·s8
  // pairs saturate int16 with 8-bit weights), or, without AVX512_VNNI, LibTorch's scalar loop (exact; replaced by
  // hotpath's int8_gemm, exact too).
  const bool saturates = !int8_gemm_by_default() && !int8_matmul_has_vnni();
  if (!saturates) {
    EXPECT_GT(e7, e8);  // a coarser weight grid
  }
  const at::Tensor q = int8_quantize_rows(x).first;
  const auto exact = [&](const at::Tensor& w_kn) {
    return at::equal(at::_int_mm(q, w_kn).to(at::kDouble), q.to(at::kDouble).mm(w_kn.to(at::kDouble)));
  };
  EXPECT_TRUE(exact(seven.op.weight_kn()));
  EXPECT_EQ(exact(eight.op.weight_kn()), !saturates);
  EXPECT_TRUE(at::equal(seven.op.forward(x, "relu"), seven.op.forward_reference(x, "relu")));
  EXPECT_EQ(seven.op.uses_int8_gemm(), int8_gemm_by_default());
  // kAuto picks by the CPU: 7-bit weights where oneDNN runs without VNNI, and where int8_gemm's AVX2 kernel runs
  // (its u8·s8 product is faster at 7 bits).
  const Layer autod = make_layer(768, 256, true, 3, Int8MatmulMode::kAuto);
  EXPECT_EQ(autod.op.weight_bits(),
            saturates || (int8_gemm_by_default() && int8_gemm_prefers_seven_bit_weights()) ? 7 : 8);
  EXPECT_EQ(autod.op.uses_int8_gemm(), int8_gemm_by_default());
  EXPECT_TRUE(at::equal(autod.op.forward(x, "relu"), autod.op.forward_reference(x, "relu")));
}

// hotpath's int8_gemm forced where at::_int_mm would run (any CPU): 8-bit and 7-bit weights (the AVX2 kernel's
// two products), the twin's bits at every ISA, bf16 and residual included, odd shapes and a row-blocked batch.
TEST(Int8Linear, HotpathGemmGivesTheTwinsBitsWithEightAndSevenBitWeightsAtEveryIsa) {
  for (const auto& [in, out, rows, mode] :
       {std::tuple{768, 256, 16, Int8MatmulMode::kEightBit}, {13, 5, 3, Int8MatmulMode::kEightBit},
        {130, 33, 67, Int8MatmulMode::kEightBit}, {64, 3072, 1400, Int8MatmulMode::kEightBit},
        {768, 256, 16, Int8MatmulMode::kSevenBitWeights}, {130, 33, 67, Int8MatmulMode::kSevenBitWeights}}) {
    at::manual_seed(in + out);
    const at::Tensor w = at::randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in)));
    const at::Tensor b = at::randn({out}) * 0.1;
    auto [w8, scale] = Int8Linear::quantize_weight(w);
    const Int8Linear op = Int8Linear::prepare(w8, scale, b, mode, Int8MatmulKernel::kHotpathGemm);
    EXPECT_TRUE(op.uses_int8_gemm());
    EXPECT_EQ(op.weight_bits(), mode == Int8MatmulMode::kEightBit ? 8 : 7);
    const at::Tensor x = at::randn({rows, in});
    const at::Tensor residual = at::randn({rows, out});
    for (const Isa isa : levels()) {
      const cpu::ScopedMaxIsa cap(isa);
      SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " " + std::to_string(rows) + "x" + std::to_string(in) + "x" +
                   std::to_string(out));
      EXPECT_TRUE(at::equal(op.forward(x, "relu", residual), op.forward_reference(x, "relu", residual)));
      const at::Tensor xb = x.to(at::kBFloat16);
      EXPECT_TRUE(at::equal(op.forward(xb), op.forward_reference(xb)));
    }
    EXPECT_LT(rel_norm_error(op.forward(x), at::linear(x, w, b)), 0.02);
  }
}

// Where oneDNN has a brgemm int8 kernel (AMX or AVX512_VNNI), kAuto multiplies on it, called directly: the same
// int32 sums as at::_int_mm, so the same bits, at row counts it runs and at those it leaves to _int_mm (AMX: 2
// rows). Elsewhere kOneDnnBrgemm refuses with one line and kAuto keeps _int_mm.
TEST(Int8Linear, BrgemmProductGivesIntMmsBitsAtEveryRowCount) {
  at::manual_seed(3);
  const at::Tensor w = at::randn({96, 768}) * (1.0 / std::sqrt(768.0));
  const at::Tensor b = at::randn({96}) * 0.1;
  auto [w8, scale] = Int8Linear::quantize_weight(w);
  const Int8Linear int_mm = Int8Linear::prepare(w8, scale, b, Int8MatmulMode::kEightBit, Int8MatmulKernel::kIntMm);
  EXPECT_FALSE(int_mm.uses_onednn_brgemm());
  std::optional<Int8Linear> brgemm;
  try {
    brgemm = Int8Linear::prepare(w8, scale, b, Int8MatmulMode::kEightBit, Int8MatmulKernel::kOneDnnBrgemm);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("brgemm"), std::string::npos) << e.what();
    const Int8Linear automatic = Int8Linear::prepare(w8, scale, b, Int8MatmulMode::kEightBit);
    EXPECT_FALSE(automatic.uses_onednn_brgemm());
    GTEST_SKIP() << "no brgemm kernel here: kOneDnnBrgemm refused, kAuto keeps at::_int_mm";
  }
  EXPECT_TRUE(brgemm->uses_onednn_brgemm());
  EXPECT_EQ(Int8Linear::prepare(w8, scale, b, Int8MatmulMode::kEightBit).uses_onednn_brgemm(),
            int8_onednn_brgemm_by_default());
  for (std::int64_t rows : {1, 2, 5, 128, 300}) {
    SCOPED_TRACE(rows);
    const at::Tensor x = at::randn({rows, 768});
    const at::Tensor residual = at::randn({rows, 96});
    EXPECT_TRUE(at::equal(brgemm->forward(x, "gelu", residual), int_mm.forward(x, "gelu", residual)));
    EXPECT_TRUE(at::equal(brgemm->forward(x.to(at::kBFloat16)), int_mm.forward(x.to(at::kBFloat16))));
  }
}

TEST(Int8Linear, HandlesOddShapes) {
  // M = 1, K = 1, N = 1, and an empty batch.
  const Layer tiny = make_layer(1, 1, true, 5);
  const at::Tensor x = at::full({1, 1}, 2.0);
  const at::Tensor y = tiny.op.forward(x);
  EXPECT_NEAR(y.item<float>(), at::linear(x, tiny.weight, tiny.bias).item<float>(), 0.02);
  const Layer layer = make_layer(13, 5, false, 6);
  EXPECT_EQ(layer.op.forward(at::zeros({0, 13})).sizes(), (std::vector<std::int64_t>{0, 5}));
  // An all-zero row gives exactly the bias.
  const Layer biased = make_layer(13, 5, true, 6);
  EXPECT_TRUE(at::equal(biased.op.forward(at::zeros({2, 13}))[1], biased.bias));
  // Leading dimensions are kept; non-contiguous x is fine.
  const at::Tensor x3 = at::randn({13, 3, 4}).permute({1, 2, 0});
  EXPECT_TRUE(at::equal(layer.op.forward(x3), layer.op.forward_reference(x3.contiguous())));
}

// Past 16 MiB of int32 sums forward() runs the matmul and the epilogue in row blocks of <= 2 MiB (160 rows
// at N = 3072): 1400 rows are 8 full blocks and a partial one, residual and bf16 rows sliced to match.
TEST(Int8Linear, RowBlocksOfLargeBatchesMatchTheTwin) {
  const Layer layer = make_layer(64, 3072, true, 9);
  const at::Tensor x = at::randn({1400, 64});
  const at::Tensor residual = at::randn({1400, 3072});
  EXPECT_TRUE(at::equal(layer.op.forward(x, "relu", residual), layer.op.forward_reference(x, "relu", residual)));
  const at::Tensor xb = x.to(at::kBFloat16).view({7, 200, 64});
  EXPECT_TRUE(at::equal(layer.op.forward(xb), layer.op.forward_reference(xb)));
}

TEST(Int8Linear, QuantizeWeightIsPerOutputChannelSymmetric) {
  at::Tensor w = at::randn({6, 10});
  w[4].zero_();
  const auto [q, scale] = Int8Linear::quantize_weight(w);
  EXPECT_EQ(q.scalar_type(), at::kChar);
  EXPECT_EQ(scale.sizes(), (std::vector<std::int64_t>{6}));
  EXPECT_EQ(q.abs().amax(1)[0].item<int>(), 127);  // each non-zero row uses the full range
  EXPECT_EQ(scale[4].item<float>(), 1.0F);
  EXPECT_LE((q.to(at::kFloat) * scale.unsqueeze(1) - w).abs().max().item<double>(),
            0.5 * scale.max().item<double>() + 1e-7);
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const hotpath::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Int8Linear, RefusesBadInputsNamingWhatWasExpected) {
  const auto [w8, scale] = Int8Linear::quantize_weight(at::randn({4, 8}));
  EXPECT_NE(error_of([&] { (void)Int8Linear::prepare(w8.to(at::kFloat), scale, {}); }).find("weight must be int8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)Int8Linear::prepare(w8, scale.narrow(0, 0, 3), {}); }).find("weight_scale must be float32 [4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)Int8Linear::prepare(w8, -scale, {}); }).find("> 0"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)Int8Linear::prepare(w8, scale, at::zeros({5})); }).find("bias must be"),
            std::string::npos);
  const Int8Linear op = Int8Linear::prepare(w8, scale, {});
  EXPECT_NE(error_of([&] { (void)op.forward(at::randn({2, 9})); }).find("in_features = 8"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)op.forward(at::ones({2, 8}, at::kInt)); }).find("float32 or bfloat16"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)op.forward(at::randn({2, 8}), "swish"); }).find("unknown activation \"swish\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)op.forward(at::randn({2, 8}), "none", at::randn({2, 5})); }).find("residual"),
            std::string::npos);
}

TEST(Int8Linear, DispatchReportSaysWhatRan) {
  (void)make_layer(8, 4, false, 1).op.forward(at::randn({2, 8}));
  for (const Isa isa : levels()) {
    const cpu::ScopedMaxIsa cap(isa);
    bool found = false;
    for (const cpu::Choice& c : cpu::dispatch_choices()) {
      if (c.op != "int8_linear") continue;
      found = true;
      EXPECT_EQ(c.variant, isa == Isa::kScalar ? "portable" : cpu::isa_name(isa));
      EXPECT_NE(c.note.find(int8_gemm_by_default() ? "hotpath int8_gemm" : "at::_int_mm"), std::string::npos) << c.note;
      const bool saturates = !int8_gemm_by_default() && !int8_matmul_has_vnni();
      const char* weights = int8_gemm_by_default() ? "7-bit weights where its AVX2 kernel runs"
                            : saturates            ? "7-bit weights"
                                                   : "8-bit weights";
      EXPECT_NE(c.note.find(weights), std::string::npos) << c.note;
      EXPECT_EQ(c.note.find("hotpath int8_gemm") != std::string::npos, int8_gemm_by_default()) << c.note;
    }
    EXPECT_TRUE(found);
  }
}

}  // namespace
}  // namespace hotpath::ops
