// Structured pruning (infer/prune.h): dependency groups of the real lowerings, pruning zeroed channels changes no
// output, MACs, the target search, importance, iterative prune → fine-tune, magnitude pruning's report and bad input.
// Parity with torch-pruning: prune_parity_test.cpp.
#include "hotpath/infer/prune.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/lower.h"
#include "hotpath/infer/quantize.h"
#include "hotpath/models/registry.h"
#include "infer/test_graphs.h"
#include "support/test_support.h"

namespace hotpath::infer {
namespace {

using test::error_of;

Graph lowered(const std::string& arch, std::int64_t size, std::int64_t classes = 10) {
  at::manual_seed(3);
  auto model = models::create_model(arch, {.num_classes = classes, .in_channels = 3});
  model->eval();
  return lower_image_model(*model, {.channels = 3, .image_size = size});
}

const ChannelGroup* group_written_by(const std::vector<ChannelGroup>& groups, const std::string& node) {
  for (const ChannelGroup& g : groups) {
    if (std::find(g.producers.begin(), g.producers.end(), node) != g.producers.end()) return &g;
    if (std::find(g.depthwise.begin(), g.depthwise.end(), node) != g.depthwise.end()) return &g;
  }
  return nullptr;
}

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

QatData random_images(std::int64_t n, std::int64_t size, std::uint64_t seed = 7) {
  auto gen = std::make_shared<at::Generator>(at::detail::createCPUGenerator(seed));
  return [=] { return QatBatch{at::randn({n, 3, size, size}, *gen), {}}; };
}

TEST(ChannelGroups, ResNetTiesEachResidualStreamAndKeepsTheInputAndLogitsFixed) {
  const std::vector<ChannelGroup> groups = channel_groups(lowered("resnet18", 64));
  std::size_t prunable = 0;
  for (const ChannelGroup& g : groups) prunable += g.prunable ? 1 : 0;
  EXPECT_EQ(prunable, 12u);  // 4 residual streams + 8 blocks' inner width (torch-pruning finds the same 12)
  const ChannelGroup* stream1 = group_written_by(groups, "conv1");
  ASSERT_NE(stream1, nullptr);
  EXPECT_TRUE(stream1->prunable);
  EXPECT_EQ(stream1->channels, 64);
  EXPECT_EQ(stream1->producers, (std::vector<std::string>{"conv1", "layer1.0.conv2", "layer1.1.conv2"}));
  EXPECT_TRUE(has(stream1->consumers, "layer2.0.downsample.0") && has(stream1->consumers, "layer2.0.conv1"));
  const ChannelGroup* stream4 = group_written_by(groups, "layer4.0.downsample.0");
  ASSERT_NE(stream4, nullptr);
  EXPECT_TRUE(has(stream4->consumers, "fc"));  // through the global average pool
  const ChannelGroup* logits = group_written_by(groups, "fc");
  ASSERT_NE(logits, nullptr);
  EXPECT_FALSE(logits->prunable);
  EXPECT_EQ(logits->fixed_by, "graph output logits");
  EXPECT_EQ(groups.front().fixed_by, "graph input images");
}

TEST(ChannelGroups, EfficientNetTiesDepthwiseAndSqueezeExcitationToTheExpandedChannels) {
  const std::vector<ChannelGroup> groups = channel_groups(lowered("efficientnet_b0", 64));
  const ChannelGroup* expanded = group_written_by(groups, "features.2.0.block.1.0");  // the depthwise conv
  ASSERT_NE(expanded, nullptr);
  EXPECT_TRUE(expanded->prunable);
  EXPECT_EQ(expanded->depthwise, (std::vector<std::string>{"features.2.0.block.1.0"}));
  EXPECT_TRUE(has(expanded->producers, "features.2.0.block.0.0"));     // the expand conv
  EXPECT_TRUE(has(expanded->producers, "features.2.0.block.2.fc2"));   // the SE rescale, multiplied in
  EXPECT_TRUE(has(expanded->consumers, "features.2.0.block.2.fc1"));   // the SE squeeze reads the pooled channels
  EXPECT_TRUE(has(expanded->consumers, "features.2.0.block.3.0"));     // the projection
  const ChannelGroup* squeeze = group_written_by(groups, "features.2.0.block.2.fc1");
  ASSERT_NE(squeeze, nullptr);
  EXPECT_EQ(squeeze->consumers, (std::vector<std::string>{"features.2.0.block.2.fc2"}));
}

TEST(ChannelGroups, ViTHasNoPrunableGroupAndPruningSaysSo) {
  const Graph vit = lowered("vit_tiny", 224);
  for (const ChannelGroup& g : channel_groups(vit)) EXPECT_FALSE(g.prunable) << g.name();
  EXPECT_NE(error_of([&] { prune_graph(vit, {}, {.ratio = 0.5}); }).find("no prunable channel group"),
            std::string::npos);
}

// Channels whose every writer has zero weights and bias are zero everywhere (relu, relu6, silu of 0 are 0; the SE
// rescale multiplies a zero): removing them must leave the logits as they were.
TEST(PruneChannels, RemovingZeroedChannelsLeavesTheOutputsAsTheyWere) {
  for (const auto& [arch, size] : std::vector<std::pair<std::string, std::int64_t>>{{"resnet18", 64},
                                                                                   {"resnet50", 64},
                                                                                   {"efficientnet_b0", 64},
                                                                                   {"cnn_small", 28}}) {
    Graph g = lowered(arch, size);
    const std::vector<ChannelGroup> groups = channel_groups(g);
    std::map<std::size_t, std::vector<std::int64_t>> kept;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const ChannelGroup& grp = groups[i];
      if (!grp.prunable) continue;
      std::vector<std::int64_t> keep;
      for (std::int64_t c = 0; c < grp.channels; ++c) {
        if (c % 3 != 1) {
          keep.push_back(c);
          continue;
        }
        for (const auto* list : {&grp.producers, &grp.depthwise}) {
          for (const std::string& name : *list) {
            const Node* n = g.find_node(name);
            g.params.at(n->params.at("weight"))[c].zero_();
            if (n->has_param("bias")) g.params.at(n->params.at("bias"))[c].zero_();
          }
        }
      }
      kept[i] = keep;
    }
    const Graph pruned = prune_channels(g, groups, kept);
    const at::Tensor x = at::randn({2, g.inputs.front().shape[1], size, size});
    const at::Tensor want = Engine::from_graph(g).run({x}).front();
    const at::Tensor got = Engine::from_graph(pruned).run({x}).front();
    EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4)) << arch << ": max diff " << (got - want).abs().max().item<double>();
    EXPECT_LT(graph_cost(pruned).macs, 0.6 * graph_cost(g).macs) << arch;
  }
}

