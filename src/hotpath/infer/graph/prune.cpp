// Structured channel pruning of an image graph (prune.h): dependency groups over the graph's values, importance,
// the cut, the MACs search and the iterative prune → fine-tune loop; magnitude pruning with its sparsity report.
#include "hotpath/infer/prune.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::infer {
namespace {

// One channel axis of one value before the unions: its channel count, why it is fixed, who reads and writes it.
struct Space {
  std::int64_t channels = -1;
  std::string fixed_by;
  std::vector<std::size_t> producers, consumers, depthwise;  // node indices
  std::vector<std::string> values;
};

// The analysis channel_groups, graph_cost and the MACs search share: the groups plus, per conv2d/linear node, which
// group its input and output channels belong to and how many positions it runs at.
struct Analysis {
  std::vector<ChannelGroup> groups;
  struct NodeCost {
    std::size_t node = 0;
    std::size_t in_group = 0, out_group = 0;  // indices into groups
    std::int64_t in = 0, out = 0;             // channels today
    std::int64_t per_position = 0;            // (I/groups)·kh·kw multiply-adds per output channel and position
    std::int64_t positions = 0;               // Hout·Wout (1 for a linear)
    bool depthwise = false;
  };
  std::vector<NodeCost> costs;
};

// A value's channel axis and shape as far as the analysis needs them: its space, rank and spatial size (-1 unknown).
struct ValueInfo {
  std::size_t space = 0;
  std::int64_t rank = 4;
  std::int64_t height = -1, width = -1;
};

// The channel spaces of a graph's values and their unions (union-find), built node by node.
class SpaceTable {
 public:
  std::size_t add(std::int64_t channels, const std::string& value) {
    Space sp;
    sp.channels = channels;
    sp.values = {value};
    spaces_.push_back(std::move(sp));
    parent_.push_back(parent_.size());
    return parent_.size() - 1;
  }
  std::size_t root(std::size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  Space& at(std::size_t i) { return spaces_[root(i)]; }
  [[nodiscard]] std::size_t size() const { return spaces_.size(); }
  void fix(std::size_t s, const std::string& why) {
    Space& sp = at(s);
    if (sp.fixed_by.empty()) sp.fixed_by = why;
  }
  void set_channels(std::size_t s, std::int64_t c, const Node& n, const std::string& value) {
    Space& sp = at(s);
    if (sp.channels < 0) sp.channels = c;
    HOTPATH_CHECK(sp.channels == c, "prune: node ", n.name, " reads ", c, " channels from value ", value,
                  ", which has ", sp.channels);
  }
  // One space of two: the older (smaller index) is the root, so groups keep their first value's order.
  void unite(std::size_t a, std::size_t b, const Node& n) {
    std::size_t ra = root(a), rb = root(b);
    if (ra == rb) return;
    if (rb < ra) std::swap(ra, rb);
    Space& into = spaces_[ra];
    Space& from = spaces_[rb];
    HOTPATH_CHECK(into.channels < 0 || from.channels < 0 || into.channels == from.channels, "prune: node ", n.name,
                  " ties values of ", into.channels, " and ", from.channels, " channels (", into.values.front(), ", ",
                  from.values.front(), ")");
    parent_[rb] = ra;
    if (into.channels < 0) into.channels = from.channels;
    if (into.fixed_by.empty()) into.fixed_by = from.fixed_by;
    for (std::vector<std::size_t> Space::*list : {&Space::producers, &Space::consumers, &Space::depthwise}) {
      (into.*list).insert((into.*list).end(), (from.*list).begin(), (from.*list).end());
    }
    into.values.insert(into.values.end(), from.values.begin(), from.values.end());
  }

 private:
  std::vector<Space> spaces_;
  std::vector<std::size_t> parent_;
};

// Walks the graph's nodes, tying their values' channel spaces and recording each conv2d/linear's cost.
class GroupBuilder {
 public:
  explicit GroupBuilder(const Graph& graph) : graph_(graph) {
    for (const ValueSpec& in : graph.inputs) {
      const bool image = in.shape.size() == 4;
      ValueInfo v{.space = spaces_.add(image ? in.shape[1] : -1, in.name),
                  .rank = static_cast<std::int64_t>(in.shape.size()),
                  .height = image ? in.shape[2] : -1,
                  .width = image ? in.shape[3] : -1};
      spaces_.fix(v.space, "graph input " + in.name);
      values_[in.name] = v;
    }
    for (std::size_t i = 0; i < graph.nodes.size(); ++i) visit(i);
    for (const std::string& out : graph.outputs) spaces_.fix(values_.at(out).space, "graph output " + out);
  }

