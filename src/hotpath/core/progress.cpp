#include "hotpath/core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath {

bool stream_is_tty(std::FILE* stream) { return stream != nullptr && ::isatty(::fileno(stream)) == 1; }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long long total = std::llround(seconds);
  const long long h = total / 3600, m = (total / 60) % 60, s = total % 60;
  std::array<char, 48> buf{};
  if (h > 0) std::snprintf(buf.data(), buf.size(), "%lld:%02lld:%02lld", h, m, s);
  else std::snprintf(buf.data(), buf.size(), "%02lld:%02lld", m, s);
  return buf.data();
}

std::string format_number(double value, int digits) {
  std::array<char, 64> buf{};
  const double magnitude = std::fabs(value);
  const bool tiny = magnitude != 0 && magnitude < std::pow(10.0, -(digits - 1));
  if (std::isfinite(value) && (tiny || magnitude >= 1e6)) {
    std::snprintf(buf.data(), buf.size(), "%.*e", std::max(digits - 1, 0), value);
  } else {
    std::snprintf(buf.data(), buf.size(), "%.*f", std::max(digits, 0), value);
  }
  return buf.data();
}

std::vector<ProgressField> train_fields(double loss, double lr, double samples_per_s, std::string_view unit) {
  std::array<char, 48> rate{};
  std::snprintf(rate.data(), rate.size(), "%.0f", samples_per_s);
  return {{"loss", format_number(loss)},
          {"lr", format_number(lr)},
          {"", std::string(rate.data()) + " " + std::string(unit)}};
}

Progress::Progress(std::int64_t total, std::ostream& out, bool is_tty, ProgressOptions options)
    : total_(total), out_(out), is_tty_(is_tty), options_(std::move(options)) {
  HOTPATH_CHECK(options_.clock != nullptr, "Progress: options.clock is empty");
  HOTPATH_CHECK(options_.ema_alpha > 0 && options_.ema_alpha <= 1, "Progress: ema_alpha must be in (0, 1], got ",
                options_.ema_alpha);
  start_ = options_.clock();
  last_step_time_ = start_;
  step_ = std::max<std::int64_t>(options_.initial_step, 0);
}

Progress::~Progress() {
  try {
    finish();
  } catch (...) {  // a destructor must not throw; the stream is all that could
  }
}

double Progress::seconds_since(Clock::time_point t, Clock::time_point now) const {
  return std::chrono::duration<double>(now - t).count();
}

void Progress::update(std::int64_t step, const std::vector<ProgressField>& fields) {
  const Clock::time_point now = options_.clock();
  if (step > step_) {
    // Average per step, so a caller that reports every k-th step still gets a per-step time.
    const double per_step = seconds_since(last_step_time_, now) / static_cast<double>(step - step_);
    ema_step_s_ = ema_step_s_ ? options_.ema_alpha * per_step + (1 - options_.ema_alpha) * *ema_step_s_ : per_step;
    last_step_time_ = now;
  }
  step_ = step;
  fields_ = fields;
  printed_current_ = false;
  finished_ = false;
  const bool last = total_ > 0 && step >= total_;
  const double interval = is_tty_ ? options_.tty_interval_s : options_.plain_interval_s;
  if (!last_print_ || last || seconds_since(*last_print_, now) >= interval) print(now);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!last_print_ && step_ == 0 && fields_.empty()) return;  // nothing was ever reported
  if (!printed_current_) print(options_.clock());
  if (is_tty_) out_ << '\n' << std::flush;
  last_width_ = 0;
}

std::optional<double> Progress::eta_seconds() const {
  if (total_ <= 0 || !ema_step_s_) return std::nullopt;
  return static_cast<double>(std::max<std::int64_t>(total_ - step_, 0)) * *ema_step_s_;
}

std::string Progress::render() const {
  std::string line = options_.prefix;
  const std::string total = std::to_string(total_);
  std::string count = std::to_string(step_);
  if (total_ > 0) {
    // Right-aligned so the fields after it do not shift as the count grows.
    if (count.size() < total.size()) count.insert(0, total.size() - count.size(), ' ');
    count += "/" + total;
  }
  const bool done = total_ > 0 && step_ >= total_;
  if (is_tty_ && total_ > 0) {
    const int width = std::max(options_.bar_width, 1);
    const auto filled = static_cast<int>(std::clamp<std::int64_t>(step_ * width / total_, 0, width));
    if (!line.empty()) line += ' ';
    line += '[' + std::string(static_cast<std::size_t>(filled), '#') +
            std::string(static_cast<std::size_t>(width - filled), '-') + ']';
  }
  if (!line.empty()) line += "  ";
  line += count;
  if (!is_tty_ && total_ > 0) {
    line += " (" + std::to_string(std::clamp<std::int64_t>(step_ * 100 / total_, 0, 100)) + "%)";
  }
  for (const auto& f : fields_) {
    line += "  ";
    if (!f.name.empty()) line += f.name + ' ';
    line += f.value;
  }
  if (done || total_ <= 0) {
    line += "  elapsed " + format_duration(seconds_since(start_, last_step_time_));
  } else {
    const auto eta = eta_seconds();
    line += "  ETA " + format_duration(eta ? *eta : -1);
  }
  return line;
}

void Progress::print(Clock::time_point now) {
  const std::string line = render();
  if (is_tty_) {
    out_ << '\r' << line;
    if (line.size() < last_width_) out_ << std::string(last_width_ - line.size(), ' ');
    last_width_ = line.size();
  } else {
    out_ << line << '\n';
  }
  out_ << std::flush;
  last_print_ = now;
  printed_current_ = true;
}

}  // namespace hotpath
