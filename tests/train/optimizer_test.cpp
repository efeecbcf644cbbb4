// Optimizers: SGD / AdamW steps against torch.optim (tests/oracles/train_ref.py optim), the no-decay
// groups, lr/momentum setters through Schedule::apply, clip_grad_norm against torch's.
#include "hotpath/train/optimizer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <iomanip>
#include <sstream>
#include <limits>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/train/schedule.h"
#include "support/test_support.h"
#include "train/train_test_support.h"

namespace hotpath::train {
namespace {

using train_test::scientific;
using train_test::tensor_json;
using train_test::values;

// A small model's worth of parameters: linear weights (decayed), biases and norm scales (not).
NamedParameters make_params(uint64_t seed) {
  at::manual_seed(seed);
  NamedParameters named = {{"fc1.weight", at::randn({5, 4})}, {"fc1.bias", at::randn({5})},
                           {"norm.weight", at::rand({5}) + 0.5}, {"norm.bias", at::randn({5})},
                           {"fc2.weight", at::randn({3, 5})}, {"fc2.bias", at::randn({3})}};
  for (auto& [name, p] : named) p.requires_grad_(true);
  return named;
}

nlohmann::json config_json(const OptimizerConfig& c) {
  return {{"kind", c.kind == OptimizerKind::kSgd ? "sgd" : "adamw"},
          {"lr", c.lr}, {"weight_decay", c.weight_decay}, {"no_decay_norm_bias", c.no_decay_norm_bias},
          {"momentum", c.momentum}, {"dampening", c.dampening}, {"nesterov", c.nesterov},
          {"beta1", c.beta1}, {"beta2", c.beta2}, {"eps", c.eps}};
}

// Three steps from the same parameters and gradients on both sides; returns the worst |diff|.
double expect_matches_torch(const OptimizerConfig& config) {
  constexpr int kSteps = 3;
  NamedParameters named = make_params(42);
  nlohmann::json fx = {{"config", config_json(config)}};
  for (const auto& [name, p] : named) fx["params"].push_back({name, tensor_json(p)});
  std::vector<std::vector<at::Tensor>> grads(kSteps);
  for (int step = 0; step < kSteps; ++step) {
    nlohmann::json step_grads = nlohmann::json::array();
    for (const auto& [name, p] : named) {
      grads[static_cast<size_t>(step)].push_back(at::randn(p.sizes()));
      step_grads.push_back({name, tensor_json(grads[static_cast<size_t>(step)].back())});
    }
    fx["grads"].push_back(step_grads);
  }
  test::TempDir dir;
  test::write_file(dir.file("optim.json"), fx.dump());
  const nlohmann::json ref = nlohmann::json::parse(
      test::run_python(test::source_path("tests/oracles/train_ref.py"), {"optim", dir.file("optim.json")}));

  auto opt = make_optimizer(config, named);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < named.size(); ++i) named[i].second.mutable_grad() = grads[static_cast<size_t>(step)][i];
    opt->step();
  }
  double worst = 0.0;
  for (const auto& [name, p] : named) {
    const auto want = ref["params"][name].get<std::vector<double>>();
    const auto got = values(p);
    EXPECT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
      worst = std::max(worst, std::abs(got[i] - want[i]));
      EXPECT_NEAR(got[i], want[i], 1e-5) << name << "[" << i << "]";
    }
  }
  return worst;
}

TEST(OptimizerParity, SgdNesterovWeightDecayMatchesTorch) {
  const double worst = expect_matches_torch(
      {.kind = OptimizerKind::kSgd, .lr = 0.1, .weight_decay = 0.05, .momentum = 0.9, .nesterov = true});
  RecordProperty("max_abs_diff", scientific(worst));
}

TEST(OptimizerParity, SgdMomentumSingleGroupMatchesTorch) {
  const double worst = expect_matches_torch({.kind = OptimizerKind::kSgd, .lr = 0.05, .weight_decay = 1e-2,
                                             .no_decay_norm_bias = false, .momentum = 0.8, .dampening = 0.1});
  RecordProperty("max_abs_diff", scientific(worst));
}

TEST(OptimizerParity, AdamWMatchesTorch) {
  const double worst = expect_matches_torch({.kind = OptimizerKind::kAdamW, .lr = 1e-2, .weight_decay = 0.1,
                                             .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-7});
  RecordProperty("max_abs_diff", scientific(worst));
}

