#include "hotpath/infer/quantize.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/ops/int8_conv.h"
#include "hotpath/ops/int8_kernels.h"
#include "hotpath/ops/int8_linear.h"

// quantization_report.json:
//   {"format": "hotpath-quantization-report", "version": 4,
//    "options": {"linear", "conv", "max_node_error", "max_output_error", "min_output_cosine", "percentile",
//                "clip_candidates", "bias_correction", "gptq", "gptq_damping", "max_fallback_passes", "keep_float",
//                "calibration_batches"},
//    "nodes": [{"name", "op", "scheme", "quantized", "error", "cumulative_error", "added_error",
//               "sensitivity" (the outputs' relative error with only this node quantized; null: not measured,
//               the target was met or not set), "reason"?,                                  (every candidate)
//               conv2d: "observer" ("minmax" | "percentile" | "clip" | "qat": a fixed input_ranges entry),
//                       "errors": {"minmax", "percentile",
//                       "clip" (the best clip candidate's; null: none tried)}, "clip_fraction" (of min/max,
//                       the best clip candidate's; 1: none tried), "range": [lo, hi],
//                       "input_scale", "input_zero_point", "bias_correction", "weight_rounding"}],
//    "fallback": {"target": {...}, "method": "sensitivity",
//                 "ranking": [{"name", "sensitivity"}] (most sensitive first; empty: no fallback ran),
//                 "passes": [{"outputs": [...], "search"?: [{"kept_float": count, "outputs"}],
//                             "kept_float"?: [names]}]},
//    "totals": {"candidates", "quantized", "kept_float",
//               "by_op": {"linear": {"quantized", "kept_float"}, "conv2d": {...}},
//               "outputs": [{"name", "kind": "logits"|"embedding"|"tensor", "relative_error",
//                            "top1_agreement" (logits) | "min_cosine", "mean_cosine" (embedding)}]},
//    "stages": [{"name", "seconds"}] (the passes of kPasses below, in order, with their wall time)}
namespace hotpath::infer {
namespace {

// The clip candidates' ratio: min/max × 0.85^i, i = 1..clip_candidates (8: down to 0.27 of min/max).
constexpr double kClipStep = 0.85;

// One node to quantize, with what the passes gather for it.
struct Candidate {
  std::size_t index = 0;  // into graph.nodes
  bool conv = false;
  // Observed (conv only): global min/max and the per-batch percentile clips, summed.
  double min = 0.0, max = 0.0;
  double clip_lo_sum = 0.0, clip_hi_sum = 0.0;
  bool seen = false;
  // The quantized weight; the linear's error sum ‖y_q − y‖² (err2), with ‖y‖² (ref2, convs too).
  at::Tensor w8, w_scale;
  std::optional<ops::Int8Linear> linear;
  double err2 = 0.0, ref2 = 0.0;
  // Conv only: the input ranges tried (min/max, the percentile clip, min/max scaled by each clip fraction),
  // each node alone quantized with it; per output channel the summed pre-activation error conv_q(x) − conv(x)
  // and how many values were summed (bias correction: the mean is what rounding shifts every output by).
  struct Range {
    std::string observer;   // "minmax" | "percentile" | "clip" | "qat" (options.input_ranges)
    double fraction = 1.0;  // clip: the fraction of min/max
    double lo = 0.0, hi = 0.0;
    std::optional<ops::Int8Conv2d> conv{};
    double err2 = 0.0;
    at::Tensor shift{};
  };
  std::vector<Range> ranges;
  double shift_count = 0.0;
  // Conv with GPTQ rounding: the Gram matrix of its input patches per group [groups, K, K] (K = in/groups·kh·kw),
  // summed over the calibration batches; freed once the weight is rounded.
  at::Tensor gram;
  double gram_rows = 0.0;  // how many patches the Gram matrix sums
  bool gptq = false;  // whether the weight was rounded by GPTQ (else to nearest)
};

// The graph with every candidate's inputs and output added to its outputs; where each value lands. The
// fp32 graph and its quantized rewrite have the same nodes and value names, so the same slots.
struct ObservedGraph {
  Graph graph;
  std::map<std::string, std::size_t> slot;
};

ObservedGraph observe(const Graph& graph, const std::vector<Candidate>& candidates) {
  ObservedGraph o{graph, {}};
  for (std::size_t i = 0; i < o.graph.outputs.size(); ++i) o.slot.emplace(o.graph.outputs[i], i);
  const auto add = [&](const std::string& value) {
    if (value.empty() || o.slot.count(value) != 0) return;
    o.slot.emplace(value, o.graph.outputs.size());
    o.graph.outputs.push_back(value);
  };
  for (const Candidate& c : candidates) {
    const Node& n = graph.nodes[c.index];
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

// The float convolution without activation or residual (the bias correction's reference).
at::Tensor float_conv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const Node& n) {
  const ops::Int8ConvGeometry g = geometry_of(n);
  const auto& p = g.padding;
  return at::conv2d(at::constant_pad_nd(x.to(at::kFloat), {p[1], p[3], p[0], p[2]}, 0.0), weight.to(at::kFloat),
                    bias.defined() ? bias.to(at::kFloat) : bias, g.stride, at::IntArrayRef{0, 0}, g.dilation, g.groups);
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
  // The r-th smallest: from a top-k of the near tail (6× faster than kthvalue at p = 99.99, 2^21 values: 210 of
  // them), or kthvalue where the tail is long.
  const auto kth_smallest = [&](std::int64_t r) {
    const std::int64_t from_top = n - r + 1;
    if (std::min(r, from_top) > n / 64) return std::get<0>(at::kthvalue(flat, r)).item<double>();
    if (r <= from_top) return std::get<0>(at::topk(flat, r, 0, /*largest=*/false, /*sorted=*/true))[r - 1].item<double>();
    return std::get<0>(at::topk(flat, from_top, 0, /*largest=*/true, /*sorted=*/true))[from_top - 1].item<double>();
  };
  return {kth_smallest(rank(100.0 - p)), kth_smallest(rank(p))};
}

// Σ over the batch's output positions of patch·patchᵀ, per group: [groups, K, K] float, K = in/groups·kh·kw
// (what ‖(W_q − W)·X‖² is a quadratic form of). Patches in chunks of 8 samples (im2col of a whole batch of
// early-layer activations would take gigabytes). At most max_positions patches per sample, evenly strided
// over its output positions: the Gram matrix costs K² per patch, and an early 3×3 conv has 3,136 positions per
// image where a few hundred per image, over the calibration set, already give far more than the 2·K patches
// GPTQ needs (ResNet-50: the observing pass went from most of an int8 export's time to a few seconds).
// Patches per K the Gram matrix of a conv's input takes over the whole calibration set, at most (patch_gram).
constexpr std::int64_t kGramPatchesPerK = 128;  // 32 lost one view of 150 in cli.int8_accuracy_efficientnet

// Returns the Gram matrix and how many patches it sums.
std::pair<at::Tensor, std::int64_t> patch_gram(const at::Tensor& x, const Node& n, const at::Tensor& weight,
                                               std::int64_t max_positions) {
  const ops::Int8ConvGeometry g = geometry_of(n);
  const auto& p = g.padding;
  const std::int64_t groups = g.groups, kh = weight.size(2), kw = weight.size(3), k = weight.size(1) * kh * kw;
  at::Tensor gram = at::zeros({groups, k, k}, at::kFloat);
  std::int64_t patches = 0;
  for (std::int64_t i = 0; i < x.size(0); i += 8) {
    const at::Tensor xs = at::constant_pad_nd(x.narrow(0, i, std::min<std::int64_t>(8, x.size(0) - i)).to(at::kFloat).contiguous(),
                                              {p[1], p[3], p[0], p[2]}, 0.0);
    at::Tensor u = at::im2col(xs, {kh, kw}, g.dilation, {0, 0}, g.stride);  // [n, C·kh·kw, L]
    if (u.size(2) > max_positions) u = u.slice(2, 0, u.size(2), (u.size(2) + max_positions - 1) / max_positions);
    const std::int64_t rows = u.size(0), positions = u.size(2);
    u = u.reshape({rows, groups, k, positions}).permute({1, 2, 0, 3}).reshape({groups, k, rows * positions});
    gram.add_(at::bmm(u, u.transpose(1, 2)));
    patches += rows * positions;
  }
  return {gram, patches};
}

// GPTQ (Frantar et al. 2022, the OBQ rounding of Nagel et al.'s AdaRound problem in closed form): the weight's
// per-output-channel int8 scale stays absmax/127 (quantize_weight's), but the weights are rounded one input
// column at a time and each column's rounding error is spread over the columns not yet rounded through the
// upper Cholesky factor of the inverse damped Gram matrix, so that the conv's output error ‖(W_q − W)·X‖² on
// the calibration inputs is (greedily) minimised instead of each weight's own error. Inputs never seen non-zero
// keep round-to-nearest. Returns nothing when the damped Gram matrix is not positive definite (caller: nearest).
std::optional<at::Tensor> gptq_round(const at::Tensor& weight, const at::Tensor& weight_scale, const at::Tensor& gram_in,
                                     double damping) {
  const std::int64_t out = weight.size(0), groups = gram_in.size(0), k = gram_in.size(1), per_group = out / groups;
  at::Tensor gram = gram_in.to(at::kDouble);
  at::Tensor diag = gram.diagonal(0, 1, 2);  // a view: writes go into gram
  diag.masked_fill_(diag <= 0.0, 1.0);
  diag.add_(damping * diag.mean(1, /*keepdim=*/true));
  const auto [chol, info] = at::linalg_cholesky_ex(gram);
  if (info.ne(0).any().item<bool>()) return std::nullopt;
  const auto [upper, info2] = at::linalg_cholesky_ex(at::cholesky_inverse(chol), /*upper=*/true);
  if (info2.ne(0).any().item<bool>() || !upper.isfinite().all().item<bool>()) return std::nullopt;
  at::Tensor w = weight.to(at::kDouble).reshape({groups, per_group, k}).contiguous();
  const at::Tensor scale = weight_scale.to(at::kDouble).reshape({groups, per_group}).contiguous();
  const at::Tensor u = upper.contiguous();
  at::Tensor q = at::empty({groups, per_group, k}, at::kChar);
  // Columns in blocks (the paper's lazy batch updates): within a block each column's error goes into the
  // block's later columns one by one (plain loops), and the block's errors into every column after it in one
  // batched GEMM. The same arithmetic as column by column, in a different order of the sums.
  constexpr std::int64_t kBlock = 128;
  double* wp = w.data_ptr<double>();
  const double* up = u.const_data_ptr<double>();
  const double* sp = scale.const_data_ptr<double>();
  std::int8_t* qp = q.data_ptr<std::int8_t>();
  for (std::int64_t i0 = 0; i0 < k; i0 += kBlock) {
    const std::int64_t i1 = std::min(k, i0 + kBlock), width = i1 - i0;
    at::Tensor err = at::empty({groups, per_group, width}, at::kDouble);
    double* ep = err.data_ptr<double>();
    for (std::int64_t g = 0; g < groups; ++g) {
      const double* ug = up + g * k * k;
      for (std::int64_t o = 0; o < per_group; ++o) {
        double* row = wp + (g * per_group + o) * k;
        double* erow = ep + (g * per_group + o) * width;
        const double s = sp[g * per_group + o];
        for (std::int64_t i = i0; i < i1; ++i) {
          const double qi = std::clamp(std::nearbyint(row[i] / s), -127.0, 127.0);  // half to even, as at::round
          qp[(g * per_group + o) * k + i] = static_cast<std::int8_t>(qi);
          const double e = (row[i] - qi * s) / ug[i * k + i];
          erow[i - i0] = e;
          for (std::int64_t j = i + 1; j < i1; ++j) row[j] -= e * ug[i * k + j];
        }
      }
    }
    if (i1 < k) w.narrow(2, i1, k - i1).sub_(at::bmm(err, u.narrow(1, i0, width).narrow(2, i1, k - i1)));
  }
  return q.reshape(weight.sizes()).contiguous();
}

double sq_norm(const at::Tensor& t) {
  const double n = t.to(at::kDouble).norm().item<double>();
  return n * n;
}

double relative(double err2, double ref2) { return ref2 > 0.0 ? std::sqrt(err2 / ref2) : (err2 > 0.0 ? INFINITY : 0.0); }

using ProgressFn = std::function<void(std::string_view, std::size_t, std::size_t)>;

void run_all(const GraphRunner& runner, const Graph& g, const std::vector<std::vector<at::Tensor>>& batches,
             const char* what, const std::function<void(std::size_t, const std::vector<at::Tensor>&)>& each,
             const ProgressFn& progress = {}) {
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
    if (progress) progress(what, b + 1, batches.size());
  }
}

// What a graph output is, for the whole-graph comparison: class logits (top-1 agreement), a sentence
// embedding (cosine; argmax over embedding dimensions means nothing) or another tensor (relative error only).
enum class OutputKind { kLogits, kEmbedding, kTensor };

OutputKind output_kind(const Graph& g, const std::string& value) {
  for (const Node& n : g.nodes) {
    if (n.output != value) continue;
    if (n.op == OpKind::kL2Normalize || n.op == OpKind::kMeanPool) return OutputKind::kEmbedding;
    if (n.op == OpKind::kLinear) return OutputKind::kLogits;
  }
  return OutputKind::kTensor;
}

const char* kind_name(OutputKind k) {
  switch (k) {
    case OutputKind::kLogits: return "logits";
    case OutputKind::kEmbedding: return "embedding";
    case OutputKind::kTensor: break;
  }
  return "tensor";
}

// One comparison of the quantized graph with fp32 on all batches: per observed value the cumulative relative
// error (everything upstream quantized too), per graph output its metrics.
struct Comparison {
  std::map<std::string, double> value_error;
  std::vector<double> output_error, top1_agreement, min_cosine, mean_cosine;
};

// `want(b)`: the fp32 values of batch b in observed_q's slots (a run of the observed fp32 graph, or the fp32
// graph's outputs kept from one run when observed_q observes nothing but the outputs).
using Reference = std::function<std::vector<at::Tensor>(std::size_t)>;

// progress: called per batch under "comparing the quantized graph with fp32" (empty: silent).
Comparison compare_graphs(const Reference& want_of, const ObservedGraph& observed_q, const GraphRunner& runner,
                          const std::vector<std::vector<at::Tensor>>& batches, const std::vector<OutputKind>& kinds,
                          const ProgressFn& progress = {}) {
  const std::size_t outputs = kinds.size();
  std::map<std::string, std::pair<double, double>> sums;  // value → (‖Δ‖², ‖y‖²)
  std::vector<double> err2(outputs, 0.0), ref2(outputs, 0.0), agree(outputs, 0.0), rows(outputs, 0.0),
      cos_min(outputs, 1.0), cos_sum(outputs, 0.0);
  const BatchRunner q_run = runner(observed_q.graph);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::vector<at::Tensor> want, got;
    try {
      want = want_of(b);
      got = q_run(batches[b]);
    } catch (const Error& e) {
      throw e.with_context("quantize_graph: comparing the quantized graph with fp32, calibration batch " +
                           std::to_string(b));
    }
    HOTPATH_CHECK(want.size() == observed_q.graph.outputs.size() && got.size() == want.size(),
                  "quantize_graph: the runner returned ", got.size(), " and ", want.size(),
                  " outputs for calibration batch ", b, ", expected ", observed_q.graph.outputs.size());
    for (const auto& [value, slot] : observed_q.slot) {
      const at::Tensor y = want[slot].to(at::kFloat);
      auto& s = sums[value];
      s.first += sq_norm(got[slot].to(at::kFloat) - y);
      s.second += sq_norm(y);
    }
    for (std::size_t i = 0; i < outputs; ++i) {
      const at::Tensor yq = got[i].to(at::kFloat);
      const at::Tensor y = want[i].to(at::kFloat);
      err2[i] += sq_norm(yq - y);
      ref2[i] += sq_norm(y);
      if (y.dim() != 2 || y.size(0) == 0) continue;
      rows[i] += static_cast<double>(y.size(0));
      if (kinds[i] == OutputKind::kLogits) {
        agree[i] += (yq.argmax(1) == y.argmax(1)).sum().item<double>();
      } else if (kinds[i] == OutputKind::kEmbedding) {
        const at::Tensor cos = at::cosine_similarity(yq, y, 1);
        cos_min[i] = std::min(cos_min[i], cos.min().item<double>());
        cos_sum[i] += cos.sum().item<double>();
      }
    }
    if (progress) progress("comparing the quantized graph with fp32", b + 1, batches.size());
  }
  Comparison c;
  for (const auto& [value, s] : sums) c.value_error[value] = relative(s.first, s.second);
  for (std::size_t i = 0; i < outputs; ++i) {
    c.output_error.push_back(relative(err2[i], ref2[i]));
    const bool rows_seen = rows[i] > 0.0;
    c.top1_agreement.push_back(rows_seen && kinds[i] == OutputKind::kLogits ? agree[i] / rows[i] : -1.0);
    c.min_cosine.push_back(rows_seen && kinds[i] == OutputKind::kEmbedding ? cos_min[i] : -1.0);
    c.mean_cosine.push_back(rows_seen && kinds[i] == OutputKind::kEmbedding ? cos_sum[i] / rows[i] : -1.0);
  }
  return c;
}

nlohmann::ordered_json outputs_json(const Graph& g, const std::vector<OutputKind>& kinds, const Comparison& c) {
  nlohmann::ordered_json outs = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    nlohmann::ordered_json o = {{"name", g.outputs[i]}, {"kind", kind_name(kinds[i])},
                                {"relative_error", c.output_error[i]}};
    if (c.top1_agreement[i] >= 0.0) o["top1_agreement"] = c.top1_agreement[i];
    if (c.min_cosine[i] >= 0.0) {
      o["min_cosine"] = c.min_cosine[i];
      o["mean_cosine"] = c.mean_cosine[i];
    }
    outs.push_back(std::move(o));
  }
  return outs;
}

