// The op set declared once (graph.h): names and kinds round-trip, an unknown op is refused where a graph is read
// with one line naming the node and the ops there are, and every op has a validation rule, so a graph of each op
// validates and serialises under its table name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "hotpath/core/error.h"
#include "hotpath/infer/graph.h"

namespace hotpath::infer {
namespace {

TEST(OpTable, EveryNameMapsToItsKindAndBack) {
  for (std::size_t i = 0; i < kOpCount; ++i) {
    const auto kind = static_cast<OpKind>(i);
    ASSERT_EQ(op_from_name(kOpNames[i]), kind) << kOpNames[i];
    EXPECT_EQ(op_name(kind), kOpNames[i]);
    EXPECT_EQ(op_index(kind), i);
  }
  EXPECT_FALSE(op_from_name("batch_norm").has_value());
  EXPECT_FALSE(op_from_name("").has_value());
  EXPECT_FALSE(op_from_name("Conv2d").has_value());  // names are case-sensitive, as config.json writes them
}

TEST(OpTable, AnUnknownOpIsRefusedWhenTheGraphIsReadNamingTheNodeAndTheOps) {
  const nlohmann::json j = {{"inputs", {{{"name", "x"}, {"dtype", "float32"}, {"shape", {-1, 4}}}}},
                            {"outputs", {"y"}},
                            {"nodes", {{{"op", "frobnicate"}, {"name", "f"}, {"inputs", {"x"}}, {"output", "y"}}}}};
  try {
    (void)graph_from_json(j, "config.json graph");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("config.json graph.nodes[0].op: unknown op 'frobnicate', expected one of conv2d, max_pool2d"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("l2_normalize"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// One node of each op that needs neither params nor attributes validates through its table row and round-trips
// through JSON under its name.
TEST(OpTable, ParamFreeOpsValidateAndRoundTripUnderTheirNames) {
  Graph g;
  g.inputs.push_back({.name = "x", .dtype = at::kFloat, .shape = {-1, 3, 4}, .dim_names = {}});
  g.inputs.push_back({.name = "mask", .dtype = at::kLong, .shape = {-1, 3}, .dim_names = {}});
  const auto add = [&](OpKind op, std::vector<std::string> inputs) {
    Node n;
    n.op = op;
    n.name = std::string(op_name(op)) + std::to_string(g.nodes.size());
    n.output = n.name;
    n.inputs = std::move(inputs);
    g.nodes.push_back(n);
    return n.output;
  };
  const std::string a = add(OpKind::kAdd, {"x", "x"});
  const std::string m = add(OpKind::kMul, {a, "x"});
  const std::string p = add(OpKind::kMeanPool, {m, "mask"});
  g.outputs = {add(OpKind::kL2Normalize, {p})};
  ASSERT_NO_THROW(g.validate());
  const nlohmann::ordered_json j = graph_to_json(g);
  EXPECT_EQ(j["nodes"][2]["op"], "mean_pool");
  const Graph back = graph_from_json(nlohmann::json::parse(j.dump()), "g");
  ASSERT_EQ(back.nodes.size(), g.nodes.size());
  for (std::size_t i = 0; i < g.nodes.size(); ++i) EXPECT_EQ(back.nodes[i].op, g.nodes[i].op);
}

}  // namespace
}  // namespace hotpath::infer
