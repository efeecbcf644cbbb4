#include "hotpath/bench/harness.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <iostream>
#include <sstream>
#include <system_error>
#include <thread>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/core/process.h"
#include "hotpath/core/remove_tree.h"

namespace hotpath::bench {

std::vector<double> ContenderResult::rates() const {
  std::vector<double> out;
  out.reserve(all.size());
  for (const RunFigures& f : all) out.push_back(f.per_s);
  return out;
}

const ContenderResult& BenchmarkResult::at(std::string_view contender) const {
  for (const ContenderResult& c : contenders) {
    if (c.name == contender) return c;
  }
  HOTPATH_CHECK(false, "benchmark ", name, ": no contender named '", contender, "'");
  return contenders.front();  // unreachable
}

bool BenchmarkResult::has(std::string_view contender) const {
  return std::any_of(contenders.begin(), contenders.end(),
                     [&](const ContenderResult& c) { return c.name == contender; });
}

double BenchmarkResult::ratio_vs(std::string_view peer) const {
  const double theirs = at(peer).best_per_s;
  return theirs > 0 ? at("hotpath").best_per_s / theirs : 0;
}

Json BenchmarkResult::to_json() const {
  Json j{{"name", name}, {"unit", unit}, {"repeats", repeats}, {"order", order}, {"contenders", Json::object()}};
  for (const ContenderResult& c : contenders) {
    Json runs = Json::array();
    for (const RunFigures& f : c.all) runs.push_back(f.details.empty() ? Json(f.per_s) : Json{{"per_s", f.per_s}, {"details", f.details}});
    j["contenders"][c.name] = {{"runs", c.runs},
                               {"best_per_s", c.best_per_s},
                               {"median_per_s", c.median_per_s},
                               {"runs_per_s", c.rates()},
                               {"best_run", c.best_index},
                               {"all_runs", runs}};
  }
  if (has("hotpath")) {
    for (const ContenderResult& c : contenders) {
      if (c.name != "hotpath") j["ratio_vs_" + c.name] = ratio_vs(c.name);
    }
  }
  j["load_average_before"] = load_before;
  j["load_average_after"] = load_after;
  j["host"] = host_info();
  j["dispatch"] = dispatch_report();
  j["command"] = command_line();
  return j;
}

std::string BenchmarkResult::table_row() const {
  std::ostringstream row;
  row << "| " << name << " (" << unit << ", best of " << repeats << ") |";
  for (const ContenderResult& c : contenders) row << " " << c.name << " " << rate_text(c.best_per_s) << " |";
  if (has("hotpath")) {
    for (const ContenderResult& c : contenders) {
      if (c.name != "hotpath") row << " " << std::fixed << std::setprecision(2) << ratio_vs(c.name) << "× vs " << c.name << " |";
    }
  }
  row << " load " << std::fixed << std::setprecision(1) << load_before << " → " << load_after << " |";
  return row.str();
}

Benchmark::Benchmark(std::string name, std::string unit, int repeats)
    : name_(std::move(name)), unit_(std::move(unit)), repeats_(repeats) {
  HOTPATH_CHECK(repeats_ >= 1, "benchmark ", name_, ": repeats must be >= 1, got ", repeats_);
}

Benchmark& Benchmark::add(Contender contender) {
  HOTPATH_ASSERT(static_cast<bool>(contender.run));
  for (const Contender& c : contenders_) {
    HOTPATH_CHECK(c.name != contender.name, "benchmark ", name_, ": two contenders named '", c.name, "'");
  }
  contenders_.push_back(std::move(contender));
  return *this;
}

BenchmarkResult Benchmark::run(std::ostream* log) {
  HOTPATH_CHECK(!contenders_.empty(), "benchmark ", name_, ": no contenders");
  BenchmarkResult result;
  result.name = name_;
  result.unit = unit_;
  result.repeats = repeats_;
  for (const Contender& c : contenders_) result.contenders.push_back({c.name, c.runs, {}, 0, 0, 0});
  result.load_before = load_average();
  for (int r = 0; r < repeats_; ++r) {
    if (log) *log << "  run " << r + 1 << ":";
    for (std::size_t i = 0; i < contenders_.size(); ++i) {
      RunFigures f = contenders_[i].run(r);
      if (log) *log << (i ? ", " : " ") << contenders_[i].name << " " << rate_text(f.per_s) << " " << unit_ << std::flush;
      result.order.push_back(contenders_[i].name);
      result.contenders[i].all.push_back(std::move(f));
    }
    if (log) *log << "\n";
  }
  result.load_after = load_average();
  for (ContenderResult& c : result.contenders) {
    const std::vector<double> rates = c.rates();
    c.best_index = static_cast<std::size_t>(std::max_element(rates.begin(), rates.end()) - rates.begin());
    c.best_per_s = rates[c.best_index];
    c.median_per_s = median(rates);
  }
  return result;
}

void add_benchmark_fields(Json& report, const BenchmarkResult& result) {
  const Json fields = result.to_json();  // the loop must not iterate over a temporary's items()
  for (const auto& [key, value] : fields.items()) {
    if (!report.contains(key)) report[key] = value;
  }
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return in ? load : -1;
}

Json host_info() {
  std::string model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; model.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  std::string os;
  if (utsname u{}; ::uname(&u) == 0) os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  return {{"cores", std::thread::hardware_concurrency()}, {"cpu_model", model}, {"os", os}};
}

Json dispatch_report() {
  const std::string text = cpu::dispatch_report_json();
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return text;  // not JSON: keep the text as it is
  }
}

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  std::size_t begin = 0;
  while (begin < raw.size()) {
    std::size_t end = raw.find('\0', begin);
    if (end == std::string::npos) end = raw.size();
    const std::string arg = raw.substr(begin, end - begin);
    if (!out.empty()) out += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == std::string::npos;
    out += plain ? arg : shell_quote(arg);
    begin = end + 1;
  }
  return out;
}

