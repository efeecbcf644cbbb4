#include "hotpath/ops/attention.h"

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

#include "counter_hash.h"
#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/ops/dropout.h"
#include "serial_note.h"
#include "thread_scratch.h"

namespace hotpath::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- tiling --------------------------------------------------------------------------------------
// Packed rows are padded to kPad floats (two 16-lane vectors) so every micro-kernel column step is
// whole; padding is zero (K, V, Q) or −inf (the key bias), so it never changes a result.
constexpr std::int64_t kPad = 32;
constexpr std::int64_t kFwdQueries = 64;   // query rows per forward task
constexpr std::int64_t kFwdKeys = 128;     // keys per online-softmax step
constexpr std::int64_t kBwdQueries = 64;   // backward tile: queries ...
constexpr std::int64_t kBwdKeys = 64;      // ... × keys
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Dropout hashes keys in blocks of 32 (one hash per key pair; see dropout_block), which every key
// tile holds whole, as does the widest vector's half (16 lanes).
constexpr int kDropoutBlock = 32;
static_assert(kFwdKeys % kDropoutBlock == 0 && kBwdKeys % kDropoutBlock == 0);

using detail::round_up;
using detail::thread_scratch;

// Keys the dropout hash per head and row (counter_hash.h: shared with the fused hidden dropout).
using detail::mix64;

// Dropout as the kernels apply it to one (batch, head): keep an element when its 16 hash bits are at
// least `threshold` (p·2¹⁶ rounded: p is honoured to 2⁻¹⁷), scale kept ones by 1/(1−p). head_key = mix
// of (seed, offset, b, h).
struct DropoutArgs {
  bool on = false;
  std::uint32_t threshold = 0;
  float scale = 1.0F;
  std::uint64_t head_key = 0;
};

DropoutArgs dropout_args(const AttentionDropout& dropout, std::int64_t b, std::int64_t h) {
  DropoutArgs d;
  if (dropout.p <= 0.0) return d;
  d.on = true;
  d.threshold = static_cast<std::uint32_t>(std::min(65535.0, std::round(dropout.p * 65536.0)));
  d.scale = static_cast<float>(1.0 / (1.0 - dropout.p));
  const std::int64_t row = dropout.sample_index.defined() ? dropout.sample_index.const_data_ptr<std::int64_t>()[b] : b;
  d.head_key = mix64(mix64(mix64(mix64(dropout.seed) ^ dropout.offset) ^ static_cast<std::uint64_t>(row)) ^
                     static_cast<std::uint64_t>(h));
  return d;
}

// One (batch, head) as the kernels see it: row-major [L, d] inputs of element type T (float, or bf16
// as its raw 16 bits), the key bias row (0 keep, −inf masked or padding; Lkp entries), whether every
// key is masked (scores are then all equal: zero) and the dropout on its probabilities.
struct HeadArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* bias = nullptr;
  bool uniform = false;
  std::int64_t lq = 0;
  std::int64_t lk = 0;
  std::int64_t d = 0;
  std::int64_t ldq = 0;  // elements between rows of q, and of k and v (forward only): d when packed per head
  std::int64_t ldk = 0;
  float scale = 1.0F;
  DropoutArgs dropout;
};

struct ForwardArgs {
  HeadArgs head;
  void* out = nullptr;   // [Lq, d], T, rows ldo elements apart
  std::int64_t ldo = 0;
  float* lse = nullptr;  // [Lq], or nullptr (inference)
  std::int64_t q0 = 0;   // query rows [q0, q1) of this task
  std::int64_t q1 = 0;
  bool pack_kv = true;   // false: the scratch still holds this head's packed K and V
};

struct BackwardArgs {
  HeadArgs head;
  const void* out = nullptr;   // forward output [Lq, d], T
  const void* dout = nullptr;  // [Lq, d], T
  const float* lse = nullptr;  // [Lq]
  void* dq = nullptr;          // [Lq, d], T
  void* dk = nullptr;          // [Lk, d], T
  void* dv = nullptr;          // [Lk, d], T
};

std::int64_t forward_scratch_floats(std::int64_t lk, std::int64_t d) {
  const std::int64_t dp = round_up(d, kPad);
  const std::int64_t lkp = round_up(lk, kFwdKeys);
  return 2 * dp * lkp + 2 * kFwdQueries * dp + kFwdQueries * kFwdKeys + 2 * kFwdQueries;
}

