// `hotpath bench serve PKG --clients N --requests M --json FILE`: `hotpath serve` under a bounded loopback
// load vs the engine's offline throughput on the same package, plus an overload run (hotpath/bench/serve_bench.h).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "hotpath/bench/serve_bench.h"
#include "hotpath/core/bounded.h"

namespace hotpath::cli {

void add_bench_serve(CLI::App& bench) {
  auto args = std::make_shared<bench::ServeBenchOptions>();
  auto json_path = std::make_shared<std::string>();
  CLI::App* cmd = bench.add_subcommand(
      "serve", "hotpath serve under N keep-alive clients (KServe v2 binary requests, every answer checked) vs the "
               "engine's offline throughput; then an overload run: 503 share and p99 of the accepted requests");
  cmd->add_option("package", args->package, "Model package directory (hotpath export)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--clients", args->clients, "Concurrent clients of the load run")->check(CLI::Range(1, 1024));
  cmd->add_option("--requests", args->requests, "Requests of each load run")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  cmd->add_option("--overload-clients", args->overload_clients,
                  "Clients of the overload run (0: 4 x --clients; -1: skip it)")
      ->check(CLI::Range(-1, 4096));
  cmd->add_option("--overload-requests", args->overload_requests, "Requests of the overload run (0: --requests)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  cmd->add_option("--max-batch-size", args->max_batch_size, "Server and offline batch")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-queue-delay-us", args->max_queue_delay_us, "Server: wait this long for a fuller batch")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{10'000'000}));
  cmd->add_option("--max-queue-size", args->max_queue_size, "Server queue of the load run (overload: --max-batch-size)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--queue-timeout-ms", args->queue_timeout_ms, "Server: queued longer is answered 504")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  cmd->add_option("--threads", args->threads, "Engine intra-op threads, server and offline (0: all cores)")
      ->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->add_option("--io-threads", args->io_threads, "Server HTTP threads")->check(CLI::Range(1, 64));
  cmd->add_option("--seq-len", args->seq_len, "Text packages: tokens per request (0: min(64, max_length))")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 16));
  cmd->add_option("--distinct-inputs", args->distinct_inputs, "Different inputs the requests cycle through")
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{4096}));
  cmd->add_option("--repeats", args->repeats, "Load and offline runs, alternating; the best counts")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--seed", args->seed, "Seed of the inputs");
  cmd->add_option("--json", *json_path, "Write the JSON report here ('-' = stdout)");
  cmd->callback([args, json_path] {
    std::vector<std::string> rows;
    const bench::Json report = bench::run_serve_bench(*args, &std::cerr, &rows);
    print_bench_report(report, *json_path, rows);
  });
}

}  // namespace hotpath::cli
