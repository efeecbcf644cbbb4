// The step-time breakdown's clock (hotpath/train/step_clock.h): wall time on the CPU, CUDA events on a GPU.
#include "hotpath/train/step_clock.h"

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace hotpath::train {

StepClock::StepClock(const at::Device& device) : device_(device) {}

void StepClock::add(StepBreakdown& bd, StepPhase phase, double seconds) {
  switch (phase) {
    case StepPhase::kData: bd.data_s += seconds; break;
    case StepPhase::kForward: bd.forward_s += seconds; break;
    case StepPhase::kBackward: bd.backward_s += seconds; break;
    case StepPhase::kAllreduce: bd.allreduce_s += seconds; break;
    case StepPhase::kOptimizer: bd.optimizer_s += seconds; break;
  }
}

StepClock::EventPtr StepClock::record() const {
  // Recorded on the stream the step's work was queued on (the training thread's current stream; the
  // loader's stage stream is another thread's), so that consecutive marks are ordered on one stream and
  // elapsedTime between them is the GPU time in between. Timing flag on (BACKEND_DEFAULT), no wait.
  auto event = std::make_shared<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  event->record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device_));
  return event;
}

void StepClock::start() {
  if (open_) return;  // a step that never finished (an epoch out of batches): its time carries on
  open_ = true;
  if (!device_.is_cuda()) {
    // Chained, last_ is the previous step's last lap: the time since then is this step's data phase.
    if (!chained_) last_ = Clock::now();
    for (double& s : seconds_) s = 0;
    return;
  }
  current_.marks.clear();
  current_.begin = chained_ && end_ ? end_ : record();
}

void StepClock::lap(StepPhase phase) {
  if (!device_.is_cuda()) {
    const Clock::time_point now = Clock::now();
    seconds_[static_cast<int>(phase)] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return;
  }
  current_.marks.emplace_back(phase, record());
}

void StepClock::add(const DeviceStep& step, StepBreakdown& bd) {
  const c10::Event* before = step.begin.get();
  for (const auto& [phase, event] : step.marks) {
    // elapsedTime: milliseconds from the earlier event to this one.
    add(bd, phase, before->elapsedTime(*event) / 1000.0);
    before = event.get();
  }
  ++bd.steps;
}

void StepClock::finish_step(StepBreakdown& bd) {
  open_ = false;
  chained_ = true;
  if (!device_.is_cuda()) {
    for (int p = 0; p < 5; ++p) add(bd, static_cast<StepPhase>(p), seconds_[p]);
    ++bd.steps;
    return;
  }
  end_ = current_.marks.empty() ? current_.begin : current_.marks.back().second;
  if (current_.begin && !current_.marks.empty()) pending_.push_back(std::move(current_));
  current_ = {};
  while (!pending_.empty() && pending_.front().marks.back().second->query()) {
    add(pending_.front(), bd);
    pending_.pop_front();
  }
}

void StepClock::pause() {
  open_ = false;
  chained_ = false;
  current_ = {};
  end_.reset();
}

void StepClock::restart(StepBreakdown& bd) {
  // Dropped unread: destroying a recorded event that has not completed yet is allowed (CUDA frees it when
  // it does), and end_ keeps the one the next step begins at.
  pending_.clear();
  bd.data_s = bd.forward_s = bd.backward_s = bd.optimizer_s = bd.allreduce_s = 0;
  bd.steps = 0;
}

void StepClock::flush(StepBreakdown& bd) {
  if (pending_.empty()) return;
  pending_.back().marks.back().second->synchronize();  // one stream: the last event completes last
  for (const DeviceStep& step : pending_) add(step, bd);
  pending_.clear();
}

}  // namespace hotpath::train
