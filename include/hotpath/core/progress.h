// hotpath/core/progress.h — the training progress line: bar, step, loss, lr, throughput, ETA.
//
//   hotpath::Progress bar(steps_per_epoch, std::cerr, hotpath::stream_is_tty(stderr), {.prefix = "epoch 3/10"});
//   for (...) bar.update(step + 1, hotpath::train_fields(loss, lr, images_per_s));
//   bar.finish();
//
// On a terminal one line is rewritten with '\r' at most every `tty_interval_s`:
//   epoch 3/10 [#########-----------]  412/938  loss 0.3121  lr 0.0500  5123 img/s  ETA 02:14
// Elsewhere (a log file, CI) it prints plain lines, never '\r', at most every `plain_interval_s`, plus
// the first and the last step:
//   epoch 3/10  412/938 (44%)  loss 0.3121  lr 0.0500  5123 img/s  ETA 02:14
// The ETA is the remaining steps times an exponential moving average of the step time. The clock is
// an option, so tests drive time by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath {

// True when `stream` is a terminal (isatty on its descriptor).
bool stream_is_tty(std::FILE* stream);

// "mm:ss" below an hour, "h:mm:ss" from there on (seconds rounded to the nearest); "--:--" for a
// negative or non-finite value.
std::string format_duration(double seconds);
// `value` with `digits` digits after the point ("0.3121"); switches to scientific notation for
// magnitudes a fixed format would show as 0.0000 (a learning rate of 3e-05 stays readable).
std::string format_number(double value, int digits = 4);

// One "name value" item on the line; an empty name prints the value alone ("5123 img/s").
struct ProgressField {
  std::string name;
  std::string value;
};

// The usual training fields: "loss 0.3121", "lr 0.0500", "5123 img/s".
std::vector<ProgressField> train_fields(double loss, double lr, double samples_per_s,
                                        std::string_view unit = "img/s");

struct ProgressOptions {
  using Clock = std::chrono::steady_clock;
  std::string prefix;               // e.g. "epoch 3/10"; empty: none
  double tty_interval_s = 0.1;      // terminal redraws at most ~10 Hz
  double plain_interval_s = 10.0;   // plain lines at most this often
  int bar_width = 20;               // characters between the brackets
  double ema_alpha = 0.1;           // weight of the newest step time in the average
  std::int64_t initial_step = 0;    // steps already done (a resumed epoch): timing starts from here
  std::function<Clock::time_point()> clock = Clock::now;  // injected by tests
};

class Progress {
 public:
  using Clock = ProgressOptions::Clock;

  // `total` steps make 100% (0 or less: unknown, no bar and no ETA). Output goes to `out`.
  Progress(std::int64_t total, std::ostream& out, bool is_tty, ProgressOptions options = {});
  // Ends the line if finish() was not called (a terminal prompt must not land on the bar).
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `step` steps are done (1-based: the last one is `total`). Prints when the throttle allows.
  void update(std::int64_t step, const std::vector<ProgressField>& fields = {});
  // Prints the last state if the throttle held it back; on a terminal ends the line. Idempotent.
  void finish();

  // Seconds to go by the moving average; nullopt before the first timed step or with no total.
  [[nodiscard]] std::optional<double> eta_seconds() const;
  // The line for the current state, without '\r' or '\n' (what update() would print).
  [[nodiscard]] std::string render() const;

 private:
  [[nodiscard]] double seconds_since(Clock::time_point t, Clock::time_point now) const;
  void print(Clock::time_point now);

  std::int64_t total_;
  std::ostream& out_;
  bool is_tty_;
  ProgressOptions options_;
  Clock::time_point start_;
  Clock::time_point last_step_time_;
  std::int64_t step_ = 0;
  std::vector<ProgressField> fields_;
  std::optional<double> ema_step_s_;
  std::optional<Clock::time_point> last_print_;
  bool printed_current_ = false;  // the latest update is on screen already
  std::size_t last_width_ = 0;    // terminal: padding wipes what a longer previous line left behind
  bool finished_ = false;
};

}  // namespace hotpath
