// load_state_dict's partial-loading rule for Hugging Face checkpoints: a new head may differ from the
// file (another label count), the base model may not (config.json disagrees with the weights).
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/text/hf_weights.h"
#include "hotpath/models/weights.h"
#include "models/model_test_support.h"

namespace hotpath::models {
using namespace hotpath::formats;  // BertConfig
namespace {

BertConfig tiny(int intermediate_size, int num_labels) {
  return BertConfig::from_json(R"({"model_type": "bert", "vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "max_position_embeddings": 16, "intermediate_size": )" +
                               std::to_string(intermediate_size) + ", \"num_labels\": " + std::to_string(num_labels) + "}");
}

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(HfWeightsPartial, AHeadOfAnotherShapeLoadsOnlyWithAllowPartial) {
  BertForSequenceClassification source(tiny(12, 2));
  BertForSequenceClassification target(tiny(12, 3));
  const std::map<std::string, at::Tensor> state = named_state(source);
  const std::string refused = error_of([&] { (void)load_state_dict(target, state, "m.bin", {}, {.base_prefix = "bert"}); });
  EXPECT_NE(refused.find("classifier.weight: model [3, 8], file [2, 8]"), std::string::npos) << refused;
  EXPECT_NE(refused.find("allow partial loading"), std::string::npos) << refused;

  const LoadReport report = load_state_dict(target, state, "m.bin", {.allow_partial = true}, {.base_prefix = "bert"});
  ASSERT_EQ(report.mismatched.size(), 2u);
  EXPECT_EQ(report.mismatched[0].name, "classifier.bias");
  EXPECT_TRUE(at::equal(named_state(target).at("bert.embeddings.word_embeddings.weight"),
                        state.at("bert.embeddings.word_embeddings.weight")));
}

TEST(HfWeightsPartial, ABaseModelOfAnotherShapeIsRefusedEvenWithAllowPartial) {
  BertForSequenceClassification source(tiny(12, 2));
  BertForSequenceClassification target(tiny(20, 2));
  const at::Tensor before = named_state(target).at("bert.embeddings.word_embeddings.weight").clone();
  for (const bool file_prefixed : {true, false}) {
    // With "bert." in the file's keys (a classifier checkpoint) and without (a bare encoder's).
    const std::map<std::string, at::Tensor> state =
        file_prefixed ? named_state(source) : named_state(*source.encoder);
    const std::string what = error_of(
        [&] { (void)load_state_dict(target, state, "m.bin", {.allow_partial = true}, {.base_prefix = "bert"}); });
    EXPECT_NE(what.find("intermediate.dense.weight: model [20, 8], file [12, 8]"), std::string::npos) << what;
    EXPECT_NE(what.find("does config.json match the weights?"), std::string::npos) << what;
    EXPECT_NE(what.find("the base model's shapes must match even when loading partially"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  // Refused loads write nothing.
  EXPECT_TRUE(at::equal(named_state(target).at("bert.embeddings.word_embeddings.weight"), before));
}

}  // namespace
}  // namespace hotpath::models
