// hotpath/bench/serve_bench.h — what `hotpath bench serve` measures: `hotpath serve` under a bounded
// loopback load against the engine's offline throughput on the same package, in the same run.
//
//   ServeBenchOptions o{.package = "pkg/resnet50-int8", .clients = 16, .requests = 2000};
//   Json report = run_serve_bench(o, &std::cerr, &rows);   // server QPS / offline QPS, p50/p90/p99, overload
//   write_report(report, "serve.json");
//
// The server is the real `hotpath serve` (this executable, started as a child on a free loopback port and
// stopped with SIGTERM); the clients are keep-alive Boost.Beast connections in threads, each sending
// one-row KServe v2 infer requests with the binary tensor extension and checking that every answer is its
// own request's (the engine's output for that input, computed up front). Offline = Engine::run on batches
// of max_batch_size rows, back to back, same threads. Both alternate `repeats` times (bench/harness.h);
// the best of each counts. The overload run restarts the server with a small queue and more clients than
// it can serve: the 503 share, how fast the 503s come, and the p99 of the requests it accepted.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "hotpath/bench/harness.h"

namespace hotpath::bench {

struct ServeBenchOptions {
  std::string package;           // a model package directory (hotpath export)
  int clients = 16;              // concurrent keep-alive connections of the load run
  std::int64_t requests = 1000;  // requests of the load run (a fixed number: it stops by itself)
  int overload_clients = 0;      // clients of the overload run (0: 4 × clients; -1: no overload run)
  std::int64_t overload_requests = 0;  // 0: the load run's
  std::int64_t max_batch_size = 16;    // server and offline batch
  std::int64_t max_queue_delay_us = 2000;
  std::int64_t max_queue_size = 256;   // load run (the overload run uses max_batch_size)
  std::int64_t queue_timeout_ms = 5000;
  int threads = 0;                     // engine intra-op threads, server and offline (0: the cores)
  int io_threads = 1;                  // the server's HTTP threads
  std::int64_t seq_len = 0;            // text packages: tokens per request (0: min(64, max_length))
  std::int64_t distinct_inputs = 64;   // requests cycle through this many different inputs
  int repeats = 3;                     // server and offline runs, alternating
  std::uint64_t seed = 0;
  std::string hotpath_exe;             // the `hotpath` to start as the server ("": this executable)
};

// The JSON report ({"package", "model", "load": {...}, "offline": {...}, "ratio_server_vs_offline",
// "overload": {...}, the harness' fields}); one markdown row per run into `table_rows`. Throws
// hotpath::Error when the server fails to start, or when any answer is lost or is another request's.
Json run_serve_bench(const ServeBenchOptions& options, std::ostream* log, std::vector<std::string>* table_rows);

}  // namespace hotpath::bench
