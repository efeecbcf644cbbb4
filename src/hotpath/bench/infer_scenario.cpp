#include "hotpath/bench/infer_scenario.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "hotpath/core/error.h"

namespace hotpath::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double since(Clock::time_point t, Clock::time_point now) { return std::chrono::duration<double>(now - t).count(); }

ScenarioFigures figures(const std::vector<double>& latencies_s, double samples, double seconds) {
  std::vector<double> ms;
  ms.reserve(latencies_s.size());
  for (const double s : latencies_s) ms.push_back(s * 1e3);
  ScenarioFigures f;
  f.per_s = seconds > 0 ? samples / seconds : 0;
  f.p50_ms = percentile(ms, 0.5);
  f.p90_ms = percentile(ms, 0.9);
  f.p99_ms = percentile(ms, 0.99);
  f.queries = static_cast<std::int64_t>(ms.size());
  f.seconds = seconds;
  return f;
}

// Warm-up, then calls until min_queries and min_seconds are both reached or max_seconds has passed.
ScenarioFigures timed_loop(const ScenarioOptions& o, std::int64_t samples_per_call,
                           const std::function<void(std::int64_t)>& call) {
  for (int i = 0; i < o.warmup; ++i) call(i);
  std::vector<double> latencies;
  const Clock::time_point start = Clock::now();
  for (;;) {
    const Clock::time_point t = Clock::now();
    call(static_cast<std::int64_t>(latencies.size()));
    const Clock::time_point now = Clock::now();
    latencies.push_back(since(t, now));
    const double elapsed = since(start, now);
    if ((static_cast<std::int64_t>(latencies.size()) >= o.min_queries && elapsed >= o.min_seconds) ||
        elapsed >= o.max_seconds) {
      ScenarioFigures f = figures(latencies, static_cast<double>(latencies.size() * samples_per_call), elapsed);
      f.batch = samples_per_call;
      return f;
    }
  }
}

// One Poisson trial at `qps`: one worker, FIFO; latency = finish - arrival.
Json server_trial(const ScenarioOptions& o, const std::function<void(std::int64_t)>& call, double qps,
                  std::mt19937_64& rng) {
  std::exponential_distribution<double> gap(qps);
  const double bound_s = o.server_p99_ms / 1e3;
  std::vector<double> latencies;
  const Clock::time_point t0 = Clock::now();
  double arrival = 0;
  for (std::int64_t i = 0; i < o.server_queries; ++i) {
    arrival += gap(rng);
    const Clock::time_point due = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival));
    std::this_thread::sleep_until(due);
    call(i);
    latencies.push_back(since(due, Clock::now()));
    if (latencies.back() > 10 * bound_s) break;
  }
  const bool complete = static_cast<std::int64_t>(latencies.size()) == o.server_queries;
  const ScenarioFigures f = figures(latencies, static_cast<double>(latencies.size()), since(t0, Clock::now()));
  return {{"target_qps", qps},      {"per_s", f.per_s},   {"p50_ms", f.p50_ms},
          {"p90_ms", f.p90_ms},     {"p99_ms", f.p99_ms}, {"queries", f.queries},
          {"seconds", f.seconds},   {"passed", complete && f.p99_ms <= o.server_p99_ms}};
}

ScenarioFigures server_search(const ScenarioOptions& o, const std::function<void(std::int64_t)>& call) {
  HOTPATH_CHECK(o.server_p99_ms > 0 && o.server_queries >= 1 && o.server_steps >= 1,
                "bench infer: the server scenario needs a p99 bound > 0 ms, >= 1 query and >= 1 trial (got ",
                o.server_p99_ms, " ms, ", o.server_queries, ", ", o.server_steps, ")");
  for (int i = 0; i < o.warmup; ++i) call(i);
  std::vector<double> probe;
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point t = Clock::now();
    call(i);
    probe.push_back(since(t, Clock::now()));
  }
  std::sort(probe.begin(), probe.end());
  const double capacity = 1.0 / std::max(probe[probe.size() / 2], 1e-9);
  std::mt19937_64 rng(o.seed);
  double lo = 0.02;
  double hi = 1.0;
  Json best = nullptr;
  Json trials = Json::array();
  for (int step = 0; step < o.server_steps; ++step) {
    const double fraction = step == 0 ? hi : (lo + hi) / 2;
    Json trial = server_trial(o, call, fraction * capacity, rng);
    const bool passed = trial["passed"].get<bool>();
    trials.push_back(trial);
    if (passed) {
      best = std::move(trial);
      lo = fraction;
      if (step == 0) break;
    } else {
      hi = fraction;
    }
  }
  ScenarioFigures f;
  if (!best.is_null()) {
    f.per_s = best["target_qps"].get<double>();
    f.p50_ms = best["p50_ms"].get<double>();
    f.p90_ms = best["p90_ms"].get<double>();
    f.p99_ms = best["p99_ms"].get<double>();
    f.queries = best["queries"].get<std::int64_t>();
    f.seconds = best["seconds"].get<double>();
  }
  f.server = {{"capacity_qps", capacity},
              {"p99_bound_ms", o.server_p99_ms},
              {"achieved_qps", best.is_null() ? 0.0 : best["per_s"].get<double>()},
              {"trials", std::move(trials)}};
  return f;
}

}  // namespace

const char* scenario_name(Scenario s) {
  switch (s) {
    case Scenario::kSingleStream: return "singlestream";
    case Scenario::kOffline: return "offline";
    case Scenario::kServer: return "server";
  }
  return "?";
}

Scenario parse_scenario(const std::string& name) {
  for (const Scenario s : {Scenario::kSingleStream, Scenario::kOffline, Scenario::kServer}) {
    if (name == scenario_name(s)) return s;
  }
  HOTPATH_CHECK(false, "bench infer: unknown scenario '", name, "' (expected singlestream, offline or server)");
  return Scenario::kOffline;  // unreachable
}

Json ScenarioFigures::to_json() const {
  Json j{{"per_s", per_s}, {"p50_ms", p50_ms}, {"p90_ms", p90_ms}, {"p99_ms", p99_ms},
         {"queries", queries}, {"seconds", seconds}, {"batch", batch}};
  if (!server.is_null()) {
    for (const auto& [key, value] : server.items()) j[key] = value;
  }
  return j;
}

ScenarioFigures run_scenario(const ScenarioOptions& o, std::int64_t samples_per_call,
                             const std::function<void(std::int64_t)>& call) {
  HOTPATH_ASSERT(static_cast<bool>(call));
  HOTPATH_CHECK(samples_per_call >= 1, "bench infer: a call must run >= 1 sample, got ", samples_per_call);
  HOTPATH_CHECK(o.scenario == Scenario::kOffline || samples_per_call == 1, "bench infer: the ",
                scenario_name(o.scenario), " scenario sends queries of 1 sample, got ", samples_per_call);
  HOTPATH_CHECK(o.warmup >= 0 && o.min_queries >= 1 && o.max_seconds > 0, "bench infer: warmup >= 0, min queries "
                ">= 1 and max seconds > 0 expected (got ", o.warmup, ", ", o.min_queries, ", ", o.max_seconds, ")");
  if (o.scenario == Scenario::kServer) return server_search(o, call);
  return timed_loop(o, samples_per_call, call);
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto n = static_cast<double>(values.size());
  const auto k = static_cast<std::int64_t>(std::ceil(p * n)) - 1;
  return values[static_cast<std::size_t>(std::clamp<std::int64_t>(k, 0, static_cast<std::int64_t>(values.size()) - 1))];
}

}  // namespace hotpath::bench
