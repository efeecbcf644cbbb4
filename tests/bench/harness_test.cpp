// The benchmark harness: contenders interleaved, every run kept, best-of and median, the ratio
// convention, the JSON report (atomic, parseable, with load/host/dispatch), peers' reports, scratch dirs.
// Also the tokenizer benchmark and split_lines, which the text benchmarks read their inputs with.
#include "hotpath/bench/harness.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/bench/tokenize_bench.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/text/lines.h"
#include "hotpath/core/remove_tree.h"

namespace hotpath::bench {
namespace {

// A contender whose runs return `rates` in turn and log their name to `order`.
Contender scripted(const std::string& name, std::vector<double> rates, std::vector<std::string>* order) {
  return {name, "scripted " + name, [name, rates, order](int repeat) {
            order->push_back(name + std::to_string(repeat));
            return RunFigures{rates.at(static_cast<std::size_t>(repeat)), {{"repeat", repeat}}};
          }};
}

TEST(Benchmark, InterleavesContendersRepeatByRepeat) {
  std::vector<std::string> order;
  Benchmark b("toy", "items/s", 3);
  b.add(scripted("hotpath", {1, 2, 3}, &order)).add(scripted("torch", {4, 5, 6}, &order));
  const BenchmarkResult r = b.run();
  EXPECT_EQ(order, (std::vector<std::string>{"hotpath0", "torch0", "hotpath1", "torch1", "hotpath2", "torch2"}));
  EXPECT_EQ(r.order, (std::vector<std::string>{"hotpath", "torch", "hotpath", "torch", "hotpath", "torch"}));
}

TEST(Benchmark, KeepsEveryRunAndReportsBestAndMedian) {
  std::vector<std::string> order;
  Benchmark b("toy", "items/s", 4);
  b.add(scripted("hotpath", {10, 40, 20, 30}, &order)).add(scripted("hf", {5, 2, 8, 1}, &order));
  const BenchmarkResult r = b.run();
  const ContenderResult& hp = r.at("hotpath");
  EXPECT_EQ(hp.rates(), (std::vector<double>{10, 40, 20, 30}));
  EXPECT_EQ(hp.best_index, 1u);
  EXPECT_DOUBLE_EQ(hp.best_per_s, 40);
  EXPECT_DOUBLE_EQ(hp.median_per_s, 25);
  EXPECT_EQ(hp.best().details["repeat"], 1);
  EXPECT_DOUBLE_EQ(r.at("hf").best_per_s, 8);
  EXPECT_DOUBLE_EQ(r.at("hf").median_per_s, 3.5);
  // ratio_vs_<peer> = hotpath per_s / peer per_s, best of each.
  EXPECT_DOUBLE_EQ(r.ratio_vs("hf"), 5.0);
  EXPECT_TRUE(r.has("hf"));
  EXPECT_FALSE(r.has("torch"));
  EXPECT_THROW((void)r.at("torch"), Error);
}

TEST(Benchmark, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median({}), 0);
  EXPECT_DOUBLE_EQ(median({3}), 3);
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
}

TEST(Benchmark, RefusesBadSetups) {
  EXPECT_THROW(Benchmark("toy", "items/s", 0), Error);
  std::vector<std::string> order;
  Benchmark b("toy", "items/s", 1);
  b.add(scripted("hotpath", {1}, &order));
  EXPECT_THROW(b.add(scripted("hotpath", {1}, &order)), Error);
  EXPECT_THROW(Benchmark("empty", "items/s", 1).run(), Error);
}

TEST(Benchmark, AContenderErrorFailsTheRun) {
  Benchmark b("toy", "items/s", 2);
  b.add({"hotpath", "ok", [](int) { return RunFigures{1}; }});
  b.add({"torch", "broken", [](int) -> RunFigures { throw Error("peer died"); }});
  EXPECT_THROW(b.run(), Error);
}

TEST(Benchmark, JsonHasEveryRunRatiosLoadHostAndDispatch) {
  std::vector<std::string> order;
  Benchmark b("toy", "items/s", 2);
  b.add(scripted("hotpath", {3, 6}, &order)).add(scripted("torch", {2, 3}, &order));
  std::ostringstream log;
  const BenchmarkResult r = b.run(&log);
  EXPECT_NE(log.str().find("run 2: hotpath 6.000 items/s, torch 3.000 items/s"), std::string::npos) << log.str();
  const Json j = r.to_json();
  EXPECT_EQ(j["name"], "toy");
  EXPECT_EQ(j["unit"], "items/s");
  EXPECT_EQ(j["repeats"], 2);
  EXPECT_EQ(j["order"].size(), 4u);
  EXPECT_EQ(j["contenders"]["hotpath"]["runs_per_s"], Json::parse("[3.0, 6.0]"));
  EXPECT_EQ(j["contenders"]["torch"]["all_runs"].size(), 2u);
  EXPECT_EQ(j["contenders"]["torch"]["all_runs"][1]["details"]["repeat"], 1);
  EXPECT_DOUBLE_EQ(j["contenders"]["hotpath"]["best_per_s"].get<double>(), 6);
  EXPECT_DOUBLE_EQ(j["contenders"]["hotpath"]["median_per_s"].get<double>(), 4.5);
  EXPECT_DOUBLE_EQ(j["ratio_vs_torch"].get<double>(), 2.0);
  EXPECT_FALSE(j.contains("ratio_vs_hotpath"));
  EXPECT_TRUE(j["load_average_before"].is_number());
  EXPECT_TRUE(j["load_average_after"].is_number());
  EXPECT_GE(j["host"]["cores"].get<int>(), 1);
  EXPECT_TRUE(j["host"].contains("cpu_model"));
  EXPECT_FALSE(j["dispatch"].is_null());
  EXPECT_FALSE(j["command"].get<std::string>().empty());
  const std::string row = r.table_row();
  EXPECT_NE(row.find("| toy (items/s, best of 2) |"), std::string::npos) << row;
  EXPECT_NE(row.find("2.00× vs torch"), std::string::npos) << row;
}

TEST(Benchmark, AddBenchmarkFieldsKeepsTheCommandsOwn) {
  std::vector<std::string> order;
  Benchmark b("toy", "items/s", 1);
  b.add(scripted("hotpath", {3}, &order)).add(scripted("hf", {1}, &order));
  Json report{{"unit", "sentences/s"}, {"ratio", 3.0}};
  add_benchmark_fields(report, b.run());
  EXPECT_EQ(report["unit"], "sentences/s");
  EXPECT_DOUBLE_EQ(report["ratio_vs_hf"].get<double>(), 3.0);
  EXPECT_TRUE(report.contains("contenders") && report.contains("dispatch") && report.contains("host"));
  EXPECT_EQ(report.begin().key(), "unit");  // the command's fields first
}

TEST(RateText, KeepsThreeSignificantDigits) {
  EXPECT_EQ(rate_text(0.1344), "0.134");
  EXPECT_EQ(rate_text(12.3456), "12.35");
  EXPECT_EQ(rate_text(512.34), "512.3");
  EXPECT_EQ(rate_text(7061340.7), "7.06 M");
}

TEST(WriteReport, WritesParseableJsonAtomically) {
  const ScratchDir dir("harness-test");
  const std::string path = dir.file("report.json");
  write_report(Json{{"a", 1}}, path);
  write_report(Json{{"b", Json::array({1, 2})}}, path);  // replaces the old report whole
  const Json back = Json::parse(read_file(path));
  EXPECT_EQ(back, (Json{{"b", Json::array({1, 2})}}));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename(), "report.json") << "left behind: " << entry.path();
  }
  EXPECT_THROW(write_report(Json{{"a", 1}}, dir.file("missing/report.json")), Error);
}

