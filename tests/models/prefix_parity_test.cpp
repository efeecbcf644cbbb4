// Prefix tuning both ways with peft (tests/oracles/prefix_ref.py): a PeftModel's saved prefix loaded by hotpath and
// hotpath's saved prefix loaded by peft.PeftModel.from_pretrained give the same logits (1e-5), with the table
// and with the reparameterisation MLP; and hotpath's training step under activation checkpointing gives the
// prefix and the head PEFT's gradients (transformers' own checkpointing drops the prefix: see prefix_ref.py).
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include <string>

#include "hotpath/models/text/bert.h"
#include "hotpath/models/text/prefix.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/attention.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

void expect_close(const at::Tensor& a, const at::Tensor& b, double tol) {
  ASSERT_EQ(a.sizes(), b.sizes());
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(diff, tol) << "max |diff| " << diff;
}

class PrefixParity : public ::testing::TestWithParam<bool> {};  // param: prefix_projection

TEST_P(PrefixParity, PeftPrefixLoadsInHotpathAndHotpathPrefixLoadsInPeft) {
  test::TempDir dir;
  std::vector<std::string> args = {"make", "--dir", dir.path().string()};
  if (GetParam()) args.push_back("--projection");
  test::run_python(test::source_path("tests/oracles/prefix_ref.py"), args);
  const auto io = read_tensors(dir.file("io.safetensors"));

  // peft → hotpath.
  auto model = load_bert_classifier(dir.path());
  const formats::PrefixConfig config = load_prefix(*model, dir.path() / "adapter");
  EXPECT_EQ(config.prefix_projection, GetParam());
  model->eval();
  {
    const at::NoGradGuard no_grad;
    expect_close(model->forward(io.at("input_ids"), io.at("attention_mask"), io.at("token_type_ids")), io.at("logits"),
                 1e-5);
  }

  // hotpath → peft: a fresh prefix of another length (through the MLP when projecting), changed, saved.
  auto ours = load_bert_classifier(dir.path());
  at::manual_seed(11);
  const formats::PrefixConfig mine =
      prefix_config_for(*ours, {.num_virtual_tokens = 3, .prefix_projection = GetParam(), .encoder_hidden_size = 10});
  apply_prefix(*ours, mine);
  {
    const at::NoGradGuard no_grad;
    for (auto& p : ours->parameters()) {
      if (p.requires_grad()) p.add_(at::randn(p.sizes()) * 0.3);
    }
  }
  save_prefix(*ours, mine, dir.path() / "ours");
  ours->eval();
  write_tensors(dir.file("in.safetensors"), {{"input_ids", io.at("input_ids")},
                                             {"attention_mask", io.at("attention_mask")},
                                             {"token_type_ids", io.at("token_type_ids")}});
  test::run_python(test::source_path("tests/oracles/prefix_ref.py"),
                   {"load", "--base", dir.path().string(), "--adapter", dir.file("ours"), "--input",
                    dir.file("in.safetensors"), "--out", dir.file("out.safetensors")});
  const at::NoGradGuard no_grad;
  expect_close(ours->forward(io.at("input_ids"), io.at("attention_mask"), io.at("token_type_ids")),
               read_tensors(dir.file("out.safetensors")).at("logits"), 1e-5);
}

// PEFT's step without checkpointing (its only working form) against hotpath's with and without it.
TEST_P(PrefixParity, CheckpointedTrainingStepGivesPeftsGradients) {
  test::TempDir dir;
  std::vector<std::string> args = {"make", "--dir", dir.path().string(), "--grads"};
  if (GetParam()) args.push_back("--projection");
  test::run_python(test::source_path("tests/oracles/prefix_ref.py"), args);
  const auto io = read_tensors(dir.file("io.safetensors"));
  for (const bool checkpointing : {true, false}) {
    SCOPED_TRACE(checkpointing ? "checkpointing" : "plain");
    auto model = load_bert_classifier(
        dir.path(), {.model = {.attention = &ops::fused_attention, .gradient_checkpointing = checkpointing}});
    load_prefix(*model, dir.path() / "adapter");  // the table: with --projection, the MLP's output
    model->train();
    const at::Tensor loss = at::cross_entropy_loss(
        model->forward(io.at("input_ids"), io.at("attention_mask"), io.at("token_type_ids")), io.at("labels"));
    loss.backward();
    expect_close(loss.reshape({1}).detach(), io.at("loss"), 1e-5);
    expect_close(model->encoder->prefix()->embedding->weight.grad(), io.at("grad_table"), 1e-5);
    expect_close(model->classifier->weight.grad(), io.at("grad_classifier"), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(TableAndProjection, PrefixParity, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Projection" : "Table"; });

}  // namespace
}  // namespace hotpath::models