  // The groups, ordered by the first node that writes each (the graph input's first), and each cost's groups.
  Analysis finish() {
    std::vector<std::pair<std::size_t, std::size_t>> order;  // (first writer's node index + 1, root); 0: none
    for (std::size_t s = 0; s < spaces_.size(); ++s) {
      if (spaces_.root(s) != s) continue;
      const Space& sp = spaces_.at(s);
      std::size_t first = graph_.nodes.size();
      for (const auto* list : {&sp.producers, &sp.depthwise}) {
        for (std::size_t i : *list) first = std::min(first, i);
      }
      order.emplace_back(first == graph_.nodes.size() ? 0 : first + 1, s);
    }
    std::stable_sort(order.begin(), order.end());
    Analysis a;
    std::map<std::size_t, std::size_t> group_of_root;
    for (const auto& [first, root] : order) {
      const Space& sp = spaces_.at(root);
      ChannelGroup g;
      g.channels = sp.channels;
      g.producers = names(sp.producers);
      g.consumers = names(sp.consumers);
      g.depthwise = names(sp.depthwise);
      g.values = sp.values;
      g.fixed_by = sp.fixed_by;
      if (g.fixed_by.empty() && g.producers.empty() && g.depthwise.empty()) g.fixed_by = "no node writes its channels";
      if (g.fixed_by.empty() && g.channels <= 1) g.fixed_by = "a single channel";
      g.prunable = g.fixed_by.empty();
      group_of_root[root] = a.groups.size();
      a.groups.push_back(std::move(g));
    }
    a.costs = costs_;
    for (std::size_t c = 0; c < a.costs.size(); ++c) {
      a.costs[c].in_group = group_of_root.at(spaces_.root(cost_spaces_[c].first));
      a.costs[c].out_group = group_of_root.at(spaces_.root(cost_spaces_[c].second));
    }
    return a;
  }

 private:
  std::vector<std::string> names(std::vector<std::size_t> idx) const {
    std::sort(idx.begin(), idx.end());
    std::vector<std::string> out;
    for (std::size_t i : idx) out.push_back(graph_.nodes[i].name);
    return out;
  }

  void visit(std::size_t i) {
    const Node& n = graph_.nodes[i];
    HOTPATH_CHECK(n.attr_str("quant", "").empty(), "prune: node ", n.name, " is quantized (", n.attr_str("quant", ""),
                  "); prune the fp32 graph, then quantize");
    const ValueInfo x = n.inputs.empty() || n.input(0).empty() ? ValueInfo{} : values_.at(n.input(0));
    ValueInfo y = x;
    switch (n.op) {
      case OpKind::kConv2d: y = conv(i, x); break;
      case OpKind::kLinear: y = linear(i, x); break;
      case OpKind::kMaxPool2d: {
        const auto k = n.attr_ints("kernel", {}), s = n.attr_ints("stride", {}), p = n.attr_ints("padding", {0, 0});
        if (x.height >= 0) y.height = (x.height + 2 * p[0] - k[0]) / s[0] + 1;
        if (x.width >= 0) y.width = (x.width + 2 * p[1] - k[1]) / s[1] + 1;
        spaces_.at(x.space).values.push_back(n.output);
        break;
      }
      case OpKind::kGlobalAvgPool:
        y.height = y.width = 1;
        y.rank = n.attr_int("keepdims", 0) != 0 ? 4 : 2;
        spaces_.at(x.space).values.push_back(n.output);
        break;
      case OpKind::kAdd:
      case OpKind::kMul: {
        const ValueInfo& b = values_.at(n.input(1));
        if (spaces_.at(x.space).channels == spaces_.at(b.space).channels) {
          spaces_.unite(x.space, b.space, n);
        } else {  // a broadcast over channels: nothing ties them, nothing may change either
          spaces_.fix(x.space, std::string(op_name(n.op)) + " " + n.name + " broadcasts over channels");
          spaces_.fix(b.space, std::string(op_name(n.op)) + " " + n.name + " broadcasts over channels");
        }
        spaces_.at(x.space).values.push_back(n.output);
        break;
      }
      default:  // an op pruning does not follow: what it reads and writes stays whole
        for (const std::string& in : n.inputs) {
          if (!in.empty()) spaces_.fix(values_.at(in).space, std::string(op_name(n.op)) + " " + n.name);
        }
        y = ValueInfo{.space = spaces_.add(-1, n.output), .rank = -1};
        spaces_.fix(y.space, std::string(op_name(n.op)) + " " + n.name);
        break;
    }
    values_[n.output] = y;
  }

