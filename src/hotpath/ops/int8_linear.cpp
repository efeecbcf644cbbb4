#include "hotpath/ops/int8_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "serial_note.h"

namespace hotpath::ops {
namespace {

using BF16 = c10::BFloat16;

enum class Act : std::uint8_t { kNone, kRelu, kRelu6, kGelu, kGeluTanh, kSilu, kSigmoid, kTanh };
// infer::kActivations (graph.h), in the order of Act.
constexpr std::string_view kActNames[] = {"none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"};

Act parse_act(std::string_view act) {
  for (std::size_t i = 0; i < std::size(kActNames); ++i) {
    if (kActNames[i] == act) return static_cast<Act>(i);
  }
  HOTPATH_CHECK(false, "int8_linear: unknown activation \"", act,
                "\" (expected none, relu, relu6, gelu, gelu_tanh, silu, sigmoid or tanh)");
  return Act::kNone;
}

struct NoResidual {};

struct QuantizeArgs {
  const void* x = nullptr;  // [M, K] f32 or bf16
  std::int8_t* q = nullptr;
  float* scale = nullptr;
  std::int64_t k = 0;
  float qmax = 127.0F;
};

struct EpilogueArgs {
  const std::int32_t* acc = nullptr;  // [M, N]
  const float* x_scale = nullptr;     // [M]
  const float* w_scale = nullptr;     // [N]
  const float* bias = nullptr;        // [N] or nullptr
  const void* residual = nullptr;     // [M, N] or nullptr
  bool residual_bf16 = false;
  void* out = nullptr;  // [M, N]
  bool out_bf16 = false;
  std::int64_t n = 0;
  Act act = Act::kNone;
};

// ---- one compilation per ISA ----------------------------------------------------------------------
#define HOTPATH_BODY inline __attribute__((always_inline))

namespace portable {
constexpr int W = 4;
#include "int8_linear_kernels.inc"
}  // namespace portable

struct Kernels {
  void (*quantize_f32)(const QuantizeArgs&, std::int64_t, std::int64_t);
  void (*quantize_bf16)(const QuantizeArgs&, std::int64_t, std::int64_t);
  void (*epilogue)(const EpilogueArgs&, std::int64_t, std::int64_t);
};
const Kernels kPortable{portable::quantize_rows_f32, portable::quantize_rows_bf16, portable::epilogue};

#ifdef HOTPATH_X86_KERNELS
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int W = 8;
#include "int8_linear_kernels.inc"
}  // namespace avx2
#pragma GCC pop_options
const Kernels kAvx2{avx2::quantize_rows_f32, avx2::quantize_rows_bf16, avx2::epilogue};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
namespace avx512 {
constexpr int W = 16;
#include "int8_linear_kernels.inc"
}  // namespace avx512
#pragma GCC pop_options
const Kernels kAvx512{avx512::quantize_rows_f32, avx512::quantize_rows_bf16, avx512::epilogue};
#endif
#undef HOTPATH_BODY

// The note every report of this op carries: what the int8 matmul itself runs (oneDNN, not capped by
// HOTPATH_MAX_ISA) and whether the weights are 7-bit; plus the OpenMP note.
const char* dispatch_note() {
  static const std::string note = [] {
    std::string s = int8_linear_matmul_note();
    if (std::strlen(detail::kSerialNote) != 0) s.append("; ").append(detail::kSerialNote);
    return s;
  }();
  return note.c_str();
}

const cpu::OpDispatch kDispatch{"int8_linear",
                                {{"avx512", cpu::Isa::kAvx512, cpu::kX86Kernels},
                                 {"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels},
                                 {"portable", cpu::Isa::kScalar}},
                                {.note = dispatch_note()}};

const Kernels& kernels() {
  const std::size_t chosen = kDispatch.select();
#ifdef HOTPATH_X86_KERNELS
  if (chosen == 0) return kAvx512;
  if (chosen == 1) return kAvx2;
#endif
  (void)chosen;
  return kPortable;
}

bool is_float_or_bf16(const at::Tensor& t) { return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16; }

// Rows per parallel task: about 16 Ki elements, at least one row.
std::int64_t row_grain(std::int64_t row_len) { return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, row_len)); }

}  // namespace

