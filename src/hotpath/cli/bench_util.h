// Printing shared by the benchmark commands (`hotpath data bench`, `hotpath bench train|text`); the
// benchmarks themselves live in the bench stage (hotpath/bench/*.h).
#pragma once

#include <string>
#include <vector>

#include "hotpath/bench/harness.h"

namespace hotpath::cli {

// The JSON report to `json_path` (atomically) or to stdout for "" / "-", and the markdown table rows
// to stdout when the JSON went to a file, else to stderr (stdout then holds only the JSON).
void print_bench_report(const bench::Json& report, const std::string& json_path,
                        const std::vector<std::string>& table_rows);

}  // namespace hotpath::cli
