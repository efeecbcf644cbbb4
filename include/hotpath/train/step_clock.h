// hotpath/train/step_clock.h — the step-time breakdown's clock: wall time on the CPU; on CUDA, events
// recorded on the current stream at each phase boundary and read once they have completed, so timing never
// synchronises the device (the breakdown is the GPU timeline: a data phase is the GPU waiting for input,
// forward/backward/optimizer the work it ran).
//
// Steps are chained: a step begins where the previous one ended, so the host's work between two steps (the
// loss read, logging, the next batch) is the next step's data phase and the steps' times add up to the time
// the run took (the wall clock on the CPU; on CUDA the GPU timeline, which tracks the wall clock because the
// trainer reads the loss after every step, so the GPU never runs a step ahead). pause() breaks the chain
// around what is not a step (evaluation, a checkpoint); restart() drops the warm-up steps that samples/s does
// not count either.
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
#include <memory>
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

  // The beginning of a step: where the previous step ended, unless pause() came between (or this is the
  // first). A step still open (started, never finished) goes on: its time is not lost.
  void start();
  // The time since the previous start() / lap() belongs to `phase` (a phase may be lapped several times).
  void lap(StepPhase phase);
  // Ends the step. CPU: its times go to `bd` now. CUDA: queued; every queued step whose last event has
  // completed is added (query only, no wait).
  void finish_step(StepBreakdown& bd);
  // What runs from here to the next start() belongs to no step (evaluation, a checkpoint). An open step is
  // dropped.
  void pause();
  // Forgets every step so far (the benchmark's warm-up: cuDNN autotuning, first allocations and kernel
  // loads would otherwise be averaged into the timed steps): `bd`'s times and step count back to zero,
  // queued steps dropped unread. The chain goes on: the next step begins where the last one ended.
  void restart(StepBreakdown& bd);
  // Waits for the queued steps' last event (one synchronisation) and adds them: once, at the end.
  void flush(StepBreakdown& bd);
  // Steps queued and not yet added (CUDA).
  [[nodiscard]] std::size_t pending() const { return pending_.size(); }

 private:
  using EventPtr = std::shared_ptr<c10::Event>;  // shared: a step's last event is the next step's begin
  struct DeviceStep {
    EventPtr begin;
    std::vector<std::pair<StepPhase, EventPtr>> marks;  // each phase runs from the mark before (or begin)
  };
  using Clock = std::chrono::steady_clock;
  [[nodiscard]] EventPtr record() const;
  static void add(const DeviceStep& step, StepBreakdown& bd);
  static void add(StepBreakdown& bd, StepPhase phase, double seconds);

  at::Device device_;
  bool open_ = false;     // start() came, finish_step() not yet
  bool chained_ = false;  // the next step begins where the last finished one ended
  // CPU
  Clock::time_point last_;
  double seconds_[5] = {0, 0, 0, 0, 0};
  // CUDA
  DeviceStep current_;
  EventPtr end_;  // the last finished step's last event (chained_)
  std::deque<DeviceStep> pending_;
};

}  // namespace hotpath::train