// The fused kernel (what AdamW runs on CUDA) on the CPU: the same update as torch.optim.AdamW.
TEST(OptimizerParity, FusedAdamWMatchesTorch) {
  const double worst = expect_matches_torch({.kind = OptimizerKind::kAdamW, .lr = 1e-2, .weight_decay = 0.1,
                                             .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-7,
                                             .adamw_kernel = AdamWKernel::kFused});
  RecordProperty("max_abs_diff", scientific(worst));
}

const torch::optim::AdamWParamState* adamw_state(torch::optim::Optimizer& opt, const at::Tensor& p) {
  const auto it = opt.state().find(p.unsafeGetTensorImpl());
  return it == opt.state().end() ? nullptr : dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get());
}

// CPU parameters keep LibTorch's loop under kAuto (the CPU path is unchanged); kFused gives the same
// parameters, step counts and moments, kept in the same AdamWParamState a checkpoint reads.
TEST(FusedAdamW, AutoKeepsTheLoopOnTheCpuAndFusedMatchesIt) {
  NamedParameters loop_params = make_params(5);
  NamedParameters fused_params = make_params(5);
  const OptimizerConfig config{.kind = OptimizerKind::kAdamW, .lr = 1e-2, .weight_decay = 0.1};
  OptimizerConfig fused_config = config;
  fused_config.adamw_kernel = AdamWKernel::kFused;
  auto loop = make_optimizer(config, loop_params);
  auto fused = make_optimizer(fused_config, fused_params);
  EXPECT_FALSE(is_fused_adamw(*loop));
  EXPECT_TRUE(is_fused_adamw(*fused));
  EXPECT_NE(dynamic_cast<torch::optim::AdamW*>(fused.get()), nullptr);  // checkpoint.cpp's test
  EXPECT_FALSE(step_unless_found_inf(*loop, at::zeros({})).has_value());
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < loop_params.size(); ++i) {
      // Step 1 leaves fc2.bias without a gradient: it gets no state and no step, on both sides.
      const bool skip = step == 1 && loop_params[i].first == "fc2.bias";
      const at::Tensor g = at::randn(loop_params[i].second.sizes());
      loop_params[i].second.mutable_grad() = skip ? at::Tensor() : g.clone();
      fused_params[i].second.mutable_grad() = skip ? at::Tensor() : g.clone();
    }
    loop->step();
    fused->step();
  }
  for (size_t i = 0; i < loop_params.size(); ++i) {
    const auto& name = loop_params[i].first;
    EXPECT_TRUE(at::allclose(fused_params[i].second, loop_params[i].second, 1e-6, 1e-7)) << name;
    const auto* a = adamw_state(*loop, loop_params[i].second);
    const auto* b = adamw_state(*fused, fused_params[i].second);
    ASSERT_TRUE(a != nullptr && b != nullptr) << name;
    EXPECT_EQ(b->step(), a->step()) << name;
    EXPECT_EQ(b->step(), name == "fc2.bias" ? 3 : 4) << name;
    EXPECT_TRUE(at::allclose(b->exp_avg(), a->exp_avg(), 1e-6, 1e-7)) << name;
    EXPECT_TRUE(at::allclose(b->exp_avg_sq(), a->exp_avg_sq(), 1e-6, 1e-7)) << name;
  }
}

