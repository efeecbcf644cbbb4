// Static INT8 convolution (ops/int8_conv.h): the u8 quantizer against its ATen twin at every ISA level,
// the oneDNN convolution against dequantize → at::conv2d for every activation, residual, padding form
// (symmetric, asymmetric "same", none), stride, groups and bf16, int8 against fp32, and bad inputs.
#include "hotpath/ops/int8_conv.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/ops/int8_kernels.h"

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

struct Case {
  const char* name;
  std::int64_t in, out, k, groups;
  Int8ConvGeometry geometry;
};

std::vector<Case> cases() {
  return {
      {"3x3 pad 1", 16, 8, 3, 1, {.padding = {1, 1, 1, 1}}},
      {"3x3 stride 2", 16, 24, 3, 1, {.stride = {2, 2}, .padding = {1, 1, 1, 1}}},
      {"1x1", 32, 16, 1, 1, {}},
      {"same pad stride 2 (asymmetric)", 8, 8, 3, 1, {.stride = {2, 2}, .padding = {0, 0, 1, 1}}},
      {"asymmetric 5x5", 8, 4, 5, 1, {.padding = {1, 2, 3, 2}}},
      {"depthwise 3x3", 16, 16, 3, 16, {.padding = {1, 1, 1, 1}}},
      {"dilation 2", 8, 8, 3, 1, {.padding = {2, 2, 2, 2}, .dilation = {2, 2}}},
  };
}

struct Layer {
  at::Tensor weight, bias;
  Int8Conv2d op;
};

Layer make_layer(const Case& c, const at::Tensor& x) {
  at::manual_seed(c.in * 31 + c.out);
  Int8ConvGeometry g = c.geometry;
  g.groups = c.groups;
  const at::Tensor w = at::randn({c.out, c.in / c.groups, c.k, c.k}) * 0.2;
  const at::Tensor b = at::randn({c.out}) * 0.1;
  auto [w8, scale] = Int8Conv2d::quantize_weight(w);
  const Int8InputQuant in = int8_affine_u8_params(x.min().item<double>(), x.max().item<double>());
  return {w, b, Int8Conv2d::prepare(w8, scale, b, in, g)};
}

at::Tensor fp32_conv(const Layer& l, const at::Tensor& x) {
  const auto& g = l.op.geometry();
  const auto& p = g.padding;
  return at::conv2d(at::constant_pad_nd(x, {p[1], p[3], p[0], p[2]}, 0.0), l.weight, l.bias, g.stride,
                    at::IntArrayRef{0, 0}, g.dilation, g.groups);
}

TEST(Int8QuantizeU8, MatchesTheAtenTwinBitForBitAtEveryIsa) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({2, 5, 7, 3}) * 4.0;  // 210 elements: vector body and tail
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const bool channels_last : {false, true}) {
      at::Tensor xd = x.to(dtype);
      if (channels_last) xd = xd.contiguous(at::MemoryFormat::ChannelsLast);
      const float inv = 1.0F / 0.03F;
      const at::Tensor ref = (at::round(xd.to(at::kFloat) * inv) + 100.0).clamp(0, 255).to(at::kByte);
      for (const Isa isa : levels()) {
        const cpu::ScopedMaxIsa cap(isa);
        const at::Tensor q = int8_quantize_u8(xd, 0.03, 100);
        SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " " + c10::toString(dtype));
        EXPECT_TRUE(q.is_contiguous(at::MemoryFormat::ChannelsLast));
        EXPECT_TRUE(at::equal(q, ref));
        EXPECT_EQ(q.max().item<int>(), 255);  // both clamps reached
        EXPECT_EQ(q.min().item<int>(), 0);
      }
    }
  }
}

