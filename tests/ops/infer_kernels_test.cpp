// The engine's out= kernels (ops/int8_kernels.h, int8_linear.h, attention.h): LayerNorm with the next
// linear's row quantization against ATen's LayerNorm and the row quantizer at every ISA level, the int8
// linear into caller buffers against forward(), attention read from the packed q | k | v against attention()
// on per-head copies, by row ranges too.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/int8_kernels.h"
#include "hotpath/ops/int8_linear.h"

namespace hotpath::ops {
namespace {

using cpu::Isa;

std::vector<Isa> levels() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (cpu::allows(isa)) out.push_back(isa);
  }
  return out;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(LayerNormRows, MatchesAtenAndQuantizesLikeTheRowQuantizerAtEveryIsa) {
  for (const std::int64_t k : {1, 7, 32, 100, 768}) {
    at::manual_seed(k);
    const at::Tensor x = at::randn({11, k}) * 3.0 + 0.5;
    const at::Tensor residual = at::randn({11, k});
    const at::Tensor w = at::randn({k}) * 0.3 + 1.0;
    const at::Tensor b = at::randn({k}) * 0.1;
    for (const bool with_residual : {false, true}) {
      const at::Tensor r = with_residual ? residual : at::Tensor();
      const at::Tensor want = at::layer_norm(with_residual ? x + residual : x, {k}, w, b, 1e-12);
      for (const Isa isa : levels()) {
        const cpu::ScopedMaxIsa cap(isa);
        SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " k=" + std::to_string(k) +
                     " residual=" + std::to_string(with_residual));
        const at::Tensor out = at::empty_like(x);
        at::Tensor q = at::empty({11, k}, at::kChar);
        at::Tensor scale = at::empty({11}, at::kFloat);
        layer_norm_rows_out(x, r, w, b, 1e-12, out, q, scale);
        EXPECT_LE(max_abs_diff(out, want), 2e-6 * std::max(1.0, want.abs().max().item<double>()));
        const auto [q_ref, scale_ref] = int8_quantize_rows(out);
        EXPECT_TRUE(at::equal(q, q_ref));
        EXPECT_TRUE(at::equal(scale, scale_ref));
        const at::Tensor plain = at::empty_like(x);
        layer_norm_rows_out(x, r, w, b, 1e-12, plain);
        EXPECT_TRUE(at::equal(plain, out)) << "quantizing changes nothing of the output";
      }
    }
  }
  // In place (the engine's embedding LayerNorm) and the one-line errors.
  const at::Tensor x = at::randn({3, 16});
  const at::Tensor w = at::ones({16}), b = at::zeros({16});
  at::Tensor inplace = x.clone();
  layer_norm_rows_out(inplace, at::Tensor(), w, b, 1e-5, inplace);
  EXPECT_LE(max_abs_diff(inplace, at::layer_norm(x, {16}, w, b, 1e-5)), 2e-6);
  EXPECT_THROW(layer_norm_rows_out(x, at::Tensor(), at::ones({15}), b, 1e-5, at::empty_like(x)), Error);
  EXPECT_THROW(layer_norm_rows_out(x.to(at::kDouble), at::Tensor(), w, b, 1e-5, at::empty_like(x)), Error);
  EXPECT_THROW(layer_norm_rows_out(x, at::Tensor(), w, b, 1e-5, at::empty_like(x), at::empty({3, 16}, at::kChar)),
               Error);
}

