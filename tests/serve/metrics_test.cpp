// The /metrics page parsed back as a Prometheus scraper reads text format 0.0.4: every sample under a
// declared family, label values unescaped to what was recorded, histograms cumulative up to +Inf = _count.
#include "hotpath/serve/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hotpath::serve {
namespace {

using namespace std::chrono_literals;

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Page {
  std::map<std::string, std::string> types;  // family → counter | gauge | histogram
  std::vector<Sample> samples;

  // The value of the one sample `name` whose labels include `want`; throws when none or several match.
  [[nodiscard]] double value(const std::string& name, const std::map<std::string, std::string>& want) const {
    const Sample* found = nullptr;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : want) match = match && s.labels.count(k) && s.labels.at(k) == v;
      if (!match) continue;
      if (found) throw std::runtime_error("several samples match " + name);
      found = &s;
    }
    if (!found) throw std::runtime_error("no sample matches " + name);
    return found->value;
  }
};

// A strict reader of the text format: fails the test on anything a scraper would reject.
Page parse(const std::string& text) {
  Page page;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_FALSE(line.empty()) << "empty line in the page";
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(helped.insert(name).second) << "HELP twice for " << name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name, type;
      f >> name >> type;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      EXPECT_TRUE(page.types.emplace(name, type).second) << "TYPE twice for " << name;
      continue;
    }
    Sample s;
    std::size_t i = line.find('{');
    if (i == std::string::npos) {  // a sample without labels: `name value`
      i = line.find(' ');
      s.name = line.substr(0, i);
      EXPECT_NE(i, std::string::npos) << "no value: " << line;
      if (i == std::string::npos) continue;
      s.value = std::stod(line.substr(i + 1));
      EXPECT_TRUE(page.types.count(s.name) && helped.count(s.name)) << "sample before its # HELP/# TYPE: " << line;
      page.samples.push_back(std::move(s));
      continue;
    }
    s.name = line.substr(0, i);
    ++i;
    while (line[i] != '}') {
      const std::size_t eq = line.find('=', i);
      const std::string key = line.substr(i, eq - i);
      EXPECT_EQ(line[eq + 1], '"') << line;
      std::string value;
      std::size_t j = eq + 2;
      for (; line[j] != '"'; ++j) {
        if (line[j] == '\\') {
          ++j;
          value += line[j] == 'n' ? '\n' : line[j];
          EXPECT_TRUE(line[j] == 'n' || line[j] == '\\' || line[j] == '"') << "bad escape in " << line;
        } else {
          value += line[j];
        }
      }
      s.labels[key] = value;
      i = j + 1;
      if (line[i] == ',') ++i;
    }
    EXPECT_EQ(line[i + 1], ' ') << line;
    s.value = std::stod(line.substr(i + 2));
    // The family: the name itself, or a histogram's name before _bucket/_sum/_count.
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string x(suffix);
      if (family.size() > x.size() && family.compare(family.size() - x.size(), x.size(), x) == 0 &&
          page.types.count(family.substr(0, family.size() - x.size())) &&
          page.types.at(family.substr(0, family.size() - x.size())) == "histogram") {
        family.resize(family.size() - x.size());
      }
    }
    EXPECT_TRUE(page.types.count(family)) << "sample before its # TYPE: " << line;
    EXPECT_TRUE(helped.count(family)) << "sample without # HELP: " << line;
    page.samples.push_back(std::move(s));
  }
  return page;
}

TEST(Metrics, CountsRequestsByStatusAndSuccess) {
  Metrics m;
  for (int i = 0; i < 3; ++i) m.count_request("resnet", 200);
  m.count_request("resnet", 503);
  m.count_request("resnet", 503);
  m.count_request("resnet", 400);
  m.count_request("bert", 200);
  const Page p = parse(m.render_prometheus());
  EXPECT_EQ(p.types.at("nv_inference_request_success"), "counter");
  EXPECT_EQ(p.value("nv_inference_request_success", {{"model", "resnet"}, {"version", "1"}}), 3);
  EXPECT_EQ(p.value("nv_inference_request_failure", {{"model", "resnet"}}), 3);
  EXPECT_EQ(p.value("nv_inference_request_success", {{"model", "bert"}}), 1);
  EXPECT_EQ(p.value("nv_inference_request_failure", {{"model", "bert"}}), 0);
  EXPECT_EQ(p.value("hotpath_requests_total", {{"model", "resnet"}, {"status", "503"}}), 2);
  EXPECT_EQ(p.value("hotpath_requests_total", {{"model", "resnet"}, {"status", "400"}}), 1);
  EXPECT_THROW((void)p.value("hotpath_requests_total", {{"model", "bert"}, {"status", "503"}}), std::runtime_error);
}

