// hotpath/core/trace.h — record what each thread spends time on, as a Chrome trace.
//
//   hotpath::TraceRecorder trace;                        // enabled; set_enabled(false) makes it ~free
//   { hotpath::TraceScope s(&trace, "forward", "train", {{"step", step}}); model.forward(x); }
//   trace.write("trace.json");                           // open in ui.perfetto.dev or chrome://tracing
//
// The output is the Trace Event Format's JSON object form: complete events ("ph":"X") with ts/dur in
// microseconds since the recorder was made, counter events ("ph":"C") and thread names ("ph":"M").
// Thread-safe: events go to one mutex-guarded vector (a few per training step, so no contention
// worth a lock-free buffer). When disabled, record()/TraceScope read neither the clock nor the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace hotpath {

// One "args" entry shown when an event is selected in the viewer.
struct TraceArg {
  template <std::integral T>
  TraceArg(std::string arg_name, T v) : name(std::move(arg_name)), value(static_cast<std::int64_t>(v)) {}
  template <std::floating_point T>
  TraceArg(std::string arg_name, T v) : name(std::move(arg_name)), value(static_cast<double>(v)) {}
  TraceArg(std::string arg_name, std::string_view v) : name(std::move(arg_name)), value(std::string(v)) {}
  TraceArg(std::string arg_name, const char* v) : name(std::move(arg_name)), value(std::string(v)) {}

  std::string name;
  std::variant<std::int64_t, double, std::string> value;
};

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  // Times are reported relative to construction. Past `max_events` events are dropped (and
  // counted) so a trace left on by mistake cannot eat the machine's memory.
  explicit TraceRecorder(bool enabled = true, std::size_t max_events = 1'000'000);
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  [[nodiscard]] bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  // A complete event: `name` ran on the calling thread from `start` to `end`.
  void record(std::string_view name, std::string_view category, Clock::time_point start, Clock::time_point end,
              std::vector<TraceArg> args = {});
  // A counter sample (drawn as a track of its own): e.g. counter("queue", {{"batches", 3}}).
  void counter(std::string_view name, std::vector<TraceArg> values, Clock::time_point at = Clock::now());
  // Names the calling thread in the viewer ("loader-0", "trainer"); recorded even when disabled,
  // so threads started before tracing was switched on still get their names.
  void set_thread_name(std::string_view name);

  // Writes {"traceEvents":[...],"displayTimeUnit":"ms"} to `path` atomically (temp file + rename).
  // Events are sorted by start time, enclosing ones first. Throws hotpath::Error naming the path.
  void write(const std::string& path) const;
  // The same document as a string (for tests and for callers that ship it elsewhere).
  [[nodiscard]] std::string to_json() const;

  [[nodiscard]] std::size_t size() const;     // events held (thread names included)
  [[nodiscard]] std::size_t dropped() const;  // events refused because max_events was reached
  void clear();                               // drops the events; keeps the time origin and thread names

  // A small id for the calling thread, stable for its lifetime: 1 for the first thread that asks, 2 ...
  static std::uint32_t thread_id();

 private:
  struct Event {
    char phase;  // 'X' complete, 'C' counter, 'M' metadata (thread name)
    std::string name;
    std::string category;
    double ts_us;
    double dur_us;
    std::uint32_t tid;
    std::vector<TraceArg> args;
  };
  void push(Event event);

  std::atomic<bool> enabled_;
  std::size_t max_events_;
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::size_t dropped_ = 0;
};

// Records [construction, destruction) as one complete event on `recorder` (nullptr or disabled: no-op).
class TraceScope {
 public:
  TraceScope(TraceRecorder* recorder, std::string_view name, std::string_view category = "hotpath",
             std::vector<TraceArg> args = {});
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceRecorder* recorder_;  // null when tracing was off at construction
  std::string name_;  // copied only when tracing is on (short names fit the small-string buffer)
  std::string category_;
  std::vector<TraceArg> args_;
  TraceRecorder::Clock::time_point start_;
};

}  // namespace hotpath
