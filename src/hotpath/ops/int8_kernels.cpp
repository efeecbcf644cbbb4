#include "hotpath/ops/int8_kernels.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <type_traits>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/ops/int8_gemm.h"
#include "hotpath/ops/onednn_matmul.h"
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
  HOTPATH_CHECK(false, "int8: unknown activation \"", act,
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

struct LayerNormArgs {
  const float* x = nullptr;         // [M, K]
  const float* residual = nullptr;  // [M, K] or nullptr
  const float* weight = nullptr;    // [K]
  const float* bias = nullptr;      // [K]
  float eps = 1e-5F;
  float* out = nullptr;             // [M, K]
  std::int8_t* q = nullptr;         // [M, K] or nullptr: out's row quantization too
  float* scale = nullptr;           // [M]
  float qmax = 127.0F;
  std::int64_t k = 0;
};

struct QuantizeU8Args {
  const void* x = nullptr;  // f32 or bf16, numel elements
  std::uint8_t* q = nullptr;
  float inv_scale = 1.0F;
  float zero_point = 0.0F;
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
#include "int8_kernels.inc"
}  // namespace portable

struct Kernels {
  void (*quantize_f32)(const QuantizeArgs&, std::int64_t, std::int64_t);
  void (*quantize_bf16)(const QuantizeArgs&, std::int64_t, std::int64_t);
  void (*epilogue)(const EpilogueArgs&, std::int64_t, std::int64_t);
  void (*quantize_u8_f32)(const QuantizeU8Args&, std::int64_t, std::int64_t);
  void (*quantize_u8_bf16)(const QuantizeU8Args&, std::int64_t, std::int64_t);
  void (*layer_norm)(const LayerNormArgs&, std::int64_t, std::int64_t);
};
const Kernels kPortable{portable::quantize_rows_f32, portable::quantize_rows_bf16, portable::epilogue,
                        portable::quantize_u8_f32, portable::quantize_u8_bf16, portable::layer_norm_rows};

#ifdef HOTPATH_X86_KERNELS
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int W = 8;
#include "int8_kernels.inc"
}  // namespace avx2
#pragma GCC pop_options
const Kernels kAvx2{avx2::quantize_rows_f32, avx2::quantize_rows_bf16, avx2::epilogue, avx2::quantize_u8_f32,
                    avx2::quantize_u8_bf16, avx2::layer_norm_rows};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
namespace avx512 {
constexpr int W = 16;
#include "int8_kernels.inc"
}  // namespace avx512
#pragma GCC pop_options
const Kernels kAvx512{avx512::quantize_rows_f32, avx512::quantize_rows_bf16, avx512::epilogue,
                      avx512::quantize_u8_f32, avx512::quantize_u8_bf16, avx512::layer_norm_rows};
#endif
#undef HOTPATH_BODY

// The notes the reports of these ops carry: what the int8 matmul / convolution itself runs (oneDNN, not
// capped by HOTPATH_MAX_ISA) and, for the matmul, whether the weights are 7-bit; plus the OpenMP note.
std::string with_serial_note(std::string note) {
  if (std::strlen(detail::kSerialNote) != 0) note.append("; ").append(detail::kSerialNote);
  return note;
}
const char* linear_note() {
  static const std::string note = with_serial_note(int8_linear_matmul_note());
  return note.c_str();
}
const char* conv_note() {
  static const std::string note = with_serial_note(int8_conv_note());
  return note.c_str();
}

