// The torch-free run-log pieces: TensorBoard event framing, the Chrome-trace recorder, the progress line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/progress.h"
#include "hotpath/core/tensorboard.h"
#include "hotpath/core/trace.h"
#include "support/test_support.h"

namespace hotpath {
namespace {

using test::TempDir;

// ---- a tiny TFRecord + protobuf reader, independent of the writer's code ------------------------

template <typename T>
T load_le(const std::string& bytes, std::size_t offset) {
  T v{};
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> records;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    EXPECT_LE(pos + 12, bytes.size()) << "truncated header at " << pos;
    const auto length = load_le<std::uint64_t>(bytes, pos);
    EXPECT_EQ(load_le<std::uint32_t>(bytes, pos + 8), masked_crc32c(crc32c(std::string_view(bytes).substr(pos, 8))));
    const std::string data = bytes.substr(pos + 12, length);
    EXPECT_EQ(load_le<std::uint32_t>(bytes, pos + 12 + length), masked_crc32c(crc32c(data)));
    records.push_back(data);
    pos += 12 + length + 4;
  }
  EXPECT_EQ(pos, bytes.size());
  return records;
}

struct Field {
  int wire_type;
  std::uint64_t number;  // varint / fixed value
  std::string bytes;     // length-delimited payload
};

std::uint64_t read_varint(const std::string& s, std::size_t& pos) {
  std::uint64_t v = 0;
  for (int shift = 0; pos < s.size(); shift += 7) {
    const auto b = static_cast<std::uint8_t>(s[pos++]);
    v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) break;
  }
  return v;
}

std::multimap<int, Field> parse_message(const std::string& s) {
  std::multimap<int, Field> fields;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::uint64_t key = read_varint(s, pos);
    Field f{static_cast<int>(key & 7), 0, {}};
    switch (f.wire_type) {
      case 0: f.number = read_varint(s, pos); break;
      case 1: f.number = load_le<std::uint64_t>(s, pos); pos += 8; break;
      case 5: f.number = load_le<std::uint32_t>(s, pos); pos += 4; break;
      case 2: {
        const std::uint64_t n = read_varint(s, pos);
        f.bytes = s.substr(pos, n);
        pos += n;
        break;
      }
      default: ADD_FAILURE() << "unexpected wire type " << f.wire_type; return fields;
    }
    fields.emplace(static_cast<int>(key >> 3), f);
  }
  return fields;
}

double as_double(std::uint64_t bits) { return std::bit_cast<double>(bits); }
float as_float(std::uint64_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits)); }

std::string only_event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().string());
  EXPECT_EQ(files.size(), 1U);
  return files.empty() ? std::string() : files[0];
}

std::string read_text(const std::string& path) {
  const auto bytes = test::read_bytes(path);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

TEST(Crc32c, MatchesKnownVectors) {
  EXPECT_EQ(crc32c(std::string_view("123456789")), 0xE3069283U);  // the CRC-32C check value
  EXPECT_EQ(crc32c(std::string_view("")), 0U);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAU);       // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43U);     // RFC 3720 B.4: 32 bytes of 0xff
}

TEST(Crc32c, MaskRotatesAndAddsTfrecordDelta) {
  EXPECT_EQ(masked_crc32c(0), 0xA282EAD8U);
  // ((c >> 15) | (c << 17)) + 0xa282ead8, computed by hand for c = 0xE3069283.
  EXPECT_EQ(masked_crc32c(0xE3069283U), ((0xE3069283U >> 15) | (0xE3069283U << 17)) + 0xA282EAD8U);
  EXPECT_EQ(masked_crc32c(0x00000001U), 0x00020000U + 0xA282EAD8U);
}

TEST(TfRecord, FramesLengthPayloadAndBothChecksums) {
  const std::string framed = frame_tfrecord("hello");
  ASSERT_EQ(framed.size(), 8U + 4U + 5U + 4U);
  EXPECT_EQ(load_le<std::uint64_t>(framed, 0), 5U);
  EXPECT_EQ(framed.substr(12, 5), "hello");
  const auto records = read_records(framed + frame_tfrecord(""));
  ASSERT_EQ(records.size(), 2U);
  EXPECT_EQ(records[0], "hello");
  EXPECT_EQ(records[1], "");
}

