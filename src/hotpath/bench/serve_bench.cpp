// `hotpath bench serve`: the real server (a child `hotpath serve`) under keep-alive Beast clients vs the
// engine offline on the same package, alternating; then an overload run against a small queue.
#include "hotpath/bench/serve_bench.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <sstream>
#include <string_view>
#include <thread>

#include "hotpath/bench/infer_scenario.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/predictor.h"

namespace hotpath::bench {
namespace {

namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr const char* kModel = "bench";

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// ---- the server child -----------------------------------------------------------------------------------
// `hotpath serve` started with fork/exec, its stdout piped (for the ready line), its stderr (the per-request
// log) to a file; SIGTERM on stop, and its exit status kept: 0 means it drained cleanly.
class ServerProcess {
 public:
  ServerProcess(const std::vector<std::string>& argv, const std::filesystem::path& log_file) : log_(log_file) {
    int out[2];
    HOTPATH_CHECK(::pipe(out) == 0, "bench serve: pipe: ", std::strerror(errno));
    const int err = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    HOTPATH_CHECK(err >= 0, "bench serve: cannot create ", log_file.string(), ": ", std::strerror(errno));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err, STDERR_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err);
    out_ = out[0];
    HOTPATH_CHECK(pid_ > 0, "bench serve: fork: ", std::strerror(errno));
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Reads stdout until "serve: ready on http://HOST:PORT"; returns PORT. Throws with the log's tail when the
  // child exits or says nothing within `timeout`.
  int wait_ready(std::chrono::seconds timeout) {
    std::string text;
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) fail("did not say it was ready within " + std::to_string(timeout.count()) + " s");
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000))) <= 0) continue;
      char buf[512];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) fail("exited before it was ready");
      text.append(buf, static_cast<std::size_t>(n));
      constexpr std::string_view kReady = "serve: ready on http://";
      const std::size_t at = text.find(kReady);
      const std::size_t eol = at == std::string::npos ? at : text.find('\n', at);
      if (eol != std::string::npos) {
        // "serve: ready on http://HOST:PORT (models: ...)": the digits after the host's colon.
        const std::string line = text.substr(at + kReady.size(), eol - at - kReady.size());
        const std::size_t colon = line.find(':');
        std::size_t end = colon == std::string::npos ? colon : colon + 1;
        while (end != std::string::npos && end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
        if (colon == std::string::npos || end == colon + 1) fail("printed a ready line without a port: " + line);
        return static_cast<int>(parse_int(line.substr(colon + 1, end - colon - 1), 1, 65535, "the server's port"));
      }
    }
  }

  // SIGTERM, then wait up to `timeout` for the drain; returns the exit status (-1: killed or no exit).
  int stop(std::chrono::seconds timeout) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (Clock::now() < deadline) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;  // the destructor kills it
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::ifstream in(log_);
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (log.size() > 2000) log = "..." + log.substr(log.size() - 2000);
    throw Error("bench serve: the server " + what + "; its stderr (" + log_.string() + "):\n" + log);
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::filesystem::path log_;
};

// ---- requests and answers -------------------------------------------------------------------------------
struct Workload {
  std::vector<std::string> bodies;      // KServe v2 binary-extension request bodies, one per distinct input
  std::vector<std::size_t> header_len;  // their JSON header lengths
  std::vector<at::Tensor> expected;     // the engine's output row (float32) for each, run alone
  std::vector<std::vector<at::Tensor>> inputs;  // the distinct inputs, batch 1
  std::string output_name;
  double tolerance = 0;  // max |server − engine alone| accepted as "the same answer"
};

std::string dtype_name(at::ScalarType t) { return t == at::kLong ? "INT64" : "FP32"; }

