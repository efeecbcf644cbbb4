#include "hotpath/infer/int8_chain.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hotpath::infer {
namespace {

bool static_int8_conv(const Node& n) { return n.op == OpKind::kConv2d && n.attr_str("quant", "") == "static_int8"; }

}  // namespace

std::int64_t chain_int8_convs(Graph& graph) {
  // value → (node index, input position) of every reader.
  std::map<std::string, std::vector<std::pair<std::size_t, std::size_t>>> readers;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      if (!n.inputs[k].empty()) readers[n.inputs[k]].emplace_back(i, k);
    }
  }
  std::int64_t chained = 0;
  for (Node& p : graph.nodes) {
    if (!static_int8_conv(p) || !p.input(1).empty() || p.attrs.count("output_scale") != 0) continue;
    const std::string act = p.attr_str("act", "none");
    if (act != "none" && act != "relu" && act != "relu6") continue;
    if (std::find(graph.outputs.begin(), graph.outputs.end(), p.output) != graph.outputs.end()) continue;
    const auto it = readers.find(p.output);
    if (it == readers.end() || it->second.empty()) continue;
    bool ok = true;
    double scale = 0.0;
    std::int64_t zero_point = 0;
    for (const auto& [index, position] : it->second) {
      const Node& c = graph.nodes[index];
      if (!static_int8_conv(c) || position != 0) {
        ok = false;
        break;
      }
      const double s = c.attr_float("input_scale", 0.0);
      const std::int64_t z = c.attr_int("input_zero_point", -1);
      if (scale == 0.0) {
        scale = s;
        zero_point = z;
      } else if (s != scale || z != zero_point) {
        ok = false;
        break;
      }
    }
    if (!ok || scale <= 0.0 || zero_point < 0 || zero_point > 255) continue;
    p.attrs["output_scale"] = scale;
    p.attrs["output_zero_point"] = zero_point;
    ++chained;
  }
  return chained;
}

}  // namespace hotpath::infer