// ---- the passes ---------------------------------------------------------------------------------------------
// quantize_graph is the list kPasses: each pass reads and extends one QuantizeRun, in order. A pass's name is its
// entry in the report's "stages" (with its seconds), so an export's time can be read per pass.

struct Choice {
  ops::Int8InputQuant input;
  at::Tensor bias;  // corrected (conv) or the original
};

struct QuantizeRun {
  QuantizeRun(const Graph& fp32_in, const std::vector<std::vector<at::Tensor>>& calibration_in,
              const QuantizeOptions& options_in, GraphRunner runner_in)
      : fp32(fp32_in),
        calibration(calibration_in),
        options(options_in),
        runner(std::move(runner_in)),
        keep(options_in.keep_float.begin(), options_in.keep_float.end()) {}

  const Graph& fp32;
  const std::vector<std::vector<at::Tensor>>& calibration;
  const QuantizeOptions& options;
  GraphRunner runner;
  std::set<std::string> keep;
  std::vector<Candidate> candidates{};
  ObservedGraph observed{};
  std::vector<Choice> choices{};             // per candidate, once decided
  std::map<std::string, int> weight_users{};  // param key → how many nodes read it
  std::vector<OutputKind> kinds{};            // per graph output
  std::vector<std::vector<at::Tensor>> fp32_outputs{};  // the fp32 graph's outputs per batch, once needed
  nlohmann::ordered_json fallback_passes = nlohmann::ordered_json::array();
  nlohmann::ordered_json ranking = nlohmann::ordered_json::array();
  Comparison cmp{};  // the final graph against fp32
  QuantizeResult result{};

