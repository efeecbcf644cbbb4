// BERT / DistilBERT: config.json parsing and its errors, HF parameter names, padding, the attention
// switch, key prefixes and weight mismatches (python-free; parity with transformers is in
// bert_parity_test.cpp).
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/softmax.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/ops/attention.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/text/hf_weights.h"
#include "hotpath/models/weights.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
using namespace hotpath::formats;  // BertArch, BertConfig
using namespace hotpath::ops;  // fused_attention
namespace {

using test::TempDir;

constexpr const char* kTinyBert = R"({"model_type": "bert", "vocab_size": 50, "hidden_size": 16,
  "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 24, "max_position_embeddings": 20,
  "id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1}, "hidden_dropout_prob": 0.0})";
constexpr const char* kTinyDistil = R"({"model_type": "distilbert", "vocab_size": 50, "dim": 16, "n_layers": 2,
  "n_heads": 2, "hidden_dim": 24, "max_position_embeddings": 20, "activation": "gelu", "dropout": 0.0})";

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string with_field(std::string json, const std::string& field, const std::string& value) {
  const auto pos = json.find("\"" + field + "\"");
  const auto colon = json.find(':', pos);
  const auto end = json.find_first_of(",}", colon);
  return json.replace(colon + 1, end - colon - 1, " " + value);
}

TEST(BertConfig, ReadsBertFieldsAndLabels) {
  const BertConfig c = BertConfig::from_json(kTinyBert);
  EXPECT_EQ(c.arch, BertArch::kBert);
  EXPECT_EQ(c.hidden_size, 16);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.type_vocab_size, 2);  // default
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_EQ(c.num_labels, 2);
  EXPECT_EQ(c.id2label, (std::vector<std::string>{"neg", "pos"}));
  EXPECT_EQ(c.label2id.at("pos"), 1);
}

TEST(BertConfig, ReadsDistilBertKeys) {
  const BertConfig c = BertConfig::from_json(kTinyDistil);
  EXPECT_EQ(c.arch, BertArch::kDistilBert);
  EXPECT_EQ(c.hidden_size, 16);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.intermediate_size, 24);
  EXPECT_EQ(c.type_vocab_size, 0);
  EXPECT_DOUBLE_EQ(c.classifier_dropout, 0.2);  // seq_classif_dropout's default
  EXPECT_EQ(c.id2label, (std::vector<std::string>{"LABEL_0", "LABEL_1"}));
}

TEST(BertConfig, MissingFieldNamesTheFileAndField) {
  std::string json = kTinyBert;
  json.erase(json.find("\"hidden_size\": 16,"), std::string("\"hidden_size\": 16,").size());
  const std::string what = error_of([&] { (void)BertConfig::from_json(json, "dir/config.json"); });
  EXPECT_NE(what.find("dir/config.json: missing required field \"hidden_size\""), std::string::npos) << what;
  std::string distil = kTinyDistil;
  distil.erase(distil.find("\"n_heads\": 2,"), std::string("\"n_heads\": 2,").size());
  EXPECT_NE(error_of([&] { (void)BertConfig::from_json(distil); }).find("\"n_heads\""), std::string::npos);
}

