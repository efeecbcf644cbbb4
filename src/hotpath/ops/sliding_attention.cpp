#include "hotpath/ops/sliding_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "serial_note.h"
#include "thread_scratch.h"

namespace hotpath::ops {
namespace {

using detail::round_up;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr std::int64_t kSlidingRows = 32;  // queries per block (they share one packed slice of K)

// One (batch, head): contiguous fp32 [L, d] q, k, v, the sequence's roles and its global keys (ascending).
struct SlidingHead {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const std::int8_t* roles = nullptr;
  const std::int64_t* globals = nullptr;
  std::int64_t n_globals = 0;
  std::int64_t len = 0;
  std::int64_t d = 0;
  std::int64_t window = 0;
  float scale = 1.0F;
};

struct SlidingForward {
  SlidingHead head;
  float* out = nullptr;  // [L, d]
  float* lse = nullptr;  // [L] or nullptr
};

struct SlidingBackward {
  SlidingHead head;
  const float* out = nullptr;
  const float* dout = nullptr;
  const float* lse = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

// K and V packed (d × columns each), two [rows × columns] tiles and two compacted rows; columns ≤
// 2·window + rows + G, padded to the widest vector.
std::int64_t sliding_scratch_floats(std::int64_t d, std::int64_t window, std::int64_t globals) {
  const std::int64_t cols = round_up(2 * window + kSlidingRows + globals, 16);
  return 2 * d * cols + 2 * kSlidingRows * cols + 2 * cols;
}

#define HOTPATH_BODY inline __attribute__((always_inline))

namespace portable {
constexpr int W = 4;
#include "sliding_attention_kernels.inc"
}  // namespace portable

struct Kernels {
  const char* name;
  void (*forward)(const SlidingForward&, float*);
  void (*backward)(const SlidingBackward&, float*);
};
const Kernels kPortable{"portable", portable::sliding_forward, portable::sliding_backward};

#ifdef HOTPATH_X86_KERNELS
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int W = 8;
#include "sliding_attention_kernels.inc"
}  // namespace avx2
#pragma GCC pop_options
const Kernels kAvx2{"avx2", avx2::sliding_forward, avx2::sliding_backward};

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
namespace avx512 {
constexpr int W = 16;
#include "sliding_attention_kernels.inc"
}  // namespace avx512
#pragma GCC pop_options
const Kernels kAvx512{"avx512", avx512::sliding_forward, avx512::sliding_backward};
#endif

const cpu::OpDispatch kDispatch{"sliding_attention",
                                {{"avx512", cpu::Isa::kAvx512, cpu::kX86Kernels},
                                 {"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels},
                                 {"portable", cpu::Isa::kScalar}},
                                {.note = detail::kSerialNote}};

const Kernels& kernels() {
  const std::size_t chosen = kDispatch.select();
#ifdef HOTPATH_X86_KERNELS
  if (chosen == 0) return kAvx512;
  if (chosen == 1) return kAvx2;
#endif
  (void)chosen;
  return kPortable;
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t window,
                  const at::Tensor& roles) {
  HOTPATH_CHECK(q.dim() == 4, "sliding_window_attention: q must be [batch, heads, length, head_dim], got "
                                 , q.dim(), " dimensions");
  HOTPATH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(),
                "sliding_window_attention: q, k and v must have one shape, got ", q.sizes(), ", ", k.sizes()
                                                                                , ", ", v.sizes());
  HOTPATH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
                "sliding_window_attention: q, k and v must have one dtype");
  HOTPATH_CHECK(window >= 0, "sliding_window_attention: window must be >= 0, got ", window);
  HOTPATH_CHECK(roles.defined() && roles.dim() == 2 && roles.size(0) == q.size(0) && roles.size(1) == q.size(2),
                "sliding_window_attention: roles must be [batch, length] = [", q.size(0), ", ", q.size(2)
                                                                             , "]");
}

// The kernels' view of the roles: int8 on the CPU, and each sequence's global keys.
struct RoleIndex {
  at::Tensor roles;                                // int8 [B, L]
  std::vector<std::vector<std::int64_t>> globals;  // per sequence, ascending
  std::int64_t max_globals = 0;
};

RoleIndex index_roles(const at::Tensor& roles) {
  RoleIndex ri;
  ri.roles = roles.to(at::kCPU).to(at::kChar).contiguous();
  const std::int64_t batch = ri.roles.size(0), len = ri.roles.size(1);
  const std::int8_t* r = ri.roles.const_data_ptr<std::int8_t>();
  ri.globals.resize(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < len; ++i) {
      const std::int8_t role = r[b * len + i];
      HOTPATH_CHECK(role >= 0 && role <= 2, "sliding_window_attention: roles[", b, ", ", i, "] is ", int{role}
                                                                               , "; expected 0 (padding), 1 (local) "
                                                                                   "or 2 (global)");
      if (role == 2) ri.globals[static_cast<std::size_t>(b)].push_back(i);
    }
    ri.max_globals =
        std::max(ri.max_globals, static_cast<std::int64_t>(ri.globals[static_cast<std::size_t>(b)].size()));
  }
  return ri;
}