TEST(TensorBoardWriter, NamesTheFileLikeTensorflow) {
  const TempDir tmp;
  const TensorBoardWriter tb(tmp.file("nested/tb"));
  const std::string name = std::filesystem::path(tb.path()).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0U) << name;
  // events.out.tfevents.<seconds>.<host, may hold dots>.<pid>.<counter>
  const std::string rest = name.substr(std::strlen("events.out.tfevents."));
  EXPECT_NEAR(std::stod(rest.substr(0, rest.find('.'))), static_cast<double>(std::time(nullptr)), 60.0) << name;
  const std::string pid_and_counter = name.substr(name.rfind('.', name.rfind('.') - 1));
  EXPECT_EQ(pid_and_counter.rfind("." + std::to_string(::getpid()) + ".", 0), 0U) << name;
  EXPECT_EQ(std::filesystem::path(tb.path()).parent_path(), std::filesystem::path(tmp.file("nested/tb")));
  // A second writer in the same second gets its own file.
  const TensorBoardWriter other(tmp.file("nested/tb"));
  EXPECT_NE(other.path(), tb.path());
}

TEST(TensorBoardWriter, WritesVersionRecordThenScalarEvents) {
  const TempDir tmp;
  {
    TensorBoardWriter tb(tmp.file("tb"));
    tb.add_scalar("train/loss", 0.3121, 412, 1700000000.5);
    tb.add_scalar("train/lr", 0.05, -3, 1700000001.0);
  }
  const auto records = read_records(read_text(only_event_file(tmp.file("tb"))));
  ASSERT_EQ(records.size(), 3U);

  const auto version = parse_message(records[0]);
  ASSERT_EQ(version.count(3), 1U);
  EXPECT_EQ(version.find(3)->second.bytes, "brain.Event:2");
  ASSERT_EQ(version.count(1), 1U);
  EXPECT_GT(as_double(version.find(1)->second.number), 1.6e9);  // wall time is "now"

  const auto event = parse_message(records[1]);
  EXPECT_EQ(as_double(event.find(1)->second.number), 1700000000.5);
  EXPECT_EQ(event.find(2)->second.number, 412U);
  const auto summary = parse_message(event.find(5)->second.bytes);
  ASSERT_EQ(summary.count(1), 1U);
  const auto value = parse_message(summary.find(1)->second.bytes);
  EXPECT_EQ(value.find(1)->second.bytes, "train/loss");
  EXPECT_EQ(value.find(2)->second.wire_type, 5);
  EXPECT_EQ(as_float(value.find(2)->second.number), 0.3121F);

  const auto negative = parse_message(records[2]);
  EXPECT_EQ(static_cast<std::int64_t>(negative.find(2)->second.number), -3);  // two's complement varint
}

TEST(TensorBoardWriter, FlushMakesRecordsVisibleBeforeClose) {
  const TempDir tmp;
  TensorBoardWriter tb(tmp.file("tb"));
  EXPECT_EQ(read_records(read_text(tb.path())).size(), 1U);  // the version record is flushed at once
  tb.add_scalar("a", 1.0, 1);
  tb.flush();
  EXPECT_EQ(read_records(read_text(tb.path())).size(), 2U);
  TensorBoardWriter moved(std::move(tb));
  moved.add_scalar("a", 2.0, 2);
  moved.flush();
  EXPECT_EQ(read_records(read_text(moved.path())).size(), 3U);
}

TEST(TensorBoardWriter, UnwritableDirectoryNamesThePath) {
  const TempDir tmp;
  test::write_file(tmp.file("file"), "not a directory");
  try {
    TensorBoardWriter tb(tmp.file("file/tb"));
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.file("file/tb")), std::string::npos) << e.what();
  }
}

// ---- trace ---------------------------------------------------------------------------------------

std::vector<nlohmann::json> events_with_phase(const nlohmann::json& doc, const std::string& phase) {
  std::vector<nlohmann::json> out;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == phase) out.push_back(e);
  }
  return out;
}

const nlohmann::json* find_event(const std::vector<nlohmann::json>& events, const std::string& name) {
  for (const auto& e : events) {
    if (e.at("name") == name) return &e;
  }
  return nullptr;
}