  void residual(const Node& n, std::size_t out_space) {
    if (n.inputs.size() > 1 && !n.input(1).empty()) spaces_.unite(out_space, values_.at(n.input(1)).space, n);
  }

  ValueInfo conv(std::size_t i, const ValueInfo& x) {
    const Node& n = graph_.nodes[i];
    const at::Tensor& w = graph_.params.at(n.params.at("weight"));
    const std::int64_t groups = n.attr_int("groups", 1);
    const std::int64_t out = w.size(0), per_group = w.size(1);
    spaces_.set_channels(x.space, per_group * groups, n, n.input(0));
    const auto stride = n.attr_ints("stride", {1, 1}), pad = n.attr_ints("padding", {0, 0, 0, 0});
    const auto dil = n.attr_ints("dilation", {1, 1});
    const auto size = [](std::int64_t in, std::int64_t before, std::int64_t after, std::int64_t k, std::int64_t s,
                         std::int64_t d) { return in < 0 ? in : (in + before + after - d * (k - 1) - 1) / s + 1; };
    ValueInfo y{.space = x.space,
                .rank = 4,
                .height = size(x.height, pad[0], pad[2], w.size(2), stride[0], dil[0]),
                .width = size(x.width, pad[1], pad[3], w.size(3), stride[1], dil[1])};
    const bool depthwise = groups > 1 && per_group == 1 && out == groups;  // groups == in == out
    if (groups == 1) {
      y.space = spaces_.add(out, n.output);
      spaces_.at(y.space).producers.push_back(i);
      spaces_.at(x.space).consumers.push_back(i);
    } else if (depthwise) {  // its output channels are its input channels
      spaces_.at(x.space).depthwise.push_back(i);
      spaces_.at(x.space).values.push_back(n.output);
    } else {
      y.space = spaces_.add(out, n.output);
      const std::string why = "grouped conv " + n.name + " (groups " + std::to_string(groups) + ")";
      spaces_.fix(x.space, why);
      spaces_.fix(y.space, why);
    }
    residual(n, y.space);
    costs_.push_back({.node = i,
                      .in = per_group * groups,
                      .out = out,
                      .per_position = per_group * w.size(2) * w.size(3),
                      .positions = y.height * y.width,
                      .depthwise = depthwise});
    cost_spaces_.emplace_back(x.space, y.space);
    return y;
  }

  ValueInfo linear(std::size_t i, const ValueInfo& x) {
    const Node& n = graph_.nodes[i];
    const at::Tensor& w = graph_.params.at(n.params.at("weight"));
    ValueInfo y = x;
    y.space = spaces_.add(w.size(0), n.output);
    if (x.rank == 2) {
      spaces_.set_channels(x.space, w.size(1), n, n.input(0));
      spaces_.at(y.space).producers.push_back(i);
      spaces_.at(x.space).consumers.push_back(i);
    } else {  // over a last axis that is no channel axis here
      const std::string why = "linear " + n.name + " over a rank-" + std::to_string(x.rank) + " value";
      spaces_.fix(x.space, why);
      spaces_.fix(y.space, why);
    }
    residual(n, y.space);
    costs_.push_back({.node = i, .in = w.size(1), .out = w.size(0), .per_position = w.size(1), .positions = 1});
    cost_spaces_.emplace_back(x.space, y.space);
    return y;
  }

