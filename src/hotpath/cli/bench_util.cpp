#include "cli/bench_util.h"

#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"

namespace hotpath::cli {

nlohmann::ordered_json parse_peer_report(std::string out, std::string_view who, std::string_view required_key) {
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  const auto nl = out.rfind('\n');
  const std::string line = nl == std::string::npos ? out : out.substr(nl + 1);
  nlohmann::ordered_json report;
  try {
    report = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, who, ": the peer printed no JSON report (", e.what(), "): '", line, "'");
  }
  const std::string key(required_key);
  HOTPATH_CHECK(report.contains(key) && report[key].is_number(), who, ": the peer's report has no numeric ", key,
                ": ", line);
  return report;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return in ? load : -1;
}

std::string rate_text(double v) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(v >= 100 ? 1 : v >= 10 ? 2 : 3) << v;
  return s.str();
}

void write_report(const nlohmann::ordered_json& report, const std::string& path) {
  const std::string text = report.dump(2) + "\n";
  if (path.empty() || path == "-") {
    std::cout << text;
    return;
  }
  write_file_atomic(path, text);
}

}  // namespace hotpath::cli
