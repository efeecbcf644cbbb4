// Predictor: the one place that decides engine or eager, and the one owner of a package's pre- and
// post-processing. Packages the test exports itself: a model package runs in the engine and a run directory
// eagerly with the same answers; text packages record their tokenizer facts and output and packages written
// before those fields load the same; contradictions and wrong-kind calls are one-line errors.
#include "hotpath/infer/predictor.h"

// ExportSource / ExportOptions are filled with designated initializers, the rest left at their defaults on
// purpose; GCC before 14 still warns about the omitted members (GCC bug 96868).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/formats/tar_writer.h"
#include "hotpath/infer/classifier.h"
#include "hotpath/infer/export.h"
#include "hotpath/infer/sentence_embed.h"
#include "hotpath/infer/text_classifier.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

namespace hotpath::infer {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file(path.string())); }
void write_json(const fs::path& path, const nlohmann::json& j) { test::write_file(path.string(), j.dump(2)); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A cnn_small run directory (3 classes, 1×12×12) and its fp32 package.
struct ImagePair {
  fs::path run, package;
  models::ModelHandle model;
};

ImagePair image_pair(const TempDir& dir) {
  ImagePair p;
  p.run = test::write_tiny_image_run(dir.path() / "run", p.model);
  p.package = dir.path() / "pkg";
  (void)export_package({.model_dir = p.run.string()}, {.out = p.package});
  return p;
}

TEST(Predictor, ModelPackageRunsInTheEngineAndRunDirectoryEagerlyWithTheSameAnswers) {
  const TempDir dir;
  const ImagePair pair = image_pair(dir);
  const Predictor eager = Predictor::open(pair.run);
  const Predictor engine = Predictor::open(pair.package);
  EXPECT_EQ(eager.engine(), nullptr);
  ASSERT_NE(eager.model(), nullptr);
  ASSERT_NE(engine.engine(), nullptr);
  EXPECT_EQ(engine.model(), nullptr);
  EXPECT_EQ(eager.output_width(), 3);
  EXPECT_EQ(engine.output_width(), 3);
  EXPECT_EQ(engine.input_specs().front().shape, (std::vector<std::int64_t>{-1, 1, 12, 12}));
  EXPECT_EQ(eager.input_specs().front().shape, (std::vector<std::int64_t>{-1, 1, 12, 12}));
  EXPECT_EQ(eager.input_specs().front().name, engine.input_specs().front().name);

  const at::Tensor x = at::randn({4, 1, 12, 12});
  const at::Tensor want = pair.model->forward(x).detach();
  EXPECT_LT((eager.run({x}).front() - want).abs().max().item<double>(), 1e-6);
  EXPECT_LT((engine.run({x}).front() - want).abs().max().item<double>(), 1e-4);
  // One post-processing: the same labels, most probable first, the package's default k (5, clamped to 3).
  const auto top = engine.top_k(engine.run({x}).front());
  ASSERT_EQ(top.size(), 4U);
  ASSERT_EQ(top[0].size(), 3U);
  EXPECT_EQ(top[0][0].label, eager.top_k(eager.run({x}).front(), 1)[0][0].label);
  EXPECT_THROW((void)engine.top_k(want, 0), Error);

  // Autocast is the eager model's: a package runs at its exported precision.
  EXPECT_NE(error_of([&] { (void)Predictor::open(pair.package, {.autocast = at::kBFloat16}); })
                .find("runs at its exported precision (fp32), not under autocast"),
            std::string::npos);
  const Predictor bf16 = Predictor::open(pair.run, {.autocast = at::kBFloat16});
  EXPECT_EQ(bf16.run({x}).front().scalar_type(), at::kFloat);
  EXPECT_LT((bf16.run({x}).front() - want).abs().max().item<double>(), 0.1);

  // An image model takes images: text calls name what it takes.
  const std::vector<std::string_view> texts{"a"};
  EXPECT_NE(error_of([&] { (void)engine.encode(texts); }).find("an image_classifier takes images, not text"),
            std::string::npos);
}

TEST(Predictor, TextPackageRecordsItsTokenizerFactsAndItsOutput) {
  const TempDir dir;
  const fs::path hf = test::write_tiny_hf_bert(dir.path() / "hf-cls", true);
  const fs::path pkg = dir.path() / "pkg";
  (void)export_package({.model_dir = hf.string()}, {.out = pkg});
  const nlohmann::json pre = read_json(pkg / "preprocess.json");
  EXPECT_EQ(pre.at("max_length"), 32);
  EXPECT_EQ(pre.at("vocab_size"), 30);
  EXPECT_EQ(pre.at("type_vocab_size"), 2);
  EXPECT_EQ(pre.at("pad_id"), 0);
  EXPECT_EQ(pre.at("truncation"), "longest_first");
  EXPECT_EQ(read_json(pkg / "config.json").at("postprocess"), nlohmann::json::parse(R"({"output": "class_scores",
                                                                                         "top_k": 5})"));

  const Predictor p = Predictor::open(pkg);
  ASSERT_NE(p.tokenizer(), nullptr);
  EXPECT_EQ(p.text().vocab_size, 30);
  EXPECT_EQ(*p.text().pad_id, 0);
  EXPECT_EQ(p.output_width(), 2);
  // Texts → rows padded to the longest with the pad id, the mask 0 there; pairs take type id 1.
  const std::vector<std::string_view> texts{"the cat sat on the mat", "a dog"};
  const text::TextBatchTensors t = p.text_inputs(texts);
  ASSERT_EQ(t.input_ids.sizes(), (std::vector<std::int64_t>{2, 8}));
  EXPECT_EQ(t.input_ids[1][7].item<std::int64_t>(), 0);
  EXPECT_EQ(t.attention_mask[1].sum().item<std::int64_t>(), 4);
  const std::vector<std::string_view> seconds{"far away", "ran"};
  EXPECT_EQ(p.text_inputs(texts, seconds).token_type_ids[0].sum().item<std::int64_t>(), 3);  // far away [SEP]
  // The predictor's answer is the text classifier's (one path from texts to labels).
  const at::Tensor logits = p.run({t.input_ids, t.attention_mask, t.token_type_ids}).front();
  EXPECT_TRUE(at::equal(logits, TextClassifier::from_dir(pkg.string()).logits(texts)));
  EXPECT_EQ(p.top_k(logits).front().front().label.rfind("LABEL_", 0), 0U);
  // The caller's default k comes from the package.
  nlohmann::json config = read_json(pkg / "config.json");
  config["postprocess"]["top_k"] = 1;
  write_json(pkg / "config.json", config);
  EXPECT_EQ(Predictor::open(pkg).top_k(logits).front().size(), 1U);
  // A longer max length than the package's positions is refused, a shorter one truncates.
  EXPECT_NE(error_of([&] { (void)Predictor::open(pkg, {.max_length = 64}); })
                .find(pkg.string() + ": max length 64 exceeds the model's 32 position embeddings"),
            std::string::npos);
  EXPECT_EQ(Predictor::open(pkg, {.max_length = 4}).text_inputs(texts).input_ids.size(1), 4);
  const std::vector<std::uint8_t> png{1, 2, 3};
  EXPECT_NE(error_of([&] { (void)p.image_input(std::as_bytes(std::span(png))); }).find("takes text, not an image"),
            std::string::npos);
}

TEST(Predictor, PackagesWrittenBeforeTheTextFieldsLoadAndAnswerTheSame) {
  const TempDir dir;
  const fs::path hf = test::write_tiny_hf_bert(dir.path() / "hf-emb", false);
  const fs::path pkg = dir.path() / "pkg";
  (void)export_package({.model_dir = hf.string()}, {.out = pkg});
  EXPECT_EQ(read_json(pkg / "config.json").at("postprocess"),
            nlohmann::json::parse(R"({"output": "embedding", "pooling": "mean", "normalize": true})"));
  const std::vector<std::string_view> lines{"the cat sat", "a dog ran far away", "mat"};
  const at::Tensor want = SentenceEncoder::from_dir(pkg).encode(lines).clone();
  // As packages were written before: preprocess.json holds max_length only, config.json no postprocess.
  write_json(pkg / "preprocess.json", {{"max_length", 32}});
  nlohmann::json config = read_json(pkg / "config.json");
  config.erase("postprocess");
  write_json(pkg / "config.json", config);
  const Predictor p = Predictor::open(pkg);
  EXPECT_EQ(p.text().vocab_size, 30);
  EXPECT_EQ(p.text().type_vocab_size, 2);
  EXPECT_EQ(*p.text().pad_id, 0);
  EXPECT_EQ(p.postprocess().output, OutputKind::kEmbedding);
  EXPECT_TRUE(p.postprocess().normalize);
  EXPECT_EQ(p.output_width(), 16);
  EXPECT_TRUE(at::equal(SentenceEncoder::from_dir(pkg).encode(lines), want));
  EXPECT_NE(error_of([&] { (void)p.top_k(want); }).find("a sentence_embedder answers embeddings, not classes"),
            std::string::npos);
}

TEST(Predictor, RecordedFactsThatContradictTheModelAreOneLineErrors) {
  const TempDir dir;
  const fs::path hf = test::write_tiny_hf_bert(dir.path() / "hf-cls", true);
  const fs::path pkg = dir.path() / "pkg";
  (void)export_package({.model_dir = hf.string()}, {.out = pkg});
  const nlohmann::json pre = read_json(pkg / "preprocess.json");
  const std::string pre_path = (pkg / "preprocess.json").string();
  const auto with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = pre;
    j[key] = value;
    write_json(pkg / "preprocess.json", j);
    return error_of([&] { (void)Predictor::open(pkg); });
  };
  EXPECT_EQ(with("vocab_size", 31), pre_path + ": vocab_size 31, but the word embeddings hold 30 rows");
  EXPECT_EQ(with("pad_id", 3), pre_path + ": pad_id 3, but the tokenizer pads with 0");
  EXPECT_EQ(with("pad_id", 30), pre_path + ": pad_id 30 is not below vocab_size 30");
  EXPECT_EQ(with("truncation", "middle"),
            pre_path + ": truncation 'middle' is not one of longest_first, only_first, only_second");
  write_json(pkg / "preprocess.json", pre);
  nlohmann::json config = read_json(pkg / "config.json");
  config["postprocess"] = {{"output", "embedding"}};
  write_json(pkg / "config.json", config);
  EXPECT_EQ(error_of([&] { (void)Predictor::open(pkg); }),
            (pkg / "config.json").string() +
                ".postprocess.output: 'embedding', expected 'class_scores' for a text_classifier package");
}

