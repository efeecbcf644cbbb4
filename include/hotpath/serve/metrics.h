// hotpath/serve/metrics.h — the server's counters and histograms, rendered for Prometheus (text exposition
// format 0.0.4, what GET /metrics answers). Thread-safe: the batchers and the HTTP threads all write here.
//
//   Metrics metrics;
//   metrics.count_request("resnet", 200);
//   std::string page = metrics.render_prometheus();   // # HELP / # TYPE / samples
//
// Families (model="NAME" on each; Triton's names where Triton has the concept):
//   nv_inference_request_success / nv_inference_request_failure   counters: requests answered 2xx / otherwise
//   hotpath_requests_total{status="503"}                           counter: requests by HTTP status
//   nv_inference_count / nv_inference_exec_count                   counters: rows inferred / engine batches run
//   nv_inference_pending_request_count                             gauge: requests queued now
//   nv_inference_queue_duration_us, nv_inference_compute_infer_duration_us, nv_inference_request_duration_us
//                                                                  counters: cumulative µs of answered requests
//   hotpath_batch_size                                             histogram: rows per engine batch
//   hotpath_queue_seconds, hotpath_compute_seconds, hotpath_request_seconds   histograms per answered request
// and the transport's (TransportStats below): connections, buffered bytes, refusals by reason.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::serve {

// A Prometheus histogram's state: cumulative-able bucket counts for fixed upper bounds (+Inf implied).
struct Histogram {
  std::vector<double> upper_bounds;   // ascending, finite
  std::vector<std::uint64_t> counts;  // per bucket (not cumulative), size upper_bounds.size() + 1 (the +Inf one)
  double sum = 0;
  std::uint64_t count = 0;

  explicit Histogram(std::vector<double> bounds = {});
  void observe(double value);
};

// Who writes what: each ModelRunner records its batches and queue depth; the HTTP layer, which sees the
// status and the end-to-end time, records requests.
class Metrics {
 public:
  void count_request(const std::string& model, int http_status);          // by model and status
  void observe_batch(const std::string& model, std::int64_t batch_size);  // rows per engine call
  // One answered request: its time queued, in the engine, and end to end (HTTP layer's view).
  void observe_request(const std::string& model, std::chrono::microseconds queue, std::chrono::microseconds compute,
                       std::chrono::microseconds total);
  void set_queue_depth(const std::string& model, std::int64_t depth);

  [[nodiscard]] std::string render_prometheus() const;

  // Bucket bounds: rows per batch; seconds for the latency histograms.
  static const std::vector<double>& batch_size_bounds();
  static const std::vector<double>& latency_bounds_seconds();

 private:
  struct PerModel {
    std::map<int, std::uint64_t> by_status;
    std::uint64_t rows = 0, executions = 0;
    std::int64_t queue_depth = 0;
    std::uint64_t queue_us = 0, compute_us = 0, total_us = 0;
    Histogram batch{batch_size_bounds()};
    Histogram queue{latency_bounds_seconds()}, compute{latency_bounds_seconds()}, total{latency_bounds_seconds()};
  };
  PerModel& model_locked(const std::string& model);

  mutable std::mutex mutex_;
  std::map<std::string, PerModel> models_;  // sorted: the page is deterministic
};

// The HTTP transport's own state (HttpServer::stats()): what bounds the server's connections and memory, and
// what it refused. Rendered after the per-model families by render_transport_prometheus():
//   hotpath_http_connections / hotpath_http_max_connections        gauges: open connections / --max-connections
//   hotpath_http_buffered_bytes / hotpath_http_max_buffered_bytes  gauges: request bytes held / --max-buffered-bytes
//   hotpath_http_max_request_bytes                                 gauge: one connection's budget (header + body)
//   hotpath_http_refused_total{reason}                             counter: answers the transport gave by itself
struct TransportStats {
  std::uint64_t connections = 0, max_connections = 0;
  std::uint64_t buffered_bytes = 0, max_buffered_bytes = 0;
  std::uint64_t max_request_bytes = 0;  // --max-header-bytes + --max-body-bytes
  // reason → count: "connections" (503), "buffered_bytes" (503), "body_too_large" (413), "header_too_large" (431),
  // "request_timeout" (408), "malformed" (400)
  std::map<std::string, std::uint64_t> refused;
};
std::string render_transport_prometheus(const TransportStats& stats);

// A label value as Prometheus' text format wants it: \ → \\, " → \", newline → \n.
std::string escape_label_value(std::string_view value);

}  // namespace hotpath::serve
