// Bottleneck adapters (models/text/adapter.h, formats/adapter_config.h), python-free: the library's config
// file and the refusals, the placement math of both presets, what trains, save → load, bad files. Parity
// with the adapters library both ways is adapter_parity_test.cpp.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/formats/adapter_config.h"
#include "hotpath/models/text/adapter.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

using formats::AdapterConfig;
using formats::BertConfig;

constexpr const char* kTinyBert = R"({"model_type": "bert", "vocab_size": 50, "hidden_size": 16,
  "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 24, "max_position_embeddings": 20,
  "id2label": {"0": "a", "1": "b", "2": "c"}, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})";

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::shared_ptr<BertForSequenceClassification> tiny() {
  at::manual_seed(5);
  return std::make_shared<BertForSequenceClassification>(BertConfig::from_json(kTinyBert));
}

TEST(AdapterConfig, PresetsAndTheLibrarysFileRoundTrip) {
  const AdapterConfig pfeiffer = AdapterConfig::preset("seq_bn");
  EXPECT_FALSE(pfeiffer.mh_adapter);
  EXPECT_TRUE(pfeiffer.original_ln_before);
  EXPECT_EQ(pfeiffer.non_linearity, "relu");
  const AdapterConfig houlsby = AdapterConfig::preset("houlsby");
  EXPECT_TRUE(houlsby.mh_adapter && houlsby.output_adapter);
  EXPECT_FALSE(houlsby.original_ln_before);
  EXPECT_EQ(houlsby.non_linearity, "swish");
  EXPECT_EQ(houlsby.bottleneck(768), 48);
  EXPECT_EQ(houlsby.bottleneck(8), 1);
  AdapterConfig named = houlsby;
  named.name = "task";
  const AdapterConfig back = AdapterConfig::from_json(named.to_json(16, "BertForSequenceClassification"));
  EXPECT_EQ(back.to_json(16, "BertForSequenceClassification"), named.to_json(16, "BertForSequenceClassification"));
  EXPECT_EQ(back.name, "task");
  // A preset name in place of the settings, as the library accepts.
  EXPECT_TRUE(AdapterConfig::from_json(R"({"name": "a", "config": "double_seq_bn"})").mh_adapter);
  // A settings object takes the library's BnConfig defaults for what it leaves out (original_ln_before false).
  const AdapterConfig minimal = AdapterConfig::from_json(
      R"({"name": "a", "config": {"mh_adapter": false, "output_adapter": true, "reduction_factor": 2, "non_linearity": "relu"}})");
  EXPECT_FALSE(minimal.original_ln_before);
  EXPECT_EQ(minimal.reduction_factor, 2.0);
}

TEST(AdapterConfig, RefusesWhatItDoesNotImplementWithOneLine) {
  const auto err = [](const std::string& config) {
    return error_of([&] { (void)AdapterConfig::from_json(R"({"name": "a", "config": )" + config + "}", "ad/adapter_config.json"); });
  };
  const std::string base = R"("mh_adapter": false, "output_adapter": true, "reduction_factor": 4, "non_linearity": "relu")";
  EXPECT_NE(err("{" + base + R"(, "ln_after": true})").find("\"ln_after\": true is not supported"), std::string::npos);
  EXPECT_NE(err("{" + base + R"(, "use_gating": true})").find("\"use_gating\": true is not supported"), std::string::npos);
  EXPECT_NE(err("{" + base + R"(, "scaling": "learned"})").find("learned scaling is not"), std::string::npos);
  EXPECT_NE(err("{" + base + R"(, "leave_out": [0]})").find("\"leave_out\" is not supported"), std::string::npos);
  EXPECT_NE(err(R"({"mh_adapter": false, "output_adapter": true, "reduction_factor": {"0": 2}, "non_linearity": "relu"})")
                .find("per-layer mappings are not supported"),
            std::string::npos);
  EXPECT_NE(err(R"({"output_adapter": true, "reduction_factor": 4, "non_linearity": "relu"})")
                .find("missing required field \"mh_adapter\""),
            std::string::npos);
  EXPECT_NE(err(R"("lora")").find("seq_bn (pfeiffer) or double_seq_bn (houlsby)"), std::string::npos);
  // A preset name with a newline (fuzz_model_config's finding) is quoted and escaped: the message stays one line.
  const std::string newline = err(R"("double_seq_\n")");
  EXPECT_NE(newline.find(R"(adapter config "double_seq_\n" is not supported)"), std::string::npos) << newline;
  EXPECT_EQ(newline.find('\n'), std::string::npos) << newline;
  EXPECT_NE(err("{" + std::string(R"("mh_adapter": false, "output_adapter": true, "reduction_factor": 4, "non_linearity": "mish")") + "}")
                .find("\"non_linearity\" is \"mish\""),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)AdapterConfig::from_json(R"({"peft_type": "LORA", "r": 4})", "x.json"); })
                .find("this is a PEFT adapter"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)AdapterConfig::from_json(R"({"name": "a.b", "config": "seq_bn"})"); }).find("\"name\""),
            std::string::npos);
}