TEST(Int8Conv2d, AffineParamsKeepZeroExact) {
  const Int8InputQuant relu = int8_affine_u8_params(0.0, 6.0);
  EXPECT_EQ(relu.zero_point, 0);
  EXPECT_DOUBLE_EQ(relu.scale, 6.0 / 255.0);
  const Int8InputQuant mixed = int8_affine_u8_params(-1.0, 3.0);
  EXPECT_EQ(mixed.zero_point, 64);  // round(1 / (4/255)) = round(63.75)
  const Int8InputQuant positive = int8_affine_u8_params(2.0, 4.0);  // widened to [0, 4]
  EXPECT_EQ(positive.zero_point, 0);
  EXPECT_DOUBLE_EQ(positive.scale, 4.0 / 255.0);
  EXPECT_DOUBLE_EQ(int8_affine_u8_params(0.0, 0.0).scale, 1.0);
  EXPECT_THROW((void)int8_affine_u8_params(1.0, -1.0), hotpath::Error);
}

// oneDNN's int8 convolution against the twin (same quantization, float conv of the dequantized values):
// the int32 sums are exact, so only the float scaling order differs.
TEST(Int8Conv2d, MatchesItsReferenceTwinForEveryActivationAndGeometry) {
  for (const Case& c : cases()) {
    at::manual_seed(c.in + c.k);
    const at::Tensor x = at::randn({2, c.in, 11, 10});
    const Layer layer = make_layer(c, x);
    const at::Tensor ref_shape = layer.op.forward_reference(x);
    const at::Tensor residual = at::randn(ref_shape.sizes());
    for (const std::string_view act : kActs) {
      for (const bool with_residual : {false, true}) {
        const at::Tensor r = with_residual ? residual : at::Tensor();
        SCOPED_TRACE(std::string(c.name) + " act=" + std::string(act) + " residual=" + std::to_string(with_residual));
        const at::Tensor ref = layer.op.forward_reference(x, act, r);
        // The ISA levels change only the u8 quantizer (bit for bit, tested above): walk them once per case.
        const std::vector<Isa> walk = act == "relu" && !with_residual ? levels() : std::vector<Isa>{cpu::max_isa()};
        for (const Isa isa : walk) {
          const cpu::ScopedMaxIsa cap(isa);
          const at::Tensor y = layer.op.forward(x, act, r);
          ASSERT_EQ(y.sizes(), ref.sizes());
          EXPECT_EQ(y.scalar_type(), at::kFloat);
          EXPECT_LE(max_rel_diff(y, ref), 1e-5) << cpu::isa_name(isa);
        }
      }
    }
  }
}

TEST(Int8Conv2d, StaysCloseToFp32Conv) {
  for (const Case& c : cases()) {
    at::manual_seed(7);
    const at::Tensor x = at::relu(at::randn({2, c.in, 12, 12}));  // a post-ReLU activation, as in ResNet
    const Layer layer = make_layer(c, x);
    const at::Tensor fp32 = fp32_conv(layer, x);
    const double bound = layer.op.weight_bits() == 8 ? 0.02 : 0.03;  // 7-bit weights where oneDNN lacks VNNI
    EXPECT_LT(rel_norm_error(layer.op.forward(x), fp32), bound) << c.name;
    const at::Tensor residual = at::randn(fp32.sizes());
    EXPECT_LT(rel_norm_error(layer.op.forward(x, "relu", residual), at::relu(fp32 + residual)), bound) << c.name;
  }
}