std::string rate_text(double v) {
  std::ostringstream s;
  if (v >= 1e6) {
    s << std::fixed << std::setprecision(2) << v / 1e6 << " M";
  } else {
    s << std::fixed << std::setprecision(v >= 100 ? 1 : v >= 10 ? 2 : 3) << v;
  }
  return s.str();
}

void write_report(const Json& report, const std::string& path) {
  const std::string text = report.dump(2) + "\n";
  if (path.empty() || path == "-") {
    std::cout << text << std::flush;
    return;
  }
  // /dev/stdout, /dev/null, a pipe: write through it. The atomic write renames a temp file over the
  // path, which would replace the device node or pipe with a regular file.
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    HOTPATH_CHECK(!std::filesystem::is_directory(status), "bench: the report path ", path, " is a directory");
    std::ofstream out(path, std::ios::binary);
    out << text << std::flush;
    HOTPATH_CHECK(out.good(), "bench: cannot write the report to ", path);
    return;
  }
  write_file_atomic(path, text);
}

std::string peer_script(std::string_view name) {
  const char* env = std::getenv("HOTPATH_SOURCE_DIR");
  const std::filesystem::path root = env && *env ? env : HOTPATH_SOURCE_DIR;
  const std::filesystem::path script = root / "bench" / "peers" / name;
  HOTPATH_CHECK(std::filesystem::exists(script), "bench: peer script not found at ", script.string());
  return script.string();
}

Json parse_peer_report(std::string out, std::string_view who, std::string_view required_key) {
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ' || out.back() == '\r')) out.pop_back();
  const auto nl = out.rfind('\n');
  const std::string line = nl == std::string::npos ? out : out.substr(nl + 1);
  Json report;
  try {
    report = Json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, who, ": the peer printed no JSON report (", e.what(), "): '", line, "'");
  }
  const std::string key(required_key);
  HOTPATH_CHECK(report.is_object() && report.contains(key) && report[key].is_number(), who,
                ": the peer's report has no numeric ", key, ": ", line);
  return report;
}

Json run_peer(const std::vector<std::string>& argv, std::string_view who, std::string_view required_key) {
  HOTPATH_ASSERT(argv.size() >= 2);
  const CommandResult r = run_command(argv);
  HOTPATH_CHECK(r.exit_code == 0, who, ": the peer failed (exit ", r.exit_code, "): ", argv[1], ": ",
                r.output.substr(r.output.size() > 2000 ? r.output.size() - 2000 : 0));
  return parse_peer_report(r.output, who, required_key);
}

ScratchDir::ScratchDir(std::string_view prefix, bool keep) : keep_(keep) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/hotpath-" + std::string(prefix) + "-XXXXXX";
  HOTPATH_CHECK(::mkdtemp(templ.data()) != nullptr, "bench: cannot create a scratch directory like ", templ, ": ",
                std::generic_category().message(errno));
  path_ = templ;
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  if (!keep_) hotpath::remove_tree(path_, ignored);
}

}  // namespace hotpath::bench