TEST(Metrics, BatchHistogramIsCumulativeAndEndsAtCount) {
  Metrics m;
  for (const std::int64_t b : {1, 3, 4, 300}) m.observe_batch("resnet", b);
  m.set_queue_depth("resnet", 7);
  const Page p = parse(m.render_prometheus());
  EXPECT_EQ(p.types.at("hotpath_batch_size"), "histogram");
  const auto bucket = [&](const std::string& le) {
    return p.value("hotpath_batch_size_bucket", {{"model", "resnet"}, {"le", le}});
  };
  EXPECT_EQ(bucket("1"), 1);
  EXPECT_EQ(bucket("2"), 1);
  EXPECT_EQ(bucket("4"), 3);  // a value equal to a bound is in that bucket (le)
  EXPECT_EQ(bucket("256"), 3);
  EXPECT_EQ(bucket("+Inf"), 4);
  EXPECT_EQ(p.value("hotpath_batch_size_count", {{"model", "resnet"}}), 4);
  EXPECT_EQ(p.value("hotpath_batch_size_sum", {{"model", "resnet"}}), 308);
  EXPECT_EQ(p.value("nv_inference_count", {{"model", "resnet"}}), 308);
  EXPECT_EQ(p.value("nv_inference_exec_count", {{"model", "resnet"}}), 4);
  EXPECT_EQ(p.types.at("nv_inference_pending_request_count"), "gauge");
  EXPECT_EQ(p.value("nv_inference_pending_request_count", {{"model", "resnet"}}), 7);
  // Every histogram's buckets never decrease, in the order the page lists them.
  double last = -1;
  for (const Sample& s : p.samples) {
    if (s.name != "hotpath_batch_size_bucket") continue;
    EXPECT_GE(s.value, last);
    last = s.value;
  }
}

TEST(Metrics, LatencyHistogramsInSecondsAndCumulativeMicroseconds) {
  Metrics m;
  m.observe_request("resnet", 100us, 2ms, 3ms);
  m.observe_request("resnet", 40ms, 20ms, 61ms);
  const Page p = parse(m.render_prometheus());
  double le_100us = -1, le_50ms = -1;
  for (const Sample& s : p.samples) {
    if (s.name != "hotpath_queue_seconds_bucket" || s.labels.at("le") == "+Inf") continue;
    const double le = std::stod(s.labels.at("le"));
    if (le == 0.0001) le_100us = s.value;
    if (le == 0.05) le_50ms = s.value;
  }
  EXPECT_EQ(le_100us, 1);
  EXPECT_EQ(le_50ms, 2);
  EXPECT_DOUBLE_EQ(p.value("hotpath_request_seconds_sum", {{"model", "resnet"}}), 0.064);
  EXPECT_EQ(p.value("hotpath_compute_seconds_count", {{"model", "resnet"}}), 2);
  EXPECT_EQ(p.value("nv_inference_queue_duration_us", {{"model", "resnet"}}), 40100);
  EXPECT_EQ(p.value("nv_inference_compute_infer_duration_us", {{"model", "resnet"}}), 22000);
  EXPECT_EQ(p.value("nv_inference_request_duration_us", {{"model", "resnet"}}), 64000);
}

TEST(Metrics, LabelValuesAreEscapedAndReadBackUnchanged) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  Metrics m;
  const std::string odd = "we\"ird\\name\nx";
  m.count_request(odd, 200);
  const Page p = parse(m.render_prometheus());
  EXPECT_EQ(p.value("nv_inference_request_success", {{"model", odd}}), 1);
}

TEST(Metrics, TransportStatsAreGaugesAndRefusalsByReason) {
  TransportStats t;
  t.connections = 3;
  t.max_connections = 512;
  t.buffered_bytes = 1234;
  t.max_buffered_bytes = 256u << 20;
  t.max_request_bytes = (64u << 20) + (16u << 10);
  t.refused = {{"connections", 2}, {"body_too_large", 1}};
  Metrics metrics;
  metrics.count_request("m", 200);
  const Page page = parse(metrics.render_prometheus() + render_transport_prometheus(t));
  EXPECT_EQ(page.types.at("hotpath_http_connections"), "gauge");
  EXPECT_EQ(page.value("hotpath_http_connections", {}), 3);
  EXPECT_EQ(page.value("hotpath_http_max_connections", {}), 512);
  EXPECT_EQ(page.value("hotpath_http_buffered_bytes", {}), 1234);
  EXPECT_EQ(page.value("hotpath_http_max_buffered_bytes", {}), 256u << 20);
  EXPECT_EQ(page.value("hotpath_http_max_request_bytes", {}), (64u << 20) + (16u << 10));
  EXPECT_EQ(page.types.at("hotpath_http_refused_total"), "counter");
  EXPECT_EQ(page.value("hotpath_http_refused_total", {{"reason", "connections"}}), 2);
  EXPECT_EQ(page.value("hotpath_http_refused_total", {{"reason", "body_too_large"}}), 1);
}

TEST(Metrics, ConcurrentWritersLoseNoCount) {
  Metrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < 1000; ++i) {
        m.count_request("resnet", 200);
        m.observe_batch("resnet", 2);
        if (i % 100 == 0) (void)m.render_prometheus();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const Page p = parse(m.render_prometheus());
  EXPECT_EQ(p.value("nv_inference_request_success", {{"model", "resnet"}}), 4000);
  EXPECT_EQ(p.value("hotpath_batch_size_count", {{"model", "resnet"}}), 4000);
}

TEST(Metrics, EmptyPageStillDeclaresEveryFamily) {
  const Page p = parse(Metrics().render_prometheus());
  EXPECT_TRUE(p.samples.empty());
  EXPECT_EQ(p.types.size(), 13U);
}

}  // namespace
}  // namespace hotpath::serve