std::int64_t backward_scratch_floats(std::int64_t lq, std::int64_t lk, std::int64_t d) {
  const std::int64_t dp = round_up(d, kPad);
  const std::int64_t lkp = round_up(lk, kBwdKeys);
  return 3 * lq * dp + 3 * dp * lkp + 2 * kBwdKeys * dp + 3 * kBwdQueries * kBwdKeys + 2 * lq;
}

// ---- one compilation per ISA ----------------------------------------------------------------------
#define HOTPATH_BODY inline __attribute__((always_inline))

namespace portable {
constexpr int W = 4;
#include "attention_kernels.inc"
}  // namespace portable

struct Kernels {
  const char* name;
  void (*forward_f32)(const ForwardArgs&, float*);
  void (*forward_bf16)(const ForwardArgs&, float*);
  void (*backward_f32)(const BackwardArgs&, float*);
  void (*backward_bf16)(const BackwardArgs&, float*);
  void (*dropout_keep_row)(const DropoutArgs&, std::int64_t, std::int64_t, bool*);
};
const Kernels kPortable{"portable", portable::forward_f32, portable::forward_bf16, portable::backward_f32,
                        portable::backward_bf16, portable::dropout_keep_row};

#ifdef HOTPATH_X86_KERNELS
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int W = 8;
#include "attention_kernels.inc"
}  // namespace avx2
#pragma GCC pop_options
const Kernels kAvx2{"avx2", avx2::forward_f32, avx2::forward_bf16, avx2::backward_f32, avx2::backward_bf16,
                    avx2::dropout_keep_row};

// The same source with 16-lane vectors.
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
namespace avx512 {
constexpr int W = 16;
#include "attention_kernels.inc"
}  // namespace avx512
#pragma GCC pop_options
const Kernels kAvx512{"avx512", avx512::forward_f32, avx512::forward_bf16, avx512::backward_f32,
                      avx512::backward_bf16, avx512::dropout_keep_row};
#endif

// Variants widest first, in the order of kernels() below.
const cpu::OpDispatch kDispatch{"attention",
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

// ---- drivers ----------------------------------------------------------------------------------------

// The key bias row per batch ([B, Lkp]: 0 keep, −inf masked or padding) and whether a batch has every
// key masked (its scores are then all equal, as in the reference's lowest-filled rows).
struct KeyBias {
  at::Tensor bias;
  std::vector<char> uniform;
};

KeyBias key_bias(const at::Tensor& mask, std::int64_t batch, std::int64_t lk, std::int64_t lkp) {
  KeyBias kb;
  kb.bias = at::full({batch, lkp}, kNegInf, at::kFloat);
  kb.uniform.assign(static_cast<std::size_t>(batch), 0);
  float* bias = kb.bias.data_ptr<float>();
  if (mask.numel() == 0) {  // no mask
    for (std::int64_t b = 0; b < batch; ++b) std::fill(bias + b * lkp, bias + b * lkp + lk, 0.0F);
    return kb;
  }
  const at::Tensor keep = mask.ne(0).to(at::kCPU).contiguous();
  const bool* kp = keep.const_data_ptr<bool>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const bool any = std::any_of(kp + b * lk, kp + (b + 1) * lk, [](bool x) { return x; });
    kb.uniform[static_cast<std::size_t>(b)] = any ? 0 : 1;
    for (std::int64_t j = 0; j < lk; ++j) bias[b * lkp + j] = (!any || kp[b * lk + j]) ? 0.0F : kNegInf;
  }
  return kb;
}

std::size_t element_size(const at::Tensor& t) { return t.element_size(); }

