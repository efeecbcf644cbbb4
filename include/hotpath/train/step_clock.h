// hotpath/train/step_clock.h — the step-time breakdown's clock: wall time on the
// CPU; on CUDA, events recorded on the current stream at each phase boundary and read once they have
// completed, so timing never synchronises the device (the breakdown is the GPU timeline: a data phase is
// the GPU waiting for input, forward/backward/optimizer the work it ran).
//
//   StepClock clock(device);
//   clock.start(); ...data...; clock.lap(StepPhase::kData); ...; clock.lap(StepPhase::kOptimizer);
//   clock.finish_step(breakdown);    // CUDA: adds every earlier step whose events have completed
//   clock.flush(breakdown);          // at the end: waits for the last events, adds the rest
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "hotpath/train/trainer.h"

namespace hotpath::train {

enum class StepPhase { kData, kForward, kBackward, kAllreduce, kOptimizer };

class StepClock {
 public:
  explicit StepClock(const at::Device& device);
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;

  // The beginning of a step.
  void start();
  // The time since the previous start() / lap() belongs to `phase` (a phase may be lapped several times).
  void lap(StepPhase phase);
  // Ends the step. CPU: its times go to `bd` now. CUDA: queued; every queued step whose last event has
  // completed is added (query only, no wait).
  void finish_step(StepBreakdown& bd);
  // Waits for the queued steps' last event (one synchronisation) and adds them: once, at the end.
  void flush(StepBreakdown& bd);
  // Steps queued and not yet added (CUDA).
  [[nodiscard]] std::size_t pending() const { return pending_.size(); }

 private:
  struct DeviceStep {
    std::vector<std::pair<StepPhase, c10::Event>> marks;  // marks[0] is the start (its phase unused)
  };
  using Clock = std::chrono::steady_clock;
  void add(const DeviceStep& step, StepBreakdown& bd) const;
  static void add(StepBreakdown& bd, StepPhase phase, double seconds);

  at::Device device_;
  // CPU
  Clock::time_point last_;
  double seconds_[5] = {0, 0, 0, 0, 0};
  // CUDA
  DeviceStep current_;
  std::deque<DeviceStep> pending_;
};

}  // namespace hotpath::train