Workload make_workload(const infer::Predictor& predictor, const ServeBenchOptions& o) {
  Workload w;
  const infer::Package& pkg = predictor.package();
  const std::vector<infer::ValueSpec> specs = predictor.input_specs();
  w.output_name = predictor.output_names().front();
  const bool text = pkg.kind != infer::PackageKind::kImageClassifier;
  const std::int64_t vocab = pkg.text.vocab_size;
  const std::int64_t len = o.seq_len > 0 ? o.seq_len : std::min<std::int64_t>(64, pkg.text.max_length);
  HOTPATH_CHECK(!text || len <= pkg.text.max_length, "bench serve: --seq-len ", len, " exceeds the package's max_length ",
                pkg.text.max_length);
  at::manual_seed(o.seed);
  for (std::int64_t i = 0; i < o.distinct_inputs; ++i) {
    std::vector<at::Tensor> in;
    if (text) {
      in = {at::randint(1, vocab, {1, len}, at::kLong), at::ones({1, len}, at::kLong), at::zeros({1, len}, at::kLong)};
    } else {
      in = {at::randn({1, pkg.image.channels, pkg.image.image_size, pkg.image.image_size})};
    }
    nlohmann::json header = {{"inputs", nlohmann::json::array()},
                             {"outputs", {{{"name", w.output_name}, {"parameters", {{"binary_data", true}}}}}}};
    std::string binary;
    for (std::size_t k = 0; k < in.size(); ++k) {
      const at::Tensor& t = in[k];
      const auto bytes = static_cast<std::size_t>(t.nbytes());
      header["inputs"].push_back({{"name", specs[k].name},
                                  {"shape", t.sizes().vec()},
                                  {"datatype", dtype_name(t.scalar_type())},
                                  {"parameters", {{"binary_data_size", bytes}}}});
      binary.append(static_cast<const char*>(t.const_data_ptr()), bytes);
    }
    const std::string h = header.dump();
    w.header_len.push_back(h.size());
    w.bodies.push_back(h + binary);
    w.expected.push_back(predictor.run(in).front().reshape({-1}).clone());
    w.inputs.push_back(std::move(in));
  }
  // fp32 rows do not depend on their batch beyond float rounding; int8 quantizes activations per batch and
  // bf16 rounds differently per GEMM shape, so their rows move with the batch they run in.
  double scale = 0;
  for (const at::Tensor& e : w.expected) scale = std::max(scale, e.abs().max().item<double>());
  w.tolerance = (pkg.precision == infer::Precision::kFp32 ? 1e-4 : 0.1) * std::max(1.0, scale);
  return w;
}

// The output floats of a 200 response (binary extension or JSON "data").
std::vector<float> output_of(const http::response<http::string_body>& res, const std::string& name) {
  const std::string& body = res.body();
  std::size_t json_len = body.size();
  const auto it = res.find("Inference-Header-Content-Length");
  if (it != res.end()) json_len = static_cast<std::size_t>(std::stoull(std::string(it->value())));
  HOTPATH_CHECK(json_len <= body.size(), "bench serve: Inference-Header-Content-Length ", json_len, " past the body (",
                body.size(), " bytes)");
  const nlohmann::json j = nlohmann::json::parse(body.substr(0, json_len));
  std::size_t offset = json_len;
  for (const auto& out : j.at("outputs")) {
    std::size_t size = 0;
    if (out.contains("parameters") && out["parameters"].contains("binary_data_size")) {
      size = out["parameters"]["binary_data_size"].get<std::size_t>();
    }
    if (out.at("name") != name) {
      offset += size;
      continue;
    }
    if (size == 0) return out.at("data").get<std::vector<float>>();
    HOTPATH_CHECK(offset + size <= body.size() && size % sizeof(float) == 0, "bench serve: output ", name,
                  " binary data past the body");
    std::vector<float> v(size / sizeof(float));
    std::memcpy(v.data(), body.data() + offset, size);
    return v;
  }
  throw Error("bench serve: the response has no output " + name);
}

struct LoadFigures {
  std::int64_t sent = 0, ok = 0, refused = 0, other = 0, mismatched = 0, lost = 0;
  std::map<int, std::int64_t> by_status;
  std::vector<double> ok_ms, refused_ms;
  double seconds = 0;
  double max_abs_diff = 0;
};

