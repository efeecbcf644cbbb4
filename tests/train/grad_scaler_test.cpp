// GradScaler: the scale / skip sequence of an injected-overflow run against torch.amp.GradScaler
// on CPU (tests/oracles/train_ref.py scaler), the stage machine, state save/load.
#include "hotpath/train/grad_scaler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/train/optimizer.h"
#include "support/test_support.h"
#include "train/train_test_support.h"

namespace hotpath::train {
namespace {

using train_test::tensor_json;
using train_test::values;

struct Injection {
  int64_t index;
  std::string value;  // "inf" or "nan"
};

// The scenario both sides run: SGD on one parameter, "loss" = sum(p * g_step), an inf/NaN written
// into the scaled gradient on some steps, explicit unscale_ + clip on odd steps.
struct Scenario {
  GradScalerOptions options{.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                            .growth_interval = 3};
  double lr = 0.1;
  double max_norm = 0.5;
  int64_t steps = 12;
  std::map<int64_t, Injection> inject = {{3, {2, "inf"}}, {7, {0, "nan"}}};
};

struct Trace {
  std::vector<double> scale;  // before each step
  std::vector<bool> stepped;
  std::vector<int64_t> growth_tracker;  // after each update
  std::vector<double> clip_norm;
  at::Tensor param;
  GradScalerState state;
};

Trace run_hotpath(const Scenario& s, const at::Tensor& init, const std::vector<at::Tensor>& grads) {
  Trace trace;
  at::Tensor p = init.clone().requires_grad_(true);
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(s.lr));
  GradScaler scaler(s.options);
  for (int64_t i = 0; i < s.steps; ++i) {
    trace.scale.push_back(scaler.get_scale());
    p.mutable_grad() = scaler.scale(grads[static_cast<size_t>(i)]);  // what backward of scale(loss) gives
    if (const auto it = s.inject.find(i); it != s.inject.end()) {
      p.mutable_grad()[it->second.index].fill_(std::stod(it->second.value));
    }
    if (i % 2 == 1) {
      scaler.unscale_(opt);
      trace.clip_norm.push_back(clip_grad_norm({p}, s.max_norm));
    }
    const at::Tensor before = p.detach().clone();
    const bool stepped = scaler.step(opt);
    EXPECT_EQ(stepped, !at::equal(before, p.detach())) << "step " << i;
    trace.stepped.push_back(stepped);
    scaler.update();
    trace.growth_tracker.push_back(scaler.growth_tracker());
    opt.zero_grad();
  }
  trace.param = p.detach();
  trace.state = scaler.state();
  return trace;
}

TEST(GradScaler, MatchesTorchOnInjectedOverflowRun) {
  const Scenario s;
  at::manual_seed(7);
  const at::Tensor init = at::randn({6});
  std::vector<at::Tensor> grads;
  nlohmann::json fx = {{"lr", s.lr}, {"max_norm", s.max_norm}, {"param", tensor_json(init)},
                       {"options", {{"init_scale", s.options.init_scale},
                                    {"growth_factor", s.options.growth_factor},
                                    {"backoff_factor", s.options.backoff_factor},
                                    {"growth_interval", s.options.growth_interval}}}};
  for (int64_t i = 0; i < s.steps; ++i) {
    grads.push_back(at::randn({6}));
    fx["grads"].push_back(tensor_json(grads.back()));
  }
  for (const auto& [step, inj] : s.inject) fx["inject"][std::to_string(step)] = {inj.index, inj.value};
  test::TempDir dir;
  test::write_file(dir.file("scaler.json"), fx.dump());
  const nlohmann::json ref = nlohmann::json::parse(
      test::run_python(test::source_path("tests/oracles/train_ref.py"), {"scaler", dir.file("scaler.json")}));

  const Trace got = run_hotpath(s, init, grads);
  EXPECT_EQ(got.scale, ref["scale"].get<std::vector<double>>());
  EXPECT_EQ(got.stepped, ref["stepped"].get<std::vector<bool>>());
  EXPECT_EQ(got.growth_tracker, ref["growth_tracker"].get<std::vector<int64_t>>());
  // The scenario must exercise both directions: backoff on steps 3 and 7, growth after 3 clean steps.
  EXPECT_EQ(got.scale[3], 131072.0);
  EXPECT_EQ(got.scale[4], 65536.0);
  EXPECT_FALSE(got.stepped[3]);
  EXPECT_FALSE(got.stepped[7]);
  EXPECT_TRUE(got.stepped[8]);

  const auto ref_norms = ref["clip_norm"].get<std::vector<std::string>>();
  ASSERT_EQ(got.clip_norm.size(), ref_norms.size());
  for (size_t i = 0; i < ref_norms.size(); ++i) {
    const double want = std::stod(ref_norms[i]);
    if (std::isfinite(want)) {
      EXPECT_NEAR(got.clip_norm[i], want, 1e-6) << "clip on odd step " << 2 * i + 1;
    } else {
      EXPECT_EQ(std::isnan(got.clip_norm[i]), std::isnan(want)) << "clip on odd step " << 2 * i + 1;
      EXPECT_FALSE(std::isfinite(got.clip_norm[i]));
    }
  }
  const auto ref_param = ref["params"].get<std::vector<double>>();
  const auto got_param = values(got.param);
  ASSERT_EQ(got_param.size(), ref_param.size());
  for (size_t i = 0; i < ref_param.size(); ++i) EXPECT_NEAR(got_param[i], ref_param[i], 1e-6) << i;

  EXPECT_EQ(got.state.scale, ref["state"]["scale"].get<double>());
  EXPECT_EQ(got.state.growth_tracker, ref["state"]["_growth_tracker"].get<int64_t>());
  EXPECT_EQ(got.state.scale, ref["final_scale"].get<double>());
}

// The fused AdamW (what AdamW is on CUDA; forced here on the CPU) under the scaler: the same skips, scales
// and parameters as LibTorch's loop, which the scaler steps only after reading the flag. Overflow on step 0
// (no optimizer state yet), 3 and a NaN on 6; unscale_ + clip on odd steps.
TEST(GradScaler, FusedAdamWSkipsAndStepsAsTheLoop) {
  struct Run {
    std::vector<bool> stepped;
    std::vector<double> scale;
    NamedParameters params;
    std::unique_ptr<torch::optim::Optimizer> opt;
  };
  const auto run = [](AdamWKernel kernel) {
    Run r;
    at::manual_seed(11);
    r.params = {{"w", at::randn({4, 3}).requires_grad_(true)}, {"b", at::randn({4}).requires_grad_(true)}};
    r.opt = make_optimizer({.kind = OptimizerKind::kAdamW, .lr = 1e-2, .weight_decay = 0.05, .adamw_kernel = kernel},
                           r.params);
    EXPECT_EQ(is_fused_adamw(*r.opt), kernel == AdamWKernel::kFused);
    GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
    for (int64_t i = 0; i < 9; ++i) {
      for (auto& [name, p] : r.params) p.mutable_grad() = scaler.scale(at::randn(p.sizes()));
      if (i == 0 || i == 3) r.params[0].second.mutable_grad()[1][2].fill_(std::numeric_limits<float>::infinity());
      if (i == 6) r.params[1].second.mutable_grad()[0].fill_(std::numeric_limits<float>::quiet_NaN());
      if (i % 2 == 1) {
        scaler.unscale_(*r.opt);
        (void)clip_grad_norm({r.params[0].second, r.params[1].second}, 1.0);
      }
      r.stepped.push_back(scaler.step(*r.opt));
      scaler.update();
      r.scale.push_back(scaler.get_scale());
      r.opt->zero_grad(true);
    }
    return r;
  };
  Run loop = run(AdamWKernel::kPerParameter);
  Run fused = run(AdamWKernel::kFused);
  EXPECT_EQ(fused.stepped, loop.stepped);
  EXPECT_EQ(fused.stepped, (std::vector<bool>{false, true, true, false, true, true, false, true, true}));
  EXPECT_EQ(fused.scale, loop.scale);
  for (size_t i = 0; i < loop.params.size(); ++i) {
    const at::Tensor& a = loop.params[i].second;
    const at::Tensor& b = fused.params[i].second;
    EXPECT_TRUE(at::allclose(b, a, 1e-6, 1e-7)) << loop.params[i].first;
    const auto* sa = dynamic_cast<const torch::optim::AdamWParamState*>(loop.opt->state().at(a.unsafeGetTensorImpl()).get());
    const auto* sb = dynamic_cast<const torch::optim::AdamWParamState*>(fused.opt->state().at(b.unsafeGetTensorImpl()).get());
    ASSERT_TRUE(sa != nullptr && sb != nullptr);
    EXPECT_EQ(sb->step(), sa->step());
    EXPECT_EQ(sb->step(), 6);
  }
}

TEST(GradScaler, DisabledIsPassThrough) {
  at::Tensor p = at::ones({3}).requires_grad_(true);
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(1.0));
  GradScaler scaler({.enabled = false});
  const at::Tensor loss = at::full({}, 2.0);
  EXPECT_TRUE(at::equal(scaler.scale(loss), loss));
  p.mutable_grad() = at::full({3}, std::numeric_limits<float>::infinity());
  p.mutable_grad()[0].fill_(1.0);
  scaler.unscale_(opt);  // no-op
  EXPECT_TRUE(scaler.step(opt));  // no inf check when disabled, like torch
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_FLOAT_EQ(p[0].item<float>(), 0.0f);
}