bool int8_matmul_has_vnni() {
#ifdef HOTPATH_X86_KERNELS
  static const bool vnni = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
  }();
  return vnni;
#else
  return false;
#endif
}

const char* int8_linear_matmul_note() {
  return int8_matmul_has_vnni() ? "matmul at::_int_mm (oneDNN, VNNI): 8-bit weights"
                                : "matmul at::_int_mm (oneDNN, no VNNI): 7-bit weights (u8*s8 pairs saturate int16)";
}

at::Tensor apply_activation_reference(const at::Tensor& x, std::string_view act) {
  switch (parse_act(act)) {
    case Act::kNone: return x;
    case Act::kRelu: return at::relu(x);
    case Act::kRelu6: return at::clamp(x, 0.0, 6.0);
    case Act::kGelu: return at::gelu(x, "none");
    case Act::kGeluTanh: return at::gelu(x, "tanh");
    case Act::kSilu: return at::silu(x);
    case Act::kSigmoid: return at::sigmoid(x);
    case Act::kTanh: return at::tanh(x);
  }
  return x;
}

std::pair<at::Tensor, at::Tensor> int8_quantize_rows(const at::Tensor& x, int qmax) {
  HOTPATH_CHECK(x.defined() && x.dim() == 2 && x.device().is_cpu() && is_float_or_bf16(x),
                "int8_quantize_rows: expected a CPU float32 or bfloat16 tensor [M, K]; got ",
                x.defined() ? x.toString() : std::string("an undefined tensor"), " ",
                x.defined() ? x.sizes() : c10::IntArrayRef{});
  HOTPATH_CHECK(qmax >= 1 && qmax <= 127, "int8_quantize_rows: qmax must be in [1, 127]; got ", qmax);
  const at::Tensor xc = x.contiguous();
  at::Tensor q = at::empty(xc.sizes(), xc.options().dtype(at::kChar));
  at::Tensor scale = at::empty({xc.size(0)}, xc.options().dtype(at::kFloat));
  QuantizeArgs a;
  a.x = xc.const_data_ptr();
  a.q = q.data_ptr<std::int8_t>();
  a.scale = scale.data_ptr<float>();
  a.k = xc.size(1);
  a.qmax = static_cast<float>(qmax);
  const Kernels& k = kernels();
  const auto run = xc.scalar_type() == at::kFloat ? k.quantize_f32 : k.quantize_bf16;
  at::parallel_for(0, xc.size(0), row_grain(a.k), [&](std::int64_t m0, std::int64_t m1) { run(a, m0, m1); });
  return {q, scale};
}