// Forward over tasks (batch, head, block of queries); returns the output and the logsumexp [B, H, Lq].
std::pair<at::Tensor, at::Tensor> fused_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& mask, const AttentionDropout& dropout) {
  const std::int64_t batch = q.size(0);
  const std::int64_t heads = q.size(1);
  const std::int64_t lq = q.size(2);
  const std::int64_t lk = k.size(2);
  const std::int64_t d = q.size(3);
  const KeyBias kb = key_bias(mask, batch, lk, round_up(lk, kFwdKeys));
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({batch, heads, lq}, q.options().dtype(at::kFloat));
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const Kernels& ker = kernels();
  const auto run = bf16 ? ker.forward_bf16 : ker.forward_f32;
  const std::size_t es = element_size(q);
  const auto* qp = static_cast<const char*>(q.const_data_ptr());
  const auto* kptr = static_cast<const char*>(k.const_data_ptr());
  const auto* vptr = static_cast<const char*>(v.const_data_ptr());
  auto* op = static_cast<char*>(out.data_ptr());
  float* lp = lse.data_ptr<float>();
  const float* bias = kb.bias.const_data_ptr<float>();
  const std::int64_t lkp = kb.bias.size(1);
  const std::int64_t blocks = (lq + kFwdQueries - 1) / kFwdQueries;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const std::int64_t scratch_floats = forward_scratch_floats(lk, d);
  at::parallel_for(0, batch * heads * blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    float* scratch = thread_scratch(scratch_floats);
    std::int64_t packed_head = -1;
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t bh = t / blocks;
      const std::int64_t blk = t % blocks;
      const std::int64_t b = bh / heads;
      ForwardArgs a;
      a.head.q = qp + static_cast<std::size_t>(bh * lq * d) * es;
      a.head.k = kptr + static_cast<std::size_t>(bh * lk * d) * es;
      a.head.v = vptr + static_cast<std::size_t>(bh * lk * d) * es;
      a.head.bias = bias + b * lkp;
      a.head.uniform = kb.uniform[static_cast<std::size_t>(b)] != 0;
      a.head.lq = lq;
      a.head.lk = lk;
      a.head.d = d;
      a.head.ldq = d;
      a.head.ldk = d;
      a.head.scale = scale;
      a.head.dropout = dropout_args(dropout, b, bh % heads);
      a.out = op + static_cast<std::size_t>(bh * lq * d) * es;
      a.ldo = d;
      a.lse = lp + bh * lq;
      a.q0 = blk * kFwdQueries;
      a.q1 = std::min(lq, a.q0 + kFwdQueries);
      a.pack_kv = packed_head != bh;
      packed_head = bh;
      run(a, scratch);
    }
  });
  return {out, lse};
}

// Backward over tasks (batch, head): dq, dk, dv in q's dtype.
variable_list fused_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                             const AttentionDropout& dropout, const at::Tensor& out, const at::Tensor& lse,
                             const at::Tensor& dout) {
  const std::int64_t batch = q.size(0);
  const std::int64_t heads = q.size(1);
  const std::int64_t lq = q.size(2);
  const std::int64_t lk = k.size(2);
  const std::int64_t d = q.size(3);
  const std::int64_t lkp = round_up(lk, kBwdKeys);
  const KeyBias kb = key_bias(mask, batch, lk, lkp);
  at::Tensor dq = at::empty_like(q);
  at::Tensor dk = at::empty_like(k);
  at::Tensor dv = at::empty_like(v);
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const Kernels& ker = kernels();
  const auto run = bf16 ? ker.backward_bf16 : ker.backward_f32;
  const std::size_t es = element_size(q);
  const auto at_row = [es](const at::Tensor& t, std::int64_t offset) {
    return static_cast<const char*>(t.const_data_ptr()) + static_cast<std::size_t>(offset) * es;
  };
  const auto at_row_mut = [es](at::Tensor& t, std::int64_t offset) {
    return static_cast<char*>(t.data_ptr()) + static_cast<std::size_t>(offset) * es;
  };
  const float* bias = kb.bias.const_data_ptr<float>();
  const float* lp = lse.const_data_ptr<float>();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const std::int64_t scratch_floats = backward_scratch_floats(lq, lk, d);
  at::parallel_for(0, batch * heads, 1, [&](std::int64_t t0, std::int64_t t1) {
    float* scratch = thread_scratch(scratch_floats);
    for (std::int64_t bh = t0; bh < t1; ++bh) {
      const std::int64_t b = bh / heads;
      BackwardArgs a;
      a.head.q = at_row(q, bh * lq * d);
      a.head.k = at_row(k, bh * lk * d);
      a.head.v = at_row(v, bh * lk * d);
      a.head.bias = bias + b * lkp;
      a.head.uniform = kb.uniform[static_cast<std::size_t>(b)] != 0;
      a.head.lq = lq;
      a.head.lk = lk;
      a.head.d = d;
      a.head.scale = scale;
      a.head.dropout = dropout_args(dropout, b, bh % heads);
      a.out = at_row(out, bh * lq * d);
      a.dout = at_row(dout, bh * lq * d);
      a.lse = lp + bh * lq;
      a.dq = at_row_mut(dq, bh * lq * d);
      a.dk = at_row_mut(dk, bh * lk * d);
      a.dv = at_row_mut(dv, bh * lk * d);
      run(a, scratch);
    }
  });
  return {dq, dk, dv};
}