  // The value `name` in a run of the observed graph.
  [[nodiscard]] at::Tensor value(const std::vector<at::Tensor>& out, const std::string& name) const {
    if (name.empty()) return {};
    return out[observed.slot.at(name)];
  }
  [[nodiscard]] const Node& node_of(const Candidate& c) const { return fp32.nodes[c.index]; }

  // The graph with candidate k rewritten where quantize[k] (graph.h's "Quantized forms"); the sensitivity runs
  // and the search try other sets than the nodes' current decisions.
  [[nodiscard]] Graph rewrite_with(const std::vector<bool>& quantize) const {
    Graph q = fp32;
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      if (!quantize[k]) continue;
      const Candidate& c = candidates[k];
      Node& n = q.nodes[c.index];
      const std::string key = n.params.at("weight");
      const std::string w_key = weight_users.at(key) > 1 ? key + ".int8" : key;
      q.params[w_key] = c.w8;
      n.params["weight"] = w_key;
      std::string s_key = w_key + "_scale";
      while (q.params.count(s_key) != 0) s_key += "_";
      q.params[s_key] = c.w_scale;
      n.params["weight_scale"] = s_key;
      n.attrs["quant"] = result.nodes[k].scheme;
      if (c.conv) {
        n.attrs["input_scale"] = choices[k].input.scale;
        n.attrs["input_zero_point"] = choices[k].input.zero_point;
        if (result.nodes[k].bias_correction > 0.0) {  // this node's own bias: others may share the float one
          std::string b_key = n.name + ".bias_corrected";
          while (q.params.count(b_key) != 0) b_key += "_";
          q.params[b_key] = choices[k].bias;
          n.params["bias"] = b_key;
        }
      }
    }
    // A float weight or bias no node uses any more goes (validate() refuses unused params).
    std::set<std::string> used;
    for (const Node& n : q.nodes) {
      for (const auto& [role, key] : n.params) used.insert(key);
    }
    for (auto it = q.params.begin(); it != q.params.end();) it = used.count(it->first) != 0 ? std::next(it) : q.params.erase(it);
    q.validate();
    return q;
  }
  [[nodiscard]] std::vector<bool> decided() const {
    std::vector<bool> quantize;
    for (const NodeQuantization& nq : result.nodes) quantize.push_back(nq.quantized);
    return quantize;
  }
  [[nodiscard]] bool misses_target(const Comparison& c) const {
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      if (kinds[i] == OutputKind::kEmbedding && c.min_cosine[i] >= 0.0) {
        if (c.min_cosine[i] < options.min_output_cosine) return true;
      } else if (options.max_output_error > 0.0 && c.output_error[i] > options.max_output_error) {
        return true;
      }
    }
    return false;
  }
  // q's outputs against the fp32 graph's on `batches` (the fp32 outputs recorded by one run, on first use).
  Comparison compare_outputs(const Graph& q, const std::vector<std::vector<at::Tensor>>& batches) {
    if (fp32_outputs.empty()) {
      run_all(runner, fp32, calibration, "running the fp32 graph", [&](std::size_t, const std::vector<at::Tensor>& out) {
        std::vector<at::Tensor> kept;
        for (const at::Tensor& t : out) kept.push_back(t.clone());
        fp32_outputs.push_back(std::move(kept));
      });
    }
    return compare_graphs([&](std::size_t b) { return fp32_outputs[b]; }, ObservedGraph{q, {}}, runner, batches, kinds);
  }
};