at::Tensor int8_dequantize_epilogue(const at::Tensor& acc, const at::Tensor& x_scale, const at::Tensor& w_scale,
                                    const at::Tensor& bias, const at::Tensor& residual, std::string_view act,
                                    at::ScalarType out_dtype) {
  HOTPATH_CHECK(acc.defined() && acc.dim() == 2 && acc.scalar_type() == at::kInt && acc.device().is_cpu(),
                "int8_dequantize_epilogue: acc must be a CPU int32 tensor [M, N]");
  const std::int64_t m = acc.size(0);
  const std::int64_t n = acc.size(1);
  HOTPATH_CHECK(x_scale.defined() && x_scale.scalar_type() == at::kFloat && x_scale.numel() == m,
                "int8_dequantize_epilogue: x_scale must be float32 [", m, "]");
  HOTPATH_CHECK(w_scale.defined() && w_scale.scalar_type() == at::kFloat && w_scale.numel() == n,
                "int8_dequantize_epilogue: w_scale must be float32 [", n, "]");
  HOTPATH_CHECK(!bias.defined() || (bias.scalar_type() == at::kFloat && bias.numel() == n),
                "int8_dequantize_epilogue: bias must be float32 [", n, "]");
  HOTPATH_CHECK(!residual.defined() || (is_float_or_bf16(residual) && residual.numel() == m * n),
                "int8_dequantize_epilogue: residual must be float32 or bfloat16 with ", m, " x ", n, " elements");
  HOTPATH_CHECK(out_dtype == at::kFloat || out_dtype == at::kBFloat16,
                "int8_dequantize_epilogue: out_dtype must be float32 or bfloat16");
  const Act a_kind = parse_act(act);
  const at::Tensor acc_c = acc.contiguous();
  const at::Tensor xs = x_scale.contiguous();
  const at::Tensor ws = w_scale.contiguous();
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  const at::Tensor r = residual.defined() ? residual.contiguous() : residual;
  at::Tensor out = at::empty({m, n}, acc.options().dtype(out_dtype));
  EpilogueArgs a;
  a.acc = acc_c.const_data_ptr<std::int32_t>();
  a.x_scale = xs.const_data_ptr<float>();
  a.w_scale = ws.const_data_ptr<float>();
  a.bias = b.defined() ? b.const_data_ptr<float>() : nullptr;
  a.residual = r.defined() ? r.const_data_ptr() : nullptr;
  a.residual_bf16 = r.defined() && r.scalar_type() == at::kBFloat16;
  a.out = out.data_ptr();
  a.out_bf16 = out_dtype == at::kBFloat16;
  a.n = n;
  a.act = a_kind;
  const auto run = kernels().epilogue;
  at::parallel_for(0, m, row_grain(n), [&](std::int64_t m0, std::int64_t m1) { run(a, m0, m1); });
  return out;
}

std::pair<at::Tensor, at::Tensor> Int8Linear::quantize_weight(const at::Tensor& weight) {
  HOTPATH_CHECK(weight.defined() && weight.dim() == 2 && weight.is_floating_point(),
                "Int8Linear::quantize_weight: expected a floating-point weight [O, I]");
  const at::Tensor w = weight.detach().to(at::kCPU, at::kFloat);
  at::Tensor absmax = w.abs().amax(1);
  absmax = at::where(absmax == 0, at::ones_like(absmax) * 127.0, absmax);
  const at::Tensor scale = absmax / at::full_like(absmax, 127.0);
  const at::Tensor q = at::round(w * (at::full_like(absmax, 127.0) / absmax).unsqueeze(1)).clamp(-127, 127).to(at::kChar);
  return {q.contiguous(), scale.contiguous()};
}

Int8Linear Int8Linear::prepare(const at::Tensor& weight_int8, const at::Tensor& weight_scale, const at::Tensor& bias,
                               Int8MatmulMode mode) {
  HOTPATH_CHECK(weight_int8.defined() && weight_int8.scalar_type() == at::kChar && weight_int8.dim() == 2,
                "Int8Linear: weight must be int8 [out_features, in_features]; got ",
                weight_int8.defined() ? weight_int8.toString() : std::string("undefined"), " ",
                weight_int8.defined() ? weight_int8.sizes() : c10::IntArrayRef{});
  const std::int64_t out_features = weight_int8.size(0);
  const std::int64_t in_features = weight_int8.size(1);
  HOTPATH_CHECK(out_features > 0 && in_features > 0, "Int8Linear: weight ", weight_int8.sizes(), " is empty");
  HOTPATH_CHECK(weight_scale.defined() && weight_scale.scalar_type() == at::kFloat && weight_scale.dim() == 1 &&
                    weight_scale.size(0) == out_features,
                "Int8Linear: weight_scale must be float32 [", out_features, "]; got ",
                weight_scale.defined() ? weight_scale.toString() : std::string("undefined"), " ",
                weight_scale.defined() ? weight_scale.sizes() : c10::IntArrayRef{});
  HOTPATH_CHECK((weight_scale > 0).all().item<bool>() && weight_scale.isfinite().all().item<bool>(),
                "Int8Linear: weight_scale must be finite and > 0");
  HOTPATH_CHECK(!bias.defined() || (bias.is_floating_point() && bias.dim() == 1 && bias.size(0) == out_features),
                "Int8Linear: bias must be floating point [", out_features, "]; got ",
                bias.defined() ? bias.sizes() : c10::IntArrayRef{});
  Int8Linear op;
  at::Tensor w = weight_int8.to(at::kCPU);
  at::Tensor scale = weight_scale.to(at::kCPU).clone();
  const bool seven_bit = mode == Int8MatmulMode::kSevenBitWeights || (mode == Int8MatmulMode::kAuto && !int8_matmul_has_vnni());
  if (seven_bit) {  // w·(63/127) rounded: the largest |w| = 127 maps to 63 exactly, the scale grows to match
    w = at::round(w.to(at::kFloat) * (63.0 / 127.0)).clamp(-63, 63).to(at::kChar);
    scale = scale * (127.0F / 63.0F);
    op.weight_bits_ = 7;
  }
  op.weight_kn_ = w.t().contiguous();
  op.weight_scale_ = scale.contiguous();
  if (bias.defined()) op.bias_ = bias.detach().to(at::kCPU, at::kFloat).contiguous();
  return op;
}