  const Graph& graph_;
  SpaceTable spaces_;
  std::map<std::string, ValueInfo> values_;
  std::vector<Analysis::NodeCost> costs_;
  std::vector<std::pair<std::size_t, std::size_t>> cost_spaces_;  // per cost: its input and output space
};

Analysis analyse(const Graph& graph) {
  graph.validate();
  return GroupBuilder(graph).finish();
}

// Multiply-adds of one sample with each group at `widths` (channels now where a group is absent from the map).
double macs_at(const Analysis& a, const std::map<std::size_t, std::int64_t>& widths) {
  const auto width = [&](std::size_t g, std::int64_t now) {
    auto it = widths.find(g);
    return it == widths.end() ? now : it->second;
  };
  double macs = 0.0;
  for (const Analysis::NodeCost& c : a.costs) {
    const double out = static_cast<double>(width(c.out_group, c.out));
    // A depthwise conv's multiply-adds per output channel do not depend on the width; a dense one's scale with the
    // input width (per_position is (I/groups)·kh·kw today).
    const double in_scale =
        c.depthwise ? 1.0 : static_cast<double>(width(c.in_group, c.in)) / static_cast<double>(c.in);
    macs += out * static_cast<double>(c.per_position) * in_scale * static_cast<double>(c.positions);
  }
  return macs;
}

at::Tensor slice_scores(const at::Tensor& w, const at::Tensor& g, bool rows, Importance importance) {
  const at::Tensor wf = (rows ? w : w.transpose(0, 1)).to(at::kFloat).flatten(1);
  if (importance == Importance::kTaylor) {
    const at::Tensor gf = (rows ? g : g.transpose(0, 1)).to(at::kFloat).flatten(1);
    return (wf * gf).abs().sum(1);  // torch-pruning's GroupTaylorImportance default (multivariable=False)
  }
  return importance == Importance::kL1 ? wf.abs().sum(1) : wf.square().sum(1);
}

std::vector<std::int64_t> top_channels(const at::Tensor& importance, std::int64_t keep) {
  // The `keep` largest, ties to the lower index (a stable sort), returned in ascending channel order.
  const at::Tensor order = std::get<1>(at::sort(importance.contiguous(), /*stable=*/true, /*dim=*/0, /*descending=*/true));
  std::vector<std::int64_t> kept(order.data_ptr<std::int64_t>(), order.data_ptr<std::int64_t>() + keep);
  std::sort(kept.begin(), kept.end());
  return kept;
}

}  // namespace

void check_prune_options(const PruneOptions& o) {
  const bool by_ratio = o.ratio != 0.0, by_macs = o.target_macs != 0.0;
  HOTPATH_CHECK(by_ratio != by_macs, "prune: give exactly one of ratio (channels removed per group) or target_macs "
                                     "(the fraction of multiply-adds to keep)");
  HOTPATH_CHECK(!by_ratio || (o.ratio > 0.0 && o.ratio < 1.0), "prune: ratio must be in (0, 1) (1 would remove "
                                                               "every channel); got ", o.ratio);
  HOTPATH_CHECK(!by_macs || (o.target_macs > 0.0 && o.target_macs < 1.0),
                "prune: target_macs (the fraction of multiply-adds kept) must be in (0, 1); got ", o.target_macs);
  HOTPATH_CHECK(o.round_to >= 1 && o.round_to <= 1024, "prune: round_to must be in [1, 1024]; got ", o.round_to);
  HOTPATH_CHECK(o.iterations >= 1 && o.iterations <= 1000, "prune: iterations must be in [1, 1000]; got ",
                o.iterations);
  HOTPATH_CHECK(o.taylor_batches >= 1 && o.taylor_batches <= 10000, "prune: taylor_batches must be in [1, 10000]; got ",
                o.taylor_batches);
  HOTPATH_CHECK(o.finetune_steps >= 0 && o.finetune_steps <= 10000000, "prune: finetune_steps must be in "
                                                                       "[0, 10000000]; got ", o.finetune_steps);
}

namespace {

void check_options(const Graph& graph, const PruneOptions& o) {
  check_prune_options(o);
  for (const std::string& name : o.ignore) {
    const Node* n = graph.find_node(name);
    HOTPATH_CHECK(n != nullptr && (n->op == OpKind::kConv2d || n->op == OpKind::kLinear), "prune: ignore names '",
                  name, "', which is no conv2d or linear node of the graph");
  }
}

// The groups of `graph` with the ignored nodes' output groups fixed.
Analysis analyse_with(const Graph& graph, const std::vector<std::string>& ignore) {
  Analysis a = analyse(graph);
  for (ChannelGroup& g : a.groups) {
    for (const std::string& name : ignore) {
      const bool writes = std::find(g.producers.begin(), g.producers.end(), name) != g.producers.end() ||
                          std::find(g.depthwise.begin(), g.depthwise.end(), name) != g.depthwise.end();
      if (writes && g.prunable) {
        g.prunable = false;
        g.fixed_by = "ignore " + name;
      }
    }
  }
  return a;
}

}  // namespace

std::string ChannelGroup::name() const {
  if (!producers.empty()) return producers.front();
  return depthwise.empty() ? (values.empty() ? std::string("?") : values.front()) : depthwise.front();
}

std::vector<ChannelGroup> channel_groups(const Graph& graph) { return analyse(graph).groups; }

GraphCost graph_cost(const Graph& graph) {
  const Analysis a = analyse(graph);
  GraphCost c;
  for (const Analysis::NodeCost& n : a.costs) {
    HOTPATH_CHECK(n.positions >= 1, "graph_cost: node ", graph.nodes[n.node].name,
                  " runs at a size the graph does not fix (its input's height and width must be fixed)");
  }
  c.macs = macs_at(a, {});
  for (const auto& [key, t] : graph.params) c.params += t.numel();
  return c;
}

const char* importance_name(Importance importance) {
  switch (importance) {
    case Importance::kL1: return "l1";
    case Importance::kL2: return "l2";
    case Importance::kTaylor: return "taylor";
  }
  return "?";
}

Importance importance_from_name(const std::string& name) {
  for (Importance i : {Importance::kL1, Importance::kL2, Importance::kTaylor}) {
    if (name == importance_name(i)) return i;
  }
  throw Error("prune: importance '" + name + "' is none of l1, l2, taylor");
}

at::Tensor channel_importance(const Graph& graph, const ChannelGroup& group, Importance importance,
                              const std::map<std::string, at::Tensor>& gradients) {
  const at::NoGradGuard no_grad;
  at::Tensor sum = at::zeros({group.channels}, at::kFloat);
  std::int64_t members = 0;
  const auto add = [&](const std::string& name, bool rows) {
    const Node* n = graph.find_node(name);
    HOTPATH_CHECK(n != nullptr, "prune: the group names node ", name, ", which the graph does not have");
    const std::string& key = n->params.at("weight");
    at::Tensor grad;
    if (importance == Importance::kTaylor) {
      auto it = gradients.find(key);
      HOTPATH_CHECK(it != gradients.end(), "prune: taylor importance needs the gradient of ", key);
      grad = it->second;
    }
    const at::Tensor s = slice_scores(graph.params.at(key), grad, rows, importance);
    HOTPATH_CHECK(s.size(0) == group.channels, "prune: node ", name, " has ", s.size(0), " channels where its group has ",
                  group.channels);
    sum += s;
    ++members;
  };
  for (const std::string& p : group.producers) add(p, /*rows=*/true);
  for (const std::string& c : group.consumers) add(c, /*rows=*/false);
  for (const std::string& d : group.depthwise) add(d, /*rows=*/true);
  HOTPATH_CHECK(members > 0, "prune: group ", group.name(), " has no weights to score");
  at::Tensor imp = sum / static_cast<double>(members);
  const double mean = imp.mean().item<double>();
  return mean > 0.0 ? imp / mean : imp;
}

Graph prune_channels(const Graph& graph, const std::vector<ChannelGroup>& groups,
                     const std::map<std::size_t, std::vector<std::int64_t>>& kept) {
  Graph out = graph;
  for (const auto& [index, channels] : kept) {
    HOTPATH_CHECK(index < groups.size(), "prune: group index ", index, " beyond the ", groups.size(), " groups");
    const ChannelGroup& g = groups[index];
    HOTPATH_CHECK(g.prunable, "prune: group ", g.name(), " is fixed (", g.fixed_by, ")");
    HOTPATH_CHECK(!channels.empty() && static_cast<std::int64_t>(channels.size()) <= g.channels,
                  "prune: group ", g.name(), " keeps ", channels.size(), " of its ", g.channels,
                  " channels; at least one");
    for (std::size_t i = 0; i < channels.size(); ++i) {
      HOTPATH_CHECK(channels[i] >= 0 && channels[i] < g.channels && (i == 0 || channels[i] > channels[i - 1]),
                    "prune: group ", g.name(), ": kept channels must ascend within [0, ", g.channels, ")");
    }
    const at::Tensor idx = at::tensor(channels, at::kLong);
    const auto slice = [&](const std::string& name, const std::string& role, std::int64_t dim) {
      const Node* n = out.find_node(name);
      auto it = n->params.find(role);
      if (it == n->params.end()) return;
      at::Tensor& t = out.params.at(it->second);
      t = t.index_select(dim, idx).contiguous();
    };
    for (const std::string& p : g.producers) {
      slice(p, "weight", 0);
      slice(p, "bias", 0);
    }
    for (const std::string& c : g.consumers) slice(c, "weight", 1);
    for (const std::string& d : g.depthwise) {
      slice(d, "weight", 0);
      slice(d, "bias", 0);
      for (Node& n : out.nodes) {
        if (n.name == d) n.attrs["groups"] = static_cast<std::int64_t>(channels.size());
      }
    }
  }
  out.validate();
  return out;
}

std::int64_t kept_channels(std::int64_t channels, double ratio, std::int64_t round_to) {
  auto keep = static_cast<std::int64_t>(static_cast<double>(channels) * (1.0 - ratio));
  if (round_to > 1 && channels >= round_to) keep = std::max(round_to, keep - keep % round_to);
  return std::clamp<std::int64_t>(keep, 1, channels);
}

PruneResult prune_graph(const Graph& graph, const QatData& data, const PruneOptions& options) {
  check_options(graph, options);
  const auto clock_start = std::chrono::steady_clock::now();
  const Analysis first = analyse_with(graph, options.ignore);
  std::vector<std::size_t> prunable;
  for (std::size_t g = 0; g < first.groups.size(); ++g) {
    if (first.groups[g].prunable) prunable.push_back(g);
  }
  HOTPATH_CHECK(!prunable.empty(), "prune: the graph has no prunable channel group (every group touches a graph input "
                                   "or output, an ignored node or an op pruning does not follow)");
  HOTPATH_CHECK(options.importance != Importance::kTaylor || static_cast<bool>(data),
                "prune: taylor importance needs data (batches to take the gradients on)");
  HOTPATH_CHECK(options.finetune_steps == 0 || static_cast<bool>(data), "prune: fine-tuning needs data");
  const GraphCost before = graph_cost(graph);
  // A group with a depthwise conv keeps two channels at least: at one, its conv would have groups 1 and read as a
  // dense 1 → 1 conv, which no longer ties the group together.
  const auto keep_of = [&](std::size_t g, double ratio) {
    const std::int64_t c = first.groups[g].channels;
    const std::int64_t keep = kept_channels(c, ratio, options.round_to);
    return first.groups[g].depthwise.empty() ? keep : std::max(keep, std::min<std::int64_t>(2, c));
  };
  const auto widths_at = [&](double ratio) {
    std::map<std::size_t, std::int64_t> w;
    for (std::size_t g : prunable) w[g] = keep_of(g, ratio);
    return w;
  };
  double ratio = options.ratio;
  if (options.target_macs > 0.0) {  // the smallest uniform ratio whose MACs are within the target (bisection)
    const double goal = options.target_macs * before.macs;
    double lo = 0.0, hi = 0.9999;
    const double least = macs_at(first, widths_at(hi));
    HOTPATH_CHECK(least <= goal, "prune: target_macs ", options.target_macs, " is out of reach: pruning every group to ",
                  "its least keeps ", least / before.macs, " of the multiply-adds (the fixed groups' layers stay)");
    for (int i = 0; i < 50; ++i) {
      const double mid = 0.5 * (lo + hi);
      (macs_at(first, widths_at(mid)) <= goal ? hi : lo) = mid;
    }
    ratio = hi;
  }

  Graph current = graph;
  nlohmann::ordered_json finetune = nlohmann::ordered_json::array();
  for (std::int64_t it = 1; it <= options.iterations; ++it) {
    const double step_ratio =  // the last cut at exactly the searched ratio (its widths are the search's)
        it == options.iterations ? ratio : ratio * static_cast<double>(it) / static_cast<double>(options.iterations);
    const Analysis now = analyse_with(current, options.ignore);
    HOTPATH_CHECK(now.groups.size() == first.groups.size(), "prune: the pruned graph's groups changed (",
                  now.groups.size(), " from ", first.groups.size(), ")");
    std::map<std::string, at::Tensor> gradients;
    if (options.importance == Importance::kTaylor) {
      std::vector<QatBatch> batches;
      for (std::int64_t b = 0; b < options.taylor_batches; ++b) batches.push_back(data());
      gradients = graph_gradients(current, batches);
    }
    std::map<std::size_t, std::vector<std::int64_t>> kept;
    for (std::size_t g : prunable) {
      const std::int64_t keep = keep_of(g, step_ratio);
      if (keep >= now.groups[g].channels) continue;
      kept[g] = top_channels(channel_importance(current, now.groups[g], options.importance, gradients), keep);
    }
    current = prune_channels(current, now.groups, kept);
    if (options.progress) options.progress(it, options.iterations);
    if (options.finetune_steps > 0) {
      QatOptions o = options.finetune;
      o.steps = options.finetune_steps;
      o.fake_quantize = false;
      o.initial_ranges.clear();
      o.keep_float.clear();
      QatResult r = qat_train(graph, data, o, &current);
      current = std::move(r.graph);
      finetune.push_back({{"iteration", it},
                          {"steps", o.steps},
                          {"loss_first", r.report["loss_first"]},
                          {"loss_last", r.report["loss_last"]},
                          {"seconds", r.report["seconds"]}});
    }
  }

  const GraphCost after = graph_cost(current);
  const Analysis last = analyse(current);
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  std::int64_t fixed = 0;
  for (std::size_t g = 0; g < first.groups.size(); ++g) {
    if (!first.groups[g].prunable) {
      ++fixed;
      continue;
    }
    groups.push_back({{"name", first.groups[g].name()},
                      {"channels", first.groups[g].channels},
                      {"kept", last.groups[g].channels}});
  }
  PruneResult result;
  result.graph = std::move(current);
  result.report = {
      {"method", "structured channel pruning (dependency groups)"},
      {"importance", importance_name(options.importance)},
      {"ratio", ratio},
      {"target_macs", options.target_macs},
      {"round_to", options.round_to},
      {"iterations", options.iterations},
      {"ignore", options.ignore},
      {"finetune_steps_per_iteration", options.finetune_steps},
      {"macs", {{"before", before.macs}, {"after", after.macs}, {"kept", after.macs / before.macs}}},
      {"params", {{"before", before.params},
                  {"after", after.params},
                  {"kept", static_cast<double>(after.params) / static_cast<double>(std::max<std::int64_t>(1, before.params))}}},
      {"prunable_groups", groups},
      {"fixed_groups", fixed},
      {"finetune", finetune},
      {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start).count()}};
  return result;
}