const cpu::OpDispatch kLinearDispatch{"int8_linear",
                                      {{"avx512", cpu::Isa::kAvx512, cpu::kX86Kernels},
                                       {"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels},
                                       {"portable", cpu::Isa::kScalar}},
                                      {.note = linear_note()}};
const cpu::OpDispatch kConvDispatch{"int8_conv",
                                    {{"avx512", cpu::Isa::kAvx512, cpu::kX86Kernels},
                                     {"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels},
                                     {"portable", cpu::Isa::kScalar}},
                                    {.note = conv_note()}};

const Kernels& kernels(const cpu::OpDispatch& dispatch) {
  const std::size_t chosen = dispatch.select();
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

namespace {

struct MatmulIsa {
  bool vnni = false;
  std::string note;
  std::string conv_note;
};

const MatmulIsa& matmul_isa() {
  static const MatmulIsa isa = [] {
    MatmulIsa m;
    const bool cpu_vnni = cpu::detected_vnni();
    const std::string cap = cpu::onednn_cap_below_vnni();
    m.vnni = cpu_vnni && cap.empty();
    const std::string why = !cpu_vnni ? "this CPU lacks VNNI" : cap;
    if (int8_gemm_by_default()) {
      const std::string reason = !int8_gemm_replaces_int_mm()                ? "forced by HOTPATH_INT8_MATMUL=int8_gemm"
                              : at::globalContext().userEnabledMkldnn() ? "at::_int_mm would run its scalar loop: this CPU lacks AVX512_VNNI"
                                                                        : "at::_int_mm would run its scalar loop: oneDNN is disabled";
      m.note = "matmul hotpath int8_gemm (op int8_gemm; " + reason +
               "): 7-bit weights where its AVX2 kernel runs (u8*s8 product), 8-bit on the others";
    } else {
      m.note = m.vnni ? "matmul at::_int_mm (oneDNN, VNNI; not capped by HOTPATH_MAX_ISA): 8-bit weights"
                      : "matmul at::_int_mm (oneDNN without VNNI: " + why +
                            "): 7-bit weights (its u8*s8 pairs saturate int16 with 8-bit ones)";
      if (m.vnni && int8_onednn_brgemm_by_default()) {
        try {  // what Int8Linear::prepare finds: a product oneDNN has a brgemm kernel for
          const std::vector<std::int8_t> probe(64 * 64, 1);
          const OneDnnInt8Matmul brgemm(64, 64, probe.data());
          m.note = "matmul oneDNN's brgemm kernel called directly (Debian libdnnl, " + brgemm.implementation() +
                   "; at::_int_mm past " + std::to_string(OneDnnInt8Matmul::kMaxRowCounts) +
                   " row counts a layer): 8-bit weights";
        } catch (const Error&) {  // no brgemm kernel here: at::_int_mm
        }
      }
    }
    m.conv_note = m.vnni ? "convolution onednn::qconv_pointwise (u8 x s8, VNNI): 8-bit weights"
                         : "convolution onednn::qconv_pointwise (u8 x s8 without VNNI: " + why + "): 7-bit weights";
    return m;
  }();
  return isa;
}

}  // namespace

bool int8_matmul_has_vnni() { return matmul_isa().vnni; }

const char* int8_linear_matmul_note() { return matmul_isa().note.c_str(); }

const char* int8_conv_note() { return matmul_isa().conv_note.c_str(); }

void check_activation(std::string_view act, std::string_view where) {
  for (const std::string_view name : kActNames) {
    if (name == act) return;
  }
  HOTPATH_CHECK(false, where, ": unknown activation \"", act,
                "\" (expected none, relu, relu6, gelu, gelu_tanh, silu, sigmoid or tanh)");
}

at::Tensor int8_quantize_u8(const at::Tensor& x, double scale, std::int64_t zero_point) {
  HOTPATH_CHECK(x.defined() && x.dim() == 4 && x.device().is_cpu() && is_float_or_bf16(x),
                "int8_quantize_u8: expected a CPU float32 or bfloat16 tensor [N, C, H, W]; got ",
                x.defined() ? x.toString() : std::string("an undefined tensor"), " ",
                x.defined() ? x.sizes() : c10::IntArrayRef{});
  HOTPATH_CHECK(scale > 0.0 && std::isfinite(scale), "int8_quantize_u8: scale must be finite and > 0; got ", scale);
  HOTPATH_CHECK(zero_point >= 0 && zero_point <= 255, "int8_quantize_u8: zero_point must be in [0, 255]; got ",
                zero_point);
  const at::Tensor xc = x.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor q = at::empty(xc.sizes(), xc.options().dtype(at::kByte).memory_format(at::MemoryFormat::ChannelsLast));
  QuantizeU8Args a;
  a.x = xc.const_data_ptr();
  a.q = q.data_ptr<std::uint8_t>();
  a.inv_scale = 1.0F / static_cast<float>(scale);
  a.zero_point = static_cast<float>(zero_point);
  const Kernels& k = kernels(kConvDispatch);
  const auto run = xc.scalar_type() == at::kFloat ? k.quantize_u8_f32 : k.quantize_u8_bf16;
  constexpr std::int64_t kGrain = 32768;
  at::parallel_for(0, xc.numel(), kGrain, [&](std::int64_t i0, std::int64_t i1) { run(a, i0, i1); });
  return q;
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

void int8_quantize_rows_out(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale, int qmax) {
  HOTPATH_CHECK(x.defined() && x.dim() == 2 && x.device().is_cpu() && is_float_or_bf16(x),
                "int8_quantize_rows: expected a CPU float32 or bfloat16 tensor [M, K]; got ",
                x.defined() ? x.toString() : std::string("an undefined tensor"), " ",
                x.defined() ? x.sizes() : c10::IntArrayRef{});
  HOTPATH_CHECK(qmax >= 1 && qmax <= 127, "int8_quantize_rows: qmax must be in [1, 127]; got ", qmax);
  HOTPATH_CHECK(q.defined() && q.scalar_type() == at::kChar && q.is_contiguous() && q.numel() == x.numel() &&
                    scale.defined() && scale.scalar_type() == at::kFloat && scale.is_contiguous() &&
                    scale.numel() == x.size(0),
                "int8_quantize_rows: q must be contiguous int8 with ", x.size(0), " x ", x.size(1),
                " elements and scale contiguous float32 [", x.size(0), "]");
  const at::Tensor xc = x.contiguous();
  QuantizeArgs a;
  a.x = xc.const_data_ptr();
  a.q = static_cast<std::int8_t*>(q.data_ptr());
  a.scale = static_cast<float*>(scale.data_ptr());
  a.k = xc.size(1);
  a.qmax = static_cast<float>(qmax);
  const Kernels& k = kernels(kLinearDispatch);
  const auto run = xc.scalar_type() == at::kFloat ? k.quantize_f32 : k.quantize_bf16;
  at::parallel_for(0, xc.size(0), row_grain(a.k), [&](std::int64_t m0, std::int64_t m1) { run(a, m0, m1); });
}

std::pair<at::Tensor, at::Tensor> int8_quantize_rows(const at::Tensor& x, int qmax) {
  HOTPATH_CHECK(x.defined() && x.dim() == 2 && x.device().is_cpu() && is_float_or_bf16(x),
                "int8_quantize_rows: expected a CPU float32 or bfloat16 tensor [M, K]; got ",
                x.defined() ? x.toString() : std::string("an undefined tensor"), " ",
                x.defined() ? x.sizes() : c10::IntArrayRef{});
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  at::Tensor scale = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  int8_quantize_rows_out(x, q, scale, qmax);
  return {q, scale};
}

void layer_norm_rows_out(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                         const at::Tensor& bias, double eps, const at::Tensor& out, const at::Tensor& q,
                         const at::Tensor& x_scale) {
  HOTPATH_CHECK(x.defined() && x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(),
                "layer_norm_rows_out: x must be a contiguous CPU float32 tensor [M, K]; got ",
                x.defined() ? x.toString() : std::string("undefined"), " ", x.defined() ? x.sizes() : c10::IntArrayRef{});
  const std::int64_t m = x.size(0);
  const std::int64_t k = x.size(1);
  const auto rows_like_x = [&](const at::Tensor& t) {
    return t.defined() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == m * k;
  };
  HOTPATH_CHECK(!residual.defined() || rows_like_x(residual), "layer_norm_rows_out: residual must be contiguous float32 with ",
                m, " x ", k, " elements");
  HOTPATH_CHECK(rows_like_x(out), "layer_norm_rows_out: out must be contiguous float32 with ", m, " x ", k, " elements");
  HOTPATH_CHECK(weight.defined() && bias.defined() && weight.scalar_type() == at::kFloat &&
                    bias.scalar_type() == at::kFloat && weight.is_contiguous() && bias.is_contiguous() &&
                    weight.numel() == k && bias.numel() == k,
                "layer_norm_rows_out: weight and bias must be contiguous float32 [", k, "]");
  HOTPATH_CHECK(q.defined() == x_scale.defined(), "layer_norm_rows_out: q and x_scale go together");
  if (q.defined()) {
    HOTPATH_CHECK(q.scalar_type() == at::kChar && q.is_contiguous() && q.numel() == m * k && x_scale.scalar_type() == at::kFloat &&
                      x_scale.is_contiguous() && x_scale.numel() == m,
                  "layer_norm_rows_out: q must be contiguous int8 with ", m, " x ", k, " elements, x_scale float32 [", m, "]");
  }
  LayerNormArgs a;
  a.x = x.const_data_ptr<float>();
  a.residual = residual.defined() ? residual.const_data_ptr<float>() : nullptr;
  a.weight = weight.const_data_ptr<float>();
  a.bias = bias.const_data_ptr<float>();
  a.eps = static_cast<float>(eps);
  a.out = static_cast<float*>(out.data_ptr());
  a.q = q.defined() ? static_cast<std::int8_t*>(q.data_ptr()) : nullptr;
  a.scale = q.defined() ? static_cast<float*>(x_scale.data_ptr()) : nullptr;
  a.k = k;
  const auto run = kernels(kLinearDispatch).layer_norm;
  at::parallel_for(0, m, row_grain(k), [&](std::int64_t m0, std::int64_t m1) { run(a, m0, m1); });
}

void int8_dequantize_epilogue_out(const at::Tensor& acc, const at::Tensor& x_scale, const at::Tensor& w_scale,
                                  const at::Tensor& bias, const at::Tensor& residual, std::string_view act,
                                  at::Tensor& out) {
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
  HOTPATH_CHECK(out.defined() && is_float_or_bf16(out) && out.is_contiguous() && out.numel() == m * n,
                "int8_dequantize_epilogue: out must be a contiguous float32 or bfloat16 tensor of ", m, " x ", n,
                " elements");
  const Act a_kind = parse_act(act);
  const at::Tensor acc_c = acc.contiguous();
  const at::Tensor xs = x_scale.contiguous();
  const at::Tensor ws = w_scale.contiguous();
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  const at::Tensor r = residual.defined() ? residual.contiguous() : residual;
  EpilogueArgs a;
  a.acc = acc_c.const_data_ptr<std::int32_t>();
  a.x_scale = xs.const_data_ptr<float>();
  a.w_scale = ws.const_data_ptr<float>();
  a.bias = b.defined() ? b.const_data_ptr<float>() : nullptr;
  a.residual = r.defined() ? r.const_data_ptr() : nullptr;
  a.residual_bf16 = r.defined() && r.scalar_type() == at::kBFloat16;
  a.out = out.data_ptr();
  a.out_bf16 = out.scalar_type() == at::kBFloat16;
  a.n = n;
  a.act = a_kind;
  const auto run = kernels(kLinearDispatch).epilogue;
  at::parallel_for(0, m, row_grain(n), [&](std::int64_t m0, std::int64_t m1) { run(a, m0, m1); });
}

at::Tensor int8_dequantize_epilogue(const at::Tensor& acc, const at::Tensor& x_scale, const at::Tensor& w_scale,
                                    const at::Tensor& bias, const at::Tensor& residual, std::string_view act,
                                    at::ScalarType out_dtype) {
  HOTPATH_CHECK(out_dtype == at::kFloat || out_dtype == at::kBFloat16,
                "int8_dequantize_epilogue: out_dtype must be float32 or bfloat16");
  HOTPATH_CHECK(acc.defined() && acc.dim() == 2, "int8_dequantize_epilogue: acc must be a CPU int32 tensor [M, N]");
  at::Tensor out = at::empty({acc.size(0), acc.size(1)}, acc.options().dtype(out_dtype));
  int8_dequantize_epilogue_out(acc, x_scale, w_scale, bias, residual, act, out);
  return out;
}

}  // namespace hotpath::ops
