#include "graph_builder.h"

#include <ATen/ops/contiguous.h>

#include "hotpath/core/error.h"

namespace hotpath::infer::detail {

std::string GraphBuilder::param(const std::string& key, const at::Tensor& t) {
  HOTPATH_CHECK(t.defined(), "lowering: tensor ", key, " is undefined");
  HOTPATH_CHECK(graph_.params.count(key) == 0, "lowering: tensor ", key, " is added twice");
  graph_.params[key] = t.detach().to(at::kCPU, at::kFloat).contiguous().clone();
  return key;
}

std::string GraphBuilder::node(OpKind op, std::string name, std::vector<std::string> inputs,
                               std::map<std::string, std::string> params, std::map<std::string, AttrValue> attrs) {
  Node n;
  n.op = op;
  n.output = name;
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  n.params = std::move(params);
  n.attrs = std::move(attrs);
  graph_.nodes.push_back(std::move(n));
  return graph_.nodes.back().output;
}

void GraphBuilder::output_as(const std::string& value, const std::string& name) {
  HOTPATH_CHECK(!graph_.nodes.empty() && graph_.nodes.back().output == value, "lowering: ", value,
                " is not the last node's output");
  graph_.nodes.back().output = name;
  graph_.outputs.push_back(name);
}

Graph GraphBuilder::finish() {
  graph_.validate();
  return std::move(graph_);
}

}  // namespace hotpath::infer::detail
