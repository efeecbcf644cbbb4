// LoRA adapters both ways with peft (tests/oracles/lora_ref.py): hotpath's saved adapter loaded by
// peft.PeftModel.from_pretrained, and a peft get_peft_model adapter loaded by hotpath; outputs within 1e-5.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <string>

#include "hotpath/models/text/bert.h"
#include "hotpath/models/lora.h"
#include "hotpath/models/weights.h"
#include "models/lora_test_tree.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
using namespace hotpath::formats;  // LoraConfig
namespace {

using lora_test::TinyClassifier;

void expect_close(const at::Tensor& a, const at::Tensor& b, double tol) {
  ASSERT_EQ(a.sizes(), b.sizes());
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(diff, tol) << "max |diff| " << diff;
}

TEST(LoraParity, HotpathAdapterLoadsInPeft) {
  test::TempDir dir;
  at::manual_seed(3);
  TinyClassifier model;
  save_safetensors(model, dir.file("base.safetensors"));
  LoraConfig config;
  config.r = 4;
  config.lora_alpha = 12;
  config.lora_dropout = 0.1;
  config.target_modules = {"query", "value", "attention.output.dense"};
  config.modules_to_save = {"classifier"};
  const LoraReport report = apply_lora(model, config);
  EXPECT_EQ(report.adapted.size(), 6u);
  {
    // Nonzero B and a changed classifier, so the adapter and the saved module both matter.
    c10::NoGradGuard no_grad;
    for (const auto& p : model.named_parameters()) {
      if (p.value().requires_grad()) p.value().add_(at::randn(p.value().sizes()) * 0.2);
    }
  }
  save_lora(model, config, dir.path() / "adapter");
  model.eval();
  const at::Tensor x = at::randn({3, 5, 8});
  write_tensors(dir.file("in.safetensors"), {{"x", x}});
  at::Tensor ours;
  {
    c10::NoGradGuard no_grad;
    ours = model.forward(x);
  }
  test::run_python(test::source_path("tests/oracles/lora_ref.py"),
                   {"tree-load", "--base", dir.file("base.safetensors"), "--adapter", dir.file("adapter"), "--input",
                    dir.file("in.safetensors"), "--out", dir.file("out.safetensors")});
  const at::Tensor theirs = read_tensors(dir.file("out.safetensors")).at("logits");
  expect_close(ours, theirs, 1e-5);
  // Without the adapter the outputs differ: the comparison above is not vacuous.
  TinyClassifier plain;
  load_safetensors(plain, dir.file("base.safetensors"));
  c10::NoGradGuard no_grad;
  EXPECT_GT((plain.forward(x) - theirs).abs().max().item<double>(), 1e-3);
}

TEST(LoraParity, PeftAdapterLoadsInHotpathAndMerges) {
  test::TempDir dir;
  test::run_python(test::source_path("tests/oracles/lora_ref.py"), {"tree-make", "--dir", dir.path().string()});
  TinyClassifier model;
  load_safetensors(model, dir.file("base.safetensors"));
  const LoraConfig config = load_lora(model, dir.path() / "adapter");
  EXPECT_EQ(config.r, 4);
  EXPECT_EQ(config.modules_to_save, std::vector<std::string>{"classifier"});
  model.eval();
  const auto io = read_tensors(dir.file("io.safetensors"));
  c10::NoGradGuard no_grad;
  const at::Tensor ours = model.forward(io.at("x"));
  expect_close(ours, io.at("logits"), 1e-5);
  EXPECT_EQ(merge_lora(model), 6);
  const at::Tensor merged = model.forward(io.at("x"));
  expect_close(merged, io.at("merged"), 1e-5);
  expect_close(merged, ours, 1e-5);
}


// The same both ways on transformers' BertForSequenceClassification (task_type SEQ_CLS: peft saves the
// classifier beside the adapters) and hotpath's BERT with the same weights.
TEST(LoraParity, BertAdaptersBothWaysWithPeft) {
  test::TempDir dir;
  test::run_python(test::source_path("tests/oracles/lora_ref.py"), {"bert-make", "--dir", dir.path().string()});
  const auto io = read_tensors(dir.file("io.safetensors"));
  const at::Tensor ids = io.at("input_ids");
  const at::Tensor mask = io.at("attention_mask");

  // peft → hotpath, then merged.
  auto model = load_bert_classifier(dir.path());
  const LoraConfig config = load_lora(*model, dir.path() / "adapter");
  EXPECT_EQ(config.task_type, "SEQ_CLS");
  model->eval();
  {
    c10::NoGradGuard no_grad;
    const at::Tensor ours = model->forward(ids, mask);
    expect_close(ours, io.at("logits"), 1e-5);
    EXPECT_EQ(merge_lora(*model), 4);
    expect_close(model->forward(ids, mask), io.at("merged"), 1e-5);
  }

  // hotpath → peft: a fresh adapter on the base weights, changed, saved, loaded by PeftModel.
  auto ours_model = load_bert_classifier(dir.path());
  LoraConfig mine;
  mine.r = 2;
  mine.lora_alpha = 3;
  mine.target_modules = {"query", "key", "value", "attention.output.dense", "intermediate.dense"};
  mine.modules_to_save = {"classifier"};
  mine.task_type = "SEQ_CLS";
  const LoraReport report = apply_lora(*ours_model, mine);
  EXPECT_EQ(report.adapted.size(), 10u);
  EXPECT_LT(report.trainable_fraction(), 0.5);
  {
    c10::NoGradGuard no_grad;
    for (const auto& p : ours_model->named_parameters())
      if (p.value().requires_grad()) p.value().add_(at::randn(p.value().sizes()) * 0.2);
  }
  save_lora(*ours_model, mine, dir.path() / "ours");
  ours_model->eval();
  write_tensors(dir.file("in.safetensors"), {{"input_ids", ids}, {"attention_mask", mask}});
  test::run_python(test::source_path("tests/oracles/lora_ref.py"),
                   {"bert-load", "--base", dir.path().string(), "--adapter", dir.file("ours"), "--input",
                    dir.file("in.safetensors"), "--out", dir.file("out.safetensors")});
  c10::NoGradGuard no_grad;
  const at::Tensor theirs = read_tensors(dir.file("out.safetensors")).at("logits");
  expect_close(ours_model->forward(ids, mask), theirs, 1e-5);
  EXPECT_GT((theirs - io.at("logits")).abs().max().item<double>(), 1e-3);
}

}  // namespace
}  // namespace hotpath::models