TEST(GraphCost, ResNet50At224IsTorchvisionsFourPointOneGigaMacs) {
  const GraphCost c = graph_cost(lowered("resnet50", 224, 1000));
  EXPECT_NEAR(c.macs / 1e9, 4.09, 0.02);  // conv + linear (torchvision's table: 4.09 GFLOPS as MACs)
  EXPECT_NEAR(static_cast<double>(c.params) / 1e6, 25.5, 0.1);  // BN folded into conv biases: 25.50 M
}

TEST(KeptChannels, FollowsTorchPruningsLocalRuleAndRounding) {
  EXPECT_EQ(kept_channels(64, 0.5, 1), 32);
  EXPECT_EQ(kept_channels(10, 0.35, 1), 6);  // int(6.5)
  EXPECT_EQ(kept_channels(64, 0.3, 8), 40);  // int(44.8) = 44 → 40
  EXPECT_EQ(kept_channels(6, 0.5, 8), 3);    // fewer channels than round_to: not rounded
  EXPECT_EQ(kept_channels(16, 0.99, 8), 8);  // never below round_to where the group has that many
  EXPECT_EQ(kept_channels(3, 0.999, 1), 1);  // never below 1
}

TEST(PruneGraph, TargetMacsIsReachedWithTheSmallestUniformRatio) {
  const Graph g = lowered("resnet18", 64);
  const PruneResult r = prune_graph(g, {}, {.target_macs = 0.5, .round_to = 8});
  const double kept = r.report["macs"]["kept"].get<double>();
  EXPECT_LE(kept, 0.5);
  EXPECT_GT(kept, 0.40);
  EXPECT_NEAR(graph_cost(r.graph).macs / graph_cost(g).macs, kept, 1e-9);
  for (const auto& grp : r.report["prunable_groups"]) EXPECT_EQ(grp["kept"].get<std::int64_t>() % 8, 0) << grp.dump();
  const at::Tensor x = at::randn({2, 3, 64, 64});
  EXPECT_EQ(Engine::from_graph(r.graph).run({x}).front().sizes(), (std::vector<std::int64_t>{2, 10}));
}

