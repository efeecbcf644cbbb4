// The inference engine against the training models it was lowered from: every family, every op,
// folded batch norms, fused residuals, merged LoRA, packages written and read back, bad packages.
#include "hotpath/infer/engine.h"
#include "hotpath/ops/onednn_conv.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/int8_chain.h"
#include "hotpath/infer/lower.h"
#include "hotpath/infer/package.h"
#include "hotpath/models/lora.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/int8_conv.h"
#include "hotpath/ops/int8_linear.h"
#include "support/test_support.h"
#include "support/tiny_bert.h"

namespace hotpath::infer {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// Batch norms with non-trivial statistics and affine parameters, so folding them is really tested.
void randomize_batch_norms(torch::nn::Module& model) {
  const at::NoGradGuard no_grad;
  for (const auto& m : model.modules()) {
    if (auto* bn = m->as<torch::nn::BatchNorm2dImpl>()) {
      bn->running_mean.uniform_(-0.5, 0.5);
      bn->running_var.uniform_(0.5, 2.0);
      bn->weight.uniform_(0.5, 1.5);
      bn->bias.uniform_(-0.2, 0.2);
    }
  }
}

// max |a − b| / max(1, max |b|): scale-aware, so deep nets with large logits are judged fairly.
double rel_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(1.0, b.abs().max().item<double>());
  return (a - b).abs().max().item<double>() / scale;
}

struct ImageModelShape {
  const char* name;
  std::int64_t classes, channels, size;
};
enum class BatchNorms { kRandomized, kAsInitialized };

// The graph of a random-weight image model made after at::manual_seed(seed), in eval mode; its batch norms
// get non-trivial statistics (randomize_batch_norms) unless kAsInitialized.
Graph seeded_image_graph(std::uint64_t seed, const ImageModelShape& m, BatchNorms bn = BatchNorms::kRandomized) {
  at::manual_seed(seed);
  auto model = models::create_model(m.name, {.num_classes = m.classes, .in_channels = m.channels});
  if (bn == BatchNorms::kRandomized) randomize_batch_norms(*model);
  model->eval();
  return lower_image_model(*model, {.channels = m.channels, .image_size = m.size});
}

at::Tensor image_reference(models::ImageClassifier& model, const at::Tensor& x) {
  model.eval();
  const at::NoGradGuard no_grad;
  return model.forward(x);
}

struct VisionCase {
  const char* name;
  std::int64_t channels;
  std::int64_t size;
};

class EngineVision : public ::testing::TestWithParam<VisionCase> {};

TEST_P(EngineVision, MatchesTheTrainingModelWithin1e5) {
  const VisionCase c = GetParam();
  at::manual_seed(7);
  auto model = models::create_model(c.name, {.num_classes = 5, .in_channels = c.channels});
  randomize_batch_norms(*model);
  model->eval();
  const at::Tensor x = at::randn({3, c.channels, c.size, c.size});
  const at::Tensor expected = image_reference(*model, x);
  Graph g = lower_image_model(*model, {.channels = c.channels, .image_size = c.size});
  // Channels-last runs the convs through oneDNN's library directly (where the build has it) and through ATen's
  // prepacked op, its twin; contiguous runs at::conv2d.
  for (const auto& [channels_last, direct] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
    const Engine engine = Engine::from_graph(g, {.threads = 1, .channels_last = channels_last, .direct_convs = direct});
    const at::Tensor got = engine.run({x}).front();
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_LT(rel_error(got, expected), 1e-5)
        << c.name << (channels_last ? " channels-last" : " contiguous") << (direct ? ", direct convs" : "");
    if (channels_last && direct && ops::OneDnnConv::unavailable().empty() && c.name != std::string("vit_tiny")) {
      EXPECT_NE(engine.describe().find("conv: oneDNN's library called directly"), std::string::npos)
          << engine.describe();
    }
  }
  // No BatchNorm survives lowering: every conv carries its folded scale and shift, no running statistics are kept.
  for (const auto& [key, t] : g.params) EXPECT_EQ(key.find("running_"), std::string::npos) << key;
}

