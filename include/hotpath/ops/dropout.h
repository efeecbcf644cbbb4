// hotpath/ops/dropout.h — training dropout as one parallel, vectorised pass, fused with the residual
// add that follows it in a post-norm transformer layer, with a counter-based mask that is never stored.
//
//   at::Tensor y = dropout_add(dense(x), hidden, 0.1, is_training());  // dropout(dense(x)) + hidden
//   at::Tensor e = fused_dropout(embeddings, 0.1, is_training());      // plain dropout
//   at::Tensor m = dropout_mask(DropoutDraw{0.1, seed, 0}, {4, 8});    // the mask, for tests
//
// Why: at::dropout on the CPU is bernoulli_ (one thread, one generator call per element) into a float
// noise tensor, a multiply that saves that tensor for backward, then a separate add: four passes, one
// of them serial, and 4 bytes per element kept until backward. Here forward is one pass over x and the
// residual on all intra-op threads, and backward regenerates the mask from (seed, offset) — one pass
// over the gradient, nothing saved.
//
// The mask: element n of the flattened (row-major) tensor is kept when 16 bits of the counter-based
// hash shared with the fused attention kernel (counter_hash.h) are at least p·2¹⁶ (rounded: p is
// honoured to 2⁻¹⁷), kept ones are scaled by 1/(1−p). Elements form rows of 2¹⁶ keyed
// mix64(mix64(mix64(seed) ^ offset) ^ row); within a row, one 32-bit hash per element pair (j + t,
// j + 16 + t), j a multiple of 32, t < 16 — the same pairing as attention's dropout_block. The mask
// depends on (seed, offset, n) only: not on the thread count, the ISA or the tensor's shape.
//
// Per-sample keys (data parallel, dynamic padding): with draw.sample_index set (int64 [B], one global
// sample index g per row of dim 0), row b of x is the sample's own tensor of S = numel/B elements and
// its element m (row-major within the sample) is keyed exactly as above with the stream
// mix64(mix64(mix64(seed) ^ offset) ^ g) instead of the call's: the mask of (g, m) depends on
// (seed, offset, g, m) only — not on the batch's composition or order, the rank, the thread count, nor
// (for [B, T, H] with m = t·H + h) on the padded length T.
//
// Randomness: the (p, training) forms draw one 64-bit seed from LibTorch's default CPU generator per
// call (offset 0), so at::manual_seed repeats a run and activation checkpointing's RNG fork replays the
// same masks when it recomputes a layer. p == 0 or eval draws nothing and is x (+ residual).
//
// dtypes: the kernel takes float32 and bfloat16 CPU tensors, in any mix (bf16 x with an fp32 residual
// is what CPU autocast gives a post-norm layer); math is fp32 with one rounding to the result dtype
// (the promoted one). Anything else runs dropout_add_reference (same mask, ATen ops), except CUDA
// tensors, which take at::dropout (its own RNG: a CPU-made mask would cost a host→device copy per call).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <optional>

namespace hotpath::ops {

// One dropout mask: probability p in [0, 1) (0: none) and the (seed, offset) that select it (offset: a
// second stream index, for callers that derive several masks from one seed).
struct DropoutDraw {
  double p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  // Undefined: the flat form. Else int64 CPU [B]: the global sample index of each row of dim 0 (above).
  at::Tensor sample_index{};

  // p with a seed from `generator` (default: LibTorch's default CPU generator, one random64()).
  // p == 0 draws nothing.
  static DropoutDraw from_generator(double p, std::optional<at::Generator> generator = std::nullopt);
};

// training && p > 0: dropout(x, p) + residual with a fresh draw; otherwise x + residual. x and residual
// have one shape (no broadcasting); differentiable in both.
at::Tensor dropout_add(const at::Tensor& x, const at::Tensor& residual, double p, bool training);
// training && p > 0: dropout(x, p) with a fresh draw; otherwise x itself. (Not `dropout`: at::dropout
// would be found by argument-dependent lookup and make unqualified calls ambiguous.)
at::Tensor fused_dropout(const at::Tensor& x, double p, bool training);

// The same with an explicit draw (draw.p == 0: no dropout).
at::Tensor dropout_add(const at::Tensor& x, const at::Tensor& residual, const DropoutDraw& draw);
at::Tensor fused_dropout(const at::Tensor& x, const DropoutDraw& draw);

// Plain ATen with the materialised mask: where(mask, float(x)·(1/(1−p)), 0) (+ float(residual)), rounded
// once to the result dtype. What the kernel computes, bit for bit on float32 and bfloat16. residual may
// be undefined (plain dropout).
at::Tensor dropout_add_reference(const at::Tensor& x, const at::Tensor& residual, const DropoutDraw& draw);

// Where a model's dropout masks come from in data-parallel training: a seed that is the same on every
// rank (e.g. from the run seed and the epoch), the global sample index of each batch row, and one fixed
// offset per dropout site of the model, so activation checkpointing's recompute redraws the same masks.
// A default-constructed source is not keyed: the model draws from the default generator as before.
struct DropoutSource {
  std::uint64_t seed = 0;
  at::Tensor sample_index{};  // int64 CPU [B]; undefined: not keyed

  // The source of one epoch of a run: seed = a mix of (run_seed, epoch), so a sample's masks depend on
  // (run_seed, epoch, its index, the site) only — every sample is seen once per epoch.
  static DropoutSource per_sample(std::uint64_t run_seed, std::int64_t epoch, at::Tensor sample_index);

  [[nodiscard]] bool keyed() const { return sample_index.defined(); }
  // The draw of dropout site `site` with probability p (p == 0: none).
  [[nodiscard]] DropoutDraw draw(double p, std::uint64_t site) const { return {p, seed, site, sample_index}; }
};

// The mask of `draw` for a tensor of `sizes`, materialised: bool, true = kept (all true when p == 0).
// With draw.sample_index, sizes[0] must equal its length.
at::Tensor dropout_mask(const DropoutDraw& draw, c10::IntArrayRef sizes);

// Why the fused kernel would not take these inputs (residual may be undefined), or nullptr. Which
// compilation of it runs (AVX2+FMA or portable, bit-identical) is op "dropout" of core/cpu.h.
const char* dropout_skip_reason(const at::Tensor& x, const at::Tensor& residual);

}  // namespace hotpath::ops
