// Quantization-aware training (infer/qat.h): the interpreter against the fp32 engine, the fake-quantized forward
// against the int8 engine it simulates, the loss falling through fake quantization, observers that freeze, labels,
// and bad input. QAT against post-training int8 on real photos: tests/cli/qat_efficientnet_test.sh.
#include "hotpath/infer/qat.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/lower.h"
#include "hotpath/models/registry.h"
#include "hotpath/ops/int8_conv.h"
#include "infer/test_graphs.h"
#include "support/test_support.h"

namespace hotpath::infer {
namespace {

double rel_error(const at::Tensor& y, const at::Tensor& ref) {
  return (y - ref).norm().item<double>() / ref.norm().item<double>();
}

Graph lowered_resnet() {
  at::manual_seed(5);
  auto model = models::create_model("resnet18_small", {.num_classes = 10, .in_channels = 3});
  model->eval();
  return lower_image_model(*model, {.channels = 3, .image_size = 32});
}

// A data source of random images [n, 3, size, size] (seeded), scaled by `scale`.
QatData random_images(std::int64_t n, std::int64_t size, double scale = 1.0, std::uint64_t seed = 7) {
  auto gen = std::make_shared<at::Generator>(at::detail::createCPUGenerator(seed));
  return [=] { return QatBatch{at::randn({n, 3, size, size}, *gen) * scale, {}}; };
}

using test::error_of;

TEST(Qat, ForwardWithoutRangesIsTheFp32Engine) {
  for (const Graph& g : {test_graphs::cnn(), lowered_resnet()}) {
    const std::int64_t size = g.inputs.front().shape[2];
    const at::Tensor x = at::randn({3, 3, size, size});
    const at::Tensor want = Engine::from_graph(g).run({x}).front();
    const at::Tensor got = qat_forward(g, {}, x, 8, /*linear=*/false).front();
    EXPECT_LT(rel_error(got, want), 1e-5);
  }
}

// The simulation is what the engine runs: each conv alone at its range (the others float), the int8 export at the
// same ranges (nearest rounding, no bias correction) gives the fake-quantized forward's output to within a few
// percent of the quantization error itself (rounding ties and oneDNN's summation order); every node quantized, the
// two stay closer than either is to fp32.
TEST(Qat, FakeQuantizedForwardIsTheInt8EnginesOutput) {
  const Graph g = lowered_resnet();
  at::manual_seed(11);
  std::vector<std::vector<at::Tensor>> calib = {{at::randn({4, 3, 32, 32})}, {at::randn({4, 3, 32, 32})}};
  // Ranges as QAT would have learned them: the quantizer's own observation.
  const QuantizeResult observed = quantize_graph(g, calib, {.gptq = false}, engine_runner(1));
  QatResult all;
  all.graph = g;
  std::vector<std::string> names;
  for (const NodeQuantization& n : observed.nodes) {
    names.push_back(n.name);
    if (n.op == OpKind::kConv2d) all.input_ranges[n.name] = {n.range_min, n.range_max};
  }
  const at::Tensor x = calib.front().front();
  const at::Tensor fp32 = Engine::from_graph(g).run({x}).front();
  int convs = 0, index = 0;
  for (const auto& [name, range] : all.input_ranges) {
    if (index++ % 4 != 0) continue;  // every 4th conv (20 in all): stem, blocks, downsamples, with residual or not
    QatResult one = all;
    one.input_ranges = {{name, range}};
    for (const std::string& other : names) {
      if (other != name) one.keep_float.push_back(other);
    }
    const QuantizeResult q = quantize_graph(g, calib, qat_quantize_options(one), engine_runner(1));
    EXPECT_EQ(q.nodes.size(), names.size());
    const at::Tensor int8 = Engine::from_graph(q.graph, {.threads = 1}).run({x}).front();
    const at::Tensor sim = qat_forward(g, one.input_ranges, x, 0, true, one.keep_float).front();
    const double int8_error = rel_error(int8, fp32);
    EXPECT_GT(int8_error, 1e-4) << name;                      // quantizing the conv changes the logits...
    EXPECT_LT(rel_error(sim, int8), 0.05 * int8_error) << name;  // ...and the simulation is that change
    ++convs;
  }
  EXPECT_GE(convs, 5);
  const QuantizeResult q = quantize_graph(g, calib, qat_quantize_options(all), engine_runner(1));
  for (const NodeQuantization& n : q.nodes) {
    EXPECT_TRUE(n.quantized) << n.name;
    if (n.op == OpKind::kConv2d) {
      EXPECT_EQ(n.observer, "qat") << n.name;
    }
  }
  const at::Tensor int8 = Engine::from_graph(q.graph, {.threads = 1}).run({x}).front();
  const at::Tensor sim = qat_forward(g, all.input_ranges, x).front();
  EXPECT_LT(rel_error(sim, int8), rel_error(int8, fp32));
}

// The gradient reaches the parameters through the fake quantization: on one repeated batch the distillation loss
// of the quantized student falls. The ranges freeze after step 1 (then train) and the learning rate is 1e-3: with
// the ranges observed for 50 steps at 3e-4 the loss (~1e-3) moved by 0.37-2.06x over seeds 12-16, and a teacher
// differing by float rounding (oneDNN's direct convs vs ATen's) flipped the outcome; here it falls to 0.05-0.20x
// on every seed with either teacher.
TEST(Qat, TrainingLowersTheQuantizedStudentsLoss) {
  Graph g = test_graphs::cnn();
  g.params["fc.weight"] = g.params["fc.weight"] * 30;  // peaked logits, as a trained classifier's
  at::manual_seed(12);
  const at::Tensor fixed = at::randn({16, 3, 16, 16});
  const QatResult r = qat_train(g, [&] { return QatBatch{fixed, {}}; },
                                {.steps = 100, .lr = 1e-3, .observer_steps = 1, .temperature = 1.0});
  EXPECT_LT(r.report["loss_last"].get<double>(), 0.6 * r.report["loss_first"].get<double>());
  ASSERT_EQ(r.input_ranges.size(), 3U);  // stem, block, down
  EXPECT_EQ(r.report["conv_weight_bits"].get<int>(), r.weight_bits);
  // The trained graph keeps the fp32 graph's structure: the export takes it as it is.
  EXPECT_EQ(r.graph.nodes.size(), g.nodes.size());
  EXPECT_FALSE(at::equal(r.graph.params.at("stem.weight"), g.params.at("stem.weight")));
  const QuantizeResult q = quantize_graph(r.graph, {{fixed}}, qat_quantize_options(r), engine_runner(1));
  for (const NodeQuantization& n : q.nodes) EXPECT_TRUE(n.quantized) << n.name;
}

TEST(Qat, RangesFollowTheBatchesForObserverStepsThenFreeze) {
  const Graph g = test_graphs::cnn();
  int calls = 0;
  const QatData data = [&] {
    ++calls;  // the first batch spans [-1, 1] exactly; later ones are 10× wider
    at::Tensor x = at::rand({4, 3, 16, 16}) * 2 - 1;
    x.view({-1})[0] = -1.0;
    x.view({-1})[1] = 1.0;
    return QatBatch{calls == 1 ? x : x * 10, {}};
  };
  const QatResult r = qat_train(g, data, {.steps = 3, .lr = 1e-6, .observer_steps = 1, .learn_ranges = false});
  EXPECT_EQ(calls, 3);
  EXPECT_DOUBLE_EQ(r.input_ranges.at("stem").first, -1.0);
  EXPECT_DOUBLE_EQ(r.input_ranges.at("stem").second, 1.0);
  EXPECT_EQ(r.report["observer_steps"], 1);

  // Observing every step, the moving average moves toward the wider batches.
  calls = 0;
  const QatResult moving = qat_train(g, data, {.steps = 3, .lr = 1e-6, .observer_steps = 3, .observer_momentum = 0.5});
  EXPECT_FALSE(moving.report["learned_ranges"].get<bool>());  // never frozen: nothing learned
  EXPECT_GT(moving.input_ranges.at("stem").second, 3.0);
  EXPECT_LT(moving.input_ranges.at("stem").first, -3.0);
}

// Initial ranges start the training; with learn_ranges each conv's scale and zero point train with the weights, and
// the range handed to the export has exactly the learned u8 parameters.
TEST(Qat, InitialRangesAreLearnedAndExportedAsTheirU8Parameters) {
  Graph g = test_graphs::cnn();
  g.params["fc.weight"] = g.params["fc.weight"] * 30;
  const std::map<std::string, std::pair<double, double>> start = {{"stem", {-4.0, 4.0}}, {"block", {0.0, 3.0}},
                                                                   {"down", {0.0, 3.0}}};
  const QatResult frozen = qat_train(g, random_images(8, 16), {.steps = 20, .lr = 1e-3, .initial_ranges = start,
                                                               .learn_ranges = false});
  EXPECT_EQ(frozen.input_ranges, start);  // no observer steps by default with initial ranges
  const QatResult r = qat_train(g, random_images(8, 16), {.steps = 20, .lr = 1e-3, .initial_ranges = start});
  EXPECT_TRUE(r.report["learned_ranges"].get<bool>());
  ASSERT_EQ(r.input_ranges.size(), 3U);
  for (const auto& [name, range] : r.input_ranges) {
    const ops::Int8InputQuant q = ops::int8_affine_u8_params(range.first, range.second);
    const ops::Int8InputQuant q0 = ops::int8_affine_u8_params(start.at(name).first, start.at(name).second);
    EXPECT_NE(q.scale, q0.scale) << name;  // trained
    EXPECT_NEAR(range.first, -static_cast<double>(q.zero_point) * q.scale, 1e-9) << name;
    EXPECT_NEAR(range.second, (255.0 - static_cast<double>(q.zero_point)) * q.scale, 1e-6) << name;
  }
  EXPECT_NE(error_of([&] { qat_train(g, random_images(2, 16), {.steps = 1, .initial_ranges = {{"fc", {0.0, 1.0}}}}); })
                .find("initial_ranges names 'fc'"),
            std::string::npos);
}

// The post-training start: each int8 node's dequantized weight and corrected bias; with train_weights false the
// weights stay exactly there while the biases train.
TEST(Qat, StartsFromThePostTrainingGraphAndCanTrainBiasesOnly) {
  const Graph g = test_graphs::cnn();
  at::manual_seed(13);
  const QuantizeResult ptq = quantize_graph(g, {{at::randn({8, 3, 16, 16})}}, {.max_node_error = 1e9}, engine_runner(1));
  const Graph start = qat_start_graph(g, ptq);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& qn = ptq.graph.nodes[i];
    if (qn.attr_str("quant", "").empty()) continue;
    const at::Tensor w8 = ptq.graph.params.at(qn.params.at("weight")).to(at::kFloat);
    const at::Tensor scale = ptq.graph.params.at(qn.params.at("weight_scale"));
    const at::Tensor w = start.params.at(g.nodes[i].params.at("weight"));
    EXPECT_TRUE(at::allclose(w, w8 * scale.view(qn.op == OpKind::kConv2d ? std::vector<std::int64_t>{-1, 1, 1, 1}
                                                                           : std::vector<std::int64_t>{-1, 1})))
        << qn.name;
    EXPECT_TRUE(at::equal(start.params.at(g.nodes[i].params.at("bias")), ptq.graph.params.at(qn.params.at("bias"))))
        << qn.name;
  }
  const QatResult r = qat_train(g, random_images(8, 16), {.steps = 5, .lr = 1e-3, .train_weights = false}, &start);
  EXPECT_FALSE(r.report["trained_weights"].get<bool>());
  EXPECT_TRUE(at::equal(r.graph.params.at("block.weight"), start.params.at("block.weight")));
  EXPECT_FALSE(at::equal(r.graph.params.at("block.bias"), start.params.at("block.bias")));
  Graph other = g;
  other.params.erase("fc.bias");
  other.nodes.back().params.erase("bias");
  EXPECT_NE(error_of([&] { qat_train(g, random_images(2, 16), {.steps = 1}, &other); }).find("the start graph has"),
            std::string::npos);
}

TEST(Qat, KeepFloatNodesAreNeitherSimulatedNorRanged) {
  const Graph g = test_graphs::cnn();
  const QatResult r = qat_train(g, random_images(4, 16), {.steps = 2, .keep_float = {"down", "fc"}});
  EXPECT_EQ(r.input_ranges.count("down"), 0U);
  EXPECT_EQ(r.input_ranges.count("stem"), 1U);
  const QuantizeOptions o = qat_quantize_options(r);
  EXPECT_EQ(o.keep_float, (std::vector<std::string>{"down", "fc"}));
  EXPECT_FALSE(o.gptq);
  EXPECT_FALSE(o.bias_correction);
}

TEST(Qat, LabelsAddCrossEntropy) {
  const Graph g = test_graphs::cnn();
  auto gen = std::make_shared<at::Generator>(at::detail::createCPUGenerator(3));
  const QatData labelled = [gen] {
    return QatBatch{at::randn({8, 3, 16, 16}, *gen), at::randint(0, 10, {8}, *gen)};
  };
  const QatResult with = qat_train(g, labelled, {.steps = 2, .label_weight = 1.0});
  const QatResult without = qat_train(g, labelled, {.steps = 2});
  // Distillation alone starts near 0 (the student is the teacher, quantized); cross-entropy adds ~ln(10).
  EXPECT_GT(with.report["loss_first"].get<double>(), without.report["loss_first"].get<double>() + 1.0);
}

TEST(Qat, RefusesBadInputNamingIt) {
  const Graph g = test_graphs::cnn();
  const auto refused = [](const Graph& graph, const QatData& data, const QatOptions& o, const std::string& text) {
    const std::string e = error_of([&] { qat_train(graph, data, o); });
    EXPECT_NE(e.find(text), std::string::npos) << "expected '" << text << "' in: " << e;
  };
  refused(test_graphs::mlp(), random_images(2, 16), {.steps = 1}, "one float input [N, C, H, W]");
  refused(g, random_images(2, 16), {.steps = 1, .keep_float = {"nope"}}, "'nope'");
  refused(g, random_images(2, 12), {.steps = 1}, "step 1: the batch's images do not fit");
  refused(g, random_images(2, 16), {.steps = 1, .label_weight = 1.0}, "needs int64 labels");
  refused(g, random_images(2, 16), {.steps = 0}, "steps must be in");
  refused(g, random_images(2, 16), {.steps = 4, .observer_steps = 5}, "observer_steps");
  refused(g, random_images(2, 16), {.steps = 1, .weight_bits = 4}, "weight_bits");
  refused(g, random_images(2, 16, NAN), {.steps = 2}, "step 1: the input of conv stem is not finite");
  // A graph already quantized is refused: QAT starts from fp32.
  const QuantizeResult q = quantize_graph(g, {{at::randn({2, 3, 16, 16})}}, {}, engine_runner(1));
  refused(q.graph, random_images(2, 16), {.steps = 1}, "already quantized");
  QuantizeOptions bad;
  bad.input_ranges["fc"] = {0.0, 1.0};
  const std::string e = error_of([&] { quantize_graph(g, {{at::randn({2, 3, 16, 16})}}, bad, engine_runner(1)); });
  EXPECT_NE(e.find("input_ranges names 'fc', which is no conv2d node"), std::string::npos) << e;
}

}  // namespace
}  // namespace hotpath::infer
