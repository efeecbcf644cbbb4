// StepClock on the CPU: laps go to their phases (a phase lapped twice adds up), steps are counted, nothing is
// pending. Its CUDA side (events, no synchronisation) is checked through the trainer in cuda_trainer_test.cpp.
#include "hotpath/train/step_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace hotpath::train {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(StepClock, CpuLapsGoToTheirPhases) {
  StepClock clock(at::Device(at::kCPU));
  StepBreakdown bd;
  for (int step = 0; step < 2; ++step) {
    clock.start();
    sleep_ms(30);
    clock.lap(StepPhase::kData);
    sleep_ms(10);
    clock.lap(StepPhase::kForward);
    sleep_ms(20);
    clock.lap(StepPhase::kBackward);
    sleep_ms(10);
    clock.lap(StepPhase::kForward);  // a second micro-batch
    clock.lap(StepPhase::kBackward);
    sleep_ms(5);
    clock.lap(StepPhase::kOptimizer);
    clock.finish_step(bd);
  }
  clock.flush(bd);
  EXPECT_EQ(bd.steps, 2);
  EXPECT_EQ(clock.pending(), 0u);
  EXPECT_GE(bd.data_s, 0.060);
  EXPECT_GE(bd.forward_s, 0.040);
  EXPECT_GE(bd.backward_s, 0.040);
  EXPECT_GE(bd.optimizer_s, 0.010);
  EXPECT_EQ(bd.allreduce_s, 0.0);
  EXPECT_LT(bd.total_s(), 1.0);  // sleeps of 75 ms a step; a loaded machine adds, never this much
  EXPECT_NE(bd.summary().find("bottleneck: data"), std::string::npos) << bd.summary();
}

}  // namespace
}  // namespace hotpath::train