SlidingHead head_view(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const RoleIndex& ri,
                      std::int64_t window, std::int64_t b, std::int64_t h) {
  const std::int64_t heads = q.size(1), len = q.size(2), d = q.size(3);
  const std::int64_t offset = (b * heads + h) * len * d;
  SlidingHead head;
  head.q = q.const_data_ptr<float>() + offset;
  head.k = k.const_data_ptr<float>() + offset;
  head.v = v.const_data_ptr<float>() + offset;
  head.roles = ri.roles.const_data_ptr<std::int8_t>() + b * len;
  head.globals = ri.globals[static_cast<std::size_t>(b)].data();
  head.n_globals = static_cast<std::int64_t>(ri.globals[static_cast<std::size_t>(b)].size());
  head.len = len;
  head.d = d;
  head.window = window;
  head.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  return head;
}

// q, k, v contiguous fp32. Returns the output and the logsumexp [B, H, L] (undefined when !keep_lse).
std::pair<at::Tensor, at::Tensor> fused_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                std::int64_t window, const RoleIndex& ri, bool keep_lse) {
  const std::int64_t batch = q.size(0), heads = q.size(1), len = q.size(2), d = q.size(3);
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = keep_lse ? at::empty({batch, heads, len}, q.options()) : at::Tensor();
  const Kernels& kern = kernels();
  const std::int64_t scratch_floats = sliding_scratch_floats(d, window, ri.max_globals);
  at::parallel_for(0, batch * heads, 1, [&](std::int64_t begin, std::int64_t end) {
    float* scratch = detail::thread_scratch(scratch_floats);
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t b = t / heads, h = t % heads;
      SlidingForward f;
      f.head = head_view(q, k, v, ri, window, b, h);
      f.out = out.data_ptr<float>() + t * len * d;
      f.lse = keep_lse ? lse.data_ptr<float>() + t * len : nullptr;
      kern.forward(f, scratch);
    }
  });
  return {out, lse};
}

variable_list fused_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t window,
                             const RoleIndex& ri, const at::Tensor& out, const at::Tensor& lse,
                             const at::Tensor& dout) {
  const std::int64_t batch = q.size(0), heads = q.size(1), len = q.size(2), d = q.size(3);
  at::Tensor dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
  const Kernels& kern = kernels();
  const std::int64_t scratch_floats = sliding_scratch_floats(d, window, ri.max_globals);
  at::parallel_for(0, batch * heads, 1, [&](std::int64_t begin, std::int64_t end) {
    float* scratch = detail::thread_scratch(scratch_floats);
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t b = t / heads, h = t % heads;
      SlidingBackward g;
      g.head = head_view(q, k, v, ri, window, b, h);
      g.out = out.const_data_ptr<float>() + t * len * d;
      g.dout = dout.const_data_ptr<float>() + t * len * d;
      g.lse = lse.const_data_ptr<float>() + t * len;
      g.dq = dq.data_ptr<float>() + t * len * d;
      g.dk = dk.data_ptr<float>() + t * len * d;
      g.dv = dv.data_ptr<float>() + t * len * d;
      kern.backward(g, scratch);
    }
  });
  return {dq, dk, dv};
}