TEST(WriteReport, WritesThroughAPipeInsteadOfReplacingIt) {
  const ScratchDir dir("harness-test");
  const std::string fifo = dir.file("report.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(fifo);
    received.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  });
  write_report(Json{{"a", 1}}, fifo);
  reader.join();
  EXPECT_EQ(Json::parse(received), (Json{{"a", 1}}));
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));  // still the pipe, not a file renamed over it
  EXPECT_THROW(write_report(Json{{"a", 1}}, dir.path().string()), Error);
}

TEST(PeerReport, TakesTheLastLineAndNeedsTheKey) {
  const Json j = parse_peer_report("loading...\n{\"samples_per_s\": 12.5, \"torch\": \"2.x\"}\n\n", "t", "samples_per_s");
  EXPECT_DOUBLE_EQ(j["samples_per_s"].get<double>(), 12.5);
  EXPECT_THROW(parse_peer_report("{\"samples_per_s\": \"fast\"}", "t", "samples_per_s"), Error);
  EXPECT_THROW(parse_peer_report("not json", "t", "samples_per_s"), Error);
  EXPECT_THROW(parse_peer_report("", "t", "samples_per_s"), Error);
}

TEST(PeerReport, RunsAChildAndRefusesItsFailure) {
  const Json j = run_peer({"/bin/sh", "-c", "echo log line; echo '{\"per_s\": 7}'"}, "t", "per_s");
  EXPECT_EQ(j["per_s"], 7);
  try {
    (void)run_peer({"/bin/sh", "-c", "echo it broke; exit 3"}, "bench toy", "per_s");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bench toy: the peer failed (exit 3)"), std::string::npos) << what;
    EXPECT_NE(what.find("it broke"), std::string::npos) << what;
  }
}