nlohmann::ordered_json magnitude_prune(Graph& graph, double sparsity) {
  HOTPATH_CHECK(sparsity >= 0.0 && sparsity < 1.0, "prune: sparsity must be in [0, 1); got ", sparsity);
  const at::NoGradGuard no_grad;
  nlohmann::ordered_json nodes = nlohmann::ordered_json::object();
  std::int64_t zeros = 0, total = 0;
  for (const Node& n : graph.nodes) {
    if (n.op != OpKind::kConv2d && n.op != OpKind::kLinear) continue;
    HOTPATH_CHECK(n.attr_str("quant", "").empty(), "prune: node ", n.name, " is quantized; prune the fp32 graph");
    at::Tensor& w = graph.params.at(n.params.at("weight"));
    const auto k = static_cast<std::int64_t>(sparsity * static_cast<double>(w.numel()));
    if (k > 0) {
      at::Tensor flat = w.contiguous().view({-1}).clone();
      const at::Tensor smallest = std::get<1>(at::sort(flat.abs(), /*stable=*/true, 0, false)).narrow(0, 0, k);
      flat.index_fill_(0, smallest, 0.0);
      w = flat.view(w.sizes());
    }
    const std::int64_t z = (w == 0).sum().item<std::int64_t>();
    nodes[n.name] = static_cast<double>(z) / static_cast<double>(w.numel());
    zeros += z;
    total += w.numel();
  }
  return {{"method", "magnitude (unstructured)"},
          {"sparsity_target", sparsity},
          {"sparsity", total > 0 ? static_cast<double>(zeros) / static_cast<double>(total) : 0.0},
          {"speedup", "none: the weights stay dense tensors, so the engine (and any dense kernel) runs exactly as many "
                      "multiply-adds; zeros only make the package compress better. Structured pruning removes "
                      "channels and does speed up."},
          {"nodes", nodes}};
}

}  // namespace hotpath::infer
