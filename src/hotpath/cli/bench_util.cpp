#include "cli/bench_util.h"

#include <iostream>

namespace hotpath::cli {

void print_bench_report(const bench::Json& report, const std::string& json_path,
                        const std::vector<std::string>& table_rows) {
  bench::write_report(report, json_path);
  const bool json_on_stdout = json_path.empty() || json_path == "-";
  std::ostream& out = json_on_stdout ? std::cerr : std::cout;
  for (const std::string& row : table_rows) out << row << "\n";
  out << std::flush;
}

}  // namespace hotpath::cli