// `clients` threads share `requests` (a counter); each keeps one connection open (reconnecting when the server
// closes it) and checks every 200 answer against the engine's for its own input.
LoadFigures run_load(int port, const Workload& w, int clients, std::int64_t requests) {
  LoadFigures total;
  std::mutex mutex;
  std::atomic<std::int64_t> next{0};
  const std::string target = std::string("/v2/models/") + kModel + "/infer";
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      LoadFigures mine;
      boost::asio::io_context io;
      std::optional<tcp::socket> socket;
      boost::beast::flat_buffer buffer;
      const tcp::endpoint server(boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
      for (std::int64_t i = next++; i < requests; i = next++) {
        const auto k = static_cast<std::size_t>((i * 7 + c) % static_cast<std::int64_t>(w.bodies.size()));
        http::request<http::string_body> req(http::verb::post, target, 11);
        req.set(http::field::host, "127.0.0.1");
        req.set(http::field::content_type, "application/octet-stream");
        req.set("Inference-Header-Content-Length", std::to_string(w.header_len[k]));
        req.body() = w.bodies[k];
        req.prepare_payload();
        ++mine.sent;
        const auto start = Clock::now();
        http::response<http::string_body> res;
        bool answered = false;
        for (int attempt = 0; attempt < 2 && !answered; ++attempt) {  // a keep-alive socket the server closed
          try {
            if (!socket) {
              socket.emplace(io);
              socket->connect(server);
              buffer.clear();
            }
            http::write(*socket, req);
            http::response_parser<http::string_body> parser;
            parser.body_limit(std::uint64_t{1} << 30);
            http::read(*socket, buffer, parser);
            res = parser.release();
            answered = true;
          } catch (const std::exception&) {
            socket.reset();
          }
        }
        const double ms = ms_since(start);
        if (!answered) {
          ++mine.lost;
          continue;
        }
        if (!res.keep_alive()) socket.reset();
        const int status = res.result_int();
        ++mine.by_status[status];
        if (status == 503) {
          ++mine.refused;
          mine.refused_ms.push_back(ms);
          continue;
        }
        if (status != 200) {
          ++mine.other;
          continue;
        }
        ++mine.ok;
        mine.ok_ms.push_back(ms);
        // Its own answer: within tolerance of the engine's row for this input, and nearer to it than to any
        // other input's.
        std::vector<float> got;
        try {
          got = output_of(res, w.output_name);
        } catch (const std::exception&) {  // a malformed answer is not this request's answer
          ++mine.mismatched;
          continue;
        }
        std::vector<double> dist(w.expected.size(), 1e300);
        for (std::size_t e = 0; e < w.expected.size(); ++e) {
          const at::Tensor& want = w.expected[e];
          if (static_cast<std::size_t>(want.numel()) != got.size()) continue;
          const float* p = want.const_data_ptr<float>();
          double d = 0;
          for (std::size_t j = 0; j < got.size(); ++j) d = std::max(d, std::fabs(double(got[j]) - double(p[j])));
          dist[e] = d;
        }
        const double own = dist[k];
        bool nearest = true;
        for (std::size_t e = 0; e < dist.size(); ++e) nearest = nearest && (e == k || dist[e] > own);
        mine.max_abs_diff = std::max(mine.max_abs_diff, own);
        if (!nearest || own > w.tolerance) ++mine.mismatched;
      }
      const std::lock_guard lock(mutex);
      total.sent += mine.sent;
      total.ok += mine.ok;
      total.refused += mine.refused;
      total.other += mine.other;
      total.mismatched += mine.mismatched;
      total.lost += mine.lost;
      total.max_abs_diff = std::max(total.max_abs_diff, mine.max_abs_diff);
      for (const auto& [s, n] : mine.by_status) total.by_status[s] += n;
      total.ok_ms.insert(total.ok_ms.end(), mine.ok_ms.begin(), mine.ok_ms.end());
      total.refused_ms.insert(total.refused_ms.end(), mine.refused_ms.begin(), mine.refused_ms.end());
    });
  }
  for (std::thread& t : threads) t.join();
  total.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return total;
}

// GET `target` on the server; the body of a 200, else throws.
std::string http_get(int port, const std::string& target) {
  boost::asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  http::request<http::empty_body> req(http::verb::get, target, 11);
  req.set(http::field::host, "127.0.0.1");
  http::write(socket, req);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res);
  HOTPATH_CHECK(res.result_int() == 200, "bench serve: GET ", target, " answered ", res.result_int());
  return res.body();
}

// The value of the sample `name{...model="bench"...}` on a Prometheus page (0 when absent).
double metric(const std::string& page, const std::string& name) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 || line.find(std::string("model=\"") + kModel + "\"") == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return 0;
}