TEST(GradScaler, EnforcesOneUnscalePerStep) {
  at::Tensor p = at::ones({2}).requires_grad_(true);
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
  GradScaler scaler;
  EXPECT_THROW(scaler.unscale_(opt), Error);  // before scale(): no scale yet
  p.mutable_grad() = scaler.scale(at::ones({2}));
  EXPECT_EQ(p.grad()[0].item<float>(), 65536.0f);
  scaler.unscale_(opt);
  EXPECT_EQ(p.grad()[0].item<float>(), 1.0f);
  EXPECT_THROW(scaler.unscale_(opt), Error);
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_THROW(scaler.step(opt), Error);
  EXPECT_THROW(scaler.unscale_(opt), Error);
  scaler.update();
  p.mutable_grad() = scaler.scale(at::ones({2}));
  EXPECT_NO_THROW(scaler.unscale_(opt));  // a new iteration after update()
}

TEST(GradScaler, StateRoundTripsAndResumes) {
  const auto run = [](GradScaler& scaler, torch::optim::Optimizer& opt, at::Tensor& p, int64_t from,
                      int64_t to) {
    std::vector<double> scales;
    for (int64_t i = from; i < to; ++i) {
      p.mutable_grad() = scaler.scale(at::ones({2}));
      if (i % 4 == 2) p.mutable_grad()[1].fill_(std::numeric_limits<float>::infinity());
      (void)scaler.step(opt);
      scaler.update();
      scales.push_back(scaler.get_scale());
    }
    return scales;
  };
  const GradScalerOptions options{.init_scale = 1024.0, .growth_interval = 2};
  at::Tensor p = at::zeros({2}).requires_grad_(true);
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
  GradScaler whole(options);
  const std::vector<double> uninterrupted = run(whole, opt, p, 0, 10);

  GradScaler first(options);
  std::vector<double> resumed = run(first, opt, p, 0, 5);
  const std::string saved = to_json(first.state());
  EXPECT_NE(saved.find("\"_growth_tracker\""), std::string::npos) << saved;
  GradScaler second({.init_scale = 1.0, .growth_interval = 1000});  // options come from the state
  second.load_state(grad_scaler_state_from_json(saved));
  EXPECT_EQ(second.get_scale(), first.get_scale());
  EXPECT_EQ(second.growth_tracker(), first.growth_tracker());
  const std::vector<double> rest = run(second, opt, p, 5, 10);
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  EXPECT_EQ(resumed, uninterrupted);
}

TEST(GradScaler, StateFromJsonNamesTheBadKey) {
  try {
    (void)grad_scaler_state_from_json(R"({"scale": 2.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                           "growth_interval": "often", "_growth_tracker": 0})");
    ADD_FAILURE() << "accepted a string growth_interval";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("growth_interval"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)grad_scaler_state_from_json(R"({"scale": 2.0})"), Error);
  EXPECT_THROW((void)grad_scaler_state_from_json("not json"), Error);
  EXPECT_THROW({ GradScaler bad({.growth_factor = 1.0}); }, Error);
}

}  // namespace
}  // namespace hotpath::train