TEST(TraceRecorder, WritesNestedCompleteEventsPerThread) {
  const TempDir tmp;
  TraceRecorder trace;
  trace.set_thread_name("trainer");
  {
    const TraceScope step(&trace, "step", "train", {{"step", 7}, {"lr", 0.05}, {"phase", "warmup"}});
    { const TraceScope fwd(&trace, "forward", "train"); std::this_thread::sleep_for(std::chrono::milliseconds(2)); }
    { const TraceScope bwd(&trace, "backward", "train"); std::this_thread::sleep_for(std::chrono::milliseconds(2)); }
  }
  std::thread worker([&] {
    trace.set_thread_name("loader-0");
    const TraceScope decode(&trace, "decode", "data");
  });
  worker.join();
  trace.counter("queue", {{"batches", 3}});
  trace.write(tmp.file("trace.json"));

  EXPECT_FALSE(std::filesystem::exists(tmp.file("trace.json") + ".tmp." + std::to_string(::getpid())));
  const auto doc = nlohmann::json::parse(read_text(tmp.file("trace.json")));
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  const auto complete = events_with_phase(doc, "X");
  ASSERT_EQ(complete.size(), 4U);
  for (const auto& e : complete) {
    EXPECT_GE(e.at("ts").get<double>(), 0.0) << e.dump();
    EXPECT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    EXPECT_TRUE(e.contains("pid") && e.contains("tid") && e.contains("cat")) << e.dump();
  }
  const auto* step = find_event(complete, "step");
  const auto* fwd = find_event(complete, "forward");
  const auto* bwd = find_event(complete, "backward");
  const auto* decode = find_event(complete, "decode");
  ASSERT_TRUE(step && fwd && bwd && decode);
  EXPECT_EQ(complete.front().at("name"), "step");  // sorted by start, the enclosing event first
  const auto end = [](const nlohmann::json* e) { return e->at("ts").get<double>() + e->at("dur").get<double>(); };
  for (const auto* child : {fwd, bwd}) {
    EXPECT_EQ(child->at("tid"), step->at("tid"));
    EXPECT_GE(child->at("ts").get<double>(), step->at("ts").get<double>());
    EXPECT_LE(end(child), end(step));
    EXPECT_GE(child->at("dur").get<double>(), 1000.0);  // slept 2 ms; µs units
  }
  EXPECT_LE(end(fwd), bwd->at("ts").get<double>());
  EXPECT_NE(decode->at("tid"), step->at("tid"));
  EXPECT_EQ(step->at("args").at("step"), 7);
  EXPECT_EQ(step->at("args").at("lr"), 0.05);
  EXPECT_EQ(step->at("args").at("phase"), "warmup");

  const auto counters = events_with_phase(doc, "C");
  ASSERT_EQ(counters.size(), 1U);
  EXPECT_EQ(counters[0].at("args").at("batches"), 3);
  const auto meta = events_with_phase(doc, "M");
  std::map<std::int64_t, std::string> thread_names;
  for (const auto& m : meta) {
    if (m.at("name") == "thread_name") thread_names[m.at("tid").get<std::int64_t>()] = m.at("args").at("name");
  }
  EXPECT_EQ(thread_names.at(step->at("tid").get<std::int64_t>()), "trainer");
  EXPECT_EQ(thread_names.at(decode->at("tid").get<std::int64_t>()), "loader-0");
}

TEST(TraceRecorder, DisabledRecordsNothingAndNullScopeIsANoOp) {
  TraceRecorder trace(false);
  { const TraceScope s(&trace, "step"); }
  { const TraceScope s(nullptr, "step"); }
  trace.record("x", "c", TraceRecorder::Clock::now(), TraceRecorder::Clock::now());
  trace.counter("queue", {{"n", 1}});
  EXPECT_EQ(trace.size(), 0U);
  trace.set_enabled(true);
  { const TraceScope s(&trace, "step"); }
  EXPECT_EQ(trace.size(), 1U);
}

TEST(TraceRecorder, ClampsReversedIntervalsAndCountsDroppedEvents) {
  TraceRecorder trace(true, 2);
  const auto t = TraceRecorder::Clock::now();
  trace.record("late", "c", t + std::chrono::milliseconds(5), t + std::chrono::milliseconds(6));
  trace.record("reversed", "c", t + std::chrono::milliseconds(3), t);
  trace.record("one too many", "c", t, t);
  EXPECT_EQ(trace.size(), 2U);
  EXPECT_EQ(trace.dropped(), 1U);
  const auto doc = nlohmann::json::parse(trace.to_json());
  const auto complete = events_with_phase(doc, "X");
  ASSERT_EQ(complete.size(), 2U);
  EXPECT_EQ(complete[0].at("name"), "reversed");  // sorted by start time
  EXPECT_EQ(complete[0].at("dur").get<double>(), 0.0);
  EXPECT_NEAR(complete[1].at("dur").get<double>(), 1000.0, 1e-6);
  EXPECT_EQ(doc.at("otherData").at("dropped_events"), 1);
  trace.clear();
  EXPECT_EQ(trace.size(), 0U);
}

