#include "hotpath/infer/quantize.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/ops/int8_conv.h"
#include "hotpath/ops/int8_linear.h"

// quantization_report.json:
//   {"format": "hotpath-quantization-report", "version": 1,
//    "options": {"linear", "conv", "max_node_error", "percentile", "keep_float", "calibration_batches"},
//    "nodes": [{"name", "op", "scheme", "quantized", "error", "reason"?,                 (every candidate)
//               conv2d: "observer", "errors": {"minmax", "percentile"}, "range": [lo, hi],
//                       "input_scale", "input_zero_point"}],
//    "totals": {"candidates", "quantized", "kept_float",
//               "by_op": {"linear": {"quantized", "kept_float"}, "conv2d": {...}},
//               "outputs": [{"name", "relative_error", "top1_agreement"?}]}}
namespace hotpath::infer {
namespace {

// One node to quantize, with what the passes gather for it.
struct Candidate {
  std::size_t index = 0;  // into graph.nodes
  bool conv = false;
  // Observed (conv only): global min/max and the per-batch percentile clips, summed.
  double min = 0.0, max = 0.0;
  double clip_lo_sum = 0.0, clip_hi_sum = 0.0;
  bool seen = false;
  // The quantized weight, and per scheme/observer the error sums ‖y_q − y‖², with ‖y‖².
  at::Tensor w8, w_scale;
  std::optional<ops::Int8Linear> linear;
  std::optional<ops::Int8Conv2d> conv_minmax, conv_percentile;
  double err2_minmax = 0.0, err2_percentile = 0.0, ref2 = 0.0;
};

// The fp32 graph with every candidate's inputs and output added to its outputs; where each value lands.
struct ObservedGraph {
  Graph graph;
  std::map<std::string, std::size_t> slot;
};

ObservedGraph observe(const Graph& fp32, const std::vector<Candidate>& candidates) {
  ObservedGraph o{fp32, {}};
  for (std::size_t i = 0; i < o.graph.outputs.size(); ++i) o.slot.emplace(o.graph.outputs[i], i);
  const auto add = [&](const std::string& value) {
    if (value.empty() || o.slot.count(value) != 0) return;
    o.slot.emplace(value, o.graph.outputs.size());
    o.graph.outputs.push_back(value);
  };
  for (const Candidate& c : candidates) {
    const Node& n = fp32.nodes[c.index];
    add(n.input(0));
    add(n.input(1));
    add(n.output);
  }
  return o;
}

const at::Tensor& param(const Graph& g, const Node& n, const std::string& role) {
  static const at::Tensor kNone;
  auto it = n.params.find(role);
  if (it == n.params.end()) return kNone;
  return g.params.at(it->second);
}

ops::Int8ConvGeometry geometry_of(const Node& n) {
  ops::Int8ConvGeometry g;
  g.stride = n.attr_ints("stride", {1, 1});
  g.padding = n.attr_ints("padding", {0, 0, 0, 0});
  g.dilation = n.attr_ints("dilation", {1, 1});
  g.groups = n.attr_int("groups", 1);
  return g;
}

// The percentile clips of one batch's values: the (100 − p)th and pth percentiles of up to 2^21 of them.
std::pair<double, double> percentile_clips(const at::Tensor& x, double p) {
  at::Tensor flat = x.reshape(-1).to(at::kFloat);
  constexpr std::int64_t kMaxSample = std::int64_t{1} << 21;
  if (flat.numel() > kMaxSample) flat = flat.slice(0, 0, flat.numel(), (flat.numel() + kMaxSample - 1) / kMaxSample);
  const std::int64_t n = flat.numel();
  const auto rank = [n](double q) {
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::llround(q / 100.0 * static_cast<double>(n))), 1, n);
  };
  const double lo = std::get<0>(at::kthvalue(flat, rank(100.0 - p))).item<double>();
  const double hi = std::get<0>(at::kthvalue(flat, rank(p))).item<double>();
  return {lo, hi};
}

double sq_norm(const at::Tensor& t) {
  const double n = t.to(at::kDouble).norm().item<double>();
  return n * n;
}

double relative(double err2, double ref2) { return ref2 > 0.0 ? std::sqrt(err2 / ref2) : (err2 > 0.0 ? INFINITY : 0.0); }