Json load_json(const LoadFigures& f) {
  Json statuses = Json::object();
  for (const auto& [s, n] : f.by_status) statuses[std::to_string(s)] = n;
  return {{"sent", f.sent},
          {"ok", f.ok},
          {"refused_503", f.refused},
          {"other_errors", f.other},
          {"lost", f.lost},
          {"mismatched", f.mismatched},
          {"by_status", statuses},
          {"seconds", f.seconds},
          {"qps", f.seconds > 0 ? static_cast<double>(f.ok) / f.seconds : 0},
          {"p50_ms", percentile(f.ok_ms, 0.50)},
          {"p90_ms", percentile(f.ok_ms, 0.90)},
          {"p99_ms", percentile(f.ok_ms, 0.99)},
          {"max_abs_diff_vs_engine", f.max_abs_diff}};
}

std::vector<std::string> server_argv(const ServeBenchOptions& o, const std::string& exe, std::int64_t queue_size) {
  const int threads = o.threads > 0 ? o.threads : at::get_num_threads();
  return {exe,
          "serve",
          "--name",
          std::string(kModel) + "=" + o.package,
          "--port",
          "0",
          "--max-batch-size",
          std::to_string(o.max_batch_size),
          "--max-queue-delay-us",
          std::to_string(o.max_queue_delay_us),
          "--max-queue-size",
          std::to_string(queue_size),
          "--queue-timeout-ms",
          std::to_string(o.queue_timeout_ms),
          "--threads",
          std::to_string(threads),
          "--io-threads",
          std::to_string(o.io_threads),
          "--drain-timeout-s",
          "60"};
}

}  // namespace