TEST(TraceRecorder, WriteToMissingDirectoryNamesThePath) {
  const TempDir tmp;
  TraceRecorder trace;
  try {
    trace.write(tmp.file("no/such/dir/trace.json"));
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.file("no/such/dir/trace.json")), std::string::npos) << e.what();
  }
}

// ---- progress ------------------------------------------------------------------------------------

struct FakeClock {
  std::chrono::steady_clock::time_point now{};
  void advance_ms(int ms) { now += std::chrono::milliseconds(ms); }
};

ProgressOptions options_with(FakeClock& clock, std::string prefix = "") {
  ProgressOptions o;
  o.prefix = std::move(prefix);
  o.clock = [&clock] { return clock.now; };
  return o;
}

std::size_t count_of(const std::string& s, char c) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), c)); }

TEST(FormatDuration, MinutesSecondsAndHours) {
  EXPECT_EQ(format_duration(0), "00:00");
  EXPECT_EQ(format_duration(59.4), "00:59");
  EXPECT_EQ(format_duration(59.6), "01:00");
  EXPECT_EQ(format_duration(134), "02:14");
  EXPECT_EQ(format_duration(3599), "59:59");
  EXPECT_EQ(format_duration(3600), "1:00:00");
  EXPECT_EQ(format_duration(3725), "1:02:05");
  EXPECT_EQ(format_duration(100 * 3600 + 1), "100:00:01");
  EXPECT_EQ(format_duration(-1), "--:--");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::quiet_NaN()), "--:--");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "--:--");
}

TEST(FormatNumber, FixedUnlessTooSmallOrLarge) {
  EXPECT_EQ(format_number(0.31214), "0.3121");
  EXPECT_EQ(format_number(0.05), "0.0500");
  EXPECT_EQ(format_number(0), "0.0000");
  EXPECT_EQ(format_number(3e-5), "3.000e-05");
  EXPECT_EQ(format_number(2.5e7), "2.500e+07");
  EXPECT_EQ(format_number(1.5, 2), "1.50");
}

TEST(Progress, TerminalRewritesOneLineAndEndsWithNewline) {
  FakeClock clock;
  std::ostringstream out;
  {
    ProgressOptions o = options_with(clock, "epoch 3/10");
    o.bar_width = 10;
    Progress bar(10, out, /*is_tty=*/true, o);
    for (int step = 1; step <= 10; ++step) {
      clock.advance_ms(500);
      bar.update(step, train_fields(0.31214, 0.05, 5123.4));
      if (step == 4) {
        EXPECT_EQ(bar.render(), "epoch 3/10 [####------]   4/10  loss 0.3121  lr 0.0500  5123 img/s  ETA 00:03");
      }
    }
    bar.finish();
    bar.finish();  // idempotent
  }
  const std::string s = out.str();
  EXPECT_EQ(count_of(s, '\r'), 10U);  // 0.5 s apart: every step drawn
  EXPECT_EQ(count_of(s, '\n'), 1U);
  EXPECT_EQ(s.back(), '\n');
  const std::string last = s.substr(s.rfind('\r') + 1);
  EXPECT_EQ(last, "epoch 3/10 [##########]  10/10  loss 0.3121  lr 0.0500  5123 img/s  elapsed 00:05\n");
}

TEST(Progress, TerminalRedrawsAtMostTenTimesASecond) {
  FakeClock clock;
  std::ostringstream out;
  Progress bar(100, out, true, options_with(clock));
  for (int step = 1; step <= 100; ++step) {
    clock.advance_ms(10);
    bar.update(step, {{"loss", "1.0"}});
  }
  bar.finish();
  // Drawn at steps 1, 11, 21, ..., 91 (0.1 s apart) and the last one.
  EXPECT_EQ(count_of(out.str(), '\r'), 11U);
  EXPECT_NE(out.str().find("\r[####################]  100/100  loss 1.0  elapsed 00:01\n"), std::string::npos) << out.str();
}