// The loss scaler's form: a nonzero flag (1, or a sum over ranks) leaves parameters, moments and step
// counts as they were, and a parameter's first step, skipped, leaves no state; a zero flag steps.
TEST(FusedAdamW, StepUnlessFoundInfSkipsOnTheFlag) {
  NamedParameters named = make_params(6);
  NamedParameters reference = make_params(6);
  auto fused = make_optimizer({.kind = OptimizerKind::kAdamW, .lr = 1e-2, .weight_decay = 0.1,
                               .adamw_kernel = AdamWKernel::kFused},
                              named);
  auto loop = make_optimizer({.kind = OptimizerKind::kAdamW, .lr = 1e-2, .weight_decay = 0.1}, reference);
  const auto set_grads = [&] {
    for (size_t i = 0; i < named.size(); ++i) {
      const at::Tensor g = at::randn(named[i].second.sizes());
      named[i].second.mutable_grad() = g.clone();
      reference[i].second.mutable_grad() = g.clone();
    }
  };
  const auto snapshot = [&] {
    std::vector<at::Tensor> out;
    for (const auto& [name, p] : named) out.push_back(p.detach().clone());
    return out;
  };
  set_grads();
  std::vector<at::Tensor> before = snapshot();
  EXPECT_EQ(step_unless_found_inf(*fused, at::ones({})), std::optional<bool>(false));
  EXPECT_TRUE(fused->state().empty()) << "a skipped first step kept state";
  for (size_t i = 0; i < named.size(); ++i) EXPECT_TRUE(at::equal(named[i].second, before[i])) << named[i].first;

  set_grads();
  EXPECT_EQ(step_unless_found_inf(*fused, at::zeros({})), std::optional<bool>(true));
  loop->step();
  set_grads();
  before = snapshot();
  EXPECT_EQ(step_unless_found_inf(*fused, at::full({}, 2.0)), std::optional<bool>(false));  // two ranks saw inf
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_TRUE(at::equal(named[i].second, before[i])) << named[i].first;
    EXPECT_EQ(adamw_state(*fused, named[i].second)->step(), 1) << named[i].first;
  }
  set_grads();
  EXPECT_EQ(step_unless_found_inf(*fused, at::zeros({})), std::optional<bool>(true));
  loop->step();
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_TRUE(at::allclose(named[i].second, reference[i].second, 1e-6, 1e-7)) << named[i].first;
    EXPECT_EQ(adamw_state(*fused, named[i].second)->step(), 2) << named[i].first;
  }
}

TEST(Optimizer, NoDecayGroupsHoldBiasesAndNorms) {
  NamedParameters named = make_params(1);
  named.emplace_back("frozen.weight", at::ones({2, 2}));  // requires_grad false: left out
  const OptimizerConfig config{.kind = OptimizerKind::kAdamW, .lr = 0.1, .weight_decay = 0.5};
  const ParamSplit split = split_weight_decay(config, named);
  EXPECT_EQ(split.decay, (std::vector<std::string>{"fc1.weight", "fc2.weight"}));
  EXPECT_EQ(split.no_decay, (std::vector<std::string>{"fc1.bias", "norm.weight", "norm.bias", "fc2.bias"}));

  // Zero gradients: AdamW's update is 0, so only decay moves a parameter, by (1 - lr * wd) per step.
  std::vector<at::Tensor> before;
  for (auto& [name, p] : named) {
    before.push_back(p.detach().clone());
    p.mutable_grad() = at::zeros_like(p);
  }
  auto opt = make_optimizer(config, named);
  ASSERT_EQ(opt->param_groups().size(), 2u);
  for (int step = 0; step < 3; ++step) opt->step();
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, p] = named[i];
    if (name == "fc1.weight" || name == "fc2.weight") {
      EXPECT_TRUE(at::allclose(p, before[i] * std::pow(1.0 - 0.1 * 0.5, 3), 1e-6, 1e-7)) << name;
    } else {
      EXPECT_TRUE(at::equal(p, before[i])) << name << " changed though it is exempt from decay";
    }
  }
  // SGD's class default weight_decay is 0, which LibTorch's group merge mistakes for "unset".
  auto sgd = make_optimizer({.kind = OptimizerKind::kSgd, .weight_decay = 0.05}, named);
  ASSERT_EQ(sgd->param_groups().size(), 2u);
  EXPECT_EQ(static_cast<const torch::optim::SGDOptions&>(sgd->param_groups()[0].options()).weight_decay(), 0.05);
  EXPECT_EQ(static_cast<const torch::optim::SGDOptions&>(sgd->param_groups()[1].options()).weight_decay(), 0.0);
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(opt->param_groups()[1].options()).weight_decay(), 0.0);
  // The rule switched off: one group, biases decayed too.
  OptimizerConfig all = config;
  all.no_decay_norm_bias = false;
  EXPECT_TRUE(split_weight_decay(all, named).no_decay.empty());
  EXPECT_EQ(make_optimizer(all, named)->param_groups().size(), 1u);
  EXPECT_TRUE(is_no_decay_param("head.bias", at::zeros({2, 2})));
  EXPECT_FALSE(is_no_decay_param("conv.weight", at::zeros({2, 2, 3, 3})));
}