// Inputs: q, k, v (contiguous, one dtype), mask (empty: none), dropout. Saved: q, k, v, out, lse, the
// mask and the dropout's p, seed and offset (backward regenerates its mask from them).
struct FusedAttention : public torch::autograd::Function<FusedAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, const AttentionDropout& dropout) {
    auto [out, lse] = fused_forward(q, k, v, mask, dropout);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["mask"] = mask;  // not differentiable
    ctx->saved_data["dropout_p"] = dropout.p;
    ctx->saved_data["dropout_seed"] = static_cast<std::int64_t>(dropout.seed);  // IValue has no uint64
    ctx->saved_data["dropout_offset"] = static_cast<std::int64_t>(dropout.offset);
    if (dropout.sample_index.defined()) ctx->saved_data["dropout_sample_index"] = dropout.sample_index;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor mask = ctx->saved_data["mask"].toTensor();
    AttentionDropout dropout;
    dropout.p = ctx->saved_data["dropout_p"].toDouble();
    dropout.seed = static_cast<std::uint64_t>(ctx->saved_data["dropout_seed"].toInt());
    dropout.offset = static_cast<std::uint64_t>(ctx->saved_data["dropout_offset"].toInt());
    if (const auto it = ctx->saved_data.find("dropout_sample_index"); it != ctx->saved_data.end()) {
      dropout.sample_index = it->second.toTensor();
    }
    const at::Tensor dout = grads[0].contiguous();
    variable_list g = fused_backward(saved[0], saved[1], saved[2], mask, dropout, saved[3], saved[4], dout);
    g.emplace_back();  // mask
    g.emplace_back();  // dropout
    return g;
  }
};

void check_dropout(const AttentionDropout& dropout) {
  HOTPATH_CHECK(dropout.p >= 0.0 && dropout.p < 1.0, "attention: dropout probability must be in [0, 1); got ",
                dropout.p);
  const at::Tensor& s = dropout.sample_index;
  HOTPATH_CHECK(!s.defined() || (s.dim() == 1 && s.scalar_type() == at::kLong && s.device().is_cpu() && s.is_contiguous()),
                "attention: expected dropout.sample_index to be a contiguous 1-D int64 CPU tensor (one global sample "
                "index per batch row)");
}

// A keyed dropout's rows: one sample index per batch row.
void check_dropout_rows(const AttentionDropout& dropout, std::int64_t batch) {
  HOTPATH_CHECK(!dropout.sample_index.defined() || dropout.sample_index.numel() == batch,
                "attention: expected one dropout sample index per batch row (", batch, "), got ",
                dropout.sample_index.numel());
}

void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  HOTPATH_CHECK(q.defined() && k.defined() && v.defined(), "attention: q, k and v must be defined tensors");
  HOTPATH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be [batch, heads, length, head_dim]; got ",
                q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  HOTPATH_CHECK(k.sizes() == v.sizes(), "attention: k ", k.sizes(), " and v ", v.sizes(), " must have one shape");
  HOTPATH_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3), "attention: q ",
                q.sizes(), " and k ", k.sizes(), " must agree in batch, heads and head_dim");
  HOTPATH_CHECK(q.size(3) > 0 && k.size(2) > 0, "attention: head_dim and key length must be positive; got q ",
                q.sizes(), ", k ", k.sizes());
  if (mask.defined()) {
    HOTPATH_CHECK(mask.dim() == 2 && mask.size(0) == k.size(0) && mask.size(1) == k.size(2),
                  "attention: key_padding_mask must be [batch, key length] = [", k.size(0), ", ", k.size(2), "]; got ",
                  mask.sizes());
  }
}

// The dtype's lowest finite value, which masked scores are filled with (HF BERT's convention).
at::Scalar lowest_value(at::ScalarType type) {
  switch (type) {
    case at::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case at::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case at::kDouble: return std::numeric_limits<double>::lowest();
    default: return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}

}  // namespace

const char* attention_skip_reason(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& key_padding_mask) {
  if (!q.device().is_cpu() || !k.device().is_cpu() || !v.device().is_cpu()) return "not CPU tensors";
  if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) return "q, k and v differ in dtype";
  if (q.scalar_type() != at::kFloat && q.scalar_type() != at::kBFloat16) return "dtype is neither float32 nor bfloat16";
  if (key_padding_mask.defined() && !key_padding_mask.device().is_cpu()) return "the mask is not a CPU tensor";
  if (q.numel() == 0) return "empty input";
  return nullptr;
}

