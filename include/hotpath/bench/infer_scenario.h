// hotpath/bench/infer_scenario.h — MLPerf-style inference scenarios around any callable that runs one query.
//
//   ScenarioOptions o{.scenario = Scenario::kSingleStream, .min_queries = 50};
//   ScenarioFigures f = run_scenario(o, /*samples_per_call=*/1, [&](std::int64_t q) { engine.run(query[q % n]); });
//   std::cout << f.per_s << " q/s, p99 " << f.p99_ms << " ms\n";
//
// The rules (bench/peers/infer_peers.py follows them line for line, so both sides are timed alike):
//   singlestream  `warmup` untimed calls, then calls back to back until min_queries and min_seconds are both
//                 reached or max_seconds has passed; latency percentiles of the calls; per_s = calls / time
//   offline       the same loop where each call is one batch: per_s = calls × samples_per_call / time,
//                 percentiles of the batch latency
//   server        queries arriving as a Poisson process (seeded), one worker, first come first served;
//                 latency = finish − arrival (queueing included). The capacity is 1 / the median of 5 timed
//                 calls after warm-up; trial 1 offers 100 % of it, and if its p99 passes the search ends,
//                 otherwise it bisects between 2 % and the last failing fraction for server_steps trials of
//                 server_queries queries. per_s = the highest offered QPS whose p99 <= server_p99_ms (0 when
//                 no trial passes). A trial stops early once a query's latency passes 10× the bound.
// Percentiles are nearest-rank. Torch-free: the callable owns whatever it runs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hotpath::bench {

enum class Scenario { kSingleStream, kOffline, kServer };
const char* scenario_name(Scenario s);                     // "singlestream" | "offline" | "server"
Scenario parse_scenario(const std::string& name);          // throws naming the accepted values

struct ScenarioOptions {
  Scenario scenario = Scenario::kOffline;
  int warmup = 2;
  std::int64_t min_queries = 20;
  double min_seconds = 1.0;
  double max_seconds = 20.0;
  double server_p99_ms = 100.0;
  std::int64_t server_queries = 100;
  int server_steps = 5;
  std::uint64_t seed = 0;
};

struct ScenarioFigures {
  double per_s = 0;     // samples/s (offline), queries/s (singlestream), max QPS under the bound (server)
  double p50_ms = 0;
  double p90_ms = 0;
  double p99_ms = 0;
  std::int64_t queries = 0;  // timed calls (server: of the reported trial)
  double seconds = 0;
  std::int64_t batch = 1;
  nlohmann::ordered_json server = nullptr;  // server: capacity_qps, p99_bound_ms, achieved_qps, trials[]
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

// Runs call(i) for query i = 0, 1, 2, ... under the scenario's rules. samples_per_call: the batch each
// call runs (offline's rate counts samples; the others require 1).
ScenarioFigures run_scenario(const ScenarioOptions& options, std::int64_t samples_per_call,
                             const std::function<void(std::int64_t)>& call);

// The nearest-rank percentile (p in (0, 1]) of `values`, which need not be sorted; 0 when empty.
double percentile(std::vector<double> values, double p);

}  // namespace hotpath::bench
