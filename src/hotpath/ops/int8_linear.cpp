#include "hotpath/ops/int8_linear.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::ops {
namespace {

bool is_float_or_bf16(const at::Tensor& t) { return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16; }

}  // namespace

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
                               Int8MatmulMode mode, Int8MatmulKernel kernel) {
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
  const bool own_gemm = kernel == Int8MatmulKernel::kHotpathGemm ||
                        (kernel == Int8MatmulKernel::kAuto && int8_gemm_by_default());
  // 7 bits where oneDNN's product saturates int16 (it runs without VNNI), and where int8_gemm's AVX2 kernel
  // runs: exact at 8 bits too, but 1.35× faster at 7 (its u8·s8 product, int8_gemm.h).
  const bool seven_bit =
      mode == Int8MatmulMode::kSevenBitWeights ||
      (mode == Int8MatmulMode::kAuto && (own_gemm ? int8_gemm_prefers_seven_bit_weights() : !int8_matmul_has_vnni()));
  if (seven_bit) {  // w·(63/127) rounded: the largest |w| = 127 maps to 63 exactly, the scale grows to match
    w = at::round(w.to(at::kFloat) * (63.0 / 127.0)).clamp(-63, 63).to(at::kChar);
    scale = scale * (127.0F / 63.0F);
    op.weight_bits_ = 7;
  }
  op.weight_kn_ = w.t().contiguous();
  if (own_gemm) op.packed_ = int8_gemm_pack(op.weight_kn_);
  if (kernel == Int8MatmulKernel::kOneDnnBrgemm ||
      (!own_gemm && kernel == Int8MatmulKernel::kAuto && int8_onednn_brgemm_by_default())) {
    try {
      op.brgemm_ = std::make_shared<const OneDnnInt8Matmul>(in_features, out_features,
                                                            op.weight_kn_.const_data_ptr<std::int8_t>());
    } catch (const Error&) {
      if (kernel == Int8MatmulKernel::kOneDnnBrgemm) throw;  // kAuto: no brgemm kernel here, at::_int_mm it is
    }
  }
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

// Past 16 MiB of int32 sums, row blocks of ≤ 2 MiB that stay in cache between the matmul and the
// epilogue: for BERT's 4096 × 768 → 3072 (48 MiB) that took 220 → 90 ms on one thread; at 4096 × 768 → 768
// (12 MiB) blocks were no faster (bench/int8_bench.cpp LinearInt8 vs LinearInt8Unblocked).
std::int64_t Int8Linear::acc_rows(std::int64_t m) const {
  constexpr std::int64_t kWholeBytes = std::int64_t{16} << 20;
  constexpr std::int64_t kBlockBytes = std::int64_t{2} << 20;
  const std::int64_t n = out_features();
  const std::int64_t block = 4 * m * n <= kWholeBytes ? m : std::max<std::int64_t>(64, kBlockBytes / (4 * n) / 16 * 16);
  return std::max<std::int64_t>(1, std::min(block, m));
}

at::Tensor Int8Linear::forward(const at::Tensor& x, std::string_view act, const at::Tensor& residual) const {
  const at::Tensor rows = rows_of(x, in_features());
  const auto shape = out_shape(x, out_features());
  check_activation(act, "Int8Linear::forward");
  if (rows.size(0) == 0) return at::empty(shape, x.options());
  const std::int64_t m = rows.size(0);
  at::Tensor out = at::empty(shape, rows.options());
  Buffers buf;
  buf.q = at::empty({m, in_features()}, rows.options().dtype(at::kChar));
  buf.x_scale = at::empty({m}, rows.options().dtype(at::kFloat));
  buf.acc = at::empty({acc_rows(m), out_features()}, rows.options().dtype(at::kInt));
  forward_out(rows, act, residual.defined() ? residual_rows(residual, shape) : residual, out, buf);
  return out;
}

void Int8Linear::forward_out(const at::Tensor& x, std::string_view act, const at::Tensor& residual, const at::Tensor& out,
                             const Buffers& buf, bool quantized) const {
  const std::int64_t k = in_features();
  const std::int64_t n = out_features();
  HOTPATH_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == k, "Int8Linear::forward_out: x ",
                x.defined() ? x.sizes() : c10::IntArrayRef{}, " must end in in_features = ", k);
  const std::int64_t m = x.numel() / k;
  check_activation(act, "Int8Linear::forward_out");
  HOTPATH_CHECK(out.defined() && out.is_contiguous() && out.numel() == m * n && is_float_or_bf16(out),
                "Int8Linear::forward_out: out must be a contiguous float32/bfloat16 tensor of ", m, " x ", n, " elements");
  HOTPATH_CHECK(buf.q.defined() && buf.q.scalar_type() == at::kChar && buf.q.is_contiguous() && buf.q.numel() == m * k,
                "Int8Linear::forward_out: buffer q must be contiguous int8 with ", m, " x ", k, " elements");
  HOTPATH_CHECK(buf.x_scale.defined() && buf.x_scale.scalar_type() == at::kFloat && buf.x_scale.numel() == m,
                "Int8Linear::forward_out: buffer x_scale must be float32 [", m, "]");
  HOTPATH_CHECK(buf.acc.defined() && buf.acc.scalar_type() == at::kInt && buf.acc.is_contiguous() && buf.acc.dim() == 2 &&
                    buf.acc.size(1) == n && buf.acc.size(0) >= 1,
                "Int8Linear::forward_out: buffer acc must be contiguous int32 [rows, ", n, "]");
  if (m == 0) return;
  const at::Tensor q = buf.q.view({m, k});
  const at::Tensor x_scale = buf.x_scale.view({m});
  if (!quantized) {
    const at::Tensor rows = rows_of(x, k);
    int8_quantize_rows_out(rows, q, x_scale);
  }
  const at::Tensor out2 = out.view({m, n});
  const at::Tensor r = residual.defined() ? residual.reshape({m, n}) : residual;
  const std::int64_t block = buf.acc.size(0);
  for (std::int64_t m0 = 0; m0 < m; m0 += block) {
    const std::int64_t len = std::min(block, m - m0);
    at::Tensor acc_block = buf.acc.narrow(0, 0, len);
    const at::Tensor q_block = q.narrow(0, m0, len);
    if (packed_.data.defined()) {
      int8_gemm_out(q_block, packed_, acc_block);
    } else if (!(brgemm_ &&
                 brgemm_->try_run(q_block.const_data_ptr<std::int8_t>(), len, acc_block.data_ptr<std::int32_t>()))) {
      at::_int_mm_out(acc_block, q_block, weight_kn_);
    }
    at::Tensor out_block = out2.narrow(0, m0, len);
    int8_dequantize_epilogue_out(acc_block, x_scale.narrow(0, m0, len), weight_scale_, bias_,
                                 r.defined() ? r.narrow(0, m0, len) : r, act, out_block);
  }
}