TEST(ScratchDir, IsFreshAndRemovedUnlessKept) {
  std::filesystem::path kept;
  std::filesystem::path removed;
  {
    const ScratchDir a("harness-test");
    const ScratchDir b("harness-test", /*keep=*/true);
    EXPECT_NE(a.path(), b.path());
    EXPECT_TRUE(std::filesystem::is_directory(a.path()));
    std::ofstream(a.file("x.txt")) << "x";
    removed = a.path();
    kept = b.path();
  }
  EXPECT_FALSE(std::filesystem::exists(removed));
  EXPECT_TRUE(std::filesystem::exists(kept));
  hotpath::remove_tree(kept);
}

TEST(PeerScript, NamesTheMissingScript) {
  EXPECT_NE(peer_script("torch_train_peer.py").find("bench/peers/torch_train_peer.py"), std::string::npos);
  EXPECT_THROW((void)peer_script("no_such_peer.py"), Error);
}

TEST(SplitLines, DropsLineEndsAndKeepsEmptyLines) {
  const std::vector<std::string_view> lines = text::split_lines("hello world\r\ntokenizers\n\na b");
  EXPECT_EQ(lines, (std::vector<std::string_view>{"hello world", "tokenizers", "", "a b"}));
  EXPECT_TRUE(text::split_lines("").empty());
  EXPECT_EQ(text::split_lines("x\n").size(), 1u);
}

TEST(TokenizeBench, CountsLinesAndTokens) {
  const text::Tokenizer tok =
      text::Tokenizer::from_vocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\ntoken\n##izer\n##s\na\nb\n");
  const std::vector<std::string_view> lines = text::split_lines("hello world\r\ntokenizers\n\na b");
  const TokenizeBenchResult r = bench_tokenize(tok, lines, {.threads = 2}, 3, 2);
  EXPECT_EQ(r.lines, 4u);
  EXPECT_EQ(r.tokens, 4u * 2 + 2 + 3 + 0 + 2);
  EXPECT_GT(r.tokens_per_s, 0);
  EXPECT_NE(to_json(r).find("\"tokens_per_s\""), std::string::npos);
}

}  // namespace
}  // namespace hotpath::bench