// Which nodes are candidates (linear and conv2d, as the options allow), their weights quantized once: the same
// tensors the rewritten graph stores.
void select_candidates(QuantizeRun& run) {
  for (std::size_t i = 0; i < run.fp32.nodes.size(); ++i) {
    const Node& n = run.fp32.nodes[i];
    HOTPATH_CHECK(n.attr_str("quant", "").empty(), "quantize_graph: node ", n.name, " is already quantized (",
                  n.attr_str("quant", ""), ")");
    const bool linear = n.op == OpKind::kLinear && run.options.linear;
    const bool conv = n.op == OpKind::kConv2d && run.options.conv;
    if (!linear && !conv) continue;
    Candidate c;
    c.index = i;
    c.conv = conv;
    const at::Tensor& w = param(run.fp32, n, "weight");
    std::tie(c.w8, c.w_scale) = c.conv ? ops::Int8Conv2d::quantize_weight(w) : ops::Int8Linear::quantize_weight(w);
    if (!c.conv) c.linear = ops::Int8Linear::prepare(c.w8, c.w_scale, param(run.fp32, n, "bias"));
    run.candidates.push_back(std::move(c));
  }
  run.observed = observe(run.fp32, run.candidates);
  for (const Node& n : run.fp32.nodes) {
    for (const auto& [role, key] : n.params) ++run.weight_users[key];
  }
  for (const std::string& out : run.fp32.outputs) run.kinds.push_back(output_kind(run.fp32, out));
}

