// hotpath/ops/attention.h — softmax(QKᵀ/√d + mask)·V as one fused CPU kernel, forward and backward.
//
//   at::Tensor ctx = fused_attention(q, k, v, attention_mask);       // q, k, v: [B, heads, L, head_dim]
//   at::Tensor ref = reference_attention(q, k, v, attention_mask);   // plain ATen, same semantics
//   at::Tensor trn = fused_attention(q, k, v, attention_mask, 0.1);  // training: dropout on the probabilities
//   const char* isa = attention_kernel_name();                       // "avx512", "avx2 (avx512: ...)"
//
// Why: ATen's eager attention materialises the [B, heads, L, L] scores three times (matmul, mask,
// softmax) and again in backward. The fused kernel is FlashAttention-2 on the CPU: per (batch, head,
// block of queries) it streams blocks of keys through an online softmax (running max and sum per
// query row), never holding more than one [queries × keys] tile, accumulates in fp32 (bf16 inputs
// are widened to fp32 as each tile is packed) and saves only the per-row logsumexp. Backward
// recomputes the tiles: D = rowsum(dO∘O), P = exp(S − lse), dS = P∘(dP − D) → dq, dk, dv.
//
// Masks: key_padding_mask is [B, Lk] (bool, integer or floating; nonzero = keep) or undefined. A
// sequence whose keys are all masked gets what the reference gives — every score equal, so each
// query's output is the mean of V — and no gradient to q or k (its output does not depend on them).
//
// Dropout (FlashAttention's): element (b, h, i, j) of the probabilities is kept when 16 bits of a
// counter-based hash of (seed, offset, b, h, i, j) are at least p·2¹⁶ (rounded; FlashAttention's CUDA
// kernel uses 8), and kept ones are scaled by 1/(1−p) before
// P·V; the logsumexp is the undropped P's. No mask is stored: backward hashes the same counters again
// (dV = P_dropᵀ·dO, dP = (dO·Vᵀ)∘mask/(1−p), D = rowsum(dO∘O) still holds). The mask of an element
// depends on its coordinates only, not on the tensor's shape, thread count or ISA. p = 0 runs the
// loops without dropout and draws no random numbers. With dropout.sample_index (int64 [B], the global
// sample index g of each batch row) b is replaced by g: the mask of (g, h, i, j) depends on neither the
// batch's composition nor the padded length, so data-parallel ranks draw what one large batch would.
//
// ISA: the loops are written once over a small vector type and compiled three times — baseline
// x86-64 (4 lanes), AVX2+FMA (8) and AVX-512 (16) — chosen at run time by the CPU dispatch
// (core/cpu.h, op "attention"); the twin tests run every level the machine has through its cap.
// bf16 math is fp32 after widening: AVX512_BF16 dot products are not used, so bf16 results match
// fp32 ones up to the final rounding.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace hotpath::ops {

// kFused throws when the fused kernel cannot take the inputs (see attention_skip_reason);
// kAuto runs it where it can, sdpa_attention on CUDA tensors, the reference elsewhere (other dtypes, mixed dtypes).
enum class AttentionKernel { kReference, kFused, kAuto };

// Dropout on the attention probabilities: p in [0, 1) (0: none); seed and offset select the mask
// (offset: a second stream index, e.g. a layer number when one seed serves a whole model).
struct AttentionDropout {
  double p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  // Undefined: rows keyed by their batch position b. Else int64 CPU [B]: row b keyed by sample_index[b].
  at::Tensor sample_index{};

  // p with a seed drawn from `generator` (default: LibTorch's default CPU generator, one random64()),
  // so at::manual_seed makes runs repeatable and activation checkpointing's RNG fork replays the same
  // mask in recompute. p == 0 draws nothing (the generator's stream is as without dropout).
  static AttentionDropout from_generator(double p, std::optional<at::Generator> generator = std::nullopt);
};

// softmax(q·kᵀ/√d, masked), dropped out, ·v: q [B, H, Lq, d], k and v [B, H, Lk, d] of one dtype,
// key_padding_mask [B, Lk] or undefined. Returns [B, H, Lq, d] in q's dtype, differentiable in q, k, v.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_padding_mask,
                     AttentionKernel kernel, const AttentionDropout& dropout = {});

// attention(..., AttentionKernel::kAuto, AttentionDropout::from_generator(dropout_p)): the fused kernel
// wherever it applies. Its signature is BERT's AttentionFn (bert.h).
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& key_padding_mask, double dropout_p = 0.0);
// attention(..., AttentionKernel::kAuto, dropout): the form BERT's AttentionFn takes (bert.h).
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& key_padding_mask, const AttentionDropout& dropout);

// Plain ATen: matmul, ·1/√d, masked keys filled with the dtype's lowest value, softmax, the dropout
// mask of attention_dropout_mask (·1/(1−p)), matmul.
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& key_padding_mask, const AttentionDropout& dropout = {});

// The mask the kernels apply for `dropout` on [batch, heads, lq, lk] probabilities, materialised:
// bool, true = kept (all true when p == 0). For tests and the reference path.
at::Tensor attention_dropout_mask(const AttentionDropout& dropout, std::int64_t batch, std::int64_t heads,
                                  std::int64_t lq, std::int64_t lk);

// Why the fused kernel would not take these inputs (kAuto then runs the reference), or nullptr.
// Shape errors are not skip reasons: attention() throws them whichever kernel is chosen.
const char* attention_skip_reason(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& key_padding_mask);

// Inference (no autograd, no dropout): the fused forward read straight from a packed projection
// qkv [B, L, 3·hidden] (q | k | v, each heads × head_dim; contiguous f32 or bf16) into out [B, L, hidden]
// (contiguous, qkv's dtype), without copying q, k, v per head or the context back. Only query rows
// [q_begin, q_end) of each sequence are written (q_end < 0: L): the engine's row split gives each thread
// its own rows. Same tiles and arithmetic as attention(), so its rows equal attention()'s bit for bit.
void attention_packed_qkv_out(const at::Tensor& qkv, std::int64_t heads, const at::Tensor& key_padding_mask,
                              at::Tensor& out, std::int64_t q_begin = 0, std::int64_t q_end = -1);

// PyTorch's scaled_dot_product_attention with this header's mask semantics (additive mask of the dtype's
// lowest value, so an all-masked sequence gets the mean of V): what attention() runs for CUDA tensors
// under kAuto, where ATen picks FlashAttention-2, memory-efficient, cuDNN or math. Its dropout draws
// from the device generator, not the counter hash above. Runs on the CPU too (tests). ops/cuda/.
at::Tensor sdpa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& key_padding_mask, double dropout_p = 0.0);
// The kernel ATen's SDPA picks for these inputs: "flash", "memory-efficient", "cudnn" or "math".
const char* sdpa_backend_name(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& key_padding_mask, double dropout_p = 0.0);

// The loops in use and why wider ones were skipped, e.g. "avx2 (avx512: capped by HOTPATH_MAX_ISA=avx2)"
// ("serial: ..." appended when built without OpenMP): op "attention" of the CPU dispatch (core/cpu.h),
// whose cap (HOTPATH_MAX_ISA, cpu::set_max_isa) pins the portable, AVX2 or AVX-512 loops.
const char* attention_kernel_name();

}  // namespace hotpath::ops