INSTANTIATE_TEST_SUITE_P(Families, EngineVision,
                         ::testing::Values(VisionCase{"cnn_small", 1, 28}, VisionCase{"resnet18", 3, 64},
                                           VisionCase{"resnet18_small", 3, 32}, VisionCase{"resnet50", 3, 64},
                                           VisionCase{"efficientnet_b0", 3, 64},
                                           VisionCase{"efficientnet_lite0", 3, 65},
                                           VisionCase{"efficientnet_lite0", 3, 64},  // TF "same": asymmetric padding
                                           VisionCase{"vit_tiny", 3, 224}),
                         [](const auto& test_info) {
                           return std::string(test_info.param.name) + "_" + std::to_string(test_info.param.size);
                         });

// The tiny BERT's position embeddings: EngineInputs checks that a longer input is refused.
constexpr std::int64_t kTextPositions = 40;

struct TextInputs {
  at::Tensor ids, mask, types;
};

// Two sequences, the second padded: the mask matters.
TextInputs text_inputs(std::int64_t length, std::int64_t vocab) {
  TextInputs t;
  t.ids = at::randint(1, vocab, {2, length}, at::kLong);
  t.mask = at::ones({2, length}, at::kLong);
  t.mask[1].narrow(0, length / 2, length - length / 2).zero_();
  t.types = at::zeros({2, length}, at::kLong);
  t.types[0].narrow(0, length / 2, length - length / 2).fill_(1);
  return t;
}

TEST(EngineText, BertClassifierMatchesTheTrainingModel) {
  for (auto arch : {formats::BertArch::kBert, formats::BertArch::kDistilBert}) {
    at::manual_seed(3);
    models::BertForSequenceClassification model(test::tiny_bert(arch, kTextPositions));
    model.eval();
    const Engine engine = Engine::from_graph(lower_text_classifier(model), {.threads = 1});
    for (std::int64_t length : {7, 19}) {
      const TextInputs in = text_inputs(length, 50);
      const at::NoGradGuard no_grad;
      const at::Tensor expected = model.forward(in.ids, in.mask, in.types);
      const at::Tensor got = engine.run({in.ids, in.mask, in.types}).front();
      EXPECT_LT(rel_error(got, expected), 1e-5) << (arch == formats::BertArch::kBert ? "bert" : "distilbert")
                                                 << " length " << length;
    }
  }
}

TEST(EngineText, MergesLoraAdaptersIntoTheWeights) {
  at::manual_seed(4);
  models::BertForSequenceClassification model(test::tiny_bert(formats::BertArch::kBert, kTextPositions));
  formats::LoraConfig lora;
  lora.r = 4;
  lora.lora_alpha = 8;
  lora.target_modules = {"query", "value"};
  models::apply_lora(model, lora);
  {
    const at::NoGradGuard no_grad;
    for (auto& p : model.named_parameters()) {
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.5);
    }
  }
  model.eval();
  const TextInputs in = text_inputs(9, 50);
  at::Tensor expected;
  {
    const at::NoGradGuard no_grad;
    expected = model.forward(in.ids, in.mask, in.types);
  }
  const Engine engine = Engine::from_graph(lower_text_classifier(model), {.threads = 1});
  EXPECT_LT(rel_error(engine.run({in.ids, in.mask, in.types}).front(), expected), 1e-5);
}

TEST(EngineText, SentenceEmbedderMatchesMeanPoolAndNormalize) {
  at::manual_seed(5);
  auto bert = std::make_shared<models::BertModel>(test::tiny_bert(formats::BertArch::kBert, kTextPositions),
                                                  models::BertOptions{.add_pooling_layer = false});
  bert->eval();
  const models::SentenceEmbedder embedder(bert);
  const TextInputs in = text_inputs(11, 50);
  at::Tensor expected;
  {
    const at::NoGradGuard no_grad;
    expected = embedder.forward(in.ids, in.mask, in.types);
  }
  const Engine engine = Engine::from_graph(lower_sentence_embedder(embedder), {.threads = 1});
  EXPECT_LT(rel_error(engine.run({in.ids, in.mask, in.types}).front(), expected), 1e-5);
  // Missing mask and token types mean "attend everywhere" and "segment 0".
  const at::Tensor all = at::ones_like(in.ids);
  at::Tensor full;
  {
    const at::NoGradGuard no_grad;
    full = embedder.forward(in.ids, all, at::zeros_like(in.ids));
  }
  EXPECT_LT(rel_error(engine.run({in.ids}).front(), full), 1e-5);
}

