// Prometheus text exposition format 0.0.4: `# HELP` and `# TYPE` once per family, then one sample per line;
// histogram buckets cumulative, ending at le="+Inf" (= _count).
#include "hotpath/serve/metrics.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <system_error>

namespace hotpath::serve {
namespace {

std::string number(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  return std::string(buf, r.ptr);
}

std::string model_label(const std::string& model) { return "model=\"" + escape_label_value(model) + "\""; }

void family(std::string& out, const char* name, const char* type, const char* help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, const char* name, const std::string& labels, const std::string& value) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(value).append("\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : upper_bounds(std::move(bounds)), counts(upper_bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  // Prometheus buckets are `le`: a value equal to a bound falls into that bucket.
  const auto it = std::lower_bound(upper_bounds.begin(), upper_bounds.end(), value);
  ++counts[static_cast<std::size_t>(it - upper_bounds.begin())];
  sum += value;
  ++count;
}

const std::vector<double>& Metrics::batch_size_bounds() {
  static const std::vector<double> b = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  return b;
}

const std::vector<double>& Metrics::latency_bounds_seconds() {
  static const std::vector<double> b = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                        0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  return b;
}

Metrics::PerModel& Metrics::model_locked(const std::string& model) { return models_[model]; }

void Metrics::count_request(const std::string& model, int http_status) {
  const std::lock_guard lock(mutex_);
  ++model_locked(model).by_status[http_status];
}

void Metrics::observe_batch(const std::string& model, std::int64_t batch_size) {
  const std::lock_guard lock(mutex_);
  PerModel& m = model_locked(model);
  m.batch.observe(static_cast<double>(batch_size));
  m.rows += static_cast<std::uint64_t>(std::max<std::int64_t>(batch_size, 0));
  ++m.executions;
}

void Metrics::observe_request(const std::string& model, std::chrono::microseconds queue,
                              std::chrono::microseconds compute, std::chrono::microseconds total) {
  const std::lock_guard lock(mutex_);
  PerModel& m = model_locked(model);
  const auto us = [](std::chrono::microseconds d) { return static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 0)); };
  m.queue_us += us(queue);
  m.compute_us += us(compute);
  m.total_us += us(total);
  m.queue.observe(static_cast<double>(us(queue)) * 1e-6);
  m.compute.observe(static_cast<double>(us(compute)) * 1e-6);
  m.total.observe(static_cast<double>(us(total)) * 1e-6);
}

void Metrics::set_queue_depth(const std::string& model, std::int64_t depth) {
  const std::lock_guard lock(mutex_);
  model_locked(model).queue_depth = depth;
}

std::string Metrics::render_prometheus() const {
  const std::lock_guard lock(mutex_);
  std::string out;
  using Get = std::function<std::string(const PerModel&)>;
  const auto scalar = [&](const char* name, const char* type, const char* help, const Get& get) {
    family(out, name, type, help);
    for (const auto& [model, m] : models_) sample(out, name, model_label(model) + ",version=\"1\"", get(m));
  };
  const auto u = [](std::uint64_t v) { return std::to_string(v); };
  scalar("nv_inference_request_success", "counter", "Requests answered with a 2xx status", [&](const PerModel& m) {
    std::uint64_t n = 0;
    for (const auto& [status, count] : m.by_status) n += status >= 200 && status < 300 ? count : 0;
    return u(n);
  });
  scalar("nv_inference_request_failure", "counter", "Requests answered with a status other than 2xx",
         [&](const PerModel& m) {
           std::uint64_t n = 0;
           for (const auto& [status, count] : m.by_status) n += status >= 200 && status < 300 ? 0 : count;
           return u(n);
         });
  scalar("nv_inference_count", "counter", "Rows (batch entries) inferred", [&](const PerModel& m) { return u(m.rows); });
  scalar("nv_inference_exec_count", "counter", "Engine batches run", [&](const PerModel& m) { return u(m.executions); });
  scalar("nv_inference_pending_request_count", "gauge", "Requests waiting in the model's queue now",
         [](const PerModel& m) { return std::to_string(m.queue_depth); });
  scalar("nv_inference_queue_duration_us", "counter", "Cumulative microseconds answered requests spent queued",
         [&](const PerModel& m) { return u(m.queue_us); });
  scalar("nv_inference_compute_infer_duration_us", "counter",
         "Cumulative microseconds answered requests spent in the engine", [&](const PerModel& m) { return u(m.compute_us); });
  scalar("nv_inference_request_duration_us", "counter", "Cumulative end-to-end microseconds of answered requests",
         [&](const PerModel& m) { return u(m.total_us); });

  family(out, "hotpath_requests_total", "counter", "Requests by model and HTTP status");
  for (const auto& [model, m] : models_) {
    for (const auto& [status, count] : m.by_status) {
      sample(out, "hotpath_requests_total", model_label(model) + ",status=\"" + std::to_string(status) + "\"", u(count));
    }
  }

  const auto histogram = [&](const char* name, const char* help, const Histogram PerModel::*member) {
    family(out, name, "histogram", help);
    const std::string bucket = std::string(name) + "_bucket";
    const std::string sum = std::string(name) + "_sum";
    const std::string count = std::string(name) + "_count";
    for (const auto& [model, m] : models_) {
      const Histogram& h = m.*member;
      const std::string labels = model_label(model);
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < h.upper_bounds.size(); ++i) {
        cumulative += h.counts[i];
        sample(out, bucket.c_str(), labels + ",le=\"" + number(h.upper_bounds[i]) + "\"", u(cumulative));
      }
      sample(out, bucket.c_str(), labels + ",le=\"+Inf\"", u(h.count));
      sample(out, sum.c_str(), labels, number(h.sum));
      sample(out, count.c_str(), labels, u(h.count));
    }
  };
  histogram("hotpath_batch_size", "Rows per engine batch", &PerModel::batch);
  histogram("hotpath_queue_seconds", "Seconds an answered request waited in the queue", &PerModel::queue);
  histogram("hotpath_compute_seconds", "Seconds of the engine batch an answered request ran in", &PerModel::compute);
  histogram("hotpath_request_seconds", "End-to-end seconds of an answered request", &PerModel::total);
  return out;
}

std::string render_transport_prometheus(const TransportStats& stats) {
  std::string out;
  const auto gauge = [&](const char* name, const char* help, std::uint64_t value) {
    family(out, name, "gauge", help);
    sample(out, name, "", std::to_string(value));
  };
  gauge("hotpath_http_connections", "Open HTTP connections (admitted ones; refused ones are counted below)",
        stats.connections);
  gauge("hotpath_http_max_connections", "Connection limit (--max-connections)", stats.max_connections);
  gauge("hotpath_http_buffered_bytes", "Request bytes the server holds now, from a request's first byte to its answer",
        stats.buffered_bytes);
  gauge("hotpath_http_max_buffered_bytes", "Limit on buffered request bytes (--max-buffered-bytes)",
        stats.max_buffered_bytes);
  gauge("hotpath_http_max_request_bytes", "One connection's budget: --max-header-bytes + --max-body-bytes",
        stats.max_request_bytes);
  family(out, "hotpath_http_refused_total", "counter", "Requests or connections the transport answered by itself");
  for (const auto& [reason, count] : stats.refused) {
    sample(out, "hotpath_http_refused_total", "reason=\"" + escape_label_value(reason) + "\"", std::to_string(count));
  }
  return out;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace hotpath::serve