// Both presets against their formulas written out (formats/adapter_config.h), on one layer's output sublayer.
TEST(Adapter, SublayerPlacementFollowsThePreset) {
  const at::Tensor h = at::randn({2, 3, 16});
  const at::Tensor input = at::randn({2, 3, 16});
  const auto ln = [](const at::Tensor& x) { return at::layer_norm(x, {16}); };
  for (const char* preset : {"seq_bn", "double_seq_bn"}) {
    AdapterConfig c = AdapterConfig::preset(preset);
    c.reduction_factor = 4;
    BottleneckAdapter adapter(c, 16);
    const at::NoGradGuard no_grad;
    for (auto& p : adapter->parameters()) p.copy_(at::randn(p.sizes()));
    const auto bottleneck = [&](const at::Tensor& x) {
      const at::Tensor d = adapter->adapter_down->forward(x);
      return adapter->adapter_up->forward(std::string(preset) == "seq_bn" ? at::relu(d) : at::silu(d));
    };
    const at::Tensor expected = std::string(preset) == "seq_bn" ? ln(bottleneck(ln(h + input)) + h + input)
                                                                : ln(bottleneck(h) + h + input);
    EXPECT_TRUE(at::allclose(adapter->sublayer(h, input, ln), expected, 1e-5, 1e-6)) << preset;
  }
}

TEST(Adapter, TrainsOnlyTheAdaptersAndTheHeadWithTheLibrarysNames) {
  auto model = tiny();
  AdapterConfig c = AdapterConfig::preset("double_seq_bn");
  c.name = "task";
  c.reduction_factor = 4;
  const LoraReport report = apply_adapter(*model, c);
  std::vector<std::string> trainable;
  for (const auto& p : model->named_parameters()) {
    if (p.value().requires_grad()) trainable.push_back(p.key());
  }
  ASSERT_EQ(trainable.size(), 2u * 2 * 4 + 2);
  EXPECT_NE(std::find(trainable.begin(), trainable.end(),
                      "bert.encoder.layer.1.attention.output.adapters.task.adapter_down.0.weight"),
            trainable.end());
  EXPECT_NE(std::find(trainable.begin(), trainable.end(), "bert.encoder.layer.0.output.adapters.task.adapter_up.bias"),
            trainable.end());
  EXPECT_EQ(report.trainable_params, 2 * 2 * (16 * 4 + 4 + 4 * 16 + 16) + 3 * 16 + 3);
  EXPECT_NE(error_of([&] { apply_adapter(*model, c); }).find("already has an adapter"), std::string::npos);
}

TEST(Adapter, SavesAndLoadsExactlyAndRefusesBadFiles) {
  auto model = tiny();
  AdapterConfig c = AdapterConfig::preset("seq_bn");
  c.reduction_factor = 2;
  apply_adapter(*model, c);
  {
    const at::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      if (p.requires_grad()) p.add_(at::randn(p.sizes()) * 0.5);
    }
  }
  test::TempDir dir;
  save_adapter(*model, c, dir.path() / "ad");
  for (const char* f : {"adapter_config.json", "adapter.safetensors", "head_config.json", "model_head.safetensors"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() / "ad" / f)) << f;
  }
  const at::Tensor ids = at::randint(1, 50, {2, 7}, at::kLong);
  model->eval();
  const at::NoGradGuard no_grad;
  const at::Tensor ours = model->forward(ids);
  auto other = tiny();
  load_adapter(*other, dir.path() / "ad");
  other->eval();
  EXPECT_TRUE(at::allclose(other->forward(ids), ours, 1e-6, 1e-6));

  // Another reduction factor than the file's tensors.
  AdapterConfig wide = c;
  wide.reduction_factor = 4;
  std::filesystem::create_directories(dir.path() / "bad");
  std::filesystem::copy_file(dir.path() / "ad" / "adapter.safetensors", dir.path() / "bad" / "adapter.safetensors");
  std::ofstream(dir.path() / "bad" / "adapter_config.json") << wide.to_json(16, "BertForSequenceClassification");
  auto third = tiny();
  EXPECT_NE(error_of([&] { load_adapter(*third, dir.path() / "bad"); }).find("has shape [8], expected [4] (hidden 16, reduction_factor 4)"),
            std::string::npos);
  EXPECT_TRUE(third->encoder->layer(0)->output_adapter().is_empty());  // refused before the model changed
  std::filesystem::remove(dir.path() / "bad" / "adapter.safetensors");
  EXPECT_NE(error_of([&] { load_adapter(*third, dir.path() / "bad"); }).find("use_safetensors=True"), std::string::npos);
}

}  // namespace
}  // namespace hotpath::models
