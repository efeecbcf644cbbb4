// Small hand-built graphs for the quantizer and QAT tests: an MLP with a residual and a CNN with a fused residual and
// TF-same padding, each with seeded random weights.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/infer/graph.h"

namespace hotpath::infer::test_graphs {

inline void add_linear(Graph& g, const std::string& name, const std::string& in, const std::string& out, std::int64_t i,
                       std::int64_t o, const std::string& act, const std::string& residual = "") {
  Node n;
  n.op = OpKind::kLinear;
  n.name = name;
  n.inputs = residual.empty() ? std::vector<std::string>{in} : std::vector<std::string>{in, residual};
  n.output = out;
  n.params = {{"weight", name + ".weight"}, {"bias", name + ".bias"}};
  n.attrs["act"] = act;
  g.params[name + ".weight"] = at::randn({o, i}) / std::sqrt(static_cast<double>(i));
  g.params[name + ".bias"] = at::randn({o}) * 0.1;
  g.nodes.push_back(std::move(n));
}

inline void add_conv(Graph& g, const std::string& name, const std::string& in, const std::string& out, std::int64_t i,
                     std::int64_t o, std::int64_t stride, std::vector<std::int64_t> padding,
                     const std::string& residual = "") {
  Node n;
  n.op = OpKind::kConv2d;
  n.name = name;
  n.inputs = residual.empty() ? std::vector<std::string>{in} : std::vector<std::string>{in, residual};
  n.output = out;
  n.params = {{"weight", name + ".weight"}, {"bias", name + ".bias"}};
  n.attrs = {{"stride", std::vector<std::int64_t>{stride, stride}},
             {"padding", std::move(padding)},
             {"dilation", std::vector<std::int64_t>{1, 1}},
             {"groups", std::int64_t{1}},
             {"act", std::string("relu")}};
  g.params[name + ".weight"] = at::randn({o, i, 3, 3}) / std::sqrt(9.0 * static_cast<double>(i));
  g.params[name + ".bias"] = at::randn({o}) * 0.1;
  g.nodes.push_back(std::move(n));
}

// A global_avg_pool node "pool": in [N, C, H, W] → out [N, C].
inline void add_global_avg_pool(Graph& g, const std::string& in, const std::string& out) {
  Node pool;
  pool.op = OpKind::kGlobalAvgPool;
  pool.name = "pool";
  pool.inputs = {in};
  pool.output = out;
  pool.attrs["keepdims"] = std::int64_t{0};
  g.nodes.push_back(std::move(pool));
}

// x [B, 64] → fc1 (gelu) → fc2 (+ x) → head [B, 10].
inline Graph mlp() {
  at::manual_seed(3);
  Graph g;
  g.inputs = {{"x", at::kFloat, {-1, 64}, {"batch", "features"}}};
  add_linear(g, "fc1", "x", "h1", 64, 128, "gelu");
  add_linear(g, "fc2", "h1", "h2", 128, 64, "none", "x");
  add_linear(g, "head", "h2", "logits", 64, 10, "none");
  g.outputs = {"logits"};
  return g;
}

// images [B, 3, 16, 16] → stem (relu) → block (+ stem, relu) → down (stride 2, TF-same padding) → pool → fc.
inline Graph cnn() {
  at::manual_seed(4);
  Graph g;
  g.inputs = {{"images", at::kFloat, {-1, 3, 16, 16}, {"batch", "channels", "height", "width"}}};
  add_conv(g, "stem", "images", "c1", 3, 8, 1, {1, 1, 1, 1});
  add_conv(g, "block", "c1", "c2", 8, 8, 1, {1, 1, 1, 1}, "c1");
  add_conv(g, "down", "c2", "c3", 8, 16, 2, {0, 0, 1, 1});
  add_global_avg_pool(g, "c3", "p");
  add_linear(g, "fc", "p", "logits", 16, 10, "none");
  g.outputs = {"logits"};
  return g;
}

}  // namespace hotpath::infer::test_graphs