// A conv with a residual and each activation: oneDNN fuses some after the add, the engine the rest.
TEST(EngineConv, ResidualThenEveryActivationMatchesATen) {
  at::manual_seed(8);
  for (std::string_view act : kActivations) {
    Graph g;
    g.inputs = {{"x", at::kFloat, {-1, 4, 6, 6}, {"batch", "channels", "height", "width"}}};
    g.params["w"] = at::randn({4, 4, 3, 3});
    g.params["b"] = at::randn({4});
    Node n;
    n.op = OpKind::kConv2d;
    n.name = n.output = "c";
    n.inputs = {"x", "x"};
    n.params = {{"weight", "w"}, {"bias", "b"}};
    n.attrs = {{"stride", std::vector<std::int64_t>{1, 1}}, {"padding", std::vector<std::int64_t>{1, 1, 1, 1}},
               {"dilation", std::vector<std::int64_t>{1, 1}}, {"groups", std::int64_t{1}}, {"act", std::string(act)}};
    g.nodes = {n};
    g.outputs = {"c"};
    const at::Tensor x = at::randn({2, 4, 6, 6});
    at::Tensor want = at::conv2d(x, g.params["w"], g.params["b"], 1, 1) + x;
    if (act == "relu") want = want.relu();
    if (act == "relu6") want = want.clamp(0, 6);
    if (act == "gelu") want = at::gelu(want);
    if (act == "gelu_tanh") want = at::gelu(want, "tanh");
    if (act == "silu") want = at::silu(want);
    if (act == "sigmoid") want = want.sigmoid();
    if (act == "tanh") want = want.tanh();
    for (const auto& [channels_last, direct] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
      const at::Tensor got =
          Engine::from_graph(g, {.channels_last = channels_last, .direct_convs = direct}).run({x}).front();
      EXPECT_LT(rel_error(got, want), 1e-5)
          << act << (channels_last ? " channels-last" : " contiguous") << (direct ? ", direct convs" : "");
    }
  }
}

