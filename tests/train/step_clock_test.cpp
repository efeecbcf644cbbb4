// StepClock on the CPU: laps go to their phases (a phase lapped twice adds up), steps are counted, nothing is
// pending; steps are chained (the time between two steps is the next one's data phase, so the steps add up
// to the time they took), pause() leaves a gap out, restart() forgets the warm-up. And the trainer's benchmark
// mode: its breakdown covers the timed steps and adds up to the step time samples/s implies (what
// `hotpath bench train` prints side by side). Its CUDA side (events, no synchronisation) is checked through
// the trainer in cuda_trainer_test.cpp.
#include "hotpath/train/step_clock.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar_writer.h"
#include "hotpath/train/recipe.h"
#include "support/test_support.h"

namespace hotpath::train {
namespace {

using Clock = std::chrono::steady_clock;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

// The host's work between two steps (the loss read, logging) used to fall between the steps and count
// nowhere, so the phases summed to less than the run took; now it is the next step's data phase.
TEST(StepClock, CpuStepsAddUpToTheTimeTheyTook) {
  StepClock clock(at::Device(at::kCPU));
  StepBreakdown bd;
  const auto t0 = Clock::now();
  clock.start();
  for (int step = 0; step < 3; ++step) {
    if (step > 0) clock.start();
    sleep_ms(5);
    clock.lap(StepPhase::kData);
    sleep_ms(10);
    clock.lap(StepPhase::kForward);
    clock.lap(StepPhase::kBackward);
    clock.lap(StepPhase::kOptimizer);
    clock.finish_step(bd);
    if (step < 2) sleep_ms(20);  // between steps: the next step's data
  }
  const double took = seconds_since(t0);
  EXPECT_EQ(bd.steps, 3);
  EXPECT_GE(bd.data_s, 3 * 0.005 + 2 * 0.020);
  EXPECT_NEAR(bd.total_s(), took, 0.005);  // the steps tile the time: only the start's and end's jitter
  EXPECT_GE(bd.data_s / bd.total_s(), 0.5) << bd.summary();
}

TEST(StepClock, PauseLeavesTheGapOutAndRestartForgetsTheWarmUp) {
  StepClock clock(at::Device(at::kCPU));
  StepBreakdown bd;
  const auto step = [&](int data_ms) {
    clock.start();
    sleep_ms(data_ms);
    clock.lap(StepPhase::kData);
    sleep_ms(5);
    clock.lap(StepPhase::kForward);
    clock.finish_step(bd);
  };
  step(1);
  clock.pause();
  sleep_ms(200);  // an evaluation or a checkpoint: no step's
  step(1);
  EXPECT_EQ(bd.steps, 2);
  EXPECT_LT(bd.total_s(), 0.150) << bd.summary();

  step(300);  // a slow warm-up step
  clock.restart(bd);
  EXPECT_EQ(bd.steps, 0);
  EXPECT_EQ(bd.total_s(), 0.0);
  const auto t0 = Clock::now();
  step(1);
  step(1);
  EXPECT_EQ(bd.steps, 2);
  EXPECT_LT(bd.total_s(), 0.150) << bd.summary();
  // Still chained across restart(): the timed steps begin where the warm-up ended.
  EXPECT_NEAR(bd.total_s(), seconds_since(t0), 0.005);
  EXPECT_EQ(clock.pending(), 0u);
}

TEST(StepClock, AStepThatNeverFinishedCarriesOn) {
  StepClock clock(at::Device(at::kCPU));
  StepBreakdown bd;
  clock.start();
  sleep_ms(20);
  clock.lap(StepPhase::kData);  // an epoch out of batches: no finish_step
  clock.start();
  sleep_ms(5);
  clock.lap(StepPhase::kData);
  clock.lap(StepPhase::kForward);
  clock.finish_step(bd);
  EXPECT_EQ(bd.steps, 1);
  EXPECT_GE(bd.data_s, 0.025);
}

// ---- the trainer's benchmark mode ------------------------------------------------------------------

// `count` gray size×size images of 4 classes (noise; what is learnt does not matter here).
std::string write_shards(const test::TempDir& dir, int count, int size) {
  formats::ShardWriter writer(dir.file("s-%06d.tar"), {.max_samples = 32});
  std::uint32_t noise = 777;
  for (int i = 0; i < count; ++i) {
    std::vector<std::uint8_t> px(static_cast<std::size_t>(size) * size);
    for (auto& p : px) {
      noise = noise * 1664525u + 1013904223u;
      p = static_cast<std::uint8_t>(noise >> 24);
    }
    const std::string cls = std::to_string(i % 4);
    writer.write({std::to_string(100000 + i), {{"png", data::encode_png(px.data(), size, size, 1)},
                                               {"cls", test::as_bytes(cls)}}});
  }
  writer.close();
  return dir.file("s-*.tar");
}

// On the GPU, `bench train` printed "step 638.0 ms" beside 2731 samples/s at batch 128 (47 ms a step): the
// breakdown averaged the warm-up (cuDNN autotuning) into the timed steps and left the time between steps
// out. Now it counts the timed steps only and they add up to the wall time samples/s is measured over.
TEST(StepClock, BenchmarkBreakdownIsTheTimedStepsAndMatchesSamplesPerSecond) {
  at::set_num_threads(1);
  const test::TempDir dir;
  const std::string shards = write_shards(dir, 64, 16);
  const std::int64_t batch = 16;
  const std::int64_t warmup = 3;
  const std::int64_t steps = 8;  // 4 steps an epoch: the timed steps cross epoch boundaries
  const Recipe recipe = parse_recipe(
      "",
      {"model.name=cnn_small", "model.num_classes=4", "data.train=" + shards, "data.image_size=16",
       "data.channels=1", "data.mean=[0.5]", "data.std=[0.3]", "data.train_crop=resize", "data.resize_shorter=16",
       "data.flip=0", "data.workers=1", "data.shuffle_buffer=16", "train.batch_size=" + std::to_string(batch),
       "train.epochs=3", "train.max_steps=" + std::to_string(warmup + steps), "train.threads=1",
       "optimizer.lr=0.01", "output_dir=" + dir.file("run")},
      "step_clock_test.yaml");
  TrainOptions options;
  options.quiet = true;
  options.benchmark_warmup_steps = warmup;
  const TrainResult r = train(recipe, options);
  ASSERT_EQ(r.steady_steps, steps);
  ASSERT_GT(r.steady_samples_per_s, 0.0);
  const StepBreakdown& bd = r.breakdown;
  EXPECT_EQ(bd.steps, steps) << "the warm-up steps are not the timed steps' breakdown";
  const double step_ms = 1000.0 * bd.total_s() / static_cast<double>(bd.steps);
  const double wall_ms = 1000.0 * static_cast<double>(batch) / r.steady_samples_per_s;  // what bench train prints
  RecordProperty("breakdown_step_ms", std::to_string(step_ms));
  RecordProperty("wall_step_ms", std::to_string(wall_ms));
  // Equal but for the host work after the last step (on the wall clock only) and before the first timed one
  // (in the breakdown only): a fraction of a millisecond a step here.
  EXPECT_NEAR(step_ms, wall_ms, 0.1 * wall_ms + 1.0) << bd.summary();
}

}  // namespace
}  // namespace hotpath::train