// Conv input ranges (min/max and percentile clips), the Gram matrices GPTQ needs; linear errors (a dynamic
// int8 linear needs no calibration): one run of the observed fp32 graph.
void observe_ranges(QuantizeRun& run) {
  const QuantizeOptions& options = run.options;
  std::int64_t calibration_samples = 0;
  for (const auto& batch : run.calibration) calibration_samples += batch.empty() ? 0 : batch.front().size(0);
  run_all(run.runner, run.observed.graph, run.calibration, "observing ranges", [&](std::size_t, const std::vector<at::Tensor>& out) {
    for (Candidate& c : run.candidates) {
      const Node& n = run.node_of(c);
      const at::Tensor x = run.value(out, n.input(0));
      if (!c.conv) {
        const at::Tensor y = run.value(out, n.output);
        const at::Tensor yq = c.linear->forward(x, n.attr_str("act", "none"), run.value(out, n.input(1)));
        c.err2 += sq_norm(yq - y);
        c.ref2 += sq_norm(y);
        continue;
      }
      const auto [lo, hi] = at::aminmax(x);
      c.min = c.seen ? std::min(c.min, lo.item<double>()) : lo.item<double>();
      c.max = c.seen ? std::max(c.max, hi.item<double>()) : hi.item<double>();
      c.seen = true;
      const auto [clip_lo, clip_hi] = percentile_clips(x, options.percentile);
      c.clip_lo_sum += clip_lo;
      c.clip_hi_sum += clip_hi;
      if (options.gptq) {
        // Patches per sample: enough for 32·K over the whole calibration set (GPTQ needs 2·K), at least 64.
        const at::Tensor& w = param(run.fp32, n, "weight");
        const std::int64_t k = w.size(1) * w.size(2) * w.size(3);
        const std::int64_t samples = std::max<std::int64_t>(1, calibration_samples);
        const std::int64_t max_positions = std::max<std::int64_t>(64, (kGramPatchesPerK * k + samples - 1) / samples);
        const auto [g, patches] = patch_gram(x, n, w, max_positions);
        c.gram = c.gram.defined() ? c.gram.add_(g) : g;
        c.gram_rows += static_cast<double>(patches);
      }
    }
  }, options.progress);
}

// Conv weights rounded by GPTQ on the inputs just observed (quantize.h); nearest where that fails, and where the
// calibration gave fewer than 2·K patches (K = the Gram matrix's size): the rounding would fit directions the
// data never spans (and a K of thousands costs seconds per conv).
void round_conv_weights(QuantizeRun& run) {
  const std::size_t total = static_cast<std::size_t>(std::count_if(
      run.candidates.begin(), run.candidates.end(), [](const Candidate& c) { return c.conv && c.gram.defined(); }));
  std::size_t done = 0;
  for (Candidate& c : run.candidates) {
    if (!c.conv || !c.gram.defined()) continue;
    if (run.options.progress) run.options.progress("rounding conv weights (GPTQ)", ++done, total);
    if (c.gram_rows < 2.0 * static_cast<double>(c.gram.size(1))) {
      c.gram = at::Tensor();
      continue;
    }
    const at::Tensor& w = param(run.fp32, run.node_of(c), "weight");
    if (std::optional<at::Tensor> rounded = gptq_round(w, c.w_scale, c.gram, run.options.gptq_damping)) {
      c.w8 = *rounded;
      c.gptq = true;
    }
    c.gram = at::Tensor();
  }
}

// Each conv's input range candidates, each node alone quantized on its recorded fp32 inputs; the mean shift of its
// pre-activation output per channel (bias correction). The ranges: min/max, the percentile clip, and min/max
// scaled by kClipStep^i (i = 1..clip_candidates): the clip that gives the node's own output the least error (MSE
// over clip candidates) — the percentile is blind to how the u8 grid's step trades against clipping, which for
// relu6 outputs whose channels differ 10× in range favours clipping the few wide channels well inside min/max.
void measure_conv_ranges(QuantizeRun& run) {
  const double batches = static_cast<double>(run.calibration.size());
  bool any_conv = false;
  for (Candidate& c : run.candidates) {
    if (!c.conv) continue;
    any_conv = true;
    const Node& n = run.node_of(c);
    if (auto fixed = run.options.input_ranges.find(n.name); fixed != run.options.input_ranges.end()) {
      c.ranges.push_back({.observer = "qat", .lo = fixed->second.first, .hi = fixed->second.second});
    } else {
      c.ranges.push_back({.observer = "minmax", .lo = c.min, .hi = c.max});
      c.ranges.push_back({.observer = "percentile", .lo = c.clip_lo_sum / batches, .hi = c.clip_hi_sum / batches});
    }
    double fraction = c.ranges.front().observer == "qat" ? 0.0 : 1.0;
    for (int i = 0; fraction > 0.0 && i < run.options.clip_candidates; ++i) {
      fraction *= kClipStep;
      c.ranges.push_back({.observer = "clip", .fraction = fraction, .lo = c.min * fraction, .hi = c.max * fraction});
    }
    for (Candidate::Range& r : c.ranges) {
      r.conv = ops::Int8Conv2d::prepare(c.w8, c.w_scale, param(run.fp32, n, "bias"),
                                        ops::int8_affine_u8_params(r.lo, r.hi), geometry_of(n));
    }
  }
  if (!any_conv) return;
  run_all(run.runner, run.observed.graph, run.calibration, "measuring conv errors", [&](std::size_t, const std::vector<at::Tensor>& out) {
    for (Candidate& c : run.candidates) {
      if (!c.conv) continue;
      const Node& n = run.node_of(c);
      const at::Tensor x = run.value(out, n.input(0));
      const at::Tensor r = run.value(out, n.input(1));
      const at::Tensor y = run.value(out, n.output);
      const std::string act = n.attr_str("act", "none");
      const at::Tensor ref = float_conv(x, param(run.fp32, n, "weight"), param(run.fp32, n, "bias"), n);
      for (Candidate::Range& range : c.ranges) {
        at::Tensor pre = range.conv->forward(x, "none").to(at::kFloat);
        const at::Tensor s = (pre - ref).sum({0, 2, 3}).to(at::kDouble);
        range.shift = range.shift.defined() ? range.shift + s : s;
        if (r.defined()) pre = pre + r.to(at::kFloat);
        range.err2 += sq_norm(ops::apply_activation_reference(pre, act) - y);
      }
      c.shift_count += static_cast<double>(ref.numel() / ref.size(1));
      c.ref2 += sq_norm(y);
    }
  }, run.options.progress);
}