TEST(BertConfig, WrongTypesAndValuesNameTheField) {
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"hidden_size", "\"16\""}, {"num_hidden_layers", "2.5"}, {"vocab_size", "0"}, {"num_attention_heads", "3"}}) {
    const std::string what = error_of([&] { (void)BertConfig::from_json(with_field(kTinyBert, field, value)); });
    EXPECT_NE(what.find("config.json"), std::string::npos) << what;
    EXPECT_TRUE(what.find(field) != std::string::npos || what.find("multiple") != std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_NE(error_of([&] { (void)BertConfig::from_json(with_field(kTinyBert, "model_type", "\"gpt2\"")); })
                .find("\"gpt2\"; supported: bert, distilbert"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)BertConfig::from_json(with_field(kTinyDistil, "activation", "\"swish\"")); })
                .find("\"activation\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)BertConfig::from_json("{not json"); }).find("invalid JSON"), std::string::npos);
}

TEST(BertModel, ParameterNamesAreHuggingFaceKeys) {
  BertForSequenceClassification bert(BertConfig::from_json(kTinyBert));
  const auto state = named_state(bert);
  for (const char* key : {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
                          "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
                          "bert.encoder.layer.1.attention.self.query.weight", "bert.encoder.layer.0.attention.self.key.bias",
                          "bert.encoder.layer.0.attention.self.value.weight", "bert.encoder.layer.0.attention.output.dense.weight",
                          "bert.encoder.layer.0.attention.output.LayerNorm.bias", "bert.encoder.layer.0.intermediate.dense.weight",
                          "bert.encoder.layer.0.output.dense.weight", "bert.encoder.layer.0.output.LayerNorm.weight",
                          "bert.pooler.dense.weight", "classifier.weight", "classifier.bias"}) {
    EXPECT_TRUE(state.count(key)) << key;
  }
  EXPECT_EQ(state.size(), 5u + 16u * 2u + 2u + 2u);
  BertForSequenceClassification distil(BertConfig::from_json(kTinyDistil));
  const auto dstate = named_state(distil);
  for (const char* key : {"distilbert.embeddings.word_embeddings.weight", "distilbert.embeddings.LayerNorm.bias",
                          "distilbert.transformer.layer.0.attention.q_lin.weight",
                          "distilbert.transformer.layer.1.attention.out_lin.bias",
                          "distilbert.transformer.layer.0.sa_layer_norm.weight", "distilbert.transformer.layer.0.ffn.lin1.weight",
                          "distilbert.transformer.layer.0.ffn.lin2.bias", "distilbert.transformer.layer.0.output_layer_norm.weight",
                          "pre_classifier.weight", "classifier.bias"}) {
    EXPECT_TRUE(dstate.count(key)) << key;
  }
  EXPECT_EQ(dstate.size(), 4u + 16u * 2u + 4u);
}

at::Tensor random_ids(std::int64_t b, std::int64_t l) { return at::randint(1, 50, {b, l}, at::kLong); }

TEST(BertModel, PaddingDoesNotChangeTheRealTokens) {
  for (const char* json : {kTinyBert, kTinyDistil}) {
    BertModel model(BertConfig::from_json(json));
    model.eval();
    const at::NoGradGuard no_grad;
    const at::Tensor ids = random_ids(1, 7);
    const at::Tensor alone = model.forward(ids);
    at::Tensor padded = at::zeros({2, 11}, at::kLong);
    padded[0].slice(0, 0, 7).copy_(ids[0]);
    padded[1].copy_(random_ids(1, 11)[0]);
    at::Tensor mask = at::zeros({2, 11}, at::kLong);
    mask[0].slice(0, 0, 7).fill_(1);
    mask[1].fill_(1);
    const at::Tensor out = model.forward(padded, mask);
    EXPECT_TRUE(at::allclose(out[0].slice(0, 0, 7), alone[0], 1e-5, 1e-5));
    // Without the mask the padding would leak in.
    EXPECT_FALSE(at::allclose(model.forward(padded)[0].slice(0, 0, 7), alone[0], 1e-5, 1e-5));
  }
}

TEST(BertAttention, EagerMatchesScaledDotProductAttention) {
  const at::Tensor q = at::randn({2, 3, 5, 8});
  const at::Tensor k = at::randn({2, 3, 5, 8});
  const at::Tensor v = at::randn({2, 3, 5, 8});
  at::Tensor mask = at::ones({2, 5}, at::kLong);
  mask[1].slice(0, 3, 5).zero_();
  const at::Tensor bool_mask = (mask != 0).view({2, 1, 1, 5});
  EXPECT_TRUE(at::allclose(bert_eager_attention(q, k, v, mask), at::scaled_dot_product_attention(q, k, v, bool_mask),
                           1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(bert_eager_attention(q, k, v, {}), at::scaled_dot_product_attention(q, k, v), 1e-5, 1e-6));
}

TEST(BertAttention, EagerDropoutIsRepeatableUnderTheSeed) {
  const at::Tensor q = at::randn({2, 3, 5, 8});
  const at::Tensor k = at::randn({2, 3, 5, 8});
  const at::Tensor v = at::randn({2, 3, 5, 8});
  at::manual_seed(3);
  const at::Tensor once = bert_eager_attention(q, k, v, {}, 0.5);
  at::manual_seed(3);
  EXPECT_TRUE(at::equal(once, bert_eager_attention(q, k, v, {}, 0.5)));
  EXPECT_FALSE(at::allclose(once, bert_eager_attention(q, k, v, {}), 1e-3, 1e-3));
  // HF's order: dropout(softmax) · v, the probabilities scaled by 1/(1 − p).
  at::manual_seed(3);
  const at::Tensor probs = at::softmax(at::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0), -1);
  EXPECT_TRUE(at::allclose(once, at::matmul(at::dropout(probs, 0.5, true), v), 1e-5, 1e-6));
}

std::atomic<int> g_attention_calls{0};
double g_attention_p = -1.0;
at::Tensor counting_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& m,
                              const AttentionDropout& dropout) {
  ++g_attention_calls;
  g_attention_p = dropout.p;
  EXPECT_EQ(q.dim(), 4);
  EXPECT_EQ(q.size(1), 2);  // heads
  EXPECT_EQ(q.size(3), 8);  // head_dim
  EXPECT_EQ(m.dim(), 2);
  return bert_eager_attention(q, k, v, m, dropout);
}

TEST(BertModel, AttentionIsSwitchable) {
  BertModel model(BertConfig::from_json(kTinyBert));
  model.eval();
  const at::NoGradGuard no_grad;
  const at::Tensor ids = random_ids(2, 6);
  const at::Tensor mask = at::ones({2, 6}, at::kLong);
  const at::Tensor reference = model.forward(ids, mask);
  g_attention_calls = 0;
  model.set_attention(&counting_attention);
  const at::Tensor switched = model.forward(ids, mask);
  EXPECT_EQ(g_attention_calls.load(), 2);  // once per layer
  EXPECT_EQ(g_attention_p, 0.0);           // eval: no dropout on the probabilities
  EXPECT_TRUE(at::equal(reference, switched));
}

// Training passes config.attention_probs_dropout_prob to the attention function (HF applies it to the
// probabilities), eval passes 0; with the fused kernel the dropout shows in the output.
TEST(BertModel, TrainingDropsOutAttentionProbabilities) {
  BertConfig config = BertConfig::from_json(kTinyBert);  // hidden dropout 0: only the attention's is left
  config.attention_probs_dropout_prob = 0.3;
  BertModel model(config);
  model.set_attention(&counting_attention);
  const at::Tensor ids = random_ids(2, 6);
  const at::Tensor mask = at::ones({2, 6}, at::kLong);
  model.train();
  (void)model.forward(ids, mask);
  EXPECT_EQ(g_attention_p, 0.3);
  model.eval();
  (void)model.forward(ids, mask);
  EXPECT_EQ(g_attention_p, 0.0);
  model.set_attention(&fused_attention);
  const at::NoGradGuard no_grad;
  const at::Tensor evaluated = model.forward(ids, mask);
  model.train();
  at::manual_seed(1);
  const at::Tensor trained = model.forward(ids, mask);
  at::manual_seed(1);
  EXPECT_TRUE(at::equal(trained, model.forward(ids, mask)));
  EXPECT_FALSE(at::allclose(trained, evaluated, 1e-3, 1e-3));
}

// Activation checkpointing replays the fused kernel's mask: the seed is drawn from the default CPU
// generator, whose state checkpoint() restores for the recompute (hidden dropout draws from it too, in
// the same order), so the gradients equal the plain run's bit for bit.
TEST(BertModel, CheckpointedFusedDropoutGivesTheSameGradients) {
  BertConfig config = BertConfig::from_json(kTinyBert);
  config.hidden_dropout_prob = 0.1;
  config.attention_probs_dropout_prob = 0.2;
  BertOptions options;
  options.attention = &fused_attention;
  at::manual_seed(0);
  BertForSequenceClassification model(config, options);
  model.train();
  const at::Tensor ids = random_ids(2, 9);
  at::Tensor mask = at::ones({2, 9}, at::kLong);
  mask[1].slice(0, 6).fill_(0);
  std::map<std::string, at::Tensor> grads[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    model.encoder->set_gradient_checkpointing(checkpointed == 1);
    model.zero_grad();
    at::manual_seed(7);
    (model.forward(ids, mask) * at::arange(1, 3, at::kFloat)).sum().backward();
    for (const auto& p : model.named_parameters())
      if (p.value().grad().defined()) grads[checkpointed][p.key()] = p.value().grad().clone();
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (const auto& [name, g] : grads[0]) EXPECT_TRUE(at::equal(g, grads[1].at(name))) << name;
}

TEST(SentenceEmbedder, MeanPoolsOverTheMaskAndNormalizes) {
  const at::Tensor hidden = at::tensor({1.0f, 2.0f, 3.0f, 4.0f, 100.0f, 100.0f}).view({1, 3, 2});
  const at::Tensor mask = at::tensor({1, 1, 0}).view({1, 3});
  EXPECT_TRUE(at::allclose(masked_mean_pool(hidden, mask), at::tensor({2.0f, 3.0f}).view({1, 2})));
  auto model = std::make_shared<BertModel>(BertConfig::from_json(kTinyBert));
  model->eval();
  const SentenceEmbedder embedder(model);
  const at::NoGradGuard no_grad;
  const at::Tensor e = embedder.forward(random_ids(3, 5), at::ones({3, 5}, at::kLong));
  EXPECT_TRUE(at::allclose(e.norm(2, {1}), at::ones({3}), 1e-5, 1e-6));
}

// A model directory written from a module of ours (keys exactly as named_state).
void write_model_dir(const std::filesystem::path& dir, const std::string& config, const torch::nn::Module& module,
                     const std::string& strip_prefix = "") {
  std::filesystem::create_directories(dir);
  test::write_file((dir / "config.json").string(), config);
  std::map<std::string, at::Tensor> state;
  for (const auto& [name, t] : named_state(module)) {
    state.emplace(name.rfind(strip_prefix, 0) == 0 ? name.substr(strip_prefix.size()) : name, t);
  }
  write_tensors((dir / "model.safetensors").string(), state);
}

TEST(HfWeights, PrefixIsAddedOrStrippedAsHfDoes) {
  TempDir tmp;
  BertForSequenceClassification source(BertConfig::from_json(kTinyBert));
  source.eval();
  write_model_dir(tmp.path() / "head", kTinyBert, source);
  write_model_dir(tmp.path() / "bare", kTinyBert, *source.encoder);
  const at::NoGradGuard no_grad;
  const at::Tensor ids = random_ids(2, 6);
  const at::Tensor expected = source.encoder->forward(ids);

  LoadReport report;
  auto from_head = load_bert_model(tmp.path() / "head", {}, &report);  // drops "bert." and the classifier
  EXPECT_TRUE(report.complete()) << report.summary();
  EXPECT_TRUE(at::equal(from_head->forward(ids), expected));
  auto from_bare = load_bert_classifier(tmp.path() / "bare", {.allow_partial = true}, &report);  // adds "bert."
  EXPECT_EQ(report.missing, (std::vector<std::string>{"classifier.bias", "classifier.weight"}));
  EXPECT_TRUE(at::equal(from_bare->encoder->forward(ids), expected));
  auto classifier = load_bert_classifier(tmp.path() / "head", {}, &report);
  EXPECT_TRUE(at::equal(classifier->forward(ids), source.forward(ids)));
}

TEST(HfWeights, LegacyGammaBetaAndPositionIdsAreHandled) {
  BertModel model(BertConfig::from_json(kTinyBert));
  std::map<std::string, at::Tensor> state = named_state(model);
  state["embeddings.LayerNorm.gamma"] = state.at("embeddings.LayerNorm.weight").clone().fill_(3.0);
  state.erase("embeddings.LayerNorm.weight");
  state["embeddings.position_ids"] = at::arange(20).unsqueeze(0);
  const LoadReport r = load_state_dict(model, state, "mem");
  EXPECT_TRUE(r.complete()) << r.summary();
  EXPECT_EQ(named_state(model).at("embeddings.LayerNorm.weight")[0].item<float>(), 3.0f);
}

TEST(HfWeights, WeightsThatDoNotMatchTheConfigAreOneLine) {
  TempDir tmp;
  BertModel small(BertConfig::from_json(kTinyBert));
  write_model_dir(tmp.path(), with_field(kTinyBert, "intermediate_size", "32"), small);
  const std::string what = error_of([&] { (void)load_bert_model(tmp.path()); });
  EXPECT_NE(what.find("model.safetensors"), std::string::npos) << what;
  EXPECT_NE(what.find("encoder.layer.0.intermediate.dense.weight: model [32, 16], file [24, 16]"), std::string::npos)
      << what;
  EXPECT_NE(what.find("does config.json match the weights?"), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

TEST(HfWeights, MissingFilesAreNamed) {
  TempDir tmp;
  EXPECT_NE(error_of([&] { (void)load_bert_model(tmp.path()); }).find("config.json: cannot open"), std::string::npos);
  test::write_file(tmp.file("config.json"), kTinyBert);
  EXPECT_NE(error_of([&] { (void)load_bert_model(tmp.path()); }).find("no model.safetensors or pytorch_model.bin"),
            std::string::npos);
  test::write_file(tmp.file("pytorch_model.bin"), "not a zip");
  const std::string what = error_of([&] { (void)load_bert_model(tmp.path()); });
  EXPECT_NE(what.find("pytorch_model.bin: cannot read as a weights-only torch.save zip checkpoint"), std::string::npos)
      << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

TEST(SentenceEmbedder, RefusesPoolingOtherThanMean) {
  TempDir tmp;
  BertModel model(BertConfig::from_json(kTinyBert));
  write_model_dir(tmp.path(), kTinyBert, model);
  std::filesystem::create_directories(tmp.path() / "1_Pooling");
  test::write_file(tmp.file("1_Pooling/config.json"),
                   R"({"word_embedding_dimension": 16, "pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false})");
  const std::string what = error_of([&] { (void)load_sentence_embedder(tmp.path()); });
  EXPECT_NE(what.find("1_Pooling/config.json: \"pooling_mode_cls_token\" is true"), std::string::npos) << what;
}

// ---- pytorch_model.bin without python: torch.save's zip layout written by LibTorch's own writer,
// data.pkl written opcode by opcode (what torch.save(state_dict) emits with pickle protocol 2).

std::string pickle_str(const std::string& s) {
  std::string out = "X";
  const auto n = static_cast<std::uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out + s;
}

std::string pickle_int(int v) { return std::string("K") + static_cast<char>(v); }

// _rebuild_tensor_v2(storage `key` of `numel` floats, offset, size (a, b), stride (b, 1)).
std::string pickle_tensor(const std::string& key, int numel, int offset, int a, int b) {
  return "ctorch._utils\n_rebuild_tensor_v2\n((" + pickle_str("storage") + "ctorch\nFloatStorage\n" + pickle_str(key) +
         pickle_str("cpu") + pickle_int(numel) + "tQ" + pickle_int(offset) + pickle_int(a) + pickle_int(b) + "\x86" +
         pickle_int(b) + pickle_int(1) + "\x86\x89" + "ccollections\nOrderedDict\n)R" + "tR";
}

std::string state_dict_pickle(const std::string& items) {
  return std::string("\x80\x02") + "ccollections\nOrderedDict\nq\x05)Rq\x06(" + items + "u}b.";
}

void write_torch_zip(const std::string& path, const std::string& pickle, const std::vector<float>& storage0) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("byteorder", "little", 6);
  writer.writeRecord("data/0", storage0.data(), storage0.size() * sizeof(float));
  writer.writeEndOfFile();
}

TEST(TorchStateDict, ReadsAnOrderedDictOfTensorsSharingAStorage) {
  TempDir tmp;
  const std::vector<float> storage = {0, 1, 2, 3, 4, 5, 6, 7};
  // "a" is the first 2x3 of the storage, "b" a 1x2 view at offset 6 (tied weights share storages).
  write_torch_zip(tmp.file("model.bin"),
                  state_dict_pickle(pickle_str("a") + pickle_tensor("0", 8, 0, 2, 3) + pickle_str("b") +
                                    pickle_tensor("0", 8, 6, 1, 2)),
                  storage);
  const auto state = read_torch_state_dict(tmp.file("model.bin"));
  ASSERT_EQ(state.size(), 2u);
  EXPECT_TRUE(at::equal(state.at("a"), at::arange(6, at::kFloat).view({2, 3})));
  EXPECT_TRUE(at::equal(state.at("b"), at::tensor({6.0f, 7.0f}).view({1, 2})));
}

TEST(TorchStateDict, RefusesGlobalsOtherThanTensorsAndDicts) {
  TempDir tmp;
  const std::string evil = std::string("\x80\x02") + "cposix\nsystem\n" + pickle_str("touch pwned") + "\x85R.";
  write_torch_zip(tmp.file("evil.bin"), evil, {0});
  const std::string what = error_of([&] { (void)read_torch_state_dict(tmp.file("evil.bin")); });
  EXPECT_NE(what.find("evil.bin: data.pkl offset 2: refusing global posix.system"), std::string::npos) << what;
  const std::string builtins = std::string("\x80\x02") + "cbuiltins\neval\n" + pickle_str("1") + "\x85R.";
  write_torch_zip(tmp.file("eval.bin"), builtins, {0});
  EXPECT_NE(error_of([&] { (void)read_torch_state_dict(tmp.file("eval.bin")); }).find("refusing global builtins.eval"),
            std::string::npos);
}

TEST(TorchStateDict, MalformedPicklesAreErrorsNotCrashes) {
  TempDir tmp;
  const std::string good = state_dict_pickle(pickle_str("a") + pickle_tensor("0", 6, 0, 2, 3));
  const std::vector<float> six = {0, 1, 2, 3, 4, 5};
  const auto error_for = [&](const std::string& pickle, const std::vector<float>& storage) {
    write_torch_zip(tmp.file("m.bin"), pickle, storage);
    return error_of([&] { (void)read_torch_state_dict(tmp.file("m.bin")); });
  };
  EXPECT_EQ(error_for(good, six), "<no error>");
  // Every truncation of a valid pickle is refused with a message.
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::string what = error_for(good.substr(0, n), six);
    EXPECT_NE(what.find("m.bin"), std::string::npos) << n << ": " << what;
  }
  EXPECT_NE(error_for(good, {0, 1, 2}).find("has 12 bytes, expected 6"), std::string::npos);  // storage too short
  const std::string past_end = state_dict_pickle(pickle_str("a") + pickle_tensor("0", 6, 4, 2, 3));
  EXPECT_NE(error_for(past_end, six).find("runs past the end of its storage"), std::string::npos);
  // size × stride chosen to wrap around int64 and land back inside the storage.
  const std::string wrap = state_dict_pickle(
      pickle_str("a") + "ctorch._utils\n_rebuild_tensor_v2\n((" + pickle_str("storage") + "ctorch\nFloatStorage\n" +
      pickle_str("0") + pickle_str("cpu") + pickle_int(6) + "tQ" + pickle_int(0) + "\x8a\x08" +
      std::string("\x01\x00\x00\x00\x00\x00\x00\x40", 8) + "\x85\x8a\x08" + std::string("\x04\x00\x00\x00\x00\x00\x00\x00", 8) +
      "\x85\x89" "ccollections\nOrderedDict\n)RtR");
  EXPECT_NE(error_for(wrap, six).find("overflows"), std::string::npos) << error_for(wrap, six);
  EXPECT_NE(error_for(std::string("\x80\x02h\x07."), six).find("memo key 7 was never stored"), std::string::npos);
  EXPECT_NE(error_for(std::string("\x80\x02K\x01."), six).find("expected a dict of tensors"), std::string::npos);
  EXPECT_NE(error_for(std::string("\x80\x02\xff."), six).find("unsupported pickle opcode 0xff"), std::string::npos);
}

}  // namespace
}  // namespace hotpath::models