AttentionDropout AttentionDropout::from_generator(double p, std::optional<at::Generator> generator) {
  AttentionDropout dropout;
  dropout.p = p;
  check_dropout(dropout);
  // One random64() of the generator, drawn as the fused hidden dropout draws its seed (dropout.h).
  dropout.seed = DropoutDraw::from_generator(p, std::move(generator)).seed;
  return dropout;
}

void attention_packed_qkv_out(const at::Tensor& qkv, std::int64_t heads, const at::Tensor& key_padding_mask,
                              at::Tensor& out, std::int64_t q_begin, std::int64_t q_end) {
  HOTPATH_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.device().is_cpu() &&
                    (qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16) && qkv.is_contiguous(),
                "attention_packed_qkv_out: qkv must be a contiguous CPU float32 or bfloat16 [batch, length, 3·hidden]; got ",
                qkv.defined() ? qkv.toString() : std::string("undefined"), " ",
                qkv.defined() ? qkv.sizes() : c10::IntArrayRef{});
  HOTPATH_CHECK(heads >= 1 && qkv.size(2) % (3 * heads) == 0 && qkv.size(2) > 0, "attention_packed_qkv_out: qkv ",
                qkv.sizes(), " does not split into q | k | v of ", heads, " heads");
  const std::int64_t batch = qkv.size(0);
  const std::int64_t len = qkv.size(1);
  const std::int64_t hidden = qkv.size(2) / 3;
  const std::int64_t d = hidden / heads;
  if (q_end < 0) q_end = len;
  HOTPATH_CHECK(0 <= q_begin && q_begin <= q_end && q_end <= len, "attention_packed_qkv_out: query rows [", q_begin,
                ", ", q_end, ") outside [0, ", len, ")");
  HOTPATH_CHECK(out.defined() && out.scalar_type() == qkv.scalar_type() && out.is_contiguous() &&
                    out.sizes() == c10::IntArrayRef({batch, len, hidden}),
                "attention_packed_qkv_out: out must be a contiguous ", qkv.scalar_type(), " [", batch, ", ", len, ", ",
                hidden, "]; got ", out.scalar_type(), " ", out.sizes());
  if (key_padding_mask.defined()) {
    HOTPATH_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == batch && key_padding_mask.size(1) == len,
                  "attention_packed_qkv_out: key_padding_mask must be [", batch, ", ", len, "]; got ",
                  key_padding_mask.sizes());
  }
  if (q_begin == q_end || batch == 0) return;
  const at::Tensor mask = key_padding_mask.defined() ? key_padding_mask : at::empty({0}, at::kBool);
  const KeyBias kb = key_bias(mask, batch, len, round_up(len, kFwdKeys));
  const bool bf16 = qkv.scalar_type() == at::kBFloat16;
  const Kernels& ker = kernels();
  const auto run = bf16 ? ker.forward_bf16 : ker.forward_f32;
  const std::size_t es = element_size(qkv);
  const auto* base = static_cast<const char*>(qkv.const_data_ptr());
  auto* op = static_cast<char*>(out.data_ptr());
  const float* bias = kb.bias.const_data_ptr<float>();
  const std::int64_t lkp = kb.bias.size(1);
  const std::int64_t rows = q_end - q_begin;
  const std::int64_t blocks = (rows + kFwdQueries - 1) / kFwdQueries;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const std::int64_t scratch_floats = forward_scratch_floats(len, d);
  at::parallel_for(0, batch * heads * blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    float* scratch = thread_scratch(scratch_floats);
    std::int64_t packed_head = -1;
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t bh = t / blocks;
      const std::int64_t blk = t % blocks;
      const std::int64_t b = bh / heads;
      const std::int64_t h = bh % heads;
      const std::size_t row0 = static_cast<std::size_t>(b * len * 3 * hidden + h * d);
      ForwardArgs a;
      a.head.q = base + row0 * es;
      a.head.k = base + (row0 + static_cast<std::size_t>(hidden)) * es;
      a.head.v = base + (row0 + static_cast<std::size_t>(2 * hidden)) * es;
      a.head.bias = bias + b * lkp;
      a.head.uniform = kb.uniform[static_cast<std::size_t>(b)] != 0;
      a.head.lq = len;
      a.head.lk = len;
      a.head.d = d;
      a.head.ldq = 3 * hidden;
      a.head.ldk = 3 * hidden;
      a.head.scale = scale;
      a.out = op + static_cast<std::size_t>(b * len * hidden + h * d) * es;
      a.ldo = hidden;
      a.q0 = q_begin + blk * kFwdQueries;
      a.q1 = std::min(q_end, a.q0 + kFwdQueries);
      a.pack_kv = packed_head != bh;
      packed_head = bh;
      run(a, scratch);
    }
  });
}

