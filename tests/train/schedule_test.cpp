// Schedules: lr sequences against torch.optim.lr_scheduler (tests/oracles/train_ref.py), validation.
#include "hotpath/train/schedule.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "support/test_support.h"
#include "train/train_test_support.h"

namespace hotpath::train {
namespace {

using train_test::scientific;

constexpr int64_t kSteps = 100;

nlohmann::json torch_schedule(nlohmann::json config) {
  config["steps"] = kSteps;
  return nlohmann::json::parse(
      test::run_python(test::source_path("tests/oracles/train_ref.py"), {"schedule", config.dump()}));
}

void expect_lrs_match(const Schedule& schedule, const nlohmann::json& ref) {
  const auto lrs = ref["lr"].get<std::vector<double>>();
  ASSERT_EQ(lrs.size(), static_cast<size_t>(kSteps));
  double worst = 0.0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const double diff = std::abs(schedule.lr_at(step) - lrs[static_cast<size_t>(step)]);
    worst = std::max(worst, diff);
    EXPECT_LE(diff, 1e-12) << "step " << step << ": hotpath " << schedule.lr_at(step) << " torch "
                           << lrs[static_cast<size_t>(step)];
  }
  testing::Test::RecordProperty("max_abs_diff", scientific(worst));
}

TEST(Schedule, WarmupCosineMatchesTorchSequentialLR) {
  const ScheduleConfig c{.kind = ScheduleKind::kWarmupCosine, .base_lr = 0.1, .total_steps = kSteps,
                         .warmup_steps = 10, .warmup_start_factor = 0.01, .min_lr = 1e-4};
  const nlohmann::json ref = torch_schedule({{"kind", "warmup_cosine"}, {"base_lr", c.base_lr},
                                             {"total_steps", c.total_steps}, {"warmup_steps", c.warmup_steps},
                                             {"warmup_start_factor", c.warmup_start_factor},
                                             {"min_lr", c.min_lr}});
  const Schedule schedule(c);
  expect_lrs_match(schedule, ref);
  EXPECT_DOUBLE_EQ(schedule.lr_at(0), 0.1 * 0.01);
  EXPECT_DOUBLE_EQ(schedule.lr_at(10), 0.1);
  EXPECT_FALSE(schedule.momentum_at(5).has_value());
}

TEST(Schedule, CosineWithoutWarmupMatchesTorchCosineAnnealingLR) {
  const ScheduleConfig c{.kind = ScheduleKind::kWarmupCosine, .base_lr = 0.5, .total_steps = 80,
                         .warmup_steps = 0, .min_lr = 0.0};
  // 100 torch steps over T_max = 80: compare the first 80, where both are the cosine.
  const nlohmann::json ref = torch_schedule({{"kind", "warmup_cosine"}, {"base_lr", c.base_lr},
                                             {"total_steps", c.total_steps}, {"warmup_steps", 0},
                                             {"warmup_start_factor", 1.0}, {"min_lr", 0.0}});
  const Schedule schedule(c);
  const auto lrs = ref["lr"].get<std::vector<double>>();
  for (int64_t step = 0; step <= 80; ++step) {
    EXPECT_NEAR(schedule.lr_at(step), lrs[static_cast<size_t>(step)], 1e-12) << "step " << step;
  }
  // After total_steps hotpath holds min_lr where torch's cosine starts rising again.
  EXPECT_EQ(schedule.lr_at(90), 0.0);
  EXPECT_GT(lrs[90], 0.0);
}

TEST(Schedule, StepDecayMatchesTorchStepLR) {
  const ScheduleConfig c{.kind = ScheduleKind::kStep, .base_lr = 0.1, .step_size = 7, .gamma = 0.5};
  const nlohmann::json ref =
      torch_schedule({{"kind", "step"}, {"base_lr", 0.1}, {"step_size", 7}, {"gamma", 0.5}});
  const Schedule schedule(c);
  expect_lrs_match(schedule, ref);
  EXPECT_DOUBLE_EQ(schedule.lr_at(6), 0.1);
  EXPECT_DOUBLE_EQ(schedule.lr_at(7), 0.05);
}

TEST(Schedule, OneCycleMatchesTorchOneCycleLR) {
  const ScheduleConfig c{.kind = ScheduleKind::kOneCycle, .base_lr = 0.4, .total_steps = kSteps,
                         .pct_start = 0.25, .div_factor = 25.0, .final_div_factor = 1e4,
                         .base_momentum = 0.85, .max_momentum = 0.95};
  const nlohmann::json ref = torch_schedule(
      {{"kind", "one_cycle"}, {"base_lr", c.base_lr}, {"total_steps", c.total_steps},
       {"pct_start", c.pct_start}, {"div_factor", c.div_factor}, {"final_div_factor", c.final_div_factor},
       {"base_momentum", c.base_momentum}, {"max_momentum", c.max_momentum}});
  const Schedule schedule(c);
  expect_lrs_match(schedule, ref);
  const auto momentum = ref["momentum"].get<std::vector<double>>();
  for (int64_t step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(schedule.momentum_at(step).has_value());
    EXPECT_NEAR(*schedule.momentum_at(step), momentum[static_cast<size_t>(step)], 1e-12) << "step " << step;
  }
  EXPECT_NEAR(schedule.lr_at(0), 0.4 / 25.0, 1e-15);
  EXPECT_THROW((void)schedule.lr_at(kSteps + 1), Error);  // torch: "Tried to step 102 times"
}

TEST(Schedule, ConstantIgnoresStep) {
  const Schedule schedule({.kind = ScheduleKind::kConstant, .base_lr = 0.3});
  EXPECT_EQ(schedule.lr_at(0), 0.3);
  EXPECT_EQ(schedule.lr_at(1'000'000), 0.3);
}

void expect_config_error(const ScheduleConfig& c, const std::string& field) {
  try {
    const Schedule schedule(c);
    ADD_FAILURE() << "accepted a bad " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Schedule, RejectsBadConfigNamingTheField) {
  expect_config_error({.kind = ScheduleKind::kWarmupCosine, .total_steps = 10, .warmup_steps = 10},
                      "total_steps");
  expect_config_error({.kind = ScheduleKind::kWarmupCosine, .total_steps = 10, .warmup_start_factor = 0.0},
                      "warmup_start_factor");
  expect_config_error({.kind = ScheduleKind::kWarmupCosine, .base_lr = 0.1, .total_steps = 10, .min_lr = 0.2},
                      "min_lr");
  expect_config_error({.kind = ScheduleKind::kStep, .step_size = 0}, "step_size");
  expect_config_error({.kind = ScheduleKind::kOneCycle, .total_steps = 100, .pct_start = 1.5}, "pct_start");
  expect_config_error({.kind = ScheduleKind::kConstant, .base_lr = 0.0}, "base_lr");
  try {
    (void)parse_schedule_kind("cosine");
    ADD_FAILURE() << "accepted an unknown kind";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warmup_cosine"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_schedule_kind("one_cycle"), ScheduleKind::kOneCycle);
}

}  // namespace
}  // namespace hotpath::train