// Text shards as the text recipes read them: KEY.txt and KEY.cls per sample.
std::string write_text_shard(const TempDir& dir, const std::string& name, const std::vector<std::string>& texts,
                             const std::vector<int>& labels) {
  formats::ShardWriter writer(dir.file(name + "-%06d.tar"), {});
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string cls = std::to_string(labels[i]);
    writer.write({std::to_string(1000 + i), {{"txt", test::as_bytes(texts[i])}, {"cls", test::as_bytes(cls)}}});
  }
  writer.close();
  return dir.file(name + "-000000.tar");
}

TEST(Predictor, EvalScoresATextPackageOnTextShardsAsItsClassifierAnswers) {
  const TempDir dir;
  const fs::path hf = test::write_tiny_hf_bert(dir.path() / "hf-cls", true);
  const fs::path pkg = dir.path() / "pkg";
  (void)export_package({.model_dir = hf.string()}, {.out = pkg});
  const std::vector<std::string> texts{"the cat sat on the mat", "a dog", "far away", "the dog ran far away",
                                       "cat", "on the mat a cat sat", "ran", "the the the", "a", "away far"};
  const std::vector<int> labels{0, 1, 1, 0, 0, 1, 0, 1, 1, 0};
  const std::string shard = write_text_shard(dir, "text", texts, labels);
  const DirEvalResult r = evaluate_dir(pkg.string(), {shard});
  EXPECT_EQ(r.eval.samples, 10);
  EXPECT_EQ(r.model, "bert (fp32 package)");
  // The classifier's own answers on the same texts, in one batch padded alike.
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const at::Tensor logits = TextClassifier::from_dir(pkg.string()).logits(views);
  const at::Tensor y = at::tensor(std::vector<std::int64_t>(labels.begin(), labels.end()));
  EXPECT_DOUBLE_EQ(r.eval.top1, 100.0 * logits.argmax(1).eq(y).sum().item<double>() / 10);
  EXPECT_NEAR(r.eval.loss, at::cross_entropy_loss(logits, y).item<double>(), 1e-5);
  // A label past the package's classes is named, not scored.
  const std::string bad = write_text_shard(dir, "bad", {"the cat"}, {2});
  EXPECT_NE(error_of([&] { (void)evaluate_dir(pkg.string(), {bad}); })
                .find("eval: sample 0 has label 2, outside the package's 2 classes"),
            std::string::npos);
}

TEST(Predictor, TextPackageWithoutATokenizerTakesTokenIdsPaddedWithTheConfigsId) {
  const TempDir dir;
  const std::string config = dir.file("bert.json");
  test::write_file(config, R"({"model_type": "bert", "vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 1,
                               "num_attention_heads": 2, "intermediate_size": 24, "max_position_embeddings": 32,
                               "type_vocab_size": 2, "pad_token_id": 3, "num_labels": 2})");
  const fs::path pkg = dir.path() / "pkg";
  (void)export_package({.random_init = true, .bert_config = config}, {.out = pkg});
  const Predictor p = Predictor::open(pkg);
  EXPECT_EQ(p.tokenizer(), nullptr);
  EXPECT_EQ(*p.text().pad_id, 3);
  const std::vector<std::string_view> texts{"the cat"};
  EXPECT_NE(error_of([&] { (void)p.text_inputs(texts); }).find("has no tokenizer files"), std::string::npos);
  const at::Tensor ids = at::randint(0, 30, {2, 5}, at::kLong);
  EXPECT_EQ(p.run({ids, at::ones_like(ids), at::zeros_like(ids)}).front().sizes(), (std::vector<std::int64_t>{2, 2}));
}

}  // namespace
}  // namespace hotpath::infer
