// The inference scenarios (bench/infer_scenario.h) around plain callables: query counts, warm-up, the rates'
// arithmetic, nearest-rank percentiles, and the server search's pass/fail logic. No absolute times are
// asserted: only orderings a sleep guarantees (a call that sleeps 20 ms never takes less).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "hotpath/bench/infer_scenario.h"
#include "hotpath/core/error.h"

namespace hotpath::bench {
namespace {

TEST(InferScenarioTest, PercentileIsNearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  EXPECT_EQ(percentile(v, 0.5), 50);
  EXPECT_EQ(percentile(v, 0.9), 90);
  EXPECT_EQ(percentile(v, 0.99), 99);
  EXPECT_EQ(percentile(v, 1.0), 100);
  EXPECT_EQ(percentile({7}, 0.99), 7);
  EXPECT_EQ(percentile({}, 0.5), 0);
  EXPECT_EQ(percentile({1, 2, 3}, 0.5), 2);
  EXPECT_EQ(percentile({1, 2, 3, 4}, 0.5), 2);
}

TEST(InferScenarioTest, SingleStreamRunsWarmupThenAtLeastMinQueriesInOrder) {
  std::vector<std::int64_t> seen;
  const ScenarioOptions o{.scenario = Scenario::kSingleStream, .warmup = 3, .min_queries = 25, .min_seconds = 0};
  const ScenarioFigures f = run_scenario(o, 1, [&](std::int64_t q) { seen.push_back(q); });
  ASSERT_EQ(f.queries, 25);
  ASSERT_EQ(seen.size(), 28u);
  EXPECT_EQ(seen[0], 0);
  EXPECT_EQ(seen[2], 2);
  for (std::int64_t i = 0; i < 25; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(3 + i)], i);
  EXPECT_EQ(f.batch, 1);
  EXPECT_GT(f.per_s, 0);
  EXPECT_NEAR(f.per_s, static_cast<double>(f.queries) / f.seconds, 1e-9 * f.per_s);
  EXPECT_LE(f.p50_ms, f.p90_ms);
  EXPECT_LE(f.p90_ms, f.p99_ms);
  EXPECT_TRUE(f.server.is_null());
}

TEST(InferScenarioTest, OfflineCountsSamplesOfEveryBatch) {
  int calls = 0;
  const ScenarioOptions o{.scenario = Scenario::kOffline, .warmup = 1, .min_queries = 4, .min_seconds = 0};
  const ScenarioFigures f = run_scenario(o, 32, [&](std::int64_t) {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(f.queries, 4);
  EXPECT_EQ(f.batch, 32);
  EXPECT_NEAR(f.per_s, 4.0 * 32 / f.seconds, 1e-9 * f.per_s);
  // Each batch sleeps 2 ms, so no percentile can be under 2 ms and the rate is at most 32 / 2 ms.
  EXPECT_GE(f.p50_ms, 2.0);
  EXPECT_LE(f.per_s, 32 / 0.002);
}

TEST(InferScenarioTest, LoopStopsAtMaxSecondsBeforeMinQueries) {
  const ScenarioOptions o{.scenario = Scenario::kSingleStream, .warmup = 0, .min_queries = 1000000,
                          .min_seconds = 0, .max_seconds = 0.05};
  const ScenarioFigures f = run_scenario(o, 1, [](std::int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  EXPECT_GE(f.queries, 1);
  EXPECT_LT(f.queries, 1000000);
  EXPECT_GE(f.seconds, 0.05);
}

TEST(InferScenarioTest, ServerFindsNoQpsWhenOneQueryAloneBreaksTheBound) {
  const ScenarioOptions o{.scenario = Scenario::kServer, .warmup = 1, .server_p99_ms = 5, .server_queries = 5,
                          .server_steps = 3};
  const ScenarioFigures f = run_scenario(o, 1, [](std::int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  EXPECT_EQ(f.per_s, 0);
  ASSERT_TRUE(f.server.is_object());
  EXPECT_EQ(f.server["p99_bound_ms"].get<double>(), 5);
  EXPECT_EQ(f.server["trials"].size(), 3u);
  for (const auto& t : f.server["trials"]) EXPECT_FALSE(t["passed"].get<bool>());
  EXPECT_LE(f.server["capacity_qps"].get<double>(), 1 / 0.020);
  // Bisection: each trial offers less than the one before.
  EXPECT_LT(f.server["trials"][1]["target_qps"].get<double>(), f.server["trials"][0]["target_qps"].get<double>());
  EXPECT_LT(f.server["trials"][2]["target_qps"].get<double>(), f.server["trials"][1]["target_qps"].get<double>());
}

TEST(InferScenarioTest, ServerReportsAPassingTrialUnderAGenerousBound) {
  // 1 ms calls, a 2 s bound: a trial at the offered rate passes unless the machine stalls for seconds.
  const ScenarioOptions o{.scenario = Scenario::kServer, .warmup = 1, .server_p99_ms = 2000, .server_queries = 20,
                          .server_steps = 4, .seed = 3};
  std::int64_t calls = 0;
  const ScenarioFigures f = run_scenario(o, 1, [&](std::int64_t) {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  ASSERT_GT(f.per_s, 0);
  const auto& trials = f.server["trials"];
  ASSERT_GE(trials.size(), 1u);
  bool found = false;
  for (const auto& t : trials) {
    if (t["passed"].get<bool>()) {
      EXPECT_LE(t["p99_ms"].get<double>(), 2000);
      EXPECT_EQ(t["queries"].get<std::int64_t>(), 20);
      found = found || t["target_qps"].get<double>() == f.per_s;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_LE(f.per_s, f.server["capacity_qps"].get<double>() * (1 + 1e-12));
  EXPECT_EQ(f.p99_ms <= 2000, true);
  EXPECT_GE(calls, 1 + 5 + 20);
}

TEST(InferScenarioTest, BadOptionsAreRefusedNamingTheValue) {
  const auto noop = [](std::int64_t) {};
  EXPECT_THROW((void)run_scenario({.scenario = Scenario::kSingleStream}, 8, noop), Error);
  EXPECT_THROW((void)run_scenario({.scenario = Scenario::kServer, .server_p99_ms = 0}, 1, noop), Error);
  EXPECT_THROW((void)run_scenario({.min_queries = 0}, 1, noop), Error);
  EXPECT_EQ(parse_scenario("server"), Scenario::kServer);
  try {
    (void)parse_scenario("batch");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'batch'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotpath::bench
