// Sliding-window (Longformer) attention: the fused kernel against its dense ATen twin — outputs and q/k/v
// gradients, fp32 and bf16, windows from 0 to past the sequence, global tokens (inside and outside the
// window, first and last), padding, head_dim off the vector width, lengths off the 32-query block — at
// every ISA level this CPU has, and the mask's own semantics on a hand-checked case.
#include "hotpath/ops/sliding_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "ops/isa_param_test.h"

namespace hotpath::ops {
namespace {

struct Case {
  std::int64_t batch, heads, len, d, window;
  std::vector<std::int64_t> lengths;  // tokens per sequence (the rest padding); empty: all len
  std::vector<std::int64_t> globals;  // global positions (in every sequence where they are tokens)
};

std::string describe(const Case& c) {
  std::ostringstream out;
  out << "[" << c.batch << "," << c.heads << "," << c.len << "," << c.d << "] window " << c.window << ", "
      << c.globals.size() << " global on " << sliding_attention_kernel_name();
  return out.str();
}

at::Tensor roles_of(const Case& c) {
  at::Tensor mask = at::ones({c.batch, c.len}, at::kLong);
  at::Tensor global = at::zeros({c.batch, c.len}, at::kLong);
  for (std::int64_t b = 0; b < c.batch; ++b) {
    const std::int64_t n = c.lengths.empty() ? c.len : c.lengths[static_cast<std::size_t>(b)];
    mask[b].narrow(0, n, c.len - n).fill_(0);
    for (std::int64_t g : c.globals) global[b][g] = 1;
  }
  return token_roles(mask, global);
}

// Output and the gradients of q, k, v for sum(out · dout).
std::vector<at::Tensor> run(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& dout,
                            std::int64_t window, const at::Tensor& roles, AttentionKernel kernel) {
  at::Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
  at::Tensor out = sliding_window_attention(q, k, v, window, roles, kernel);
  const auto grads = torch::autograd::grad({(out.to(at::kFloat) * dout).sum()}, {q, k, v});
  return {out.detach(), grads[0], grads[1], grads[2]};
}

void expect_close(const at::Tensor& a, const at::Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double err = (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
  EXPECT_LE(err, tol) << what;
  EXPECT_FALSE(a.isnan().any().item<bool>()) << what;
}

void check_case(const Case& c, std::uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor q = at::randn({c.batch, c.heads, c.len, c.d}), k = at::randn_like(q), v = at::randn_like(q),
                   dout = at::randn_like(q);
  const at::Tensor roles = roles_of(c);
  const auto fused = run(q, k, v, dout, c.window, roles, AttentionKernel::kFused);
  const auto ref = run(q, k, v, dout, c.window, roles, AttentionKernel::kReference);
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) expect_close(fused[i], ref[i], 2e-5, describe(c) + " fp32 " + names[i]);
  // bf16 inputs: widened, fp32 math, the output rounded once; against the fp32 twin on the rounded inputs.
  const auto round = [](const at::Tensor& t) { return t.to(at::kBFloat16); };
  const auto fused16 = run(round(q), round(k), round(v), dout, c.window, roles, AttentionKernel::kFused);
  const auto ref16 = run(round(q).to(at::kFloat), round(k).to(at::kFloat), round(v).to(at::kFloat), dout, c.window,
                         roles, AttentionKernel::kReference);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(fused16[i].scalar_type(), at::kBFloat16) << names[i];
    expect_close(fused16[i], ref16[i], 3e-2, describe(c) + " bf16 " + names[i]);
  }
}

const std::vector<Case> kCases = {
    {2, 3, 40, 64, 4, {}, {}},                // local only, several blocks of 32
    {2, 2, 77, 8, 3, {77, 50}, {0}},          // padding, a global first token, head_dim below one vector
    {1, 2, 70, 20, 16, {}, {0, 35, 69}},      // globals in the middle and last, inside other rows' windows
    {3, 1, 45, 33, 0, {45, 1, 30}, {0}},      // window 0 (itself and the globals); a one-token sequence
    {2, 2, 50, 16, 100, {50, 20}, {3, 7}},    // window past the sequence: dense attention
    {1, 1, 130, 64, 40, {}, {}},              // several blocks, band wider than a block
};

class SlidingIsaTest : public test::IsaParamTest<&sliding_attention_kernel_name> {};

TEST_P(SlidingIsaTest, MatchesDenseTwinForwardAndBackward) {
  std::uint64_t seed = 11;
  for (const Case& c : kCases) check_case(c, seed++);
}

INSTANTIATE_TEST_SUITE_P(Isa, SlidingIsaTest, test::isa_levels(), test::isa_test_name);

// The mask, by hand: length 6, window 1, token 0 global, token 5 padding.
TEST(SlidingWindowKeep, LocalWindowPlusGlobalKeysPaddingExcluded) {
  const at::Tensor roles = token_roles(at::tensor({1, 1, 1, 1, 1, 0}, at::kLong).unsqueeze(0),
                                       at::tensor({1, 0, 0, 0, 0, 0}, at::kLong).unsqueeze(0));
  EXPECT_TRUE(at::equal(roles, at::tensor({2, 1, 1, 1, 1, 0}, at::kChar).unsqueeze(0)));
  const at::Tensor keep = sliding_window_keep(roles, 1)[0].to(at::kInt);
  const at::Tensor want = at::tensor({1, 1, 0, 0, 0, 0,    // the global query: its own window (the caller replaces it)
                                      1, 1, 1, 0, 0, 0,    // 0 is global, 1 and 2 in the window
                                      1, 1, 1, 1, 0, 0,    // 0 global (outside the window), 1..3
                                      1, 0, 1, 1, 1, 0,    // 0 global, 2..4
                                      1, 0, 0, 1, 1, 0,    // 0 global, 3, 4 (5 is padding)
                                      0, 0, 0, 0, 0, 0},   // padding attends to nothing
                                     at::kInt)
                             .view({6, 6});
  EXPECT_TRUE(at::equal(keep, want)) << keep;
}

TEST(SlidingWindowAttention, PaddingRowsAreZeroAndGetNoGradient) {
  at::manual_seed(3);
  const at::Tensor q = at::randn({1, 2, 10, 8}).requires_grad_(), k = at::randn({1, 2, 10, 8}),
                   v = at::randn({1, 2, 10, 8});
  const at::Tensor roles = token_roles(at::cat({at::ones({1, 7}, at::kLong), at::zeros({1, 3}, at::kLong)}, 1), {});
  const at::Tensor out = sliding_window_attention(q, k, v, 2, roles, AttentionKernel::kFused);
  EXPECT_EQ(out.narrow(2, 7, 3).abs().max().item<float>(), 0.0F);
  const at::Tensor dq = torch::autograd::grad({out.sum()}, {q})[0];
  EXPECT_EQ(dq.narrow(2, 7, 3).abs().max().item<float>(), 0.0F);
  EXPECT_GT(dq.narrow(2, 0, 7).abs().max().item<float>(), 0.0F);
}

TEST(SlidingWindowAttention, BadRolesAndShapesAreOneLine) {
  const at::Tensor q = at::randn({1, 1, 4, 8});
  EXPECT_THROW(sliding_window_attention(q, q, q, 1, at::full({1, 4}, 3, at::kChar)), Error);
  EXPECT_THROW(sliding_window_attention(q, q, q, 1, at::ones({1, 5}, at::kChar)), Error);
  EXPECT_THROW(sliding_window_attention(q, q, q, -1, at::ones({1, 4}, at::kChar)), Error);
  EXPECT_THROW(sliding_window_attention(q, q.narrow(2, 0, 3), q, 1, at::ones({1, 4}, at::kChar)), Error);
  try {
    sliding_window_attention(q, q, q, 1, at::full({1, 4}, 3, at::kChar));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("roles[0, 0] is 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotpath::ops