TEST(EngineInputs, RefusesWrongShapesDtypesAndIdsWithOneLine) {
  at::manual_seed(1);
  auto model = models::create_model("cnn_small", {.num_classes = 3, .in_channels = 1});
  model->eval();
  const Engine engine = Engine::from_graph(lower_image_model(*model, {.channels = 1, .image_size = 28}));
  const auto message = [&](const std::vector<at::Tensor>& in) {
    try {
      (void)engine.run(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({at::randn({2, 3, 28, 28})}).find("input images is [2, 3, 28, 28]"), std::string::npos);
  EXPECT_NE(message({at::randn({2, 1, 28})}).find("expected 4 dims"), std::string::npos);
  EXPECT_NE(message({at::ones({2, 1, 28, 28}, at::kLong)}).find("expected floating point"), std::string::npos);
  EXPECT_NE(message({}).find("input images is required"), std::string::npos);

  models::BertForSequenceClassification bert(test::tiny_bert(formats::BertArch::kBert, kTextPositions));
  bert.eval();
  const Engine text = Engine::from_graph(lower_text_classifier(bert));
  const at::Tensor ids = at::full({1, 4}, 50, at::kLong);  // vocab is 50: id 50 is out of range
  EXPECT_THROW((void)text.run({ids}), Error);
  try {
    (void)text.run({ids});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input_ids holds ids in [50, 50], expected [0, 50)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)text.run({at::zeros({1, kTextPositions + 1}, at::kLong)}), Error);
}

TEST(EngineBf16, RunsFp32WithAReasonWhereTheCpuLacksNativeBf16) {
  const Graph g = seeded_image_graph(2, {.name = "resnet18_small", .classes = 4, .channels = 3, .size = 16});
  const at::Tensor x = at::randn({2, 3, 16, 16});
  const at::Tensor fp32 = Engine::from_graph(g).run({x}).front();
  {
    const cpu::ScopedMaxIsa cap(cpu::Isa::kAvx512);
    const Engine e = Engine::from_graph(g, {.precision = Precision::kBf16});
    EXPECT_NE(e.describe().find("lacks AVX512_BF16, so fp32 runs instead"), std::string::npos) << e.describe();
    EXPECT_LT(rel_error(e.run({x}).front(), fp32), 1e-6);
  }
  if (cpu::detected_isa() >= cpu::Isa::kAvx512Bf16) {
    const Engine e = Engine::from_graph(g, {.precision = Precision::kBf16});
    EXPECT_LT(rel_error(e.run({x}).front(), fp32), 5e-2) << "bf16 tolerance";
  }
}

// Quantizes every conv (static, ranges observed on `calibration`) and linear (dynamic) of `g` by hand,
// in graph.h's quantized form: what the quantizer writes, without the quantizer.
// `pick` (default: all) chooses the nodes; the others stay float, as the quantizer's fallback leaves them.
Graph quantize_by_hand(const Graph& g, const at::Tensor& calibration,
                       const std::function<bool(const Node&)>& pick = {}) {
  std::map<std::string, std::pair<double, double>> ranges;
  const Engine fp32 = Engine::from_graph(g, {.threads = 1});
  (void)fp32.run({calibration}, [&](const Node& n, const std::vector<at::Tensor>& in, const at::Tensor&) {
    if (n.op != OpKind::kConv2d) return;
    auto& r = ranges[n.name];
    r.first = std::min(r.first, in[0].min().item<double>());
    r.second = std::max(r.second, in[0].max().item<double>());
  });
  Graph q = g;
  for (Node& n : q.nodes) {
    if ((n.op != OpKind::kConv2d && n.op != OpKind::kLinear) || (pick && !pick(n))) continue;
    const at::Tensor w = q.params.at(n.params.at("weight"));
    auto [w8, scale] = n.op == OpKind::kConv2d ? ops::Int8Conv2d::quantize_weight(w) : ops::Int8Linear::quantize_weight(w);
    q.params[n.params.at("weight")] = w8;
    q.params[n.name + ".weight_scale"] = scale;
    n.params["weight_scale"] = n.name + ".weight_scale";
    if (n.op == OpKind::kConv2d) {
      const ops::Int8InputQuant iq = ops::int8_affine_u8_params(ranges.at(n.name).first, ranges.at(n.name).second);
      n.attrs["quant"] = std::string("static_int8");
      n.attrs["input_scale"] = iq.scale;
      n.attrs["input_zero_point"] = iq.zero_point;
    } else {
      n.attrs["quant"] = std::string("dynamic_int8");
    }
  }
  return q;
}

TEST(EngineInt8, RunsQuantizedConvsAndLinearsCloseToFp32) {
  const Graph g = seeded_image_graph(12, {.name = "resnet18_small", .classes = 6, .channels = 3, .size = 16});
  const at::Tensor x = at::randn({4, 3, 16, 16});
  const Graph q = quantize_by_hand(g, x);
  q.validate();
  const Engine int8 = Engine::from_graph(q, {.threads = 1, .precision = Precision::kInt8});
  EXPECT_NE(int8.describe().find("int8 conv2d 20"), std::string::npos) << int8.describe();
  EXPECT_NE(int8.describe().find("int8 linear 1"), std::string::npos) << int8.describe();
  const at::Tensor want = Engine::from_graph(g).run({x}).front();
  const at::Tensor got = int8.run({x}).front();
  // 20 int8 convs in a row on random weights: a few percent of the logit range.
  EXPECT_LT(rel_error(got, want), 0.1);
  EXPECT_GT(rel_error(got, want), 0.0) << "the int8 path really ran";
}

// An int8 graph's float nodes (the quantizer's fallback, softmax, LayerNorm, ...) run fp32 even where bf16 runs:
// the export measured its accuracy that way, and bf16 there loses what the fallback kept.
TEST(EngineInt8, UnquantizedNodesRunFp32EvenWhereBf16Runs) {
  const Graph g = seeded_image_graph(14, {.name = "resnet18_small", .classes = 6, .channels = 3, .size = 16});
  const at::Tensor x = at::randn({2, 3, 16, 16});
  int convs = 0;
  const Graph q = quantize_by_hand(g, x, [&](const Node& n) { return n.op != OpKind::kConv2d || ++convs % 2 == 1; });
  const Engine plain = Engine::from_graph(q, {.threads = 1, .precision = Precision::kInt8});
  const Engine with_bf16 = Engine::from_graph(q, {.threads = 1, .precision = Precision::kInt8, .emulate_bf16 = true});
  EXPECT_NE(with_bf16.describe().find("int8 asked, compute dtype fp32"), std::string::npos) << with_bf16.describe();
  EXPECT_TRUE(at::equal(plain.run({x}).front(), with_bf16.run({x}).front()));
}

// Chained convs hand each other u8 tensors (int8_chain.h): the same numbers up to oneDNN's requantization
// rounding, and the u8 values really flow (a chained conv's output is uint8).
TEST(EngineInt8, ChainedConvsMatchUnchainedAndPassU8) {
  const Graph g = seeded_image_graph(13, {.name = "resnet18_small", .classes = 6, .channels = 3, .size = 16});
  const at::Tensor x = at::randn({4, 3, 16, 16});
  const Graph q = quantize_by_hand(g, x);
  Graph chained = q;
  // Basic blocks: conv1 (relu) feeds only conv2 → 8 chained; nothing else qualifies (residuals, the stem
  // feeds a block input that is also a residual).
  EXPECT_EQ(chain_int8_convs(chained), 8);
  EXPECT_EQ(chain_int8_convs(chained), 0) << "idempotent";
  const Engine plain = Engine::from_graph(q, {.threads = 1, .precision = Precision::kInt8});
  const Engine fast = Engine::from_graph(chained, {.threads = 1, .precision = Precision::kInt8});
  const at::Tensor a = plain.run({x}).front();
  const at::Tensor b = fast.run({x}).front();
  EXPECT_LT(rel_error(b, a), 0.02);
  int u8_values = 0;
  (void)fast.run({x}, [&](const Node& n, const std::vector<at::Tensor>&, const at::Tensor& out) {
    if (n.attrs.count("output_scale") != 0) {
      EXPECT_EQ(out.scalar_type(), at::kByte) << n.name;
      ++u8_values;
    }
  });
  EXPECT_EQ(u8_values, 8);
}

// A batch cut into one part per thread (EngineOptions::split_batch) gives the unsplit run's rows: fp32 and
// int8 text graphs, even and odd batches, a padded sequence.
TEST(EngineText, SplitBatchEqualsTheUnsplitRun) {
  at::manual_seed(6);
  models::BertForSequenceClassification model(test::tiny_bert(formats::BertArch::kBert, kTextPositions));
  model.eval();
  const Graph g = lower_text_classifier(model);
  for (const bool int8 : {false, true}) {
    const Graph graph = int8 ? quantize_by_hand(g, at::randint(1, 50, {2, 9}, at::kLong)) : g;
    const EngineOptions split_options{.threads = 2, .precision = int8 ? Precision::kInt8 : Precision::kFp32};
    EngineOptions whole_options = split_options;
    whole_options.split_batch = false;
    const Engine split = Engine::from_graph(graph, split_options);
    const Engine whole = Engine::from_graph(graph, whole_options);
    EXPECT_NE(split.describe().find("batch: batches of >= 2 split across the threads"), std::string::npos)
        << split.describe();
    EXPECT_NE(whole.describe().find("(split_batch off)"), std::string::npos) << whole.describe();
    for (const std::int64_t batch : {2, 5}) {
      const at::Tensor ids = at::randint(1, 50, {batch, 13}, at::kLong);
      at::Tensor mask = at::ones({batch, 13}, at::kLong);
      mask[1].narrow(0, 6, 7).zero_();
      const at::Tensor types = at::zeros({batch, 13}, at::kLong);
      const at::Tensor got = split.run({ids, mask, types}).front();
      const at::Tensor want = whole.run({ids, mask, types}).front();
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_LT(rel_error(got, want), 1e-6) << (int8 ? "int8" : "fp32") << " batch " << batch;
    }
  }
  // Image graphs keep every node's own parallelism.
  auto cnn = models::create_model("resnet18_small", {.num_classes = 3, .in_channels = 3});
  const Engine image = Engine::from_graph(lower_image_model(*cnn, {.channels = 3, .image_size = 16}), {.threads = 2});
  EXPECT_NE(image.describe().find("batch: every node parallel on its own (image graph"), std::string::npos)
      << image.describe();
}

// ---- packages -------------------------------------------------------------------------------------

Package image_package(const std::string& arch, std::int64_t channels, std::int64_t size, std::int64_t classes) {
  Package p;
  p.kind = PackageKind::kImageClassifier;
  p.architecture = arch;
  p.image.channels = channels;
  p.image.image_size = size;
  p.image.crop = EvalCrop::kResize;
  p.image.mean.assign(static_cast<std::size_t>(channels), 0.5);
  p.image.std.assign(static_cast<std::size_t>(channels), 0.25);
  for (std::int64_t i = 0; i < classes; ++i) p.labels.push_back("class " + std::to_string(i));
  return p;
}

// The bf16 path itself, on any AVX-512 CPU: emulate_bf16 runs what an AVX512_BF16 CPU runs (oneDNN emulates
// the instructions), so image and text graphs and a bf16 package are checked within bf16 tolerance here too.
TEST(EngineBf16, EmulatedBf16RunsTheBf16PathWithinBf16Tolerance) {
  if (cpu::max_isa() < cpu::Isa::kAvx512) GTEST_SKIP() << "oneDNN's bf16 needs AVX-512 (or a lower HOTPATH_MAX_ISA cap)";
  const bool native = cpu::max_isa() >= cpu::Isa::kAvx512Bf16;
  for (const char* name : {"resnet18_small", "efficientnet_lite0"}) {
    const Graph g = seeded_image_graph(4, {.name = name, .classes = 5, .channels = 3, .size = 33});
    const at::Tensor x = at::randn({3, 3, 33, 33});
    const at::Tensor fp32 = Engine::from_graph(g).run({x}).front();
    const Engine e = Engine::from_graph(g, {.precision = Precision::kBf16, .emulate_bf16 = true});
    EXPECT_NE(e.describe().find("compute dtype bf16"), std::string::npos) << e.describe();
    if (!native) {
      EXPECT_NE(e.describe().find("oneDNN emulates bf16"), std::string::npos) << e.describe();
    }
    const at::Tensor got = e.run({x}).front();
    EXPECT_EQ(got.scalar_type(), at::kFloat) << "float at the graph's edges";
    EXPECT_LT(rel_error(got, fp32), 5e-2) << name << ": bf16 tolerance";
    EXPECT_GT(rel_error(got, fp32), 1e-6) << name << ": the bf16 path really ran";
  }
  at::manual_seed(5);
  models::BertForSequenceClassification bert(test::tiny_bert(formats::BertArch::kBert, kTextPositions));
  bert.eval();
  const Graph t = lower_text_classifier(bert);
  const TextInputs in = text_inputs(13, 50);
  const at::Tensor fp32 = Engine::from_graph(t).run({in.ids, in.mask, in.types}).front();
  const Engine e = Engine::from_graph(t, {.precision = Precision::kBf16, .emulate_bf16 = true});
  const at::Tensor got = e.run({in.ids, in.mask, in.types}).front();
  EXPECT_LT(rel_error(got, fp32), 5e-2) << "bert: bf16 tolerance";
  EXPECT_GT(rel_error(got, fp32), 1e-6) << "bert: the bf16 path really ran";

  // A bf16 package (bf16 weights on disk, as hotpath export writes them) reloads into the same numbers.
  const Graph g = seeded_image_graph(6, {.name = "resnet18_small", .classes = 3, .channels = 3, .size = 16});
  Graph stored = g;
  for (auto& [key, w] : stored.params) {
    if (w.scalar_type() == at::kFloat) w = w.to(at::kBFloat16).to(at::kFloat);
  }
  const TempDir dir;
  const fs::path pkg = dir.path() / "bf16";
  Package bf16_package = image_package("resnet18_small", 3, 16, 3);
  bf16_package.precision = Precision::kBf16;
  write_package_dir(pkg, bf16_package, stored, {}, {}, false);
  const at::Tensor x = at::randn({2, 3, 16, 16});
  const at::Tensor from_graph =
      Engine::from_graph(stored, {.precision = Precision::kBf16, .emulate_bf16 = true}).run({x}).front();
  const Engine loaded = Engine::load(pkg.string(), {.emulate_bf16 = true});
  EXPECT_NE(loaded.describe().find("bf16 asked, compute dtype bf16"), std::string::npos) << loaded.describe();
  EXPECT_TRUE(at::equal(loaded.run({x}).front(), from_graph));
  EXPECT_LT(rel_error(from_graph, Engine::from_graph(g).run({x}).front()), 5e-2) << "package: bf16 tolerance";
}

TEST(Package, RoundTripsAndReloadsBitIdentical) {
  const Graph g = seeded_image_graph(9, {.name = "resnet18_small", .classes = 3, .channels = 1, .size = 12});
  const TempDir dir;
  const fs::path pkg = dir.path() / "pkg";
  write_package_dir(pkg, image_package("resnet18_small", 1, 12, 3), g, {{"precision", "fp32"}}, {}, false);
  for (const char* f : {"config.json", "model.safetensors", "preprocess.json", "labels.txt", "quantization_report.json"}) {
    EXPECT_TRUE(fs::is_regular_file(pkg / f)) << f;
  }
  EXPECT_TRUE(is_package_dir(pkg));
  const Package back = read_package(pkg);
  EXPECT_EQ(back.labels, std::vector<std::string>({"class 0", "class 1", "class 2"}));
  EXPECT_EQ(back.image.image_size, 12);
  const at::Tensor x = at::randn({2, 1, 12, 12});
  const at::Tensor a = Engine::from_graph(g).run({x}).front();
  const at::Tensor b = Engine::load(pkg.string()).run({x}).front();
  EXPECT_TRUE(at::equal(a, b));
  // An existing, non-empty package is not overwritten by accident.
  EXPECT_THROW(write_package_dir(pkg, image_package("resnet18_small", 1, 12, 3), g, {}, {}, false), Error);
}

std::string load_error(const fs::path& pkg) {
  try {
    (void)Engine::load(pkg.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Package, BadPackagesFailWithOneLineNamingTheFile) {
  const Graph g = seeded_image_graph(10, {.name = "cnn_small", .classes = 3, .channels = 1, .size = 8},
                                         BatchNorms::kAsInitialized);
  const TempDir dir;
  const auto fresh = [&](const std::string& name) {
    const fs::path pkg = dir.path() / name;
    write_package_dir(pkg, image_package("cnn_small", 1, 8, 3), g, {}, {}, false);
    return pkg;
  };
  const auto write = [](const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; };
  {
    const fs::path pkg = fresh("no-weights");
    fs::remove(pkg / "model.safetensors");
    EXPECT_NE(load_error(pkg).find("model.safetensors: missing"), std::string::npos) << load_error(pkg);
  }
  {
    const fs::path pkg = fresh("garbled-config");
    write(pkg / "config.json", "{\"hotpath_package\": 1, \"kind\": ");
    EXPECT_NE(load_error(pkg).find("config.json: invalid JSON"), std::string::npos) << load_error(pkg);
  }
  {
    const fs::path pkg = fresh("garbled-weights");
    write(pkg / "model.safetensors", "\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}");
    EXPECT_NE(load_error(pkg).find("model.safetensors"), std::string::npos) << load_error(pkg);
  }
  {
    const fs::path pkg = fresh("wrong-labels");
    write(pkg / "labels.txt", "a\nb\n");
    EXPECT_NE(load_error(pkg).find("2 labels, but the model's output layer classifier has 3 classes"),
              std::string::npos)
        << load_error(pkg);
  }
  {
    const fs::path pkg = fresh("contradicting-preprocess");
    write(pkg / "preprocess.json",
          R"({"channels": 3, "image_size": 8, "mean": [0,0,0], "std": [1,1,1], "eval_crop": "resize"})");
    EXPECT_NE(load_error(pkg).find("contradict the graph input"), std::string::npos) << load_error(pkg);
  }
  {
    // Weights of another model: the first conv's weight has the wrong shape for its node.
    const fs::path pkg = fresh("other-weights");
    auto t = models::read_tensors((pkg / "model.safetensors").string());
    t.begin()->second = at::zeros({4});
    models::write_tensors((pkg / "model.safetensors").string(), t);
    EXPECT_NE(load_error(pkg).find("expected"), std::string::npos) << load_error(pkg);
  }
  {
    const fs::path pkg = fresh("hf-config");
    write(pkg / "config.json", R"({"model_type": "bert", "hidden_size": 8})");
    EXPECT_FALSE(is_package_dir(pkg));
    EXPECT_NE(load_error(pkg).find("not a hotpath model package"), std::string::npos) << load_error(pkg);
  }
  {
    const fs::path pkg = fresh("unknown-op");
    std::string text;
    {
      std::ifstream in(pkg / "config.json");
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const auto pos = text.find("\"conv2d\"");
    ASSERT_NE(pos, std::string::npos);
    text.replace(pos, 8, "\"conv9d\"");
    write(pkg / "config.json", text);
    EXPECT_NE(load_error(pkg).find("unknown op 'conv9d'"), std::string::npos) << load_error(pkg);
  }
}

// Random damage to config.json (byte flips, cuts, insertions): every load either works or fails with one
// hotpath::Error line — never another exception, a crash or a hang.
TEST(Package, MutatedConfigsFailWithOneLineOrLoad) {
  const Graph g = seeded_image_graph(11, {.name = "cnn_small", .classes = 3, .channels = 1, .size = 8},
                                         BatchNorms::kAsInitialized);
  const TempDir dir;
  const fs::path pkg = dir.path() / "pkg";
  write_package_dir(pkg, image_package("cnn_small", 1, 8, 3), g, {}, {}, false);
  std::string original;
  {
    std::ifstream in(pkg / "config.json");
    original.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;
  const auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const std::string digits = "0123456789-.eE\"{}[],:\\ ";
  int loaded = 0, refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text = original;
    const int edits = 1 + static_cast<int>(next() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = next() % text.size();
      switch (next() % 4) {
        case 0: text[at] = digits[next() % digits.size()]; break;
        case 1: text.erase(at, 1 + next() % 8); break;
        case 2: text.insert(at, 1, digits[next() % digits.size()]); break;
        default: text.resize(at); break;
      }
      if (text.empty()) text.push_back('{');  // not text = "{": GCC 12 warns falsely (-Wstringop-overflow)
    }
    std::ofstream(pkg / "config.json", std::ios::binary | std::ios::trunc) << text;
    try {
      const Engine e = Engine::load(pkg.string());
      (void)e.run({at::randn({1, 1, 8, 8})});
      ++loaded;
    } catch (const Error& err) {
      const std::string what = err.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << "more than one line: " << what;
      ++refused;
    } catch (const std::exception& other) {
      ADD_FAILURE() << "mutation " << i << " escaped as a non-hotpath error: " << other.what();
    }
  }
  EXPECT_GT(refused, 100);
  std::cout << loaded << " mutated configs loaded, " << refused << " refused with one line\n";
}

}  // namespace
}  // namespace hotpath::infer
