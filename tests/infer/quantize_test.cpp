// The INT8 quantization pass (infer/quantize.h): hand-built graphs (an MLP with a residual, a small CNN
// with a fused residual and TF-same padding) and a lowered ResNet-18, quantized on calibration batches and
// run by the engine; the per-layer error analysis (a layer whose own error is too large stays float, the
// conv observer with the lower error wins), the report, keep_float, the runner hook, and bad input.
#include "hotpath/infer/quantize.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/lower.h"
#include "hotpath/models/registry.h"
#include "infer/test_graphs.h"
#include "support/test_support.h"

namespace hotpath::infer {
namespace {

using test_graphs::add_conv;
using test_graphs::add_global_avg_pool;
using test_graphs::add_linear;
using test_graphs::cnn;
using test_graphs::mlp;

std::vector<std::vector<at::Tensor>> batches(std::vector<std::int64_t> shape, int count) {
  std::vector<std::vector<at::Tensor>> out;
  for (int i = 0; i < count; ++i) out.push_back({at::randn(shape)});
  return out;
}

const NodeQuantization& node(const QuantizeResult& r, const std::string& name) {
  for (const NodeQuantization& n : r.nodes) {
    if (n.name == name) return n;
  }
  throw Error("no node " + name);
}

double rel_norm_error(const at::Tensor& y, const at::Tensor& ref) { return (y - ref).norm().item<double>() / ref.norm().item<double>(); }

TEST(QuantizeGraph, QuantizesEveryLinearDynamicallyAndTheEngineRunsIt) {
  const Graph g = mlp();
  const auto calib = batches({16, 64}, 3);
  const QuantizeResult r = quantize_graph(g, calib, {}, engine_runner(1));
  ASSERT_EQ(r.nodes.size(), 3U);
  for (const NodeQuantization& n : r.nodes) {
    EXPECT_TRUE(n.quantized) << n.name << ": " << n.reason;
    EXPECT_EQ(n.scheme, "dynamic_int8");
    EXPECT_GT(n.error, 0.0);  // int8 is not exact...
    EXPECT_LT(n.error, 0.02);  // ...but close: ~1 % per layer
  }
  for (const Node& n : r.graph.nodes) {
    EXPECT_EQ(n.attr_str("quant", ""), "dynamic_int8");
    EXPECT_EQ(r.graph.params.at(n.params.at("weight")).scalar_type(), at::kChar);
    EXPECT_EQ(r.graph.params.at(n.params.at("weight_scale")).sizes(),
              (std::vector<std::int64_t>{r.graph.params.at(n.params.at("weight")).size(0)}));
  }
  const at::Tensor x = at::randn({8, 64});
  const at::Tensor fp32 = Engine::from_graph(g).run({x}).front();
  const at::Tensor int8 = Engine::from_graph(r.graph).run({x}).front();
  EXPECT_LT(rel_norm_error(int8, fp32), 0.03);
  ASSERT_EQ(r.output_error.size(), 1U);
  EXPECT_GT(r.output_error[0], 0.0);
  EXPECT_LT(r.output_error[0], 0.03);
  EXPECT_GE(r.top1_agreement[0], 0.8);
}

TEST(QuantizeGraph, CalibratesEveryConvAndPicksTheObserverWithTheLowerError) {
  const Graph g = cnn();
  const auto calib = batches({4, 3, 16, 16}, 3);
  const QuantizeResult r = quantize_graph(g, calib, {}, engine_runner(1));
  ASSERT_EQ(r.nodes.size(), 4U);
  for (const NodeQuantization& n : r.nodes) {
    EXPECT_TRUE(n.quantized) << n.name << ": " << n.reason;
    if (n.op != OpKind::kConv2d) continue;
    EXPECT_EQ(n.scheme, "static_int8");
    EXPECT_DOUBLE_EQ(n.error, std::min(n.error_minmax, n.error_percentile)) << n.name;
    EXPECT_EQ(n.observer, n.error_percentile < n.error_minmax ? "percentile" : "minmax");
    EXPECT_EQ(n.error_clip, -1.0);  // no clip candidates by default
    EXPECT_LT(n.error, 0.03) << n.name;
    EXPECT_GT(n.input_scale, 0.0);
    const Node* q = r.graph.find_node(n.name);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->attr_str("quant", ""), "static_int8");
    EXPECT_DOUBLE_EQ(q->attr_float("input_scale", 0.0), n.input_scale);
    EXPECT_EQ(q->attr_int("input_zero_point", -1), n.input_zero_point);
  }
  // The stem sees raw N(0, 1) pixels: a zero point in the middle; the block sees post-ReLU values: zero point 0.
  EXPECT_GT(node(r, "stem").input_zero_point, 64);
  EXPECT_EQ(node(r, "block").input_zero_point, 0);
  EXPECT_LT(r.output_error[0], 0.05);
  const at::Tensor x = at::randn({4, 3, 16, 16});
  EXPECT_LT(rel_norm_error(Engine::from_graph(r.graph).run({x}).front(), Engine::from_graph(g).run({x}).front()), 0.05);
}

// EfficientNet-Lite0's stem has edge filters: large weights that cancel on smooth images, so rounding each
// weight to nearest leaves an output error far above the weights' own. GPTQ rounds them so that the errors
// cancel too on the calibration inputs (and on other smooth inputs: measured on a held-out batch).
TEST(QuantizeGraph, GptqRoundingLowersTheConvOutputErrorOnCorrelatedInputs) {
  Graph g = cnn();
  at::manual_seed(5);
  at::Tensor w = at::randn({8, 3, 3, 3});
  g.params["stem.weight"] = w - w.mean({2, 3}, /*keepdim=*/true);  // zero-sum 3x3 filters: high-pass
  const auto smooth = [](std::int64_t n) {
    return at::upsample_bilinear2d(at::randn({n, 3, 4, 4}), {16, 16}, /*align_corners=*/false).contiguous();
  };
  std::vector<std::vector<at::Tensor>> calib;
  for (int i = 0; i < 3; ++i) calib.push_back({smooth(8)});
  const QuantizeResult nearest = quantize_graph(g, calib, {.bias_correction = false, .gptq = false}, engine_runner(1));
  const QuantizeResult gptq = quantize_graph(g, calib, {.bias_correction = false, .gptq = true}, engine_runner(1));
  EXPECT_EQ(node(nearest, "stem").weight_rounding, "nearest");
  EXPECT_EQ(node(gptq, "stem").weight_rounding, "gptq");
  EXPECT_EQ(node(gptq, "fc").weight_rounding, "nearest");  // linears: dynamic int8, rounded to nearest
  EXPECT_EQ(gptq.report["nodes"][0]["weight_rounding"], "gptq");
  EXPECT_TRUE(gptq.report["options"]["gptq"].get<bool>());
  EXPECT_LT(node(gptq, "stem").error, 0.95 * node(nearest, "stem").error)
      << "gptq " << node(gptq, "stem").error << ", nearest " << node(nearest, "stem").error;
  // Same per-channel scales (only the rounding differs), int8 values within [-127, 127].
  const Node* qn = gptq.graph.find_node("stem");
  const Node* nn = nearest.graph.find_node("stem");
  ASSERT_NE(qn, nullptr);
  ASSERT_NE(nn, nullptr);
  const at::Tensor qw = gptq.graph.params.at(qn->params.at("weight"));
  EXPECT_EQ(qw.scalar_type(), at::kChar);
  EXPECT_LE(qw.abs().max().item<int>(), 127);
  EXPECT_TRUE(at::equal(gptq.graph.params.at(qn->params.at("weight_scale")),
                        nearest.graph.params.at(nn->params.at("weight_scale"))));
  EXPECT_FALSE(at::equal(qw, nearest.graph.params.at(nn->params.at("weight"))));
  // On a held-out batch of the same kind the whole graph's output error is lower too.
  const at::Tensor x = smooth(16);
  const at::Tensor ref = Engine::from_graph(g).run({x}).front();
  const double e_gptq = rel_norm_error(Engine::from_graph(gptq.graph).run({x}).front(), ref);
  const double e_nearest = rel_norm_error(Engine::from_graph(nearest.graph).run({x}).front(), ref);
  EXPECT_LT(e_gptq, e_nearest) << "held-out output error: gptq " << e_gptq << ", nearest " << e_nearest;
}

TEST(QuantizeGraph, PercentileObserverWinsOnALargeHeavyTailedInput) {
  // Laplace-distributed pixels, 2 × 3 × 512 × 512 = 1.6 M values: min/max stretches the u8 grid to the
  // largest of them (~14); the 99.99th percentile (~9.2) clips 157 values by ~1 each and halves the grid
  // noise of all the others. (A single huge outlier goes the other way: it dominates the output's norm, and
  // clipping it costs more than any grid; small tensors have no values past the percentile at all.)
  at::manual_seed(6);
  Graph g;
  g.inputs = {{"images", at::kFloat, {-1, 3, 512, 512}, {"batch", "channels", "height", "width"}}};
  add_conv(g, "stem", "images", "c1", 3, 4, 4, {1, 1, 1, 1});
  g.outputs = {"c1"};
  const at::Tensor laplace = at::empty({2, 3, 512, 512}).exponential_() * (at::randint(0, 2, {2, 3, 512, 512}) * 2 - 1);
  const QuantizeResult r = quantize_graph(g, {{laplace}}, {}, engine_runner(1));
  const NodeQuantization& stem = node(r, "stem");
  EXPECT_EQ(stem.observer, "percentile");
  EXPECT_LT(stem.error_percentile, stem.error_minmax);
  EXPECT_LT(stem.range_max, 0.8 * laplace.max().item<double>());
  EXPECT_DOUBLE_EQ(r.report["nodes"][0]["range"][1].get<double>(), stem.range_max);
  EXPECT_EQ(r.report["nodes"][0]["observer"], "percentile");
  // The small CNN's 3 k-value inputs have nothing past the 99.99th percentile: both observers agree.
  const QuantizeResult small = quantize_graph(cnn(), batches({4, 3, 16, 16}, 1), {}, engine_runner(1));
  EXPECT_EQ(node(small, "stem").observer, "minmax");
  EXPECT_DOUBLE_EQ(node(small, "stem").error_percentile, node(small, "stem").error_minmax);
}

TEST(QuantizeGraph, ClippedRangeWinsWhereMinMaxIsStretchedByValuesTheConvIgnores) {
  // One input channel spans ±50 but the conv's weights ignore it (a relu6 tensor whose channels differ
  // 10× in range is the real case): min/max stretches the u8 grid over it, and so does the percentile
  // (a third of the values lie out there). Clipping it costs the output nothing and shrinks the grid step
  // for the channels that matter, so the smallest clip candidate (0.85^8 ≈ 0.27 of min/max, still ±13.6,
  // wider than the N(0, 1) channels) gives the least output error.
  at::manual_seed(12);
  Graph g;
  g.inputs = {{"images", at::kFloat, {-1, 3, 16, 16}, {"batch", "channels", "height", "width"}}};
  add_conv(g, "stem", "images", "c1", 3, 8, 1, {1, 1, 1, 1});
  g.outputs = {"c1"};
  g.params.at("stem.weight").select(1, 0).zero_();
  at::Tensor x = at::randn({4, 3, 16, 16});
  x.select(1, 0).uniform_(-50.0, 50.0);
  const QuantizeResult r = quantize_graph(g, {{x}}, {.clip_candidates = 8}, engine_runner(1));
  const NodeQuantization& stem = node(r, "stem");
  EXPECT_EQ(stem.observer, "clip");
  EXPECT_NEAR(stem.clip_fraction, std::pow(0.85, 8), 1e-12);
  EXPECT_DOUBLE_EQ(stem.error, stem.error_clip);
  EXPECT_LT(stem.error_clip, 0.5 * std::min(stem.error_minmax, stem.error_percentile));
  EXPECT_NEAR(stem.range_max, std::pow(0.85, 8) * x.max().item<double>(), 1e-4);
  const auto& j = r.report["nodes"][0];
  EXPECT_EQ(j["observer"], "clip");
  EXPECT_DOUBLE_EQ(j["errors"]["clip"].get<double>(), stem.error_clip);
  EXPECT_DOUBLE_EQ(j["clip_fraction"].get<double>(), stem.clip_fraction);
  EXPECT_EQ(r.report["options"]["clip_candidates"], 8);
  // The engine runs the clipped conv with the error the report gives.
  const at::Tensor ref = Engine::from_graph(g).run({x}).front();
  EXPECT_NEAR(rel_norm_error(Engine::from_graph(r.graph).run({x}).front(), ref), stem.error, 0.2 * stem.error);
  // Without candidates (the default): min/max or the percentile, no clip error.
  const QuantizeResult plain = quantize_graph(g, {{x}}, {}, engine_runner(1));
  EXPECT_NE(node(plain, "stem").observer, "clip");
  EXPECT_EQ(node(plain, "stem").error_clip, -1.0);
  EXPECT_TRUE(plain.report["nodes"][0]["errors"]["clip"].is_null());
  EXPECT_GT(node(plain, "stem").error, 2.0 * stem.error);
}

TEST(QuantizeGraph, LayerWhoseOwnErrorIsTooLargeStaysFloatAndIsReported) {
  Graph g = mlp();
  auto calib = batches({16, 64}, 2);
  // One huge feature per row that fc1 ignores (BERT has such outlier dimensions): per-row int8 scales by it
  // and rounds every other feature of fc1's input to 0, so fc1's output is lost.
  for (auto& b : calib) b[0].select(1, 0).fill_(1000.0);
  g.params.at("fc1.weight").select(1, 0).zero_();
  const QuantizeResult r = quantize_graph(g, calib, {.max_node_error = 0.05}, engine_runner(1));
  const NodeQuantization& fc1 = node(r, "fc1");
  EXPECT_FALSE(fc1.quantized);
  EXPECT_GT(fc1.error, 0.05);
  EXPECT_NE(fc1.reason.find("max_node_error 0.05"), std::string::npos) << fc1.reason;
  EXPECT_EQ(r.graph.find_node("fc1")->attr_str("quant", ""), "");
  EXPECT_EQ(r.graph.params.at("fc1.weight").scalar_type(), at::kFloat);
  EXPECT_TRUE(node(r, "head").quantized);
  // The report says the same.
  const auto& j = r.report;
  EXPECT_EQ(j["format"], "hotpath-quantization-report");
  EXPECT_EQ(j["totals"]["candidates"], 3);
  EXPECT_EQ(j["totals"]["kept_float"].get<int>(), 3 - j["totals"]["quantized"].get<int>());
  EXPECT_EQ(j["nodes"][0]["name"], "fc1");
  EXPECT_EQ(j["nodes"][0]["quantized"], false);
  EXPECT_EQ(j["nodes"][0]["reason"], fc1.reason);
  EXPECT_EQ(j["totals"]["by_op"]["linear"]["kept_float"].get<int>(), j["totals"]["kept_float"].get<int>());
  EXPECT_EQ(j["totals"]["outputs"][0]["name"], "logits");
  EXPECT_TRUE(j["totals"]["outputs"][0].contains("top1_agreement"));
}

TEST(QuantizeGraph, KeepFloatAndSchemeSwitchesAreHonoured) {
  const Graph g = cnn();
  const auto calib = batches({2, 3, 16, 16}, 1);
  const QuantizeResult r = quantize_graph(g, calib, {.linear = false, .keep_float = {"stem"}}, engine_runner(1));
  EXPECT_FALSE(node(r, "stem").quantized);
  EXPECT_EQ(node(r, "stem").reason, "kept float by keep_float");
  EXPECT_TRUE(node(r, "block").quantized);
  EXPECT_THROW((void)node(r, "fc"), Error);  // linear switched off: not even a candidate
  EXPECT_EQ(r.graph.find_node("fc")->attr_str("quant", ""), "");
}

TEST(QuantizeGraph, RunsTheGraphThroughTheGivenRunner) {
  int prepared = 0;
  int batches_run = 0;
  const GraphRunner engine = engine_runner(1);
  const GraphRunner counting = [&](const Graph& graph) -> BatchRunner {
    ++prepared;
    BatchRunner run = engine(graph);
    return [&batches_run, run](const std::vector<at::Tensor>& inputs) {
      ++batches_run;
      return run(inputs);
    };
  };
  (void)quantize_graph(cnn(), batches({2, 3, 16, 16}, 2), {}, counting);
  EXPECT_EQ(prepared, 4);  // ranges, conv errors, then fp32 and the quantized graph side by side
  EXPECT_EQ(batches_run, 8);
  prepared = batches_run = 0;
  (void)quantize_graph(mlp(), batches({2, 64}, 2), {}, counting);
  EXPECT_EQ(prepared, 3);  // no conv: no second observation pass
}

// images [B, 3, 16, 16] → `depth` 3×3 convs (8 channels, relu, the odd ones with a residual) → pool → fc.
Graph deep_cnn(int depth) {
  at::manual_seed(9);
  Graph g;
  g.inputs = {{"images", at::kFloat, {-1, 3, 16, 16}, {"batch", "channels", "height", "width"}}};
  // prefix + number without `"c" + std::to_string(i)`, on which GCC 12 warns falsely (-Wstringop-overflow).
  const auto named = [](std::string prefix, int i) { return prefix.append(std::to_string(i)); };
  add_conv(g, "conv0", "images", "c0", 3, 8, 1, {1, 1, 1, 1});
  for (int i = 1; i < depth; ++i) {
    const std::string in = named("c", i - 1);
    add_conv(g, named("conv", i), in, named("c", i), 8, 8, 1, {1, 1, 1, 1}, i % 2 == 1 ? in : "");
  }
  add_global_avg_pool(g, named("c", depth - 1), "p");
  add_linear(g, "fc", "p", "logits", 8, 10, "none");
  g.outputs = {"logits"};
  return g;
}

TEST(QuantizeGraph, TheMostSensitiveNodesStayFloatUntilTheOutputMeetsItsTarget) {
  const Graph g = deep_cnn(12);
  const auto calib = batches({4, 3, 16, 16}, 2);
  // Without a target every node passes its own gate; the errors add up along the chain.
  const QuantizeResult all = quantize_graph(g, calib, {.max_node_error = 0.5}, engine_runner(1));
  for (const NodeQuantization& n : all.nodes) EXPECT_TRUE(n.quantized) << n.name << ": " << n.reason;
  const double target = 0.5 * all.output_error[0];
  ASSERT_GT(target, 0.0);
  const NodeQuantization& last = node(all, "conv11");
  EXPECT_GT(last.cumulative_error, last.error);  // upstream error included
  EXPECT_DOUBLE_EQ(all.report["nodes"][11]["cumulative_error"].get<double>(), last.cumulative_error);

  const QuantizeResult r = quantize_graph(g, calib, {.max_node_error = 0.5, .max_output_error = target}, engine_runner(1));
  EXPECT_LE(r.output_error[0], target);
  int kept = 0;
  for (const NodeQuantization& n : r.nodes) {
    if (n.quantized) continue;
    ++kept;
    EXPECT_NE(n.reason.find("sensitivity"), std::string::npos) << n.reason;
    EXPECT_EQ(r.graph.find_node(n.name)->attr_str("quant", ""), "");
  }
  EXPECT_GE(kept, 1);
  EXPECT_LT(kept, static_cast<int>(r.nodes.size()));  // not everything: only what it takes
  const auto& passes = r.report["fallback"]["passes"];
  ASSERT_GE(passes.size(), 2U);
  EXPECT_FALSE(passes[0]["kept_float"].empty());
  EXPECT_DOUBLE_EQ(passes.back()["outputs"][0]["relative_error"].get<double>(), r.output_error[0]);
  EXPECT_EQ(r.report["totals"]["kept_float"].get<int>(), kept);
  // The ranking: every node measured (all passed their own gate), most sensitive first; the nodes kept float
  // are the head of it. Without a target nothing is measured.
  EXPECT_EQ(r.report["version"].get<int>(), 4);
  EXPECT_EQ(r.report["fallback"]["method"], "sensitivity");
  const auto& ranking = r.report["fallback"]["ranking"];
  ASSERT_EQ(ranking.size(), r.nodes.size());
  for (std::size_t i = 1; i < ranking.size(); ++i) {
    EXPECT_GE(ranking[i - 1]["sensitivity"].get<double>(), ranking[i]["sensitivity"].get<double>());
  }
  for (int i = 0; i < kept; ++i) {
    const NodeQuantization& n = node(r, ranking[static_cast<std::size_t>(i)]["name"].get<std::string>());
    EXPECT_FALSE(n.quantized) << n.name;
    EXPECT_GT(n.sensitivity, 0.0) << n.name;
  }
  EXPECT_TRUE(all.report["nodes"][0]["sensitivity"].is_null());
  EXPECT_TRUE(all.report["fallback"]["ranking"].empty());
  // The engine agrees with the reported error on the calibration data.
  at::Tensor err2 = at::zeros({}, at::kDouble), ref2 = at::zeros({}, at::kDouble);
  const Engine e32 = Engine::from_graph(g), e8 = Engine::from_graph(r.graph);
  for (const auto& b : calib) {
    const at::Tensor y = e32.run(b).front(), yq = e8.run(b).front();
    err2 += (yq - y).to(at::kDouble).pow(2).sum();
    ref2 += y.to(at::kDouble).pow(2).sum();
  }
  EXPECT_NEAR(std::sqrt((err2 / ref2).item<double>()), r.output_error[0], 1e-4);
  // No more passes than allowed: with none, nothing is kept float by the target.
  const QuantizeResult capped =
      quantize_graph(g, calib, {.max_node_error = 0.5, .max_output_error = target, .max_fallback_passes = 0},
                     engine_runner(1));
  for (const NodeQuantization& n : capped.nodes) EXPECT_TRUE(n.quantized) << n.name;
}

TEST(QuantizeGraph, BiasCorrectionRemovesTheMeanShiftOfEachChannel) {
  // Inputs far from 0 on one side (u8 steps of ~0.1) and weights with one large tap per channel: rounding
  // shifts each output channel's mean; the corrected bias takes the shift out on the calibration data.
  at::manual_seed(11);
  Graph g;
  g.inputs = {{"images", at::kFloat, {-1, 8, 12, 12}, {"batch", "channels", "height", "width"}}};
  add_conv(g, "conv", "images", "y", 8, 8, 1, {1, 1, 1, 1});
  g.nodes[0].attrs["act"] = std::string("none");
  g.params["conv.weight"].select(3, 0).select(2, 0).mul_(20.0);
  g.outputs = {"y"};
  std::vector<std::vector<at::Tensor>> calib;
  for (int i = 0; i < 3; ++i) calib.push_back({at::rand({4, 8, 12, 12}) * 25.0 + at::rand({1, 8, 1, 1}) * 3.0});
  const auto mean_shift = [&](const Graph& q) {
    const Engine e32 = Engine::from_graph(g), e8 = Engine::from_graph(q);
    at::Tensor shift = at::zeros({8}, at::kDouble);
    for (const auto& b : calib) shift += (e8.run(b).front() - e32.run(b).front()).to(at::kDouble).mean({0, 2, 3});
    return (shift / static_cast<double>(calib.size())).abs().max().item<double>();
  };
  // The node stays int8 at every ISA: without VNNI its weights have 7 bits (int8_conv.h), and the large taps
  // put its error alone past the default max_node_error, which would keep it float (nothing to correct).
  const QuantizeResult plain =
      quantize_graph(g, calib, {.max_node_error = 0.5, .bias_correction = false}, engine_runner(1));
  const QuantizeResult corrected =
      quantize_graph(g, calib, {.max_node_error = 0.5, .bias_correction = true}, engine_runner(1));
  EXPECT_TRUE(node(plain, "conv").quantized);
  EXPECT_TRUE(node(corrected, "conv").quantized);
  EXPECT_EQ(node(plain, "conv").bias_correction, 0.0);
  EXPECT_GT(node(corrected, "conv").bias_correction, 0.0);
  EXPECT_GT(mean_shift(plain.graph), 1e-3);
  EXPECT_LT(mean_shift(corrected.graph), 0.25 * mean_shift(plain.graph));
  EXPECT_LE(corrected.output_error[0], plain.output_error[0]);
  // The corrected bias is the node's own parameter; the float one is gone (no other user).
  const Node* conv = corrected.graph.find_node("conv");
  EXPECT_EQ(conv->params.at("bias"), "conv.bias_corrected");
  EXPECT_EQ(corrected.graph.params.count("conv.bias"), 0U);
  EXPECT_DOUBLE_EQ(corrected.report["nodes"][0]["bias_correction"].get<double>(), node(corrected, "conv").bias_correction);
}

TEST(QuantizeGraph, SentenceEmbeddingOutputsReportCosineNotTop1) {
  Graph g = mlp();
  Node norm;
  norm.op = OpKind::kL2Normalize;
  norm.name = "normalize";
  norm.inputs = {"logits"};
  norm.output = "embedding";
  g.nodes.push_back(norm);
  g.outputs = {"embedding"};
  const QuantizeResult r = quantize_graph(g, batches({16, 64}, 2), {}, engine_runner(1));
  EXPECT_EQ(r.top1_agreement[0], -1.0);
  EXPECT_GT(r.min_cosine[0], 0.99);
  EXPECT_LE(r.min_cosine[0], 1.0);
  const auto& out = r.report["totals"]["outputs"][0];
  EXPECT_EQ(out["kind"], "embedding");
  EXPECT_FALSE(out.contains("top1_agreement"));
  EXPECT_DOUBLE_EQ(out["min_cosine"].get<double>(), r.min_cosine[0]);
  EXPECT_LE(out["min_cosine"].get<double>(), out["mean_cosine"].get<double>());
  // A cosine target the graph misses keeps linears float (reported by sensitivity).
  const QuantizeResult strict = quantize_graph(g, batches({16, 64}, 2), {.min_output_cosine = 1.0}, engine_runner(1));
  EXPECT_LT(strict.report["totals"]["quantized"].get<int>(), 3);
  // Class logits keep top-1 agreement.
  const QuantizeResult logits = quantize_graph(mlp(), batches({16, 64}, 2), {}, engine_runner(1));
  EXPECT_EQ(logits.report["totals"]["outputs"][0]["kind"], "logits");
  EXPECT_GE(logits.top1_agreement[0], 0.0);
  EXPECT_EQ(logits.min_cosine[0], -1.0);
}

TEST(QuantizeGraph, QuantizesALoweredResNet) {
  at::manual_seed(5);
  auto model = models::create_model("resnet18_small", {.num_classes = 10, .in_channels = 3});
  model->eval();
  const Graph g = lower_image_model(*model, {.channels = 3, .image_size = 32});
  const QuantizeResult r = quantize_graph(g, batches({4, 3, 32, 32}, 2), {}, engine_runner(1));
  int convs = 0;
  for (const NodeQuantization& n : r.nodes) {
    convs += n.op == OpKind::kConv2d ? 1 : 0;
    EXPECT_TRUE(n.quantized) << n.name << ": " << n.reason;
  }
  EXPECT_GE(convs, 17);
  EXPECT_LT(r.output_error[0], 0.1);
}

using test::error_of;

TEST(QuantizeGraph, RefusesBadInputNamingIt) {
  const Graph g = mlp();
  const auto has = [](const std::string& what, const char* part) { return what.find(part) != std::string::npos; };
  EXPECT_TRUE(has(error_of([&] { (void)quantize_graph(g, {}); }), "no calibration batches"));
  EXPECT_TRUE(has(error_of([&] { (void)quantize_graph(g, batches({2, 64}, 1), {.keep_float = {"fc9"}}); }),
                  "keep_float names 'fc9'"));
  EXPECT_TRUE(has(error_of([&] { (void)quantize_graph(g, batches({2, 65}, 1)); }), "calibration batch 0"));
  const QuantizeResult r = quantize_graph(g, batches({2, 64}, 1));
  EXPECT_TRUE(has(error_of([&] { (void)quantize_graph(r.graph, batches({2, 64}, 1)); }), "already quantized"));
  EXPECT_TRUE(has(error_of([&] { (void)quantize_graph(g, batches({2, 64}, 1), {.percentile = 40.0}); }), "percentile"));
  EXPECT_TRUE(has(error_of([&] { (void)quantize_graph(g, batches({2, 64}, 1), {.clip_candidates = -1}); }), "clip_candidates"));
  EXPECT_TRUE(has(error_of([&] { (void)quantize_graph(g, batches({2, 64}, 1), {.max_output_error = -1.0}); }),
                  "max_output_error"));
  EXPECT_TRUE(has(error_of([&] { (void)quantize_graph(g, batches({2, 64}, 1), {.max_fallback_passes = -1}); }),
                  "max_fallback_passes"));
}

}  // namespace
}  // namespace hotpath::infer