TEST(Optimizer, RejectsBadConfigNamingTheField) {
  const NamedParameters named = make_params(3);
  const auto expect_error = [&](const OptimizerConfig& c, const std::string& field) {
    try {
      (void)make_optimizer(c, named);
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error({.lr = -1.0}, "lr");
  expect_error({.kind = OptimizerKind::kSgd, .momentum = 0.0, .nesterov = true}, "nesterov");
  expect_error({.kind = OptimizerKind::kAdamW, .beta2 = 1.0}, "beta2");
  expect_error({.weight_decay = -0.1}, "weight_decay");
  EXPECT_THROW((void)make_optimizer({}, {{"w", at::ones({2})}}), Error);  // nothing trainable
  EXPECT_THROW((void)parse_optimizer_kind("adam"), Error);
  EXPECT_EQ(parse_optimizer_kind("adamw"), OptimizerKind::kAdamW);
}

TEST(Optimizer, ScheduleApplySetsEveryGroup) {
  const NamedParameters named = make_params(4);
  const Schedule one_cycle({.kind = ScheduleKind::kOneCycle, .base_lr = 0.4, .total_steps = 50});
  auto sgd = make_optimizer({.kind = OptimizerKind::kSgd, .weight_decay = 1e-4}, named);
  one_cycle.apply(*sgd, 20);
  ASSERT_EQ(sgd->param_groups().size(), 2u);
  for (const auto& group : sgd->param_groups()) {
    EXPECT_DOUBLE_EQ(group.options().get_lr(), one_cycle.lr_at(20));
    EXPECT_DOUBLE_EQ(static_cast<const torch::optim::SGDOptions&>(group.options()).momentum(),
                     *one_cycle.momentum_at(20));
  }
  EXPECT_DOUBLE_EQ(get_lr(*sgd, 1), one_cycle.lr_at(20));

  auto adamw = make_optimizer({.kind = OptimizerKind::kAdamW, .weight_decay = 0.05}, named);
  one_cycle.apply(*adamw, 3);
  for (const auto& group : adamw->param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    EXPECT_DOUBLE_EQ(std::get<0>(options.betas()), *one_cycle.momentum_at(3));
    EXPECT_DOUBLE_EQ(std::get<1>(options.betas()), 0.999);
    EXPECT_DOUBLE_EQ(options.get_lr(), one_cycle.lr_at(3));
  }
}

// clip_grad_norm against torch.nn.utils.clip_grad_norm_ (total norm and the clipped gradients).
void expect_clip_matches_torch(double max_norm, double norm_type, double grad_scale) {
  NamedParameters named = make_params(11);
  nlohmann::json fx = {{"max_norm", max_norm}};
  if (std::isinf(norm_type)) fx["norm_type"] = "inf"; else fx["norm_type"] = norm_type;
  std::vector<at::Tensor> params;
  for (auto& [name, p] : named) {
    p.mutable_grad() = at::randn(p.sizes()) * grad_scale;
    fx["grads"].push_back({name, tensor_json(p.grad())});
    params.push_back(p);
  }
  test::TempDir dir;
  test::write_file(dir.file("clip.json"), fx.dump());
  const nlohmann::json ref = nlohmann::json::parse(
      test::run_python(test::source_path("tests/oracles/train_ref.py"), {"clip", dir.file("clip.json")}));
  const double total = clip_grad_norm(params, max_norm, norm_type);
  EXPECT_NEAR(total, ref["total_norm"].get<double>(), 1e-6);
  for (const auto& [name, p] : named) {
    const auto want = ref["grads"][name].get<std::vector<double>>();
    const auto got = values(p.grad());
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << name << "[" << i << "]";
  }
}

TEST(ClipGradNorm, MatchesTorchWhenClipping) { expect_clip_matches_torch(1.0, 2.0, 1.0); }
TEST(ClipGradNorm, MatchesTorchInfNorm) { expect_clip_matches_torch(0.5, std::numeric_limits<double>::infinity(), 1.0); }
TEST(ClipGradNorm, MatchesTorchBelowTheLimit) { expect_clip_matches_torch(100.0, 2.0, 0.1); }

TEST(ClipGradNorm, NoGradientsGiveZero) {
  const at::Tensor p = at::ones({3}).requires_grad_(true);
  EXPECT_EQ(clip_grad_norm({p}, 1.0), 0.0);
}

}  // namespace
}  // namespace hotpath::train