TEST(Int8Conv2d, TakesBf16InputAndChannelsLast) {
  const Case c = cases()[0];
  const at::Tensor x = at::randn({1, c.in, 8, 8}).to(at::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
  const Layer layer = make_layer(c, x.to(at::kFloat));
  const at::Tensor residual = at::randn({1, c.out, 8, 8}).to(at::kBFloat16);
  const at::Tensor y = layer.op.forward(x, "relu", residual);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_LE(max_rel_diff(y, layer.op.forward_reference(x, "relu", residual)), 1e-2);
  EXPECT_TRUE(layer.op.forward(x.to(at::kFloat)).is_contiguous(at::MemoryFormat::ChannelsLast));
}

TEST(Int8Conv2d, SevenBitWeightsMatchTheTwinAndStayCloseToFp32) {
  const Case c = cases()[1];
  const at::Tensor x = at::relu(at::randn({2, c.in, 12, 12}));
  const Layer layer = make_layer(c, x);
  const auto [w8, scale] = Int8Conv2d::quantize_weight(layer.weight);
  const Int8Conv2d seven = Int8Conv2d::prepare(w8, scale, layer.bias, layer.op.input_quant(),
                                               {.stride = {2, 2}, .padding = {1, 1, 1, 1}},
                                               Int8MatmulMode::kSevenBitWeights);
  EXPECT_EQ(seven.weight_bits(), 7);
  EXPECT_EQ(layer.op.weight_bits(), int8_matmul_has_vnni() ? 8 : 7);  // kAuto
  EXPECT_LE(max_rel_diff(seven.forward(x, "relu"), seven.forward_reference(x, "relu")), 1e-5);
  EXPECT_LT(rel_norm_error(seven.forward(x), fp32_conv(layer, x)), 0.03);
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

TEST(Int8Conv2d, RefusesBadInputsNamingWhatWasExpected) {
  const auto [w8, scale] = Int8Conv2d::quantize_weight(at::randn({4, 3, 3, 3}));
  const Int8InputQuant in{0.1, 10};
  const auto has = [](const std::string& what, const char* part) { return what.find(part) != std::string::npos; };
  EXPECT_TRUE(has(error_of([&] { (void)Int8Conv2d::prepare(w8.to(at::kFloat), scale, {}, in, {}); }),
                  "weight must be int8 [O, I/groups, kh, kw]"));
  EXPECT_TRUE(has(error_of([&] { (void)Int8Conv2d::prepare(w8, scale.narrow(0, 0, 2), {}, in, {}); }),
                  "weight_scale must be float32 [4]"));
  EXPECT_TRUE(has(error_of([&] { (void)Int8Conv2d::prepare(w8, scale, {}, {0.1, 300}, {}); }),
                  "input_zero_point must be in [0, 255]"));
  EXPECT_TRUE(has(error_of([&] { (void)Int8Conv2d::prepare(w8, scale, {}, {0.0, 0}, {}); }), "input_scale"));
  EXPECT_TRUE(has(error_of([&] { (void)Int8Conv2d::prepare(w8, scale, {}, in, {.padding = {1, 1}}); }),
                  "padding must be 4 values"));
  const Int8Conv2d op = Int8Conv2d::prepare(w8, scale, {}, in, {.padding = {1, 1, 1, 1}});
  EXPECT_TRUE(has(error_of([&] { (void)op.forward(at::randn({1, 5, 8, 8})); }), "5 channels, expected 3"));
  EXPECT_TRUE(has(error_of([&] { (void)op.forward(at::randn({1, 3, 8})); }), "[N, C, H, W]"));
  EXPECT_TRUE(has(error_of([&] { (void)op.forward(at::randn({1, 3, 8, 8}), "swish"); }), "unknown activation \"swish\""));
  EXPECT_TRUE(has(error_of([&] { (void)op.forward(at::randn({1, 3, 8, 8}), "relu", at::randn({1, 4, 7, 8})); }),
                  "residual must be"));
}

TEST(Int8Conv2d, DispatchReportSaysWhatRan) {
  (void)int8_quantize_u8(at::randn({1, 2, 3, 3}), 0.1, 0);
  for (const Isa isa : levels()) {
    const cpu::ScopedMaxIsa cap(isa);
    bool found = false;
    for (const cpu::Choice& c : cpu::dispatch_choices()) {
      if (c.op != "int8_conv") continue;
      found = true;
      EXPECT_EQ(c.variant, isa == Isa::kScalar ? "portable" : cpu::isa_name(isa));
      EXPECT_NE(c.note.find("qconv_pointwise"), std::string::npos) << c.note;
      EXPECT_NE(c.note.find(int8_matmul_has_vnni() ? "8-bit weights" : "7-bit weights"), std::string::npos);
    }
    EXPECT_TRUE(found);
  }
}

}  // namespace
}  // namespace hotpath::ops
