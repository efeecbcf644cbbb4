// Structured pruning against torch-pruning 1.6.1 (tests/oracles/prune_ref.py) on torchvision models with the same
// weights: the same dependency groups (ResNet-18, ResNet-50, EfficientNet-B0), the same channels kept by L1 and L2
// group magnitude, and the same logits as the library's pruned models (ResNets: batch norms with gamma = 1 and
// var = 1, so folding them scales each group uniformly and the rankings survive it).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hotpath/infer/engine.h"
#include "hotpath/infer/lower.h"
#include "hotpath/infer/prune.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/weights.h"
#include "support/test_support.h"

namespace hotpath::infer {
namespace {

constexpr std::int64_t kSize = 64;
constexpr std::int64_t kClasses = 10;

struct Reference {
  test::TempDir dir;
  nlohmann::json json;
  Graph graph;  // ours, lowered from the same weights
};

std::unique_ptr<Reference> reference(const std::string& arch, double ratio) {
  auto r = std::make_unique<Reference>();
  test::run_python(test::source_path("tests/oracles/prune_ref.py"),
                   {"groups", "--arch", arch, "--num-classes", std::to_string(kClasses), "--image-size",
                    std::to_string(kSize), "--ratio", std::to_string(ratio), "--out", r->dir.path().string()});
  std::ifstream in(r->dir.file("torch_pruning.json"));
  r->json = nlohmann::json::parse(in);
  auto model = models::create_model(arch, {.num_classes = kClasses, .in_channels = 3});
  models::load_safetensors(*model, r->dir.file("model.safetensors"));
  model->eval();
  r->graph = lower_image_model(*model, {.channels = 3, .image_size = kSize});
  return r;
}

// Our prunable groups keyed as the oracle keys them: the first of sorted(producers + depthwise).
std::map<std::string, std::size_t> keyed(const std::vector<ChannelGroup>& groups) {
  std::map<std::string, std::size_t> out;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (!groups[i].prunable) continue;
    std::vector<std::string> writers = groups[i].producers;
    writers.insert(writers.end(), groups[i].depthwise.begin(), groups[i].depthwise.end());
    out[*std::min_element(writers.begin(), writers.end())] = i;
  }
  return out;
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

void expect_same_groups(const Reference& r) {
  const std::vector<ChannelGroup> groups = channel_groups(r.graph);
  const auto ours = keyed(groups);
  ASSERT_EQ(ours.size(), r.json["groups"].size());
  for (const auto& g : r.json["groups"]) {
    const std::string key = g["key"];
    SCOPED_TRACE("group " + key);
    ASSERT_TRUE(ours.count(key));
    const ChannelGroup& mine = groups[ours.at(key)];
    EXPECT_EQ(mine.channels, g["channels"].get<std::int64_t>());
    EXPECT_EQ(sorted(mine.producers), g["out"].get<std::vector<std::string>>());
    EXPECT_EQ(sorted(mine.consumers), g["in"].get<std::vector<std::string>>());
    EXPECT_EQ(sorted(mine.depthwise), g["depthwise"].get<std::vector<std::string>>());
  }
}

// L1 and L2: the channels torch-pruning keeps in each group, and the pruned models' logits.
void expect_same_selection(const Reference& r, double ratio) {
  const std::vector<ChannelGroup> groups = channel_groups(r.graph);
  const auto ours = keyed(groups);
  const at::Tensor images = models::read_tensors(r.dir.file("input.safetensors")).at("images");
  const auto outputs = models::read_tensors(r.dir.file("output.safetensors"));
  const at::Tensor dense = Engine::from_graph(r.graph).run({images}).front();
  EXPECT_TRUE(at::allclose(dense, outputs.at("logits"), 1e-4, 1e-4)) << (dense - outputs.at("logits")).abs().max();
  for (const std::string imp : {"l1", "l2"}) {
    SCOPED_TRACE(imp);
    std::map<std::size_t, std::vector<std::int64_t>> kept;
    for (const auto& [key, want] : r.json["kept"][imp].items()) {
      const ChannelGroup& g = groups[ours.at(key)];
      const at::Tensor s = channel_importance(r.graph, g, importance_from_name(imp));
      const std::int64_t keep = kept_channels(g.channels, ratio, 1);
      const at::Tensor order = std::get<1>(at::sort(s, /*stable=*/true, 0, /*descending=*/true)).narrow(0, 0, keep);
      std::vector<std::int64_t> mine(order.data_ptr<std::int64_t>(), order.data_ptr<std::int64_t>() + keep);
      std::sort(mine.begin(), mine.end());
      EXPECT_EQ(mine, want.get<std::vector<std::int64_t>>()) << "group " << key;
      kept[ours.at(key)] = mine;
    }
    // The same cut through prune_graph's own selection, and the library's pruned model's logits.
    const PruneResult pruned = prune_graph(r.graph, {}, {.ratio = ratio, .importance = importance_from_name(imp)});
    for (const auto& [name, shape] : r.json["pruned_shapes"][imp].items()) {
      const Node* n = pruned.graph.find_node(name);
      ASSERT_NE(n, nullptr) << name;
      const at::Tensor& w = pruned.graph.params.at(n->params.at("weight"));
      const std::int64_t in = n->op == OpKind::kConv2d ? w.size(1) * n->attr_int("groups", 1) : w.size(1);
      EXPECT_EQ((std::vector<std::int64_t>{w.size(0), in}), shape.get<std::vector<std::int64_t>>()) << name;
    }
    const at::Tensor got = Engine::from_graph(pruned.graph).run({images}).front();
    const at::Tensor same_cut = Engine::from_graph(prune_channels(r.graph, groups, kept)).run({images}).front();
    EXPECT_TRUE(at::allclose(got, same_cut, 1e-5, 1e-5));
    EXPECT_TRUE(at::allclose(got, outputs.at(imp), 1e-4, 1e-4)) << "max diff " << (got - outputs.at(imp)).abs().max();
    // MACs: ours count conv and linear multiply-adds; torch-pruning's counter adds batch norms, pools and adds.
    EXPECT_NEAR(pruned.report["macs"]["after"].get<double>() / r.json["macs"][imp].get<double>(), 1.0, 0.02);
  }
  EXPECT_NEAR(graph_cost(r.graph).macs / r.json["macs"]["dense"].get<double>(), 1.0, 0.02);
}

TEST(PruneParity, ResNet18GroupsChannelsAndLogitsAreTorchPrunings) {
  const auto r = reference("resnet18", 0.5);
  expect_same_groups(*r);
  expect_same_selection(*r, 0.5);
}

TEST(PruneParity, ResNet50GroupsChannelsAndLogitsAreTorchPrunings) {
  const auto r = reference("resnet50", 0.3);
  expect_same_groups(*r);
  expect_same_selection(*r, 0.3);
}

// EfficientNet-B0: depthwise convs, squeeze-excitation and the residual streams give the same groups. The channel
// choice differs by design: torch-pruning leaves a depthwise conv's weights out of the importance (its
// GroupMagnitudeImportance matches only the dense conv pruning functions); hotpath counts them.
TEST(PruneParity, EfficientNetB0GroupsAreTorchPrunings) {
  const auto r = reference("efficientnet_b0", 0.5);
  expect_same_groups(*r);
  // torch-pruning counts the batch norms, SE multiplies and activations too: 4 % of this small network.
  EXPECT_NEAR(graph_cost(r->graph).macs / r->json["macs"]["dense"].get<double>(), 1.0, 0.05);
}

}  // namespace
}  // namespace hotpath::infer