Json run_serve_bench(const ServeBenchOptions& o, std::ostream* log, std::vector<std::string>* table_rows) {
  HOTPATH_CHECK(o.clients >= 1 && o.clients <= 1024, "bench serve: --clients ", o.clients, " outside [1, 1024]");
  HOTPATH_CHECK(o.requests >= 1, "bench serve: --requests must be at least 1");
  HOTPATH_CHECK(o.distinct_inputs >= 2 && o.distinct_inputs <= 4096, "bench serve: distinct inputs ",
                o.distinct_inputs, " outside [2, 4096]");
  HOTPATH_CHECK(o.repeats >= 1 && o.repeats <= 100, "bench serve: --repeats ", o.repeats, " outside [1, 100]");
  const std::string exe = o.hotpath_exe.empty() ? std::filesystem::read_symlink("/proc/self/exe").string() : o.hotpath_exe;
  const int threads = o.threads > 0 ? o.threads : at::get_num_threads();

  const infer::Predictor predictor = infer::Predictor::open(o.package, {.threads = threads});
  HOTPATH_CHECK(predictor.engine() != nullptr, "bench serve: ", o.package, " is a training run directory; the server "
                "runs model packages (hotpath export)");
  const infer::Package& pkg = predictor.package();
  const Workload w = make_workload(predictor, o);
  const ScratchDir scratch("hotpath-bench-serve");

  // Offline: the engine on batches of max_batch_size distinct rows, back to back (infer_scenario's offline rule).
  std::vector<at::Tensor> batch;
  for (std::size_t k = 0; k < w.inputs.front().size(); ++k) {
    std::vector<at::Tensor> rows;
    for (std::int64_t r = 0; r < o.max_batch_size; ++r) {
      rows.push_back(w.inputs[static_cast<std::size_t>(r) % w.inputs.size()][k]);
    }
    batch.push_back(at::cat(rows, 0));
  }
  const auto offline = [&](int) {
    const ScenarioFigures f = run_scenario({.scenario = Scenario::kOffline, .warmup = 2, .min_queries = 10,
                                            .min_seconds = 3.0, .max_seconds = 60.0},
                                           o.max_batch_size, [&](std::int64_t) { (void)predictor.run(batch); });
    return RunFigures{f.per_s, f.to_json()};
  };

  std::optional<ServerProcess> server;
  server.emplace(server_argv(o, exe, o.max_queue_size), scratch.path() / "serve-load.log");
  const int port = server->wait_ready(std::chrono::seconds(600));
  if (log) *log << "bench serve: hotpath serve ready on port " << port << "\n";
  std::int64_t lost = 0, mismatched = 0, errors = 0;
  const auto served = [&](int) {
    const LoadFigures f = run_load(port, w, o.clients, o.requests);
    lost += f.lost;
    mismatched += f.mismatched;
    errors += f.other + f.refused;
    const Json j = load_json(f);
    return RunFigures{j["qps"].get<double>(), j};
  };
  Benchmark b("serve", "requests/s", o.repeats);
  b.add({"hotpath", "hotpath serve, " + std::to_string(o.clients) + " keep-alive clients, one-row KServe v2 binary requests",
         served});
  b.add({"offline", "hotpath::infer::Engine::run on batches of " + std::to_string(o.max_batch_size) + " rows", offline});
  const BenchmarkResult result = b.run(log);
  // The server's own count of what it ran (every load run): were the batches full?
  const std::string page = http_get(port, "/metrics");
  const double executions = metric(page, "nv_inference_exec_count");
  const double rows = metric(page, "nv_inference_count");
  const int load_exit = server->stop(std::chrono::seconds(90));
  server.reset();
  HOTPATH_CHECK(lost == 0 && mismatched == 0, "bench serve: ", lost, " requests lost and ", mismatched,
                " answered with another request's output (or off by more than ", w.tolerance, ")");

  Json report = {{"name", "serve"},
                 {"package", o.package},
                 {"kind", infer::package_kind_name(pkg.kind)},
                 {"precision", infer::precision_name(pkg.precision)},
                 {"clients", o.clients},
                 {"requests", o.requests},
                 {"max_batch_size", o.max_batch_size},
                 {"max_queue_delay_us", o.max_queue_delay_us},
                 {"threads", threads},
                 {"io_threads", o.io_threads},
                 {"load", result.at("hotpath").best().details},
                 {"offline", result.at("offline").best().details},
                 {"ratio_server_vs_offline", result.ratio_vs("offline")},
                 {"load_errors", errors},
                 {"server_batches", executions},
                 {"server_rows", rows},
                 {"server_mean_batch_size", executions > 0 ? rows / executions : 0},
                 {"server_exit_code_after_sigterm", load_exit}};

  if (o.overload_clients >= 0) {
    const int clients = o.overload_clients > 0 ? o.overload_clients : 4 * o.clients;
    const std::int64_t requests = o.overload_requests > 0 ? o.overload_requests : o.requests;
    server.emplace(server_argv(o, exe, o.max_batch_size), scratch.path() / "serve-overload.log");
    const int overload_port = server->wait_ready(std::chrono::seconds(600));
    const LoadFigures f = run_load(overload_port, w, clients, requests);
    const int exit_code = server->stop(std::chrono::seconds(90));
    server.reset();
    Json j = load_json(f);
    j["clients"] = clients;
    j["max_queue_size"] = o.max_batch_size;
    j["queue_timeout_ms"] = o.queue_timeout_ms;
    j["share_503"] = f.sent > 0 ? static_cast<double>(f.refused) / static_cast<double>(f.sent) : 0;
    j["p50_503_ms"] = percentile(f.refused_ms, 0.50);
    j["p99_503_ms"] = percentile(f.refused_ms, 0.99);
    j["p99_accepted_under_queue_timeout"] = percentile(f.ok_ms, 0.99) < static_cast<double>(o.queue_timeout_ms);
    j["server_exit_code_after_sigterm"] = exit_code;
    HOTPATH_CHECK(f.lost == 0 && f.mismatched == 0, "bench serve: overload: ", f.lost, " requests lost and ",
                  f.mismatched, " answered with another request's output");
    if (log) {
      *log << "bench serve: overload " << clients << " clients: " << f.ok << " answered (p99 " << j["p99_ms"].get<double>()
           << " ms), " << f.refused << " refused 503 (p99 " << j["p99_503_ms"].get<double>() << " ms)\n";
    }
    report["overload"] = j;
  }
  add_benchmark_fields(report, result);
  if (table_rows) {
    table_rows->push_back(result.table_row());
    const Json& l = report["load"];
    std::ostringstream row;
    row << "| serve latency | p50 " << l["p50_ms"].get<double>() << " ms | p90 " << l["p90_ms"].get<double>()
        << " ms | p99 " << l["p99_ms"].get<double>() << " ms | server/offline " << report["ratio_server_vs_offline"].get<double>()
        << " | mean server batch " << report["server_mean_batch_size"].get<double>() << " |";
    table_rows->push_back(row.str());
  }
  return report;
}

}  // namespace hotpath::bench