// Each node alone: its scheme's parameters (a conv's best range, its corrected bias) and whether its own error
// allows int8.
void decide_nodes(QuantizeRun& run) {
  const QuantizeOptions& options = run.options;
  run.choices.assign(run.candidates.size(), {});
  for (std::size_t k = 0; k < run.candidates.size(); ++k) {
    const Candidate& c = run.candidates[k];
    const Node& src = run.node_of(c);
    NodeQuantization nq;
    nq.name = src.name;
    nq.op = src.op;
    nq.scheme = c.conv ? "static_int8" : "dynamic_int8";
    nq.weight_rounding = c.gptq ? "gptq" : "nearest";
    nq.error = relative(c.err2, c.ref2);
    Choice& choice = run.choices[k];
    choice.bias = param(run.fp32, src, "bias");
    if (c.conv) {
      // The range with the lowest error; ties go to the earlier (min/max before the percentile before clips).
      const Candidate::Range* best = &c.ranges.front();
      for (const Candidate::Range& r : c.ranges) {
        if (r.err2 < best->err2) best = &r;
        const double e = relative(r.err2, c.ref2);
        if (r.observer == "minmax") nq.error_minmax = e;
        if (r.observer == "percentile") nq.error_percentile = e;
        if (r.observer == "clip" && (nq.error_clip < 0.0 || e < nq.error_clip)) {
          nq.error_clip = e;
          nq.clip_fraction = r.fraction;
        }
      }
      nq.observer = best->observer;
      nq.error = relative(best->err2, c.ref2);
      nq.range_min = best->lo;
      nq.range_max = best->hi;
      choice.input = best->conv->input_quant();
      nq.input_scale = choice.input.scale;
      nq.input_zero_point = choice.input.zero_point;
      if (options.bias_correction && c.shift_count > 0.0) {
        const at::Tensor shift = (best->shift / c.shift_count).to(at::kFloat);
        nq.bias_correction = shift.abs().max().item<double>();
        const at::Tensor& b = choice.bias;
        choice.bias = (b.defined() ? b.to(at::kFloat) : at::zeros_like(shift)) - shift;
      }
    }
    if (run.keep.count(src.name) != 0) {
      nq.reason = "kept float by keep_float";
    } else if (!(nq.error <= options.max_node_error)) {
      std::ostringstream why;
      why << "error " << nq.error << " > max_node_error " << options.max_node_error;
      nq.reason = why.str();
    } else {
      nq.quantized = true;
    }
    run.result.nodes.push_back(std::move(nq));
  }
}

// Every node still quantized ranked by sensitivity, once: the outputs' worst relative error with only that node
// quantized, on the first batches that hold ranking_samples (a ranking, not a verdict: the search judges the
// target on every batch).
void rank_sensitivity(QuantizeRun& run) {
  std::vector<std::vector<at::Tensor>> batches;
  for (std::int64_t n = 0; n < run.options.ranking_samples && batches.size() < run.calibration.size();) {
    batches.push_back(run.calibration[batches.size()]);
    n += batches.back().empty() ? 1 : std::max<std::int64_t>(1, batches.back().front().size(0));
  }
  std::vector<NodeQuantization>& nodes = run.result.nodes;
  const std::size_t to_rank = static_cast<std::size_t>(
      std::count_if(nodes.begin(), nodes.end(), [](const NodeQuantization& nq) { return nq.quantized; }));
  std::size_t done = 0;
  for (std::size_t k = 0; k < run.candidates.size(); ++k) {
    if (!nodes[k].quantized) continue;
    std::vector<bool> only(run.candidates.size(), false);
    only[k] = true;
    const Comparison c = run.compare_outputs(run.rewrite_with(only), batches);
    double worst = 0.0;
    for (double e : c.output_error) worst = std::max(worst, e);
    nodes[k].sensitivity = worst;
    if (run.options.progress) run.options.progress("ranking node sensitivity", ++done, to_rank);
  }
}