TEST(ChannelImportance, AZeroedChannelScoresZeroAndIsPrunedFirstForEveryImportance) {
  Graph g = lowered("cnn_small", 28);
  const std::vector<ChannelGroup> groups = channel_groups(g);
  std::size_t index = 0;
  while (!groups[index].prunable) ++index;
  const ChannelGroup& grp = groups[index];
  for (const std::string& name : grp.producers) {
    const Node* n = g.find_node(name);
    g.params.at(n->params.at("weight"))[5].zero_();
    g.params.at(n->params.at("bias"))[5].zero_();
  }
  for (const std::string& name : grp.consumers) g.params.at(g.find_node(name)->params.at("weight")).select(1, 5).zero_();
  std::vector<QatBatch> batches;
  const QatData data = random_images(4, 28);
  for (int b = 0; b < 2; ++b) {
    batches.push_back(data());
  }
  const auto gradients = graph_gradients(g, batches);
  for (Importance imp : {Importance::kL1, Importance::kL2, Importance::kTaylor}) {
    const at::Tensor s = channel_importance(g, grp, imp, gradients);
    ASSERT_EQ(s.size(0), grp.channels);
    EXPECT_EQ(s[5].item<double>(), 0.0) << importance_name(imp);
    EXPECT_NEAR(s.mean().item<double>(), 1.0, 1e-5) << importance_name(imp);  // normalised by the mean
    EXPECT_EQ(std::get<1>(s.min(0)).item<std::int64_t>(), 5) << importance_name(imp);
  }
}

TEST(PruneGraph, IterativePruningWithFineTuningRecoversTheTeachersOutputs) {
  const Graph g = lowered("resnet18_small", 32);
  const QatData data = random_images(16, 32);
  PruneOptions o{.ratio = 0.5, .iterations = 2, .finetune_steps = 30};
  o.finetune.lr = 2e-3;
  const PruneResult r = prune_graph(g, data, o);
  ASSERT_EQ(r.report["finetune"].size(), 2u);
  for (const auto& f : r.report["finetune"]) {
    EXPECT_LT(f["loss_last"].get<double>(), 0.8 * f["loss_first"].get<double>()) << f.dump();
  }
  EXPECT_LT(r.report["params"]["kept"].get<double>(), 0.4);
  // The fine-tuned graph is closer to the teacher than the same cut without fine-tuning.
  const PruneResult cut = prune_graph(g, {}, {.ratio = 0.5, .iterations = 2});
  const at::Tensor x = at::randn({16, 3, 32, 32});
  const at::Tensor teacher = Engine::from_graph(g).run({x}).front();
  const double tuned = (Engine::from_graph(r.graph).run({x}).front() - teacher).norm().item<double>();
  const double raw = (Engine::from_graph(cut.graph).run({x}).front() - teacher).norm().item<double>();
  EXPECT_LT(tuned, raw);
}

