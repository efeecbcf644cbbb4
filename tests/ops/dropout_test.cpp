// The fused hidden dropout (+ residual) against x·mask/(1−p) + residual with the materialised mask:
// forward and backward in fp32 (bitwise) and every float32/bfloat16 mix (bitwise vs the reference),
// lengths off the 32-element block and across a 2¹⁶-element row, the mask's statistics and its
// dependence on seed and offset only, the generator draws (none for p = 0 and eval), thread-count
// independence, finite differences, checkpoint replay, and BERT's use of it.
#include "hotpath/ops/dropout.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/ops/activation_checkpoint.h"
#include "hotpath/models/text/bert.h"
#include "models/model_test_support.h"

namespace hotpath::ops {
using namespace hotpath::models;  // the BERT and LoRA modules the ops run in
using namespace hotpath::formats;  // BertConfig
namespace {

// Equal values, shapes and dtypes (−0 equals +0: x·0 of the spelled-out reference gives −0 for
// negative x, where the kernel writes +0).
void expect_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << what;
  EXPECT_TRUE(a.eq(b).all().item<bool>()) << what << ": max |diff| "
                                          << (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

float scale_of(double p) { return static_cast<float>(1.0 / (1.0 - p)); }

// Sizes around the 32-element block and the 2¹⁶-element row.
const std::vector<std::vector<std::int64_t>> kShapes = {{1}, {31}, {2, 16}, {3, 11}, {4, 8, 24}, {2, 33000}, {70000 + 17}};

TEST(FusedDropout, AddEqualsMaskedScaledXPlusResidual) {
  for (const double p : {0.1, 0.5}) {
    for (const auto& shape : kShapes) {
      const DropoutDraw draw{p, 1234, 5};
      const at::Tensor x = at::randn(shape);
      const at::Tensor r = at::randn(shape);
      const at::Tensor keep = dropout_mask(draw, shape);
      expect_same(dropout_add(x, r, draw), x * keep.to(at::kFloat) * scale_of(p) + r, "dropout_add");
      expect_same(fused_dropout(x, draw), x * keep.to(at::kFloat) * scale_of(p), "dropout");
    }
  }
}

TEST(FusedDropout, KernelAppliesTheMaterialisedMask) {
  const DropoutDraw draw{0.3, 99, 0};
  for (const auto& shape : kShapes) {
    const at::Tensor kept = fused_dropout(at::ones(shape), draw).ne(0);
    EXPECT_TRUE(at::equal(kept, dropout_mask(draw, shape))) << at::IntArrayRef(shape);
  }
}

TEST(FusedDropout, KeepFractionIsOneMinusPAndPairsAreIndependent) {
  const std::int64_t n = std::int64_t{1} << 20;
  for (const double p : {0.1, 0.5, 0.9}) {
    const at::Tensor keep = dropout_mask({p, 7, 0}, {n / 32, 32});
    const double kept = keep.to(at::kDouble).mean().item<double>();
    const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
    EXPECT_NEAR(kept, 1.0 - p, 5.0 * sigma) << "p " << p;
    // Elements t and t + 16 of a block share one hash (low and high 16 bits): both dropped ≈ p².
    using at::indexing::Slice;
    const at::Tensor both = keep.index({Slice(), Slice(0, 16)}).logical_not() &
                            keep.index({Slice(), Slice(16, 32)}).logical_not();
    const double sigma2 = std::sqrt(p * p * (1.0 - p * p) / static_cast<double>(n / 2));
    EXPECT_NEAR(both.to(at::kDouble).mean().item<double>(), p * p, 5.0 * sigma2) << "p " << p;
  }
}

TEST(FusedDropout, SameSeedSameMaskOtherSeedsAndOffsetsDiffer) {
  const std::vector<std::int64_t> shape{64, 1024};
  const at::Tensor a = dropout_mask({0.5, 42, 0}, shape);
  EXPECT_TRUE(at::equal(a, dropout_mask({0.5, 42, 0}, shape)));
  for (const DropoutDraw& other : {DropoutDraw{0.5, 42, 1}, DropoutDraw{0.5, 43, 0}}) {
    const double differ = a.ne(dropout_mask(other, shape)).to(at::kDouble).mean().item<double>();
    EXPECT_NEAR(differ, 0.5, 0.02) << "seed " << other.seed << " offset " << other.offset;  // 2p(1−p)
  }
  // The mask of an element depends on its flat index only, not on the tensor's shape.
  EXPECT_TRUE(at::equal(a.flatten(), dropout_mask({0.5, 42, 0}, {64 * 1024})));
}

at::Tensor generator_state() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  const std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

TEST(FusedDropout, ZeroPAndEvalAreIdentityAndDrawNothing) {
  const at::Tensor x = at::randn({5, 40});
  const at::Tensor r = at::randn({5, 40});
  const at::Tensor before = generator_state();
  expect_same(dropout_add(x, r, 0.0, true), x + r, "p = 0");
  expect_same(dropout_add(x, r, 0.1, false), x + r, "eval");
  EXPECT_TRUE(fused_dropout(x, 0.0, true).is_same(x));
  EXPECT_TRUE(fused_dropout(x, 0.1, false).is_same(x));
  EXPECT_TRUE(at::equal(before, generator_state()));
  // Training with p > 0 takes exactly one random64() per call.
  at::Generator copy = at::detail::getDefaultCPUGenerator().clone();
  (void)dropout_add(x, r, 0.1, true);
  at::check_generator<at::CPUGeneratorImpl>(copy)->random64();
  EXPECT_TRUE(at::equal(copy.get_state(), generator_state()));
}

TEST(FusedDropout, ManualSeedRepeatsTheMask) {
  const at::Tensor x = at::randn({3, 100});
  at::manual_seed(11);
  const at::Tensor a = fused_dropout(x, 0.2, true);
  at::manual_seed(11);
  EXPECT_TRUE(at::equal(a, fused_dropout(x, 0.2, true)));
  EXPECT_FALSE(at::equal(a, fused_dropout(x, 0.2, true)));  // the next call draws a new seed
}

TEST(FusedDropout, BackwardRegeneratesTheMask) {
  for (const auto& shape : kShapes) {
    const DropoutDraw draw{0.25, 3, 8};
    const at::Tensor x = at::randn(shape).requires_grad_(true);
    const at::Tensor r = at::randn(shape).requires_grad_(true);
    const at::Tensor w = at::randn(shape);
    (dropout_add(x, r, draw) * w).sum().backward();
    const at::Tensor keep = dropout_mask(draw, shape).to(at::kFloat);
    expect_same(x.grad(), w * keep * scale_of(draw.p), "dx");
    expect_same(r.grad(), w, "dresidual");
    const at::Tensor x2 = x.detach().requires_grad_(true);
    (fused_dropout(x2, draw) * w).sum().backward();
    expect_same(x2.grad(), w * keep * scale_of(draw.p), "dx (plain dropout)");
  }
}

// bf16 (alone or with an fp32 residual, as autocast gives a layer) against the reference, whose one
// rounding the kernel reproduces: outputs and gradients bitwise, in the inputs' dtypes.
TEST(FusedDropout, Bfloat16AndMixedDtypesMatchTheReference) {
  const DropoutDraw draw{0.1, 77, 2};
  const std::vector<std::int64_t> shape{3, 1000};
  for (const auto& [xt, rt] : {std::pair{at::kBFloat16, at::kBFloat16}, std::pair{at::kBFloat16, at::kFloat},
                               std::pair{at::kFloat, at::kBFloat16}}) {
    const at::Tensor x0 = at::randn(shape).mul(3.0).to(xt);
    const at::Tensor r0 = at::randn(shape).to(rt);
    const at::Tensor w = at::randn(shape).to(at::promote_types(xt, rt));
    at::Tensor grads[2][2];
    for (int fused = 0; fused < 2; ++fused) {
      const at::Tensor x = x0.clone().requires_grad_(true);
      const at::Tensor r = r0.clone().requires_grad_(true);
      const at::Tensor y = fused == 1 ? dropout_add(x, r, draw) : dropout_add_reference(x, r, draw);
      EXPECT_EQ(y.scalar_type(), at::promote_types(xt, rt));
      if (fused == 1) expect_same(y, dropout_add_reference(x0, r0, draw), "forward");
      (y * w).sum().backward();
      grads[fused][0] = x.grad();
      grads[fused][1] = r.grad();
    }
    expect_same(grads[1][0], grads[0][0], "dx");
    expect_same(grads[1][1], grads[0][1], "dresidual");
    EXPECT_EQ(grads[1][0].scalar_type(), xt);
    EXPECT_EQ(grads[1][1].scalar_type(), rt);
    const at::Tensor xb = x0.to(at::kBFloat16);
    expect_same(fused_dropout(xb, draw), dropout_add_reference(xb, at::Tensor(), draw), "plain bf16");
  }
}

TEST(FusedDropout, GradientsMatchFiniteDifferences) {
  const DropoutDraw draw{0.4, 5, 0};
  const at::Tensor x0 = at::randn({70}, at::kDouble);
  const at::Tensor r0 = at::randn({70}, at::kDouble);
  const at::Tensor w = at::randn({70}, at::kDouble);
  const auto loss = [&](const at::Tensor& x, const at::Tensor& r) {
    return (dropout_add(x.to(at::kFloat), r.to(at::kFloat), draw).to(at::kDouble) * w).sum();
  };
  const at::Tensor x = x0.clone().requires_grad_(true);
  const at::Tensor r = r0.clone().requires_grad_(true);
  loss(x, r).backward();
  const double h = 0.5;  // the loss is linear: a wide step only shrinks the fp32 rounding
  for (const std::int64_t i : {0, 15, 16, 31, 32, 69}) {
    for (int which = 0; which < 2; ++which) {
      at::Tensor plus = (which == 0 ? x0 : r0).clone();
      at::Tensor minus = plus.clone();
      plus[i] += h;
      minus[i] -= h;
      const double numeric = which == 0 ? (loss(plus, r0) - loss(minus, r0)).item<double>() / (2 * h)
                                        : (loss(x0, plus) - loss(x0, minus)).item<double>() / (2 * h);
      const double analytic = (which == 0 ? x.grad() : r.grad())[i].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-3 * (1.0 + std::abs(numeric))) << (which == 0 ? "x[" : "r[") << i << "]";
    }
  }
}

TEST(FusedDropout, BackwardIsDifferentiable) {
  const DropoutDraw draw{0.3, 21, 0};
  const at::Tensor x = at::randn({200}).requires_grad_(true);
  const at::Tensor g = at::randn({200}).requires_grad_(true);
  const at::Tensor dx = torch::autograd::grad({fused_dropout(x, draw)}, {x}, {g}, /*retain_graph=*/true,
                                              /*create_graph=*/true)[0];
  const at::Tensor v = at::randn({200});
  (dx * v).sum().backward();
  expect_same(g.grad(), v * dropout_mask(draw, {200}).to(at::kFloat) * scale_of(draw.p), "d(dx)/dg");
}

TEST(FusedDropout, ResultDoesNotDependOnTheThreadCount) {
  const DropoutDraw draw{0.1, 8, 0};
  const at::Tensor x = at::randn({300000});
  const at::Tensor r = at::randn({300000});
  const at::Tensor one = dropout_add(x, r, draw);
  at::set_num_threads(2);
  const at::Tensor two = dropout_add(x, r, draw);
  at::set_num_threads(1);
  EXPECT_TRUE(at::equal(one, two));
}

TEST(FusedDropout, OtherDtypesRunTheReferenceWithTheSameMask) {
  const DropoutDraw draw{0.2, 4, 0};
  const at::Tensor x = at::randn({4, 50}, at::kDouble);
  const at::Tensor r = at::randn({4, 50}, at::kDouble);
  EXPECT_NE(dropout_skip_reason(x, r), nullptr);
  const at::Tensor y = dropout_add(x, r, draw);
  EXPECT_EQ(y.scalar_type(), at::kDouble);
  const at::Tensor keep = dropout_mask(draw, {4, 50});
  expect_same(y, at::where(keep, x * (1.0 / (1.0 - draw.p)), 0.0) + r, "double");
  EXPECT_EQ(dropout_skip_reason(x.to(at::kFloat), r.to(at::kBFloat16)), nullptr);
}

TEST(FusedDropout, RejectsBadInput) {
  const at::Tensor x = at::randn({4});
  EXPECT_THROW(fused_dropout(x, 1.0, true), Error);
  EXPECT_THROW(fused_dropout(x, -0.1, false), Error);
  EXPECT_THROW(dropout_add(x, at::randn({5}), 0.1, true), Error);
  EXPECT_THROW(dropout_add(x, at::randn({1, 4}), DropoutDraw{0.1, 1, 0}), Error);
}

// Data parallel: a batch of 2B rows [2B, T, H] keyed by the rows' global sample indices gets, row for
// row, the masks its two halves get keyed alike — in another order and padded to other lengths (the mask
// of (g, t, h) does not depend on T) — for the materialised mask, the kernel (fp32 and bf16, H off the
// 32-element block) and its backward; a sample longer than a 2¹⁶-element row too.
TEST(FusedDropout, KeyedBatchEqualsItsHalvesAtAnyPadding) {
  const std::vector<std::int64_t> g = {12, 5, 900, 31, 2, 77};
  const at::Tensor all = at::tensor(g, at::kLong);
  for (const std::int64_t h : {40, 64}) {
    const DropoutDraw full{0.3, 2024, 9, all};
    const at::Tensor x = at::randn({6, 24, h});
    const at::Tensor r = at::randn({6, 24, h});
    const at::Tensor keep = dropout_mask(full, x.sizes());
    // First half padded to 11 tokens, second half reversed and padded to 37.
    const at::Tensor rows = at::tensor(std::vector<std::int64_t>{5, 4, 3}, at::kLong);
    const DropoutDraw first{0.3, 2024, 9, all.slice(0, 0, 3).clone()};
    const DropoutDraw second{0.3, 2024, 9, all.index_select(0, rows)};
    EXPECT_TRUE(at::equal(dropout_mask(first, {3, 11, h}), keep.slice(0, 0, 3).slice(1, 0, 11))) << h;
    EXPECT_TRUE(at::equal(dropout_mask(second, {3, 37, h}).slice(1, 0, 24), keep.index_select(0, rows))) << h;
    // The kernel applies that mask (fp32 and bf16 bitwise, against the reference) ...
    expect_same(dropout_add(x, r, full), dropout_add_reference(x, r, full), "keyed dropout_add");
    expect_same(fused_dropout(x.to(at::kBFloat16), full), dropout_add_reference(x.to(at::kBFloat16), at::Tensor(), full),
                "keyed bf16 dropout");
    // ... and the halves, padded, give the whole batch's values on their rows.
    const at::Tensor padded = at::cat({x.index_select(0, rows), at::randn({3, 13, h})}, 1);
    const at::Tensor y = fused_dropout(x, full);
    expect_same(fused_dropout(padded, second).slice(1, 0, 24), y.index_select(0, rows), "keyed second half");
    expect_same(fused_dropout(x.slice(0, 0, 3).slice(1, 0, 11).contiguous(), first), y.slice(0, 0, 3).slice(1, 0, 11),
                "keyed first half");
    // Backward regenerates the keyed mask.
    const at::Tensor xg = x.clone().requires_grad_(true);
    fused_dropout(xg, full).backward(at::ones_like(x));
    expect_same(xg.grad(), keep.to(at::kFloat) * scale_of(0.3), "keyed backward");
  }
  // Unkeyed, element n of the flat tensor: the halves' masks are not the whole batch's.
  EXPECT_FALSE(at::equal(dropout_mask({0.3, 2024, 9}, {3, 24, 40}),
                         dropout_mask({0.3, 2024, 9, all}, {6, 24, 40}).slice(0, 0, 3)));
  // Rows keyed by one sample index are equal; by others, different (≈ 2p(1−p) of the elements).
  const at::Tensor same = dropout_mask({0.3, 1, 0, at::tensor(std::vector<std::int64_t>{4, 4, 5}, at::kLong)}, {3, 2000});
  EXPECT_TRUE(at::equal(same[0], same[1]));
  EXPECT_NEAR((same[0] != same[2]).to(at::kDouble).mean().item<double>(), 2 * 0.3 * 0.7, 0.05);
  // A sample past one 2¹⁶-element row, its tail off the block, on 1 and 2 threads.
  const DropoutDraw big{0.1, 3, 1, at::tensor(std::vector<std::int64_t>{8, 1}, at::kLong)};
  const at::Tensor xb = at::randn({2, 70000 + 17});
  const at::Tensor one = fused_dropout(xb, big);
  at::set_num_threads(2);
  const at::Tensor two = fused_dropout(xb, big);
  at::set_num_threads(1);
  expect_same(one, two, "keyed, 2 threads");
  expect_same(one, dropout_add_reference(xb, at::Tensor(), big), "keyed, past a row");
  expect_same(one[1], fused_dropout(xb.slice(0, 1, 2).contiguous(), {0.1, 3, 1, at::tensor(std::vector<std::int64_t>{1}, at::kLong)})[0],
              "keyed, alone");
  // One index per row of dim 0, int64, or one line saying so.
  EXPECT_THROW(fused_dropout(xb, DropoutDraw{0.1, 3, 1, at::tensor(std::vector<std::int64_t>{8}, at::kLong)}), Error);
  EXPECT_THROW(fused_dropout(xb, DropoutDraw{0.1, 3, 1, at::tensor(std::vector<std::int64_t>{8, 1}, at::kLong).to(at::kInt)}),
               Error);
}

// activation_checkpoint.h forks the default generator: the recompute draws the same seed, so the
// same mask, and the gradients are the plain run's bit for bit.
TEST(FusedDropout, CheckpointRecomputeReplaysTheMask) {
  const at::Tensor w = at::randn({6, 6});
  const auto block = [&](const at::Tensor& h) { return dropout_add(at::matmul(h, w), h, 0.3, true); };
  at::Tensor grads[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    const at::Tensor h = at::ones({4, 6}).requires_grad_(true);
    at::manual_seed(3);
    const at::Tensor y = ckpt == 1 ? checkpoint(block, h) : block(h);
    (y * at::arange(24, at::kFloat).view({4, 6})).sum().backward();
    grads[ckpt] = h.grad();
  }
  EXPECT_TRUE(at::equal(grads[0], grads[1]));
}

// Backward regenerates the mask: after forward only the output is alive (at::dropout keeps a float
// noise tensor of x's size for backward, besides the output).
TEST(FusedDropout, KeepsNothingForBackward) {
  const at::Tensor x = at::randn({64, 1024}).requires_grad_(true);
  const at::Tensor r = at::randn({64, 1024}).requires_grad_(true);
  PeakMemory meter;
  at::Tensor y = dropout_add(x, r, 0.1, true);
  EXPECT_EQ(meter.current_bytes(), static_cast<std::int64_t>(y.nbytes()));
  y.reset();
  meter.reset();
  y = at::dropout(x, 0.1, true) + r;
  EXPECT_GE(meter.current_bytes(), 2 * static_cast<std::int64_t>(y.nbytes()));
}

BertConfig tiny_bert() {
  BertConfig c;
  c.vocab_size = 60;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 64;
  c.max_position_embeddings = 64;
  c.num_labels = 3;
  c.hidden_dropout_prob = 0.2;
  c.classifier_dropout = 0.2;
  return c;
}

// HOTPATH_BERT_DROPOUT=aten (the A/B switch for benchmarks) puts at::dropout back; eval is the same
// either way and training is repeatable under at::manual_seed.
TEST(FusedDropout, BertUsesItInTrainingOnly) {
  at::manual_seed(0);
  BertForSequenceClassification model(tiny_bert());
  const at::Tensor ids = at::randint(1, 60, {2, 20}, at::kLong);
  const auto run = [&](bool aten) {
    if (aten) {
      setenv("HOTPATH_BERT_DROPOUT", "aten", 1);
    } else {
      unsetenv("HOTPATH_BERT_DROPOUT");
    }
    at::manual_seed(5);
    at::Tensor out = model.forward(ids);
    unsetenv("HOTPATH_BERT_DROPOUT");
    return out;
  };
  model.eval();
  EXPECT_TRUE(at::equal(run(false), run(true)));
  model.train();
  const at::Tensor fused = run(false);
  EXPECT_TRUE(at::equal(fused, run(false)));
  EXPECT_FALSE(at::equal(fused, run(true)));
  model.eval();
  EXPECT_FALSE(at::equal(fused, run(false)));
}

// A keyed BERT in training (hidden, attention and classifier dropout, LoRA dropout, checkpointing on and
// off, fused and eager attention): the logits of a batch of 4 equal those of its halves, each padded to
// another length and with its rows in another order — what 2 data-parallel ranks compute for 1 rank's batch.
TEST(FusedDropout, KeyedBertBatchEqualsItsPaddedHalves) {
  for (const bool fused : {true, false}) {
    for (const bool ckpt : {false, true}) {
      at::manual_seed(0);
      BertConfig config = tiny_bert();
      config.attention_probs_dropout_prob = 0.3;
      BertOptions options;
      options.attention = fused ? static_cast<AttentionFn>(&fused_attention) : static_cast<AttentionFn>(&bert_eager_attention);
      options.gradient_checkpointing = ckpt;
      const auto owner = std::make_shared<BertForSequenceClassification>(config, options);
      BertForSequenceClassification& model = *owner;
      formats::LoraConfig lora;
      lora.r = 2;
      lora.lora_dropout = 0.25;
      lora.target_modules = {"query", "value", "dense"};
      models::apply_lora(model, lora);
      {  // lora_B starts at zero, which would hide the adapters' dropout
        const at::NoGradGuard no_grad;
        for (const auto& item : model.named_modules("", /*include_self=*/false)) {
          const auto linear = std::dynamic_pointer_cast<LoraLinearImpl>(item.value());
          if (linear && linear->has_adapter()) linear->lora_B->weight.normal_(0.0, 0.5);
        }
      }
      model.train();
      const std::int64_t lengths[] = {9, 5, 14, 7};
      const at::Tensor ids = at::randint(1, 60, {4, 14}, at::kLong);
      at::Tensor mask = at::zeros({4, 14}, at::kLong);
      for (int b = 0; b < 4; ++b) mask[b].slice(0, 0, lengths[b]).fill_(1);
      const at::Tensor index = at::tensor(std::vector<std::int64_t>{301, 2, 58, 1200}, at::kLong);
      const DropoutSource source = DropoutSource::per_sample(42, 3, index);
      const at::Tensor whole = model.forward(ids * mask, mask, {}, source);
      const auto half = [&](std::vector<std::int64_t> rows, std::int64_t length) {
        const at::Tensor r = at::tensor(rows, at::kLong);
        at::Tensor part_ids = at::zeros({r.numel(), length}, at::kLong);
        at::Tensor part_mask = at::zeros({r.numel(), length}, at::kLong);
        const std::int64_t n = std::min<std::int64_t>(length, 14);
        part_ids.slice(1, 0, n).copy_((ids * mask).index_select(0, r).slice(1, 0, n));
        part_mask.slice(1, 0, n).copy_(mask.index_select(0, r).slice(1, 0, n));
        return model.forward(part_ids, part_mask, {}, DropoutSource::per_sample(42, 3, index.index_select(0, r)));
      };
      const std::string what = std::string(fused ? "fused" : "eager") + (ckpt ? ", checkpointed" : "");
      EXPECT_TRUE(at::allclose(half({3, 0}, 9), whole.index_select(0, at::tensor(std::vector<std::int64_t>{3, 0})), 1e-5, 1e-5)) << what;
      EXPECT_TRUE(at::allclose(half({2, 1}, 20), whole.index_select(0, at::tensor(std::vector<std::int64_t>{2, 1})), 1e-5, 1e-5)) << what;
      // Dropout is on: another epoch's seed changes the logits, eval mode ignores the source.
      EXPECT_FALSE(at::allclose(model.forward(ids * mask, mask, {}, DropoutSource::per_sample(42, 4, index)), whole, 1e-4, 1e-4))
          << what;
      model.eval();
      EXPECT_TRUE(at::equal(model.forward(ids * mask, mask, {}, source), model.forward(ids * mask, mask))) << what;
    }
  }
}

// Not a check — a measurement (run with --gtest_also_run_disabled_tests): at::dropout + add vs the
// fused dropout_add on one BERT-base activation ([32, 128, 768] fp32), forward and backward
// (torch::autograd::grad: no accumulation pass), 1 and 2 threads, best of 15 wall and CPU times.
TEST(FusedDropout, DISABLED_SpeedVsAtenDropoutAdd) {
  const auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const auto wall_seconds = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const at::Tensor x = at::randn({32, 128, 768}).requires_grad_(true);
  const at::Tensor r = at::randn({32, 128, 768}).requires_grad_(true);
  const at::Tensor g = at::randn({32, 128, 768});
  for (const int threads : {1, 2}) {
    at::set_num_threads(threads);
    for (const bool fused : {false, true}) {
      double best[2][2] = {{1e9, 1e9}, {1e9, 1e9}};  // [forward, backward][wall, cpu]
      for (int rep = 0; rep < 15; ++rep) {
        const double w0 = wall_seconds();
        const double c0 = cpu_seconds();
        const at::Tensor y = fused ? dropout_add(x, r, 0.1, true) : at::dropout(x, 0.1, true) + r;
        const double w1 = wall_seconds();
        const double c1 = cpu_seconds();
        const auto grads = torch::autograd::grad({y}, {x, r}, {g});
        const double w2 = wall_seconds();
        const double c2 = cpu_seconds();
        best[0][0] = std::min(best[0][0], w1 - w0);
        best[0][1] = std::min(best[0][1], c1 - c0);
        best[1][0] = std::min(best[1][0], w2 - w1);
        best[1][1] = std::min(best[1][1], c2 - c1);
      }
      std::cout << threads << " thread(s) " << (fused ? "fused dropout_add " : "at::dropout + add ") << "forward "
                << 1e3 * best[0][0] << " ms (cpu " << 1e3 * best[0][1] << " ms), backward " << 1e3 * best[1][0]
                << " ms (cpu " << 1e3 * best[1][1] << " ms)\n";
    }
  }
  at::set_num_threads(1);
}

}  // namespace
}  // namespace hotpath::ops
