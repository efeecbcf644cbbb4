// hotpath/models/attention.h — softmax(QKᵀ/√d + mask)·V as one fused CPU kernel, forward and backward.
//
//   at::Tensor ctx = fused_attention(q, k, v, attention_mask);       // q, k, v: [B, heads, L, head_dim]
//   at::Tensor ref = reference_attention(q, k, v, attention_mask);   // plain ATen, same semantics
//   const char* isa = attention_kernel_name();                       // "avx2", "avx512", "portable: ..."
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
// ISA: the loops are written once over a small vector type and compiled three times — baseline
// x86-64 (4 lanes), AVX2+FMA (8) and AVX-512F (16) — chosen at run time from the CPU's features.
// The AVX-512 build is the same source as the AVX2 one but has only been compiled, not run, by the
// tests here (the development machine is AVX2-only). bf16 math is fp32 after widening: AVX512_BF16
// dot products are not used, so bf16 results match fp32 ones up to the final rounding.
#pragma once

#include <ATen/core/Tensor.h>

namespace hotpath::models {

// kFused throws when the fused kernel cannot take the inputs (see attention_skip_reason);
// kAuto runs it where it can and the reference elsewhere (CUDA, other dtypes, mixed dtypes).
enum class AttentionKernel { kReference, kFused, kAuto };

// softmax(q·kᵀ/√d, masked)·v: q [B, H, Lq, d], k and v [B, H, Lk, d] of one dtype, key_padding_mask
// [B, Lk] or undefined. Returns [B, H, Lq, d] in q's dtype, differentiable in q, k and v.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_padding_mask,
                     AttentionKernel kernel);

// attention(..., AttentionKernel::kAuto): the fused kernel wherever it applies.
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& key_padding_mask);

// Plain ATen: matmul, ·1/√d, masked keys filled with the dtype's lowest value, softmax, matmul.
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& key_padding_mask);

// Why the fused kernel would not take these inputs (kAuto then runs the reference), or nullptr.
// Shape errors are not skip reasons: attention() throws them whichever kernel is chosen.
const char* attention_skip_reason(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& key_padding_mask);

// Which compilation of the fused loops runs. kAuto takes the widest the CPU supports; the others pin
// one (tests, benchmarks) and throw when the CPU lacks its instructions.
enum class AttentionIsa { kAuto, kPortable, kAvx2, kAvx512 };
void set_attention_isa(AttentionIsa isa);
// The loops in use: "avx512", "avx2" or "portable" (with ": <why not wider>"); ", serial: ..." is
// appended when the library was built without OpenMP (at::parallel_for then runs on one thread).
const char* attention_kernel_name();

}  // namespace hotpath::models