at::Tensor Int8Linear::forward_reference(const at::Tensor& x, std::string_view act, const at::Tensor& residual) const {
  const at::Tensor rows = rows_of(x, in_features()).to(at::kFloat);
  const auto shape = out_shape(x, out_features());
  const at::Tensor r = residual_rows(residual, shape);
  check_activation(act, "Int8Linear::forward");
  if (rows.size(0) == 0) return at::empty(shape, x.options());
  at::Tensor absmax = rows.abs().amax(1);
  const at::Tensor qmax = at::full_like(absmax, 127.0);
  absmax = at::where(absmax == 0, qmax, absmax);
  const at::Tensor x_scale = absmax / qmax;
  const at::Tensor q = at::round(rows * (qmax / absmax).unsqueeze(1)).clamp(-127, 127).to(at::kChar);
  // The exact int32 sums (in double: exact below 2^53), whichever product forward() runs; float as the sums.
  at::Tensor y = q.to(at::kDouble).mm(weight_kn_.to(at::kDouble)).to(at::kFloat) * x_scale.unsqueeze(1) * weight_scale_;
  if (bias_.defined()) y = y + bias_;
  if (r.defined()) y = y + r.to(at::kFloat);
  return apply_activation_reference(y, act).to(x.scalar_type()).view(shape);
}

}  // namespace hotpath::ops
