#include "hotpath/core/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

nlohmann::json args_json(const std::vector<TraceArg>& args) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& a : args) std::visit([&](const auto& v) { out[a.name] = v; }, a.value);
  return out;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

TraceRecorder::TraceRecorder(bool enabled, std::size_t max_events)
    : enabled_(enabled), max_events_(max_events), origin_(Clock::now()) {}

std::uint32_t TraceRecorder::thread_id() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void TraceRecorder::push(Event event) {
  const std::lock_guard lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

void TraceRecorder::record(std::string_view name, std::string_view category, Clock::time_point start,
                           Clock::time_point end, std::vector<TraceArg> args) {
  if (!enabled()) return;
  using Micros = std::chrono::duration<double, std::micro>;
  const double ts = Micros(start - origin_).count();
  // A clock read out of order by the caller must not produce a negative duration the viewer rejects.
  const double dur = std::max(0.0, Micros(end - start).count());
  push(Event{'X', std::string(name), std::string(category), ts, dur, thread_id(), std::move(args)});
}

void TraceRecorder::counter(std::string_view name, std::vector<TraceArg> values, Clock::time_point at) {
  if (!enabled()) return;
  const double ts = std::chrono::duration<double, std::micro>(at - origin_).count();
  push(Event{'C', std::string(name), "counter", ts, 0.0, thread_id(), std::move(values)});
}

void TraceRecorder::set_thread_name(std::string_view name) {
  const std::uint32_t tid = thread_id();
  {
    const std::lock_guard lock(mutex_);
    for (auto& e : events_) {
      if (e.phase == 'M' && e.tid == tid) {
        e.args = {TraceArg("name", name)};
        return;
      }
    }
  }
  push(Event{'M', "thread_name", "", 0.0, 0.0, tid, {TraceArg("name", name)}});
}

std::string TraceRecorder::to_json() const {
  std::vector<Event> events;
  std::size_t dropped = 0;
  {
    const std::lock_guard lock(mutex_);
    events = events_;
    dropped = dropped_;
  }
  // Metadata first, then by start time with the enclosing (longer) event before what it contains,
  // so viewers that nest by order (chrome://tracing) draw parents above children.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    const bool a_meta = a.phase == 'M', b_meta = b.phase == 'M';
    if (a_meta != b_meta) return a_meta;
    if (a.ts_us != b.ts_us) return a.ts_us < b.ts_us;
    return a.dur_us > b.dur_us;
  });
  const auto pid = static_cast<std::int64_t>(::getpid());
  nlohmann::json list = nlohmann::json::array();
  list.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", "hotpath"}}}});
  for (const auto& e : events) {
    nlohmann::json j = {{"name", e.name}, {"ph", std::string(1, e.phase)}, {"pid", pid}, {"tid", e.tid}};
    if (e.phase != 'M') {
      j["cat"] = e.category;
      j["ts"] = e.ts_us;
    }
    if (e.phase == 'X') j["dur"] = e.dur_us;
    j["args"] = args_json(e.args);
    list.push_back(std::move(j));
  }
  nlohmann::json doc = {{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}};
  if (dropped > 0) doc["otherData"] = {{"dropped_events", dropped}};
  return doc.dump();
}

void TraceRecorder::write(const std::string& path) const {
  const std::string text = to_json();
  // Temp file + rename: a viewer (or a crash) never sees half a trace.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    HOTPATH_CHECK(f != nullptr, tmp, ": cannot create the trace file: ", std::strerror(errno));
    const bool ok = std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
    const bool closed = std::fclose(f.release()) == 0;
    if (!ok || !closed) {
      const int err = errno;
      std::remove(tmp.c_str());
      HOTPATH_CHECK(false, tmp, ": cannot write the trace (", text.size(), " bytes): ", std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    HOTPATH_CHECK(false, path, ": cannot rename ", tmp, " over it: ", std::strerror(err));
  }
}

std::size_t TraceRecorder::size() const {
  const std::lock_guard lock(mutex_);
  return events_.size();
}

std::size_t TraceRecorder::dropped() const {
  const std::lock_guard lock(mutex_);
  return dropped_;
}

void TraceRecorder::clear() {
  const std::lock_guard lock(mutex_);
  std::erase_if(events_, [](const Event& e) { return e.phase != 'M'; });
  dropped_ = 0;
}

TraceScope::TraceScope(TraceRecorder* recorder, std::string_view name, std::string_view category,
                       std::vector<TraceArg> args)
    : recorder_(recorder != nullptr && recorder->enabled() ? recorder : nullptr) {
  if (recorder_ == nullptr) return;
  name_ = name;
  category_ = category;
  args_ = std::move(args);
  start_ = TraceRecorder::Clock::now();
}

TraceScope::~TraceScope() {
  if (recorder_ == nullptr) return;
  recorder_->record(name_, category_, start_, TraceRecorder::Clock::now(), std::move(args_));
}

}  // namespace hotpath