at::Tensor attention_dropout_mask(const AttentionDropout& dropout, std::int64_t batch, std::int64_t heads,
                                  std::int64_t lq, std::int64_t lk) {
  check_dropout(dropout);
  HOTPATH_CHECK(batch >= 0 && heads >= 0 && lq >= 0 && lk >= 0, "attention_dropout_mask: negative size [", batch,
                ", ", heads, ", ", lq, ", ", lk, "]");
  if (dropout.p == 0.0) return at::ones({batch, heads, lq, lk}, at::kBool);
  check_dropout_rows(dropout, batch);
  at::Tensor keep = at::empty({batch, heads, lq, lk}, at::kBool);
  bool* out = keep.data_ptr<bool>();
  const auto row = kernels().dropout_keep_row;
  at::parallel_for(0, batch * heads, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t bh = t0; bh < t1; ++bh) {
      const DropoutArgs d = dropout_args(dropout, bh / heads, bh % heads);
      for (std::int64_t i = 0; i < lq; ++i) row(d, i, lk, out + (bh * lq + i) * lk);
    }
  });
  return keep;
}

at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& key_padding_mask, const AttentionDropout& dropout) {
  check_shapes(q, k, v, key_padding_mask);
  check_dropout(dropout);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  if (key_padding_mask.defined()) {
    const at::Tensor masked =
        key_padding_mask.eq(0).to(scores.device()).view({key_padding_mask.size(0), 1, 1, key_padding_mask.size(1)});
    scores = scores.masked_fill(masked, lowest_value(scores.scalar_type()));
  }
  at::Tensor probs = at::softmax(scores, -1);
  if (dropout.p > 0.0) {
    const at::Tensor keep = attention_dropout_mask(dropout, q.size(0), q.size(1), q.size(2), k.size(2));
    // One rounding in the probabilities' dtype: masked_fill then ·1/(1−p) as a scalar.
    probs = probs.masked_fill(keep.logical_not().to(probs.device()), 0.0) * (1.0 / (1.0 - dropout.p));
  }
  return at::matmul(probs, v);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_padding_mask,
                     AttentionKernel kernel, const AttentionDropout& dropout) {
  check_shapes(q, k, v, key_padding_mask);
  check_dropout(dropout);
  check_dropout_rows(dropout, q.size(0));
  if (kernel == AttentionKernel::kReference) return reference_attention(q, k, v, key_padding_mask, dropout);
  // CUDA: ATen's SDPA (flash / memory-efficient / cuDNN); the CPU kernel's dropout seed is still drawn
  // (from_generator), so the CPU generator's stream does not depend on the device.
  if (kernel == AttentionKernel::kAuto && q.is_cuda()) return sdpa_attention(q, k, v, key_padding_mask, dropout.p);
  const char* why = attention_skip_reason(q, k, v, key_padding_mask);
  if (why != nullptr) {
    HOTPATH_CHECK(kernel != AttentionKernel::kFused, "attention: the fused kernel cannot run: ", why);
    return reference_attention(q, k, v, key_padding_mask, dropout);
  }
  // An undefined tensor cannot pass through Function::apply: "no mask" travels as an empty one.
  const at::Tensor mask = key_padding_mask.defined() ? key_padding_mask : at::empty({0}, at::kBool);
  return FusedAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), mask, dropout);
}

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& key_padding_mask, double dropout_p) {
  return attention(q, k, v, key_padding_mask, AttentionKernel::kAuto, AttentionDropout::from_generator(dropout_p));
}

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& key_padding_mask, const AttentionDropout& dropout) {
  return attention(q, k, v, key_padding_mask, AttentionKernel::kAuto, dropout);
}

const char* attention_kernel_name() { return kDispatch.describe(); }

}  // namespace hotpath::ops