// One fallback pass's search: the fewest of the most sensitive nodes to keep float, by bisection over the ranking
// (none misses: just measured; all of them is assumed to meet the target, everything the fallback can do).
// Marks them float with their reason; the pass's record gets the search and the names.
void keep_most_sensitive_float(QuantizeRun& run, int pass, nlohmann::ordered_json& record) {
  std::vector<NodeQuantization>& nodes = run.result.nodes;
  std::vector<std::size_t> order;  // still quantized, most sensitive first
  for (std::size_t k = 0; k < run.candidates.size(); ++k) {
    if (nodes[k].quantized && nodes[k].sensitivity >= 0.0) order.push_back(k);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return nodes[a].sensitivity > nodes[b].sensitivity; });
  if (run.ranking.empty()) {
    for (std::size_t k : order) run.ranking.push_back({{"name", nodes[k].name}, {"sensitivity", nodes[k].sensitivity}});
  }
  std::size_t lo = 0, hi = order.size();
  nlohmann::ordered_json search = nlohmann::ordered_json::array();
  std::size_t steps = 0, step = 0;  // bisection steps: ceil(log2(order.size()))
  for (std::size_t span = order.size(); span > 1; span = (span + 1) / 2) ++steps;
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    std::vector<bool> quantize = run.decided();
    for (std::size_t i = 0; i < mid; ++i) quantize[order[i]] = false;
    const Comparison c = run.compare_outputs(run.rewrite_with(quantize), run.calibration);
    search.push_back({{"kept_float", mid}, {"outputs", outputs_json(run.fp32, run.kinds, c)}});
    (run.misses_target(c) ? lo : hi) = mid;
    if (run.options.progress) run.options.progress("searching the layers to keep float", ++step, std::max(step, steps));
  }
  nlohmann::ordered_json kept = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < hi; ++i) {
    NodeQuantization& nq = nodes[order[i]];
    nq.quantized = false;
    std::ostringstream why;
    why << "sensitivity: the quantized graph missed its output target (fallback pass " << pass + 1
        << "); this node is the " << i + 1 << "th most sensitive of the " << order.size()
        << " quantized (the outputs' relative error with only it quantized: " << nq.sensitivity
        << "), and keeping the " << hi << " most sensitive float meets the target";
    nq.reason = why.str();
    kept.push_back(nq.name);
  }
  record["search"] = std::move(search);
  record["kept_float"] = std::move(kept);
}

// The whole quantized graph against fp32, every candidate's output compared with everything upstream of it
// quantized too: per-node errors compound (EfficientNet-Lite0: 49 convs of 0.2–2.7 % each gave 14 % on the
// logits), which no per-node gate sees. While an output misses its target, the nodes the outputs are most
// sensitive to stay float. A node's sensitivity is the outputs' relative error with only that node quantized
// (everything else float): what its error becomes by the time it reaches the logits, amplified or damped by
// every layer downstream. The error a node adds to its own output (added_error) does not see that: error added
// early (stem, first stages) is amplified downstream, and keeping deep convs float by their added error barely
// moved EfficientNet-Lite0's logits. The fewest of the most sensitive nodes that bring the outputs within the
// target are found by bisection over the ranking (outputs only, the fp32 outputs kept from one run).
void fall_back_by_sensitivity(QuantizeRun& run) {
  const BatchRunner fp32_run = run.runner(run.observed.graph);
  const Reference fp32_observed = [&](std::size_t b) { return fp32_run(run.calibration[b]); };
  bool ranked = false;
  for (int pass = 0;; ++pass) {
    run.result.graph = run.rewrite_with(run.decided());
    run.cmp = compare_graphs(fp32_observed, observe(run.result.graph, run.candidates), run.runner, run.calibration,
                             run.kinds, run.options.progress);
    nlohmann::ordered_json record = {{"outputs", outputs_json(run.fp32, run.kinds, run.cmp)}};
    bool any_quantized = false;
    for (std::size_t k = 0; k < run.candidates.size(); ++k) {
      const Node& n = run.node_of(run.candidates[k]);
      const auto error_of = [&](const std::string& v) {
        auto it = run.cmp.value_error.find(v);
        return v.empty() || it == run.cmp.value_error.end() ? 0.0 : it->second;
      };
      NodeQuantization& nq = run.result.nodes[k];
      nq.cumulative_error = error_of(n.output);
      nq.added_error = nq.cumulative_error - std::max(error_of(n.input(0)), error_of(n.input(1)));
      any_quantized = any_quantized || nq.quantized;
    }
    if (!run.misses_target(run.cmp) || pass >= run.options.max_fallback_passes || !any_quantized) {
      run.fallback_passes.push_back(std::move(record));
      break;
    }
    if (!ranked) {
      ranked = true;
      rank_sensitivity(run);
    }
    keep_most_sensitive_float(run, pass, record);
    run.fallback_passes.push_back(std::move(record));
  }
  run.result.output_error = run.cmp.output_error;
  run.result.top1_agreement = run.cmp.top1_agreement;
  run.result.min_cosine = run.cmp.min_cosine;
}

nlohmann::ordered_json node_json(const NodeQuantization& nq) {
  nlohmann::ordered_json e = {{"name", nq.name},
                              {"op", op_name(nq.op)},
                              {"scheme", nq.scheme},
                              {"quantized", nq.quantized},
                              {"error", nq.error},
                              {"cumulative_error", nq.cumulative_error},
                              {"added_error", nq.added_error},
                              {"sensitivity", nq.sensitivity >= 0.0 ? nlohmann::ordered_json(nq.sensitivity)
                                                                    : nlohmann::ordered_json(nullptr)}};
  if (!nq.quantized) e["reason"] = nq.reason;
  if (nq.op == OpKind::kConv2d) {
    e["observer"] = nq.observer;
    e["errors"] = {{"minmax", nq.error_minmax}, {"percentile", nq.error_percentile},
                   {"clip", nq.error_clip >= 0.0 ? nlohmann::ordered_json(nq.error_clip) : nlohmann::ordered_json(nullptr)}};
    e["clip_fraction"] = nq.clip_fraction;
    e["range"] = {nq.range_min, nq.range_max};
    e["input_scale"] = nq.input_scale;
    e["input_zero_point"] = nq.input_zero_point;
    e["bias_correction"] = nq.bias_correction;
    e["weight_rounding"] = nq.weight_rounding;
  }
  return e;
}

