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

void StepClock::start() {
  if (!device_.is_cuda()) {
    last_ = Clock::now();
    for (double& s : seconds_) s = 0;
    return;
  }
  current_.marks.clear();
  lap(StepPhase::kData);  // the start mark
}

void StepClock::lap(StepPhase phase) {
  if (!device_.is_cuda()) {
    const Clock::time_point now = Clock::now();
    seconds_[static_cast<int>(phase)] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return;
  }
  // Recorded on the stream the step's work was queued on; timing flag on (BACKEND_DEFAULT), no wait.
  c10::Event event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  event.record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device_));
  current_.marks.emplace_back(phase, std::move(event));
}

void StepClock::add(const DeviceStep& step, StepBreakdown& bd) const {
  for (std::size_t i = 1; i < step.marks.size(); ++i) {
    // elapsedTime: milliseconds from the earlier event to this one.
    add(bd, step.marks[i].first, step.marks[i - 1].second.elapsedTime(step.marks[i].second) / 1000.0);
  }
  ++bd.steps;
}

void StepClock::finish_step(StepBreakdown& bd) {
  if (!device_.is_cuda()) {
    for (int p = 0; p < 5; ++p) add(bd, static_cast<StepPhase>(p), seconds_[p]);
    ++bd.steps;
    return;
  }
  if (current_.marks.size() >= 2) pending_.push_back(std::move(current_));
  current_ = {};
  while (!pending_.empty() && pending_.front().marks.back().second.query()) {
    add(pending_.front(), bd);
    pending_.pop_front();
  }
}

void StepClock::flush(StepBreakdown& bd) {
  if (pending_.empty()) return;
  pending_.back().marks.back().second.synchronize();  // one stream: the last event completes last
  for (const DeviceStep& step : pending_) add(step, bd);
  pending_.clear();
}

}  // namespace hotpath::train