void run_all(const GraphRunner& runner, const Graph& g,
                                             const std::vector<std::vector<at::Tensor>>& batches, const char* what,
                                             const std::function<void(std::size_t, const std::vector<at::Tensor>&)>& each) {
  const BatchRunner run = runner(g);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::vector<at::Tensor> out;
    try {
      out = run(batches[b]);
    } catch (const Error& e) {
      throw e.with_context(std::string("quantize_graph: ") + what + ", calibration batch " + std::to_string(b));
    }
    HOTPATH_CHECK(out.size() == g.outputs.size(), "quantize_graph: the runner returned ", out.size(),
                  " outputs for calibration batch ", b, ", expected ", g.outputs.size());
    each(b, out);
  }
}

}  // namespace

GraphRunner engine_runner(int threads) {
  return [threads](const Graph& graph) -> BatchRunner {
    auto engine = std::make_shared<Engine>(Engine::from_graph(graph, {.threads = threads}));
    return [engine](const std::vector<at::Tensor>& inputs) { return engine->run(inputs); };
  };
}

QuantizeResult quantize_graph(const Graph& fp32, const std::vector<std::vector<at::Tensor>>& calibration,
                              const QuantizeOptions& options, const GraphRunner& runner_in) {
  HOTPATH_CHECK(!calibration.empty(), "quantize_graph: no calibration batches (the error analysis needs data)");
  HOTPATH_CHECK(options.max_node_error > 0.0, "quantize_graph: max_node_error must be > 0; got ", options.max_node_error);
  HOTPATH_CHECK(options.percentile > 50.0 && options.percentile < 100.0,
                "quantize_graph: percentile must be in (50, 100); got ", options.percentile);
  fp32.validate();
  for (const std::string& name : options.keep_float) {
    const Node* n = fp32.find_node(name);
    HOTPATH_CHECK(n != nullptr && (n->op == "linear" || n->op == "conv2d"), "quantize_graph: keep_float names '", name,
                  "', which is no linear or conv2d node of the graph");
  }
  const GraphRunner runner = runner_in ? runner_in : engine_runner();
  const std::set<std::string> keep(options.keep_float.begin(), options.keep_float.end());

  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < fp32.nodes.size(); ++i) {
    const Node& n = fp32.nodes[i];
    HOTPATH_CHECK(n.attr_str("quant", "").empty(), "quantize_graph: node ", n.name, " is already quantized (",
                  n.attr_str("quant", ""), ")");
    const bool linear = n.op == "linear" && options.linear;
    const bool conv = n.op == "conv2d" && options.conv;
    if (!linear && !conv) continue;
    Candidate c;
    c.index = i;
    c.conv = conv;
    candidates.push_back(std::move(c));
  }

  // Weights first: quantized once, the same tensors the rewritten graph stores.
  for (Candidate& c : candidates) {
    const Node& n = fp32.nodes[c.index];
    const at::Tensor& w = param(fp32, n, "weight");
    std::tie(c.w8, c.w_scale) = c.conv ? ops::Int8Conv2d::quantize_weight(w) : ops::Int8Linear::quantize_weight(w);
    if (!c.conv) c.linear = ops::Int8Linear::prepare(c.w8, c.w_scale, param(fp32, n, "bias"));
  }

  const ObservedGraph observed = observe(fp32, candidates);
  const auto value = [&](const std::vector<at::Tensor>& out, const std::string& name) -> at::Tensor {
    if (name.empty()) return {};
    return out[observed.slot.at(name)];
  };
  std::vector<std::vector<at::Tensor>> fp32_outputs(calibration.size());
  const bool any_conv = std::any_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.conv; });

  // Pass 1: conv input ranges (min/max and percentile clips); linear errors (no calibration needed); the fp32
  // graph outputs for the final comparison.
  run_all(runner, observed.graph, calibration, "observing ranges", [&](std::size_t b, const std::vector<at::Tensor>& out) {
    for (std::size_t i = 0; i < fp32.outputs.size(); ++i) fp32_outputs[b].push_back(out[i]);
    for (Candidate& c : candidates) {
      const Node& n = fp32.nodes[c.index];
      const at::Tensor x = value(out, n.input(0));
      if (c.conv) {
        const double lo = x.min().item<double>();
        const double hi = x.max().item<double>();
        c.min = c.seen ? std::min(c.min, lo) : lo;
        c.max = c.seen ? std::max(c.max, hi) : hi;
        c.seen = true;
        const auto [clip_lo, clip_hi] = percentile_clips(x, options.percentile);
        c.clip_lo_sum += clip_lo;
        c.clip_hi_sum += clip_hi;
      } else {
        const at::Tensor y = value(out, n.output);
        const at::Tensor yq = c.linear->forward(x, n.attr_str("act", "none"), value(out, n.input(1)));
        c.err2_minmax += sq_norm(yq - y);
        c.ref2 += sq_norm(y);
      }
    }
  });

  // Pass 2 (convs): each observer's parameters, each node alone quantized on its recorded fp32 inputs.
  const double batches = static_cast<double>(calibration.size());
  for (Candidate& c : candidates) {
    if (!c.conv) continue;
    const Node& n = fp32.nodes[c.index];
    const at::Tensor& bias = param(fp32, n, "bias");
    c.conv_minmax = ops::Int8Conv2d::prepare(c.w8, c.w_scale, bias, ops::int8_affine_u8_params(c.min, c.max), geometry_of(n));
    c.conv_percentile = ops::Int8Conv2d::prepare(
        c.w8, c.w_scale, bias, ops::int8_affine_u8_params(c.clip_lo_sum / batches, c.clip_hi_sum / batches),
        geometry_of(n));
  }
  if (any_conv) {
    run_all(runner, observed.graph, calibration, "measuring conv errors", [&](std::size_t, const std::vector<at::Tensor>& out) {
      for (Candidate& c : candidates) {
        if (!c.conv) continue;
        const Node& n = fp32.nodes[c.index];
        const at::Tensor x = value(out, n.input(0));
        const at::Tensor r = value(out, n.input(1));
        const at::Tensor y = value(out, n.output);
        const std::string act = n.attr_str("act", "none");
        c.err2_minmax += sq_norm(c.conv_minmax->forward(x, act, r) - y);
        c.err2_percentile += sq_norm(c.conv_percentile->forward(x, act, r) - y);
        c.ref2 += sq_norm(y);
      }
    });
  }

  // Decide and rewrite.
  QuantizeResult result;
  result.graph = fp32;
  Graph& q = result.graph;
  std::map<std::string, int> weight_users;
  for (const Node& n : fp32.nodes) {
    for (const auto& [role, key] : n.params) ++weight_users[key];
  }
  for (Candidate& c : candidates) {
    const Node& src = fp32.nodes[c.index];
    NodeQuantization nq;
    nq.name = src.name;
    nq.op = src.op;
    nq.scheme = c.conv ? "static_int8" : "dynamic_int8";
    nq.error_minmax = relative(c.err2_minmax, c.ref2);
    nq.error = nq.error_minmax;
    ops::Int8InputQuant input;
    if (c.conv) {
      nq.error_percentile = relative(c.err2_percentile, c.ref2);
      const bool percentile = nq.error_percentile < nq.error_minmax;
      nq.observer = percentile ? "percentile" : "minmax";
      nq.error = percentile ? nq.error_percentile : nq.error_minmax;
      nq.range_min = percentile ? c.clip_lo_sum / batches : c.min;
      nq.range_max = percentile ? c.clip_hi_sum / batches : c.max;
      input = (percentile ? c.conv_percentile : c.conv_minmax)->input_quant();
      nq.input_scale = input.scale;
      nq.input_zero_point = input.zero_point;
    }
    if (keep.count(src.name) != 0) {
      nq.reason = "kept float by keep_float";
    } else if (!(nq.error <= options.max_node_error)) {
      std::ostringstream why;
      why << "error " << nq.error << " > max_node_error " << options.max_node_error;
      nq.reason = why.str();
    } else {
      nq.quantized = true;
      Node& n = q.nodes[c.index];
      const std::string key = n.params.at("weight");
      const std::string w_key = weight_users[key] > 1 ? key + ".int8" : key;
      q.params[w_key] = c.w8;
      n.params["weight"] = w_key;
      std::string s_key = w_key + "_scale";
      while (q.params.count(s_key) != 0) s_key += "_";
      q.params[s_key] = c.w_scale;
      n.params["weight_scale"] = s_key;
      n.attrs["quant"] = nq.scheme;
      if (c.conv) {
        n.attrs["input_scale"] = input.scale;
        n.attrs["input_zero_point"] = input.zero_point;
      }
    }
    result.nodes.push_back(std::move(nq));
  }
  // A shared float weight that no node uses any more goes (validate() refuses unused params).
  std::set<std::string> used;
  for (const Node& n : q.nodes) {
    for (const auto& [role, key] : n.params) used.insert(key);
  }
  for (auto it = q.params.begin(); it != q.params.end();) it = used.count(it->first) != 0 ? std::next(it) : q.params.erase(it);
  q.validate();

  // The whole quantized graph against fp32 on the same batches.
  const std::size_t outputs = fp32.outputs.size();
  std::vector<double> err2(outputs, 0.0), ref2(outputs, 0.0), agree(outputs, 0.0), rows(outputs, 0.0);
  run_all(runner, q, calibration, "running the quantized graph", [&](std::size_t b, const std::vector<at::Tensor>& out) {
    for (std::size_t i = 0; i < outputs; ++i) {
      const at::Tensor yq = out[i].to(at::kFloat);
      const at::Tensor y = fp32_outputs[b][i].to(at::kFloat);
      err2[i] += sq_norm(yq - y);
      ref2[i] += sq_norm(y);
      if (y.dim() == 2 && y.size(0) > 0) {
        agree[i] += (yq.argmax(1) == y.argmax(1)).sum().item<double>();
        rows[i] += static_cast<double>(y.size(0));
      }
    }
  });
  for (std::size_t i = 0; i < outputs; ++i) {
    result.output_error.push_back(relative(err2[i], ref2[i]));
    result.top1_agreement.push_back(rows[i] > 0.0 ? agree[i] / rows[i] : -1.0);
  }

  // The report.
  nlohmann::ordered_json& j = result.report;
  j["format"] = "hotpath-quantization-report";
  j["version"] = 1;
  j["options"] = {{"linear", options.linear},
                  {"conv", options.conv},
                  {"max_node_error", options.max_node_error},
                  {"percentile", options.percentile},
                  {"keep_float", options.keep_float},
                  {"calibration_batches", calibration.size()}};
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  std::map<std::string, std::pair<int, int>> by_op;  // op → (quantized, kept float)
  int quantized = 0;
  for (const NodeQuantization& nq : result.nodes) {
    nlohmann::ordered_json e = {{"name", nq.name}, {"op", nq.op}, {"scheme", nq.scheme}, {"quantized", nq.quantized},
                                {"error", nq.error}};
    if (!nq.quantized) e["reason"] = nq.reason;
    if (nq.op == "conv2d") {
      e["observer"] = nq.observer;
      e["errors"] = {{"minmax", nq.error_minmax}, {"percentile", nq.error_percentile}};
      e["range"] = {nq.range_min, nq.range_max};
      e["input_scale"] = nq.input_scale;
      e["input_zero_point"] = nq.input_zero_point;
    }
    nodes.push_back(std::move(e));
    auto& counts = by_op[nq.op];
    (nq.quantized ? counts.first : counts.second) += 1;
    quantized += nq.quantized ? 1 : 0;
  }
  j["nodes"] = std::move(nodes);
  nlohmann::ordered_json totals;
  totals["candidates"] = result.nodes.size();
  totals["quantized"] = quantized;
  totals["kept_float"] = static_cast<int>(result.nodes.size()) - quantized;
  nlohmann::ordered_json ops_json = nlohmann::ordered_json::object();
  for (const auto& [op, counts] : by_op) ops_json[op] = {{"quantized", counts.first}, {"kept_float", counts.second}};
  totals["by_op"] = std::move(ops_json);
  nlohmann::ordered_json outs = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < outputs; ++i) {
    nlohmann::ordered_json o = {{"name", fp32.outputs[i]}, {"relative_error", result.output_error[i]}};
    if (result.top1_agreement[i] >= 0.0) o["top1_agreement"] = result.top1_agreement[i];
    outs.push_back(std::move(o));
  }
  totals["outputs"] = std::move(outs);
  j["totals"] = std::move(totals);
  return result;
}

}  // namespace hotpath::infer
