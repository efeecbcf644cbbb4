// Private to infer/: appends nodes and copies of weights to a Graph while lowering a model.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/infer/graph.h"

namespace hotpath::infer::detail {

class GraphBuilder {
 public:
  // A float32 contiguous copy of `t` under `key` (the module's dotted name + role); returns the key.
  std::string param(const std::string& key, const at::Tensor& t);

  // Adds a node whose output value is named after the node; returns the output name.
  std::string node(OpKind op, std::string name, std::vector<std::string> inputs,
                   std::map<std::string, std::string> params = {}, std::map<std::string, AttrValue> attrs = {});

  void input(ValueSpec spec) { graph_.inputs.push_back(std::move(spec)); }
  void output(const std::string& value) { graph_.outputs.push_back(value); }
  // Renames the last node's output `value` to `name` and makes it a graph output.
  void output_as(const std::string& value, const std::string& name);
  // Validates and hands the graph over.
  Graph finish();

 private:
  Graph graph_;
};

}  // namespace hotpath::infer::detail
