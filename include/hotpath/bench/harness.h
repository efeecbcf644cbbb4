// hotpath/bench/harness.h — the one side-by-side benchmark runner every `hotpath bench ...` uses:
// named contenders (hotpath in process, peers as python subprocesses) run interleaved, every run kept,
// best-of and median, the machine's load before/after, host and CPU-dispatch facts, atomic JSON.
//
//   Benchmark b("loader", "images/s", /*repeats=*/3);
//   b.add({"hotpath", "hotpath::data::Loader", [&](int) { return RunFigures{bench_loader(o).images_per_s}; }});
//   b.add({"torch", "DataLoader + PIL", [&](int) { return peer_figures(run_peer(argv, "data bench", "images_per_s"), "images_per_s"); }});
//   BenchmarkResult r = b.run(&std::cerr);   // hotpath torch hotpath torch hotpath torch
//   write_report(r.to_json(), "out.json");   // r.ratio_vs("torch") == best hotpath / best torch
//
// Why interleave and keep the best: on a shared machine other processes only ever slow a run down, and
// they come and go; A B A B spreads that over both sides, and the best run is the least disturbed one.
// The median and every run are in the JSON so a reader can see the spread. One ratio convention:
// ratio_vs_<peer> = hotpath per_s / peer per_s (> 1: hotpath is faster).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::bench {

using Json = nlohmann::ordered_json;

// One run of one contender: its rate and whatever else it measured (kept in the JSON for every run).
struct RunFigures {
  double per_s = 0;
  Json details = Json::object();
};

struct Contender {
  std::string name;  // "hotpath", "torch", "hf", ...; the JSON's keys and ratio_vs_<name> use it
  std::string runs;  // what it runs, in words ("hotpath::train::train (benchmark mode)")
  std::function<RunFigures(int repeat)> run;
};

struct ContenderResult {
  std::string name;
  std::string runs;
  std::vector<RunFigures> all;  // every run, in order
  std::size_t best_index = 0;
  double best_per_s = 0;
  double median_per_s = 0;
  [[nodiscard]] const RunFigures& best() const { return all.at(best_index); }
  [[nodiscard]] std::vector<double> rates() const;
};

struct BenchmarkResult {
  std::string name;
  std::string unit;
  int repeats = 0;
  std::vector<std::string> order;  // the contenders' names in the order they ran
  std::vector<ContenderResult> contenders;
  double load_before = -1;
  double load_after = -1;

  // The contender called `contender`; hotpath::Error if there is none.
  [[nodiscard]] const ContenderResult& at(std::string_view contender) const;
  [[nodiscard]] bool has(std::string_view contender) const;
  // best hotpath per_s / best `peer` per_s (0 when the peer measured nothing).
  [[nodiscard]] double ratio_vs(std::string_view peer) const;
  // {"name", "unit", "repeats", "order", "contenders": {name: {runs, best_per_s, median_per_s, runs_per_s,
  //  best}}, "ratio_vs_<peer>"..., "load_average_before", "load_average_after", "host", "dispatch", "command"}
  [[nodiscard]] Json to_json() const;
  // One markdown table row: "| name | hotpath 512.3 images/s | torch 300.1 | 1.71× vs torch | load 0.5 → 1.2 |".
  [[nodiscard]] std::string table_row() const;
};

class Benchmark {
 public:
  Benchmark(std::string name, std::string unit, int repeats);
  Benchmark& add(Contender contender);
  // Runs every contender once per repeat, in the order added (A B A B ...); a line per run on `log`.
  // A contender's exception propagates (a failed peer fails the benchmark: no ratio without it).
  BenchmarkResult run(std::ostream* log = nullptr);

 private:
  std::string name_;
  std::string unit_;
  int repeats_;
  std::vector<Contender> contenders_;
};

// Adds every field of result.to_json() that `report` does not have yet: a command's own fields first,
// the harness' (contenders, order, ratio_vs_<peer>, load, host, dispatch, command) after them.
void add_benchmark_fields(Json& report, const BenchmarkResult& result);

// The median of `values` (the mean of the two middle ones for an even count; 0 when empty).
double median(std::vector<double> values);

// The 1-minute load average (/proc/loadavg; -1 where there is none): on a shared machine it says how
// much of the CPU the runs had.
double load_average();

// {"cores": hardware threads, "cpu_model": /proc/cpuinfo's "model name", "os": uname}.
Json host_info();

// hotpath::cpu::dispatch_report_json() as JSON: which kernel each op takes on this CPU and why.
Json dispatch_report();

// This process' command line (/proc/self/cmdline), shell-quoted: the command that made the figures.
std::string command_line();

// A rate with three significant digits at least (0.134, 12.35, 512.3, 7.06 M).
std::string rate_text(double v);

// The report as indented JSON to `path` (atomically: readers never see half a report), or to stdout
// for "" / "-". A path that exists and is not a regular file (/dev/stdout, a pipe) is written through.
void write_report(const Json& report, const std::string& path);

// <source dir>/bench/peers/<name>: the python peers live together there. hotpath::Error if missing.
std::string peer_script(std::string_view name);

// Runs a peer (argv[0] = python) and parses its report: the last non-empty line of its stdout (it may
// log before), which must hold a numeric `required_key`. Errors name `who` ("bench train") and show the
// end of the peer's output.
Json run_peer(const std::vector<std::string>& argv, std::string_view who, std::string_view required_key);
Json parse_peer_report(std::string out, std::string_view who, std::string_view required_key);

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it when this goes out of scope
// unless `keep`: the one place benchmarks get scratch space.
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view prefix, bool keep = false);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
  bool keep_;
};

}  // namespace hotpath::bench
