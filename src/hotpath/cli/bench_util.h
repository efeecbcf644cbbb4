// Shared by the side-by-side benchmark commands (`hotpath bench train`, `hotpath bench text`): the
// peer's JSON report, the machine's load, and writing the report.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace hotpath::cli {

// The last non-empty line of a peer's stdout, parsed (the peer may log before its report); it must
// hold a numeric `required_key`. `who` names the command in errors ("bench train").
nlohmann::ordered_json parse_peer_report(std::string out, std::string_view who, std::string_view required_key);

// The 1-minute load average (/proc/loadavg; -1 where there is none): on a shared machine it says how
// much of the CPU the runs had.
double load_average();

// A rate with three significant digits at least (0.134, 12.35, 512.3).
std::string rate_text(double v);

// The report as indented JSON to `path` (atomically), or to stdout for "" / "-".
void write_report(const nlohmann::ordered_json& report, const std::string& path);

}  // namespace hotpath::cli