// The fused kernel under autograd: saves q, k, v, the output and the logsumexp (all O(L)).
class SlidingFunction : public torch::autograd::Function<SlidingFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            std::int64_t window, const at::Tensor& roles) {
    const at::Tensor q32 = q.to(at::kFloat).contiguous(), k32 = k.to(at::kFloat).contiguous(),
                     v32 = v.to(at::kFloat).contiguous();
    const RoleIndex ri = index_roles(roles);
    const bool grad = q.requires_grad() || k.requires_grad() || v.requires_grad();
    auto [out, lse] = fused_forward(q32, k32, v32, window, ri, grad);
    if (grad) {
      ctx->save_for_backward({q32, k32, v32, out, lse, ri.roles});
      ctx->saved_data["window"] = window;
      ctx->saved_data["dtype"] = static_cast<std::int64_t>(q.scalar_type());
    }
    return out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const std::int64_t window = ctx->saved_data["window"].toInt();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const RoleIndex ri = index_roles(saved[5]);
    const at::Tensor dout = grad_outputs[0].to(at::kFloat).contiguous();
    variable_list grads = fused_backward(saved[0], saved[1], saved[2], window, ri, saved[3], saved[4], dout);
    return {grads[0].to(dtype), grads[1].to(dtype), grads[2].to(dtype), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor token_roles(const at::Tensor& attention_mask, const at::Tensor& global_attention_mask) {
  HOTPATH_CHECK(attention_mask.defined() || global_attention_mask.defined(),
                "token_roles: give attention_mask or global_attention_mask (or both)");
  const at::Tensor tokens =
      attention_mask.defined() ? attention_mask.ne(0) : at::ones_like(global_attention_mask, at::kBool);
  if (global_attention_mask.defined()) {
    HOTPATH_CHECK(!attention_mask.defined() || attention_mask.sizes() == global_attention_mask.sizes(),
                  "token_roles: attention_mask ", attention_mask.sizes(), " and global_attention_mask "
                                                , global_attention_mask.sizes(), " differ in shape");
  }
  at::Tensor roles = tokens.to(at::kChar);
  if (global_attention_mask.defined()) roles = roles * (global_attention_mask.ne(0).to(at::kChar) + 1);
  return roles;
}

at::Tensor sliding_window_keep(const at::Tensor& roles, std::int64_t window) {
  const std::int64_t len = roles.size(1);
  const at::Tensor pos = at::arange(len, roles.options().dtype(at::kLong));
  const at::Tensor near = (pos.unsqueeze(1) - pos.unsqueeze(0)).abs().le(window);  // [L, L]
  const at::Tensor query = roles.ne(0).unsqueeze(2);                                // [B, L, 1]
  const at::Tensor local_key = roles.eq(1).unsqueeze(1);                            // [B, 1, L]
  const at::Tensor global_key = roles.eq(2).unsqueeze(1);
  return query.logical_and(global_key.logical_or(local_key.logical_and(near.unsqueeze(0))));
}

at::Tensor reference_sliding_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              std::int64_t window, const at::Tensor& roles) {
  check_inputs(q, k, v, window, roles);
  const at::Tensor keep = sliding_window_keep(roles.to(q.device()), window).unsqueeze(1);  // [B, 1, L, L]
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul(scale);
  scores = scores.masked_fill(keep.logical_not(), std::numeric_limits<float>::lowest());
  at::Tensor probs = at::softmax(scores.to(at::kFloat), -1).to(q.scalar_type());
  probs = probs.masked_fill(roles.to(q.device()).eq(0).unsqueeze(1).unsqueeze(3), 0.0);
  return at::matmul(probs, v);
}

at::Tensor sliding_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    std::int64_t window, const at::Tensor& roles, AttentionKernel kernel) {
  check_inputs(q, k, v, window, roles);
  const bool fusable = q.device().is_cpu() && (q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16);
  if (kernel == AttentionKernel::kFused) {
    HOTPATH_CHECK(fusable, "sliding_window_attention: the fused kernel takes fp32 or bf16 CPU tensors, got "
                              , q.scalar_type(), " on ", q.device());
  }
  if (kernel == AttentionKernel::kReference || !fusable) {
    return reference_sliding_window_attention(q, k, v, window, roles);
  }
  return SlidingFunction::apply(q, k, v, window, roles);
}

const char* sliding_attention_kernel_name() { return kDispatch.describe(); }

}  // namespace hotpath::ops