TEST(MagnitudePrune, ZeroesTheSmallestWeightsAndSaysItGivesNoSpeedUp) {
  Graph g = lowered("cnn_small", 28);
  const nlohmann::ordered_json report = magnitude_prune(g, 0.6);
  EXPECT_NEAR(report["sparsity"].get<double>(), 0.6, 0.01);
  EXPECT_NE(report["speedup"].get<std::string>().find("none"), std::string::npos);
  for (const auto& [name, s] : report["nodes"].items()) EXPECT_NEAR(s.get<double>(), 0.6, 0.02) << name;
  EXPECT_EQ(graph_cost(g).macs, graph_cost(lowered("cnn_small", 28)).macs);  // as many multiply-adds as before
  EXPECT_NE(error_of([&] { magnitude_prune(g, 1.0); }).find("sparsity must be in [0, 1)"), std::string::npos);
}

TEST(PruneGraph, RefusesBadOptionsAndQuantizedGraphsWithOneClearLine) {
  const Graph g = lowered("resnet18_small", 32);
  EXPECT_NE(error_of([&] { prune_graph(g, {}, {.ratio = 1.0}); }).find("ratio must be in (0, 1) (1 would remove every"),
            std::string::npos);
  EXPECT_NE(error_of([&] { prune_graph(g, {}, {}); }).find("exactly one of ratio"), std::string::npos);
  EXPECT_NE(error_of([&] { prune_graph(g, {}, {.ratio = 0.5, .target_macs = 0.5}); }).find("exactly one of ratio"),
            std::string::npos);
  EXPECT_NE(error_of([&] { prune_graph(g, {}, {.target_macs = 1e-6}); }).find("out of reach"), std::string::npos);
  EXPECT_NE(error_of([&] { prune_graph(g, {}, {.ratio = 0.5, .round_to = 0}); }).find("round_to"), std::string::npos);
  EXPECT_NE(error_of([&] { prune_graph(g, {}, {.ratio = 0.5, .ignore = {"nope"}}); }).find("'nope'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { prune_graph(g, {}, {.ratio = 0.5, .importance = Importance::kTaylor}); })
                .find("taylor importance needs data"),
            std::string::npos);
  EXPECT_NE(error_of([] { importance_from_name("l3"); }).find("none of l1, l2, taylor"), std::string::npos);
  QuantizeOptions qo;
  qo.max_output_error = 0.0;
  const Graph q = quantize_graph(g, {{at::randn({4, 3, 32, 32})}}, qo).graph;
  EXPECT_NE(error_of([&] { channel_groups(q); }).find("prune the fp32 graph, then quantize"), std::string::npos);
}

// A depthwise conv cut to one channel would have groups 1 (a dense 1 → 1 conv) and fall out of its group: groups with
// one keep two channels, so that an iterative run's later cuts and the report see the same groups.
TEST(PruneGraph, DepthwiseGroupsKeepTwoChannelsAndStayOneGroup) {
  const Graph g = lowered("efficientnet_b0", 32);
  const PruneResult r = prune_graph(g, {}, {.ratio = 0.97, .iterations = 2});
  const std::vector<ChannelGroup> before = channel_groups(g), after = channel_groups(r.graph);
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i].name(), before[i].name());
  const Node* dw = r.graph.find_node("features.1.0.block.0.0");  // 32 → int(0.96) = 0 → 2 channels
  ASSERT_NE(dw, nullptr);
  EXPECT_EQ(dw->attr_int("groups", 0), 2);
  EXPECT_EQ(Engine::from_graph(r.graph).run({at::randn({2, 3, 32, 32})}).front().sizes(),
            (std::vector<std::int64_t>{2, 10}));
}

TEST(PruneGraph, IgnoredNodesKeepTheirOutputChannels) {
  const Graph g = lowered("resnet18", 64);
  const PruneResult r = prune_graph(g, {}, {.ratio = 0.5, .ignore = {"layer1.0.conv1"}});
  const Node* n = r.graph.find_node("layer1.0.conv1");
  EXPECT_EQ(r.graph.params.at(n->params.at("weight")).size(0), 64);
  EXPECT_EQ(r.graph.params.at(r.graph.find_node("layer1.1.conv1")->params.at("weight")).size(0), 32);
}

}  // namespace
}  // namespace hotpath::infer
