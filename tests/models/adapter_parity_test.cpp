// Bottleneck adapters both ways with the adapters library (tests/oracles/adapters_ref.py, its overlay from
// scripts/setup): its save_adapter(..., use_safetensors=True) output loaded by hotpath and hotpath's saved
// adapter loaded by its load_adapter give the same logits (1e-5), for Pfeiffer (seq_bn) and Houlsby
// (double_seq_bn), the head included.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include <string>

#include "hotpath/models/text/adapter.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

void expect_close(const at::Tensor& a, const at::Tensor& b, double tol) {
  ASSERT_EQ(a.sizes(), b.sizes());
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(diff, tol) << "max |diff| " << diff;
}

class AdapterParity : public ::testing::TestWithParam<std::string> {};

TEST_P(AdapterParity, LibraryAdapterLoadsInHotpathAndHotpathAdapterLoadsInTheLibrary) {
  test::TempDir dir;
  test::run_python(test::source_path("tests/oracles/adapters_ref.py"), {"make", "--dir", dir.path().string(), "--config", GetParam()});
  const auto io = read_tensors(dir.file("io.safetensors"));
  auto model = load_bert_classifier(dir.path());
  const formats::AdapterConfig config = load_adapter(*model, dir.path() / "adapter");
  EXPECT_EQ(config.name, "bottleneck");
  EXPECT_EQ(config.mh_adapter, GetParam() == "double_seq_bn");
  model->eval();
  {
    const at::NoGradGuard no_grad;
    expect_close(model->forward(io.at("input_ids"), io.at("attention_mask"), io.at("token_type_ids")), io.at("logits"),
                 1e-5);
  }
  // hotpath → the library: fresh adapters of another width and name, changed, saved.
  auto ours = load_bert_classifier(dir.path());
  formats::AdapterConfig mine = formats::AdapterConfig::preset(GetParam());
  mine.name = "mine";
  mine.reduction_factor = 2;
  at::manual_seed(3);
  apply_adapter(*ours, mine);
  {
    const at::NoGradGuard no_grad;
    for (auto& p : ours->parameters()) {
      if (p.requires_grad()) p.add_(at::randn(p.sizes()) * 0.5);
    }
  }
  save_adapter(*ours, mine, dir.path() / "ours");
  ours->eval();
  write_tensors(dir.file("in.safetensors"), {{"input_ids", io.at("input_ids")},
                                             {"attention_mask", io.at("attention_mask")},
                                             {"token_type_ids", io.at("token_type_ids")}});
  test::run_python(test::source_path("tests/oracles/adapters_ref.py"),
                   {"load", "--base", dir.path().string(), "--adapter", dir.file("ours"), "--input",
                    dir.file("in.safetensors"), "--out", dir.file("out.safetensors")});
  const at::NoGradGuard no_grad;
  expect_close(ours->forward(io.at("input_ids"), io.at("attention_mask"), io.at("token_type_ids")),
               read_tensors(dir.file("out.safetensors")).at("logits"), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(PfeifferAndHoulsby, AdapterParity, ::testing::Values("seq_bn", "double_seq_bn"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "seq_bn" ? "Pfeiffer" : "Houlsby";
                         });

}  // namespace
}  // namespace hotpath::models