// quantization_report.json (the format at the top of this file), but for "stages", which quantize_graph adds.
void write_report(QuantizeRun& run) {
  const QuantizeOptions& options = run.options;
  nlohmann::ordered_json& j = run.result.report;
  j["format"] = "hotpath-quantization-report";
  j["version"] = 4;
  j["options"] = {{"linear", options.linear},
                  {"conv", options.conv},
                  {"max_node_error", options.max_node_error},
                  {"max_output_error", options.max_output_error},
                  {"min_output_cosine", options.min_output_cosine},
                  {"percentile", options.percentile},
                  {"clip_candidates", options.clip_candidates},
                  {"bias_correction", options.bias_correction},
                  {"gptq", options.gptq},
                  {"gptq_damping", options.gptq_damping},
                  {"max_fallback_passes", options.max_fallback_passes},
                  {"ranking_samples", options.ranking_samples},
                  {"keep_float", options.keep_float},
                  {"fixed_input_ranges", options.input_ranges.size()},
                  {"calibration_batches", run.calibration.size()}};
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  std::map<std::string, std::pair<int, int>> by_op;  // op → (quantized, kept float)
  int quantized = 0;
  for (const NodeQuantization& nq : run.result.nodes) {
    nodes.push_back(node_json(nq));
    auto& counts = by_op[std::string(op_name(nq.op))];
    (nq.quantized ? counts.first : counts.second) += 1;
    quantized += nq.quantized ? 1 : 0;
  }
  j["nodes"] = std::move(nodes);
  j["fallback"] = {{"target", {{"max_output_error", options.max_output_error},
                               {"min_output_cosine", options.min_output_cosine}}},
                   {"method", "sensitivity"},
                   {"ranking", std::move(run.ranking)},
                   {"passes", std::move(run.fallback_passes)}};
  nlohmann::ordered_json totals;
  totals["candidates"] = run.result.nodes.size();
  totals["quantized"] = quantized;
  totals["kept_float"] = static_cast<int>(run.result.nodes.size()) - quantized;
  nlohmann::ordered_json ops_json = nlohmann::ordered_json::object();
  for (const auto& [op, counts] : by_op) ops_json[op] = {{"quantized", counts.first}, {"kept_float", counts.second}};
  totals["by_op"] = std::move(ops_json);
  totals["outputs"] = outputs_json(run.fp32, run.kinds, run.cmp);
  j["totals"] = std::move(totals);
}

struct QuantizePass {
  std::string_view name;
  void (*run)(QuantizeRun&);
};

// The quantizer, in order.
constexpr QuantizePass kPasses[] = {
    {"select_candidates", select_candidates},   // linear/conv2d nodes, weights to int8
    {"observe_ranges", observe_ranges},         // conv input ranges and Gram matrices, linear errors
    {"round_conv_weights", round_conv_weights},  // GPTQ
    {"measure_conv_ranges", measure_conv_ranges},  // each conv's range candidates and bias shift
    {"decide_nodes", decide_nodes},             // each node alone: its parameters, int8 or float
    {"fall_back", fall_back_by_sensitivity},    // the whole graph against its output target
    {"write_report", write_report},
};

void check_options(const Graph& fp32, const std::vector<std::vector<at::Tensor>>& calibration,
                   const QuantizeOptions& options) {
  HOTPATH_CHECK(!calibration.empty(), "quantize_graph: no calibration batches (the error analysis needs data)");
  HOTPATH_CHECK(options.max_node_error > 0.0, "quantize_graph: max_node_error must be > 0; got ", options.max_node_error);
  HOTPATH_CHECK(options.max_output_error >= 0.0, "quantize_graph: max_output_error must be >= 0 (0: no fallback); got ",
                options.max_output_error);
  HOTPATH_CHECK(options.min_output_cosine >= -1.0 && options.min_output_cosine <= 1.0,
                "quantize_graph: min_output_cosine must be in [-1, 1]; got ", options.min_output_cosine);
  HOTPATH_CHECK(options.max_fallback_passes >= 0, "quantize_graph: max_fallback_passes must be >= 0; got ",
                options.max_fallback_passes);
  HOTPATH_CHECK(options.ranking_samples >= 1, "quantize_graph: ranking_samples must be >= 1; got ", options.ranking_samples);
  HOTPATH_CHECK(options.percentile > 50.0 && options.percentile < 100.0,
                "quantize_graph: percentile must be in (50, 100); got ", options.percentile);
  HOTPATH_CHECK(options.gptq_damping > 0.0 && std::isfinite(options.gptq_damping),
                "quantize_graph: gptq_damping must be finite and > 0; got ", options.gptq_damping);
  HOTPATH_CHECK(options.clip_candidates >= 0 && options.clip_candidates <= 32,
                "quantize_graph: clip_candidates must be in [0, 32]; got ", options.clip_candidates);
  fp32.validate();
  for (const std::string& name : options.keep_float) {
    const Node* n = fp32.find_node(name);
    HOTPATH_CHECK(n != nullptr && (n->op == OpKind::kLinear || n->op == OpKind::kConv2d),
                  "quantize_graph: keep_float names '", name, "', which is no linear or conv2d node of the graph");
  }
  for (const auto& [name, range] : options.input_ranges) {
    const Node* n = fp32.find_node(name);
    HOTPATH_CHECK(n != nullptr && n->op == OpKind::kConv2d, "quantize_graph: input_ranges names '", name,
                  "', which is no conv2d node of the graph");
    HOTPATH_CHECK(std::isfinite(range.first) && std::isfinite(range.second) && range.first <= range.second,
                  "quantize_graph: input_ranges['", name, "'] must be a finite [lo, hi] with lo <= hi; got [",
                  range.first, ", ", range.second, "]");
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
                              const QuantizeOptions& options, const GraphRunner& runner) {
  check_options(fp32, calibration, options);
  QuantizeRun run(fp32, calibration, options, runner ? runner : engine_runner());
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const QuantizePass& pass : kPasses) {
    const auto start = std::chrono::steady_clock::now();
    pass.run(run);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    stages.push_back({{"name", pass.name}, {"seconds", took.count()}});
  }
  run.result.report["stages"] = std::move(stages);
  return std::move(run.result);
}

}  // namespace hotpath::infer