TEST(Progress, TerminalPadsAShorterLineOverALongerOne) {
  FakeClock clock;
  std::ostringstream out;
  Progress bar(0, out, true, options_with(clock));
  bar.update(1, {{"note", "a long first message"}});
  clock.advance_ms(200);
  bar.update(2, {{"note", "short"}});
  const std::string s = out.str();
  const std::string first = "1  note a long first message  elapsed 00:00";
  const std::string second = "2  note short  elapsed 00:00";
  EXPECT_EQ(s, "\r" + first + "\r" + second + std::string(first.size() - second.size(), ' '));
}

TEST(Progress, PlainOutputPrintsLinesEveryIntervalAndTheLastStep) {
  FakeClock clock;
  std::ostringstream out;
  {
    Progress bar(25, out, /*is_tty=*/false, options_with(clock, "epoch 1/2"));
    for (int step = 1; step <= 25; ++step) {
      clock.advance_ms(1000);
      bar.update(step, train_fields(0.5, 0.1, 64));
    }
  }  // the destructor finishes; the last line is already out
  const std::string s = out.str();
  EXPECT_EQ(s.find('\r'), std::string::npos);
  EXPECT_EQ(s,
            "epoch 1/2   1/25 (4%)  loss 0.5000  lr 0.1000  64 img/s  ETA 00:24\n"
            "epoch 1/2  11/25 (44%)  loss 0.5000  lr 0.1000  64 img/s  ETA 00:14\n"
            "epoch 1/2  21/25 (84%)  loss 0.5000  lr 0.1000  64 img/s  ETA 00:04\n"
            "epoch 1/2  25/25 (100%)  loss 0.5000  lr 0.1000  64 img/s  elapsed 00:25\n");
}

TEST(Progress, PlainFinishPrintsAStateTheThrottleHeldBack) {
  FakeClock clock;
  std::ostringstream out;
  Progress bar(25, out, false, options_with(clock));
  for (int step = 1; step <= 15; ++step) {
    clock.advance_ms(1000);
    bar.update(step);
  }
  bar.finish();
  EXPECT_EQ(out.str(), " 1/25 (4%)  ETA 00:24\n11/25 (44%)  ETA 00:14\n15/25 (60%)  ETA 00:10\n");
}

TEST(Progress, EtaFollowsAnExponentialMovingAverageOfStepTime) {
  FakeClock clock;
  std::ostringstream out;
  ProgressOptions o = options_with(clock);
  o.ema_alpha = 0.5;
  Progress bar(100, out, false, o);
  EXPECT_FALSE(bar.eta_seconds().has_value());
  clock.advance_ms(1000);
  bar.update(1);
  EXPECT_DOUBLE_EQ(*bar.eta_seconds(), 99 * 1.0);  // the first step time seeds the average
  clock.advance_ms(3000);
  bar.update(2);
  EXPECT_DOUBLE_EQ(*bar.eta_seconds(), 98 * 2.0);  // 0.5 * 3 + 0.5 * 1
  clock.advance_ms(4000);
  bar.update(4);  // two steps in 4 s: 2 s per step
  EXPECT_DOUBLE_EQ(*bar.eta_seconds(), 96 * 2.0);
  bar.update(4);  // no progress: the average does not move
  EXPECT_DOUBLE_EQ(*bar.eta_seconds(), 96 * 2.0);
}

TEST(Progress, ResumedEpochTimesFromTheInitialStep) {
  FakeClock clock;
  std::ostringstream out;
  ProgressOptions o = options_with(clock);
  o.initial_step = 400;
  Progress bar(500, out, false, o);
  clock.advance_ms(250);
  bar.update(401);
  EXPECT_DOUBLE_EQ(*bar.eta_seconds(), 99 * 0.25);  // not 400 steps in 0.25 s
}

TEST(Progress, StreamIsTtyIsFalseForAFile) {
  const TempDir tmp;
  std::FILE* f = std::fopen(tmp.file("log").c_str(), "w");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(stream_is_tty(f));
  std::fclose(f);
  EXPECT_FALSE(stream_is_tty(nullptr));
}

}  // namespace
}  // namespace hotpath
