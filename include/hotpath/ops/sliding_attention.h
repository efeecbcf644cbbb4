// hotpath/ops/sliding_attention.h — Longformer's local + global attention without the L×L scores: a fused
// CPU kernel (forward and backward) whose memory grows linearly with the sequence, and its dense twin.
//
//   at::Tensor roles = token_roles(attention_mask, global_attention_mask);  // [B, L]: 0 pad, 1 local, 2 global
//   at::Tensor ctx = sliding_window_attention(q, k, v, /*window=*/256, roles);  // q, k, v [B, H, L, d]
//   at::Tensor ref = reference_sliding_window_attention(q, k, v, 256, roles);   // dense mask, same semantics
//
// Semantics (transformers' LongformerSelfAttention, local part): a query i that is not padding attends to
// every key j that is not padding and either is a global token or is a local token within the window,
// |i − j| ≤ window (the one-sided size: HF's attention_window / 2). A global key inside the window counts
// once. Scores are q·k/√d, softmax over those keys, times v. Padding queries get 0 (HF's masked_fill).
// Global *queries* get the same local formula here; Longformer replaces their rows with attention of its
// separate global projections over every key (models/text/longformer.h does that with ops::attention).
//
// The kernel: per (batch, head), blocks of 32 queries share one packed, transposed slice of K — the
// union of their windows plus the global keys — so Q·Kᵀ is a register-tiled product over at most
// 2·window + 32 + G columns instead of L; each row's softmax and P·V cover only its own window and the
// global keys. Only the per-row logsumexp [B, H, L] is saved for backward, which recomputes the tile.
// Work and memory are O(L · (2·window + G)). fp32 math; bf16 inputs are widened and the result rounded
// back. The loops are compiled for portable x86-64, AVX2+FMA and AVX-512 and picked by the CPU dispatch
// (core/cpu.h, op "sliding_attention").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "hotpath/ops/attention.h"

namespace hotpath::ops {

// Token roles from transformers' masks: attention_mask [B, L] (nonzero = token; undefined = all tokens)
// times (global_attention_mask + 1) (nonzero = global; undefined = none) → int8 [B, L]: 0 padding,
// 1 local, 2 global — LongformerModel._merge_to_attention_mask.
at::Tensor token_roles(const at::Tensor& attention_mask, const at::Tensor& global_attention_mask);

// q, k, v [B, H, L, d] (one dtype: f32 or bf16; CPU for kFused), roles [B, L] (as token_roles), window ≥ 0
// (one-sided). Returns [B, H, L, d] in q's dtype, differentiable in q, k, v. kAuto: the fused kernel on
// CPU tensors, the dense reference elsewhere (a mask path, quadratic in L).
at::Tensor sliding_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    std::int64_t window, const at::Tensor& roles,
                                    AttentionKernel kernel = AttentionKernel::kAuto);

// Plain ATen on the dense [B, 1, L, L] mask of sliding_window_keep: q·kᵀ/√d, excluded keys at the lowest
// value, softmax, padding rows zeroed, ·v. O(L²) memory: for tests and devices without the kernel.
at::Tensor reference_sliding_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              std::int64_t window, const at::Tensor& roles);

// Which key each query attends to, materialised: bool [B, L, L], true = attended (all false on padding rows).
at::Tensor sliding_window_keep(const at::Tensor& roles, std::int64_t window);

// "avx512", or "avx2 (avx512: capped by HOTPATH_MAX_ISA=avx2)": op "sliding_attention" of the CPU dispatch.
const char* sliding_attention_kernel_name();

}  // namespace hotpath::ops