namespace {

// x [..., I] → [M, I] contiguous, checked; residual → [M, O] contiguous or undefined.
at::Tensor rows_of(const at::Tensor& x, std::int64_t in_features) {
  HOTPATH_CHECK(x.defined() && x.device().is_cpu() && is_float_or_bf16(x),
                "Int8Linear::forward: x must be a CPU float32 or bfloat16 tensor; got ",
                x.defined() ? x.toString() : std::string("undefined"));
  HOTPATH_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Int8Linear::forward: x ", x.sizes(),
                " must end in in_features = ", in_features);
  return x.reshape({-1, in_features}).contiguous();
}

std::vector<std::int64_t> out_shape(const at::Tensor& x, std::int64_t out_features) {
  std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out_features;
  return shape;
}

at::Tensor residual_rows(const at::Tensor& residual, const std::vector<std::int64_t>& shape) {
  if (!residual.defined()) return residual;
  HOTPATH_CHECK(residual.device().is_cpu() && is_float_or_bf16(residual) && residual.sizes() == c10::IntArrayRef(shape),
                "Int8Linear::forward: residual must be a CPU float32 or bfloat16 tensor ", c10::IntArrayRef(shape),
                "; got ", residual.toString(), " ", residual.sizes());
  return residual.reshape({-1, shape.back()}).contiguous();
}

}  // namespace

at::Tensor Int8Linear::forward(const at::Tensor& x, std::string_view act, const at::Tensor& residual) const {
  const at::Tensor rows = rows_of(x, in_features());
  const auto shape = out_shape(x, out_features());
  const at::Tensor r = residual_rows(residual, shape);
  parse_act(act);
  if (rows.size(0) == 0) return at::empty(shape, x.options());
  const auto [q, x_scale] = int8_quantize_rows(rows);
  const at::Tensor acc = at::_int_mm(q, weight_kn_);
  return int8_dequantize_epilogue(acc, x_scale, weight_scale_, bias_, r, act, x.scalar_type()).view(shape);
}

at::Tensor Int8Linear::forward_reference(const at::Tensor& x, std::string_view act, const at::Tensor& residual) const {
  const at::Tensor rows = rows_of(x, in_features()).to(at::kFloat);
  const auto shape = out_shape(x, out_features());
  const at::Tensor r = residual_rows(residual, shape);
  parse_act(act);
  if (rows.size(0) == 0) return at::empty(shape, x.options());
  at::Tensor absmax = rows.abs().amax(1);
  const at::Tensor qmax = at::full_like(absmax, 127.0);
  absmax = at::where(absmax == 0, qmax, absmax);
  const at::Tensor x_scale = absmax / qmax;
  const at::Tensor q = at::round(rows * (qmax / absmax).unsqueeze(1)).clamp(-127, 127).to(at::kChar);
  at::Tensor y = at::_int_mm(q, weight_kn_).to(at::kFloat) * x_scale.unsqueeze(1) * weight_scale_;
  if (bias_.defined()) y = y + bias_;
  if (r.defined()) y = y + r.to(at::kFloat);
  return apply_activation_reference(y, act).to(x.scalar_type()).view(shape);
}

}  // namespace hotpath::ops