TEST(Int8Linear, ForwardOutEqualsForwardBitForBit) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({48, 40}) * 0.2;
  const at::Tensor bias = at::randn({48}) * 0.1;
  auto [w8, scale] = Int8Linear::quantize_weight(w);
  const Int8Linear op = Int8Linear::prepare(w8, scale, bias);
  const at::Tensor x = at::randn({2, 9, 40});
  const at::Tensor residual = at::randn({2, 9, 48});
  for (const char* act : {"none", "gelu", "relu"}) {
    const at::Tensor want = op.forward(x, act, residual);
    for (const std::int64_t acc_rows : {std::int64_t{18}, std::int64_t{5}, std::int64_t{1}}) {
      Int8Linear::Buffers buf{at::empty({18, 40}, at::kChar), at::empty({18}, at::kFloat),
                              at::empty({acc_rows, 48}, at::kInt)};
      const at::Tensor out = at::empty({2, 9, 48});
      op.forward_out(x, act, residual, out, buf);
      EXPECT_TRUE(at::equal(out, want)) << act << " acc rows " << acc_rows;
    }
    // Rows quantized beforehand (by a LayerNorm): x is not read.
    const auto [q, xs] = int8_quantize_rows(x.reshape({18, 40}));
    const at::Tensor out = at::empty({2, 9, 48});
    op.forward_out(at::full({2, 9, 40}, 1e9), act, residual, out,
                   {q.clone(), xs.clone(), at::empty({op.acc_rows(18), 48}, at::kInt)}, /*quantized=*/true);
    EXPECT_TRUE(at::equal(out, want)) << act << " pre-quantized";
  }
  EXPECT_EQ(op.acc_rows(18), 18);
  const at::Tensor out = at::empty({2, 9, 48});
  EXPECT_THROW(op.forward_out(x, "none", {}, out, {at::empty({17, 40}, at::kChar), at::empty({18}), at::empty({18, 48}, at::kInt)}),
               Error);
  EXPECT_THROW(op.forward_out(x, "none", {}, at::empty({2, 9, 47}), {at::empty({18, 40}, at::kChar), at::empty({18}),
                                                                      at::empty({18, 48}, at::kInt)}),
               Error);
}

TEST(AttentionPackedQkv, EqualsAttentionOnPerHeadCopiesAtEveryIsaAndByRows) {
  struct Case {
    std::int64_t batch, len, heads, head_dim;
    bool mask;
  };
  for (const Case c : {Case{2, 77, 4, 16, true}, Case{1, 128, 12, 64, false}, Case{1, 131, 2, 40, true},
                       Case{3, 5, 1, 8, true}}) {
    at::manual_seed(c.len);
    const std::int64_t hidden = c.heads * c.head_dim;
    const at::Tensor qkv = at::randn({c.batch, c.len, 3 * hidden});
    at::Tensor mask = at::ones({c.batch, c.len}, at::kLong);
    if (c.mask) mask[c.batch - 1].narrow(0, c.len / 2, c.len - c.len / 2).zero_();
    const at::Tensor m = c.mask ? mask : at::Tensor();
    const at::Tensor parts = qkv.view({c.batch, c.len, 3, c.heads, c.head_dim}).permute({2, 0, 3, 1, 4});
    for (const Isa isa : levels()) {
      const cpu::ScopedMaxIsa cap(isa);
      SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " len=" + std::to_string(c.len));
      const c10::InferenceMode no_grad;
      const at::Tensor want = attention(parts[0], parts[1], parts[2], m, AttentionKernel::kFused)
                                  .transpose(1, 2)
                                  .reshape({c.batch, c.len, hidden});
      at::Tensor out = at::empty({c.batch, c.len, hidden});
      attention_packed_qkv_out(qkv, c.heads, m, out);
      EXPECT_TRUE(at::equal(out, want)) << max_abs_diff(out, want);
      // Two row ranges that do not start at a block boundary: the same rows.
      at::Tensor rows = at::zeros({c.batch, c.len, hidden});
      const std::int64_t cut = c.len / 3;
      attention_packed_qkv_out(qkv, c.heads, m, rows, 0, cut);
      attention_packed_qkv_out(qkv, c.heads, m, rows, cut, c.len);
      EXPECT_TRUE(at::equal(rows, want)) << max_abs_diff(rows, want);
    }
  }
  at::Tensor out = at::empty({1, 4, 8});
  EXPECT_THROW(attention_packed_qkv_out(at::randn({1, 4, 23}), 1, {}, out), Error);
  EXPECT_THROW(attention_packed_qkv_out(at::randn({1, 4, 24}), 1, {}, out, 3, 5), Error);
  EXPECT_THROW(attention_packed_qkv_out(at::randn({1, 4, 24}), 1, at::ones({1, 5}), out), Error);
}

}  // namespace
}  // namespace hotpath::ops
