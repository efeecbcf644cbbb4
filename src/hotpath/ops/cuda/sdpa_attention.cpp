// The CUDA side of attention(): PyTorch's scaled_dot_product_attention, which picks FlashAttention-2,
// the memory-efficient kernel, cuDNN's or the math fallback by itself. Plain ATen calls, so this file
// builds and runs on a machine without CUDA too (the CPU test compares it with reference_attention).
#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "hotpath/core/error.h"
#include "hotpath/ops/attention.h"

namespace hotpath::ops {
namespace {

// The key padding mask as SDPA's additive mask [B, 1, 1, Lk] in q's dtype: 0 where kept, the dtype's
// lowest value where masked. Additive, not boolean, so a sequence whose keys are all masked gets every
// score equal and the mean of V, as reference_attention gives (a boolean mask would give NaN or zeros).
// Its rows are laid out 16 elements apart (a view of [B, 1, 1, Lk rounded up to 16]): the memory-efficient
// kernel wants the mask's strides aligned, and ATen would otherwise pad a copy of it on every call.
std::optional<at::Tensor> additive_mask(const at::Tensor& q, const at::Tensor& key_padding_mask) {
  if (!key_padding_mask.defined()) return std::nullopt;
  double lowest = static_cast<double>(std::numeric_limits<float>::lowest());
  if (q.scalar_type() == at::kHalf) lowest = static_cast<double>(std::numeric_limits<c10::Half>::lowest());
  if (q.scalar_type() == at::kBFloat16) lowest = static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
  if (q.scalar_type() == at::kDouble) lowest = std::numeric_limits<double>::lowest();
  constexpr std::int64_t kAlign = 16;
  const std::int64_t batch = key_padding_mask.size(0);
  const std::int64_t keys = key_padding_mask.size(1);
  const at::Tensor masked = key_padding_mask.to(q.device()).eq(0).view({batch, 1, 1, keys});
  at::Tensor bias = at::zeros({batch, 1, 1, (keys + kAlign - 1) / kAlign * kAlign}, q.options()).narrow(3, 0, keys);
  bias.masked_fill_(masked, lowest);
  return bias;
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, double p) {
  HOTPATH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "sdpa attention: q, k, v must be [B, heads, L, d], got ",
                q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  HOTPATH_CHECK(!mask.defined() || (mask.dim() == 2 && mask.size(0) == q.size(0) && mask.size(1) == k.size(2)),
                "sdpa attention: key_padding_mask must be [B, Lk] = [", q.size(0), ", ", k.size(2), "], got ",
                mask.sizes());
  HOTPATH_CHECK(p >= 0.0 && p < 1.0, "sdpa attention: dropout p is ", p, ", expected [0, 1)");
}

}  // namespace

at::Tensor sdpa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& key_padding_mask, double dropout_p) {
  check_inputs(q, k, v, key_padding_mask, dropout_p);
  return at::scaled_dot_product_attention(q, k, v, additive_mask(q, key_padding_mask), dropout_p);
}

const char* sdpa_backend_name(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& key_padding_mask, double dropout_p) {
  check_inputs(q, k, v, key_padding_mask, dropout_p);
  const std::int64_t choice = at::_fused_sdp_choice(q, k, v, additive_mask(q, key_padding_mask), dropout_p);
  switch (static_cast<at::SDPBackend>(choice)) {
    case at::SDPBackend::flash_attention: return "flash";
    case at::SDPBackend::efficient_attention: return "memory-efficient";
    case at::SDPBackend::cudnn_attention: return "cudnn";
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::overrideable: return "overrideable";
    case at::SDPBackend::error: break;
  }
  return "none (ATen found no kernel for these inputs)";
}

}  // namespace hotpath::ops
