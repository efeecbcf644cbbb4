// GradSync (DDP) and DistContext on a real Gloo group of two ranks in one process (threads, FileStore
// rendezvous): bucketed, overlapped all-reduce == its reference twin (all-reduce after backward) == the
// gradients of the whole batch on one process; no-sync accumulation == the large batch; the start-up
// agreement check names the differing key. ZeRO-1/2 (ZeroSync) on the same group: the sharding math, equality
// with DDP + a whole optimizer (AdamW and SGD momentum, clipping, no-sync accumulation), the loss scaler's
// agreed inf check, sharded checkpoints assembled and resumed (same stage, another stage, DDP).
#include "hotpath/train/distributed.h"
#include "hotpath/train/from_recipe.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "hotpath/core/error.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/train/grad_scaler.h"
#include "hotpath/train/optimizer.h"
#include "hotpath/train/zero.h"
#include "support/test_support.h"
#include "support/two_ranks.h"

namespace hotpath::train {
namespace {

using test::run_two_ranks;
using test::TempDir;

// A two-layer MLP as plain tensors, plus a parameter the loss never uses. Registration order is the
// order of this list; "unused" comes first so that it lands in the last bucket (reverse order).
struct Mlp {
  NamedParameters params;
  explicit Mlp(const std::vector<at::Tensor>& init) {
    const char* names[] = {"unused", "w1", "b1", "w2", "b2"};
    for (std::size_t i = 0; i < init.size(); ++i) params.emplace_back(names[i], init[i].clone().requires_grad_(true));
  }
  [[nodiscard]] at::Tensor loss(const at::Tensor& x, const at::Tensor& y) const {
    const at::Tensor h = at::relu(at::addmm(params[2].second, x, params[1].second.t()));
    return (at::addmm(params[4].second, h, params[3].second.t()) - y).pow(2).mean();
  }
  [[nodiscard]] std::vector<at::Tensor> grads() const {
    std::vector<at::Tensor> g;
    for (const auto& [n, p] : params) g.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    return g;
  }
};

struct Fixture {
  std::vector<at::Tensor> init;
  at::Tensor x, y;
  Fixture() {
    at::manual_seed(3);
    init = {at::randn({3, 3}), at::randn({16, 8}), at::randn({16}), at::randn({4, 16}), at::randn({4})};
    x = at::randn({8, 8});
    y = at::randn({8, 4});
  }
  // The gradients of the mean loss over all 8 rows on one process.
  [[nodiscard]] std::vector<at::Tensor> full_batch_grads() const {
    Mlp m(init);
    m.loss(x, y).backward();
    return m.grads();
  }
};

void expect_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::allclose(a[i], b[i], /*rtol=*/1e-5, tol)) << what << ": tensor " << i << " differs by "
                                                  << (a[i] - b[i]).abs().max().item<double>();
  }
}

constexpr GradSyncOptions kTinyBuckets{.first_bucket_bytes = 64, .bucket_bytes = 256, .overlap = true};

TEST(GradSync, BucketedOverlappedAllReduceEqualsTheWholeBatch) {
  const Fixture f;
  const std::vector<at::Tensor> expected = f.full_batch_grads();
  std::vector<std::vector<at::Tensor>> got(2), twin(2);
  std::vector<std::vector<std::vector<std::string>>> buckets(2);
  std::vector<GradSyncStats> stats(2);
  const auto errors = run_two_ranks([&](int r, DistContext& dist) {
    const at::Tensor x = f.x.narrow(0, 4 * r, 4), y = f.y.narrow(0, 4 * r, 4);
    for (const bool overlap : {true, false}) {
      Mlp m(f.init);
      GradSyncOptions o = kTinyBuckets;
      o.overlap = overlap;
      GradSync sync(dist, m.params, o);
      for (int step = 0; step < 2; ++step) {  // twice: the buckets are reset and reused
        sync.zero_grad();
        m.loss(x, y).backward();
        sync.finish();
      }
      (overlap ? got : twin)[r] = m.grads();
      if (overlap) {
        buckets[r] = sync.bucket_names();
        stats[r] = sync.stats();
      }
    }
  });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  for (int r = 0; r < 2; ++r) {
    expect_close(got[r], expected, 1e-6, "overlapped");
    for (std::size_t i = 0; i < got[r].size(); ++i) {
      EXPECT_TRUE(at::equal(got[r][i], twin[r][i])) << "the reference twin differs at tensor " << i;
    }
  }
  EXPECT_EQ(buckets[0], buckets[1]);  // the same buckets on every rank
  ASSERT_GE(buckets[0].size(), 3u);
  EXPECT_EQ(buckets[0].front().front(), "b2");  // reverse registration order
  EXPECT_EQ(buckets[0].back().back(), "unused");
  // Every bucket but the last (it holds the unused parameter: launched by finish) left from a hook.
  EXPECT_GT(stats[0].launched_in_backward, 0.0);
  EXPECT_LT(stats[0].launched_in_backward, 1.0);
  EXPECT_EQ(stats[0].bucket_bytes_total, static_cast<std::int64_t>((9 + 128 + 16 + 64 + 4) * sizeof(float)));
}

TEST(GradSync, NoSyncAccumulationEqualsTheLargeBatch) {
  const Fixture f;
  const std::vector<at::Tensor> expected = f.full_batch_grads();
  std::vector<std::vector<at::Tensor>> got(2);
  const auto errors = run_two_ranks([&](int r, DistContext& dist) {
    Mlp m(f.init);
    GradSync sync(dist, m.params, kTinyBuckets);
    for (int micro = 0; micro < 2; ++micro) {  // rank r: rows 4r..4r+1, then 4r+2..4r+3
      sync.set_sync(micro == 1);
      (m.loss(f.x.narrow(0, 4 * r + 2 * micro, 2), f.y.narrow(0, 4 * r + 2 * micro, 2)) * 0.5).backward();
    }
    sync.finish();
    got[r] = m.grads();
  });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  for (int r = 0; r < 2; ++r) expect_close(got[r], expected, 1e-6, "accumulated");
}

TEST(DistContext, RefusesARankWithAnotherRecipe) {
  const AgreementKeys a{{"optimizer.lr", "0.1"}, {"train.batch_size", "8"}};
  const AgreementKeys b{{"optimizer.lr", "0.2"}, {"train.batch_size", "8"}};
  const auto errors = run_two_ranks([](int, DistContext&) {}, {a, b});
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank 1's recipe differs from rank 0's at optimizer.lr (0.2 on rank 1, 0.1 on rank 0)"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

TEST(DistContext, CollectivesAndBroadcastString) {
  std::vector<double> sums(2);
  std::vector<std::string> shared(2);
  const auto errors = run_two_ranks([&](int r, DistContext& dist) {
    at::Tensor t = at::full({2}, r + 1.0, at::kDouble);
    dist.all_reduce_sum(t, "test");
    sums[r] = t[1].item<double>();
    std::vector<at::Tensor> b{at::full({1}, r == 0 ? 42.0 : 0.0)};
    dist.broadcast(b, 0, "test");
    EXPECT_EQ(b[0].item<float>(), 42.0f);
    shared[r] = dist.broadcast_string("k", r == 0 ? "from rank 0" : "ignored");
    dist.barrier("end");
  });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  EXPECT_EQ(sums, std::vector<double>({3.0, 3.0}));
  EXPECT_EQ(shared, std::vector<std::string>({"from rank 0", "from rank 0"}));
}

TEST(DistEnv, ReadsTorchrunAndRefusesMalformedVariables) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29511", 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  DistEnv e = dist_env_from_environment();
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.master_port, 29511);
  setenv("RANK", "2", 1);
  try {
    (void)dist_env_from_environment();
    ADD_FAILURE() << "RANK=2 of WORLD_SIZE=2 was accepted";
  } catch (const hotpath::Error& err) {
    EXPECT_NE(std::string(err.what()).find("$RANK='2'"), std::string::npos) << err.what();
  }
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "TORCHELASTIC_USE_AGENT_STORE"}) {
    unsetenv(v);
  }
  EXPECT_FALSE(dist_env_from_environment().distributed());
}

TEST(DistEnv, TimeoutIsAtLeastOneMillisecondAndRoundsToTheNearest) {
  Recipe r;
  r.train.dist_timeout_s = 0.0025;
  EXPECT_EQ(dist_timeout_for(r), std::chrono::milliseconds(3));
  setenv("HOTPATH_DIST_TIMEOUT_S", "0.001", 1);
  EXPECT_EQ(dist_timeout_for(r), std::chrono::milliseconds(1));
  for (const char* bad : {"1e-6", "0", "-1", "86401", "5s"}) {
    setenv("HOTPATH_DIST_TIMEOUT_S", bad, 1);
    try {
      (void)dist_timeout_for(r);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const hotpath::Error& err) {
      EXPECT_NE(std::string(err.what()).find("expected seconds in [0.001, 86400]"), std::string::npos) << err.what();
    }
  }
  unsetenv("HOTPATH_DIST_TIMEOUT_S");
}

TEST(DistEnv, FallsBackToSlurm) {
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NTASKS_PER_NODE", "2", 1);
  setenv("MASTER_ADDR", "node0", 1);
  setenv("MASTER_PORT", "29500", 1);
  const DistEnv e = dist_env_from_environment();
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_FALSE(e.agent_store);  // rank 0 hosts the store
  unsetenv("MASTER_PORT");
  try {
    (void)dist_env_from_environment();
    ADD_FAILURE() << "a Slurm job without MASTER_PORT was accepted";
  } catch (const hotpath::Error& err) {
    EXPECT_NE(std::string(err.what()).find("$MASTER_ADDR/$MASTER_PORT are not set"), std::string::npos) << err.what();
  }
  for (const char* v : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "MASTER_ADDR"}) {
    unsetenv(v);
  }
}

// ---- ZeRO-1/2 ------------------------------------------------------------------------------------

TEST(ZeroLayout, SlicesAreAlignedContiguousAndCoverEveryElementOnce) {
  const NamedParameters flat{{"a", at::zeros({4})}, {"b", at::zeros({8, 8})}, {"c", at::zeros({16})}, {"d", at::zeros({9})}};
  for (const int world : {1, 2, 3, 5}) {
    const ShardLayout l = make_shard_layout(flat, world, 16);
    EXPECT_EQ(l.numel, 93);
    EXPECT_EQ(l.shard_numel % 16, 0);
    EXPECT_GE(l.shard_numel * world, l.numel);
    EXPECT_LT(l.shard_numel * (world - 1), l.numel + 16 * world) << "slices larger than needed";
    std::vector<int> covered(93, 0);
    for (int r = 0; r < world; ++r) {
      for (const auto& seg : l.segments(r)) {
        const auto& p = l.params[seg.param];
        const std::int64_t at_flat = p.offset + seg.begin;
        EXPECT_GE(at_flat, r * l.shard_numel);
        EXPECT_LE(at_flat + seg.length, (r + 1) * l.shard_numel);
        for (std::int64_t k = 0; k < seg.length; ++k) covered[at_flat + k] += 1;
      }
    }
    EXPECT_EQ(covered, std::vector<int>(93, 1)) << "world " << world;
  }
  EXPECT_EQ(optimizer_shard_file(1, 2), "optimizer-shard-00001-of-00002.safetensors");
}

// What a DDP (stage 0) or ZeRO run of the Mlp leaves: weights, norms, optimizer state, state bytes.
struct MlpRun {
  std::vector<at::Tensor> weights;
  std::vector<double> norms;
  TensorMap whole_state;       // DDP: optimizer_state() over the whole parameters
  std::int64_t state_bytes = 0;
  bool grads_freed = true;     // stage 2: no parameter kept its .grad after finish()
};

struct RunConfig {
  int stage = 0;
  OptimizerConfig optimizer;
  double clip = 0;
  int accum = 1;
  int steps = 5;
  ZeroNorm norm = ZeroNorm::kWhole;
};

// `steps` steps of rank r's 4 rows (accum micro-batches each; the rows scaled per step so that every step
// differs). With `checkpoint_dir`, the ZeRO run writes a sharded checkpoint after `save_at` steps.
MlpRun train_mlp(int r, DistContext& dist, const Fixture& f, const RunConfig& c, Mlp& m,
              const std::string& checkpoint_dir = "", int save_at = -1, const TensorMap* resume = nullptr,
              int first_step = 0) {
  std::unique_ptr<GradSync> ddp;
  std::unique_ptr<torch::optim::Optimizer> whole;
  std::unique_ptr<ZeroSync> zero;
  if (c.stage == 0) {
    ddp = std::make_unique<GradSync>(dist, m.params, kTinyBuckets);
    whole = make_optimizer(c.optimizer, m.params);
    if (resume) load_optimizer_state(*whole, m.params, *resume);
  } else {
    zero = std::make_unique<ZeroSync>(dist, m.params, c.optimizer, ZeroOptions{.stage = c.stage, .buckets = kTinyBuckets, .norm = c.norm});
    if (resume) zero->load_state(*resume);
  }
  torch::optim::Optimizer& opt = zero ? zero->optimizer() : *whole;
  std::vector<at::Tensor> tensors;
  for (const auto& [n, p] : m.params) tensors.push_back(p);
  MlpRun run;
  for (int step = first_step; step < c.steps; ++step) {
    const double scale = 1.0 + 0.25 * step;
    const std::int64_t rows = 4 / c.accum;
    for (int micro = 0; micro < c.accum; ++micro) {
      const bool last = micro == c.accum - 1;
      if (zero) zero->set_sync(last);
      if (ddp) ddp->set_sync(last);
      const std::int64_t at_row = 4 * r + rows * micro;
      (m.loss(f.x.narrow(0, at_row, rows) * scale, f.y.narrow(0, at_row, rows)) / static_cast<double>(c.accum)).backward();
    }
    if (zero) {
      zero->finish();
      if (c.stage == 2) {
        for (const auto& [n, p] : m.params) run.grads_freed = run.grads_freed && !p.grad().defined();
      }
    } else {
      ddp->finish();
    }
    if (c.clip > 0) run.norms.push_back(zero ? zero->clip_grad_norm(c.clip) : clip_grad_norm(tensors, c.clip));
    opt.step();
    if (zero) {
      zero->refresh_parameters();
      zero->zero_grad();
    } else {
      ddp->zero_grad();
    }
    if (step + 1 == save_at && zero) {
      if (r == 0) begin_checkpoint(checkpoint_dir);
      dist.barrier("test: shard directory");
      write_optimizer_shard(checkpoint_dir, r, zero->layout(), zero->shard_state());
      dist.barrier("test: shards written");
      if (r == 0) {
        CheckpointData data;
        data.optimizer_manifest = optimizer_manifest_json(zero->layout(), c.stage, step + 1);
        data.trainer_json = "{}";
        save_checkpoint(checkpoint_dir, data);
      }
      dist.barrier("test: checkpoint complete");
    }
  }
  for (const auto& [n, p] : m.params) run.weights.push_back(p.detach().clone());
  if (zero) {
    run.state_bytes = zero->stats().optimizer_state_bytes;
  } else {
    run.whole_state = optimizer_state(opt, m.params);
    for (const auto& [k, t] : run.whole_state) run.state_bytes += static_cast<std::int64_t>(t.nbytes());
  }
  return run;
}

OptimizerConfig adamw() {
  return {.kind = OptimizerKind::kAdamW, .lr = 0.01, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
}
OptimizerConfig sgd_momentum() {
  return {.kind = OptimizerKind::kSgd, .lr = 0.02, .weight_decay = 0.01, .momentum = 0.9, .nesterov = true};
}

// ZeRO-1 and ZeRO-2 == DDP with the whole optimizer, bit for bit, on both ranks, for AdamW and SGD momentum,
// with clipping (the global norm from the whole gradients) and with no-sync accumulation; the norm summed
// from the slices (ZeroNorm::kSlices) within float rounding.
TEST(Zero, StagesOneAndTwoEqualDdp) {
  const Fixture f;
  struct Case {
    const char* name;
    OptimizerConfig optimizer;
    double clip;
    int accum;
  };
  const Case cases[] = {{"adamw", adamw(), 0, 1},
                        {"sgd momentum", sgd_momentum(), 0, 1},
                        {"adamw + clipping", adamw(), 0.5, 1},
                        {"sgd + clipping + accumulation", sgd_momentum(), 0.5, 2},
                        {"adamw + accumulation", adamw(), 0, 2}};
  for (const Case& c : cases) {
    std::vector<std::vector<MlpRun>> runs(3, std::vector<MlpRun>(2));
    std::vector<MlpRun> slices(2);  // ZeRO-2 with the norm from the slices
    const auto errors = run_two_ranks([&](int r, DistContext& dist) {
      for (int stage = 0; stage <= 2; ++stage) {
        Mlp m(f.init);
        runs[stage][r] = train_mlp(r, dist, f, {.stage = stage, .optimizer = c.optimizer, .clip = c.clip, .accum = c.accum}, m);
      }
      Mlp m(f.init);
      slices[r] = train_mlp(r, dist, f, {.stage = 2, .optimizer = c.optimizer, .clip = c.clip, .accum = c.accum,
                                         .norm = ZeroNorm::kSlices}, m);
    });
    ASSERT_EQ(errors, std::vector<std::string>(2)) << c.name << ": " << errors[0] << errors[1];
    for (int stage = 1; stage <= 2; ++stage) {
      for (int r = 0; r < 2; ++r) {
        SCOPED_TRACE(std::string(c.name) + ", ZeRO-" + std::to_string(stage) + ", rank " + std::to_string(r));
        for (std::size_t i = 0; i < runs[0][r].weights.size(); ++i) {
          EXPECT_TRUE(at::equal(runs[stage][r].weights[i], runs[0][r].weights[i]))
              << "tensor " << i << " differs from DDP's by " << (runs[stage][r].weights[i] - runs[0][r].weights[i]).abs().max().item<double>();
        }
        EXPECT_EQ(runs[stage][r].norms, runs[0][r].norms);
        expect_close(slices[r].weights, runs[0][r].weights, 1e-6, "weights (norm from the slices)");
        ASSERT_EQ(slices[r].norms.size(), runs[0][r].norms.size());
        for (std::size_t k = 0; k < runs[0][r].norms.size(); ++k) {
          EXPECT_NEAR(slices[r].norms[k], runs[0][r].norms[k], 1e-6 * runs[0][r].norms[k]) << "slice norm at step " << k;
        }
        if (c.clip > 0) {
          EXPECT_GT(runs[0][r].norms.front(), c.clip) << "the clipping case must clip";
        }
        EXPECT_TRUE(runs[stage][r].grads_freed) << "ZeRO-2 kept a whole .grad after the reduction";
      }
      // The weights moved, and both ranks hold the same model.
      EXPECT_FALSE(at::allclose(runs[stage][0].weights[1], f.init[1]));
      for (std::size_t i = 0; i < runs[stage][0].weights.size(); ++i) {
        EXPECT_TRUE(at::equal(runs[stage][0].weights[i], runs[stage][1].weights[i])) << c.name << ": tensor " << i;
      }
      // Optimizer state per rank ≈ 1/world of DDP's (AdamW: the step counters are per slice).
      const double whole = static_cast<double>(runs[0][0].state_bytes);
      const double sum = static_cast<double>(runs[stage][0].state_bytes + runs[stage][1].state_bytes);
      EXPECT_NEAR(sum, whole, 0.05 * whole) << c.name;
      for (int r = 0; r < 2; ++r) EXPECT_LT(static_cast<double>(runs[stage][r].state_bytes), 0.6 * whole) << c.name;
    }
  }
}

// fp16's loss scaler: an inf on one rank's slice only makes every rank skip the step when the ranks agree.
TEST(Zero, LossScalerInfCheckAgreesAcrossRanks) {
  const Fixture f;
  std::vector<int> skipped(2, -1), skipped_alone(2, -1);
  const auto errors = run_two_ranks([&](int r, DistContext& dist) {
    for (const bool agree : {false, true}) {
      Mlp m(f.init);
      ZeroSync zero(dist, m.params, adamw(), {.stage = 2, .buckets = kTinyBuckets});
      GradScaler scaler({.init_scale = 4.0});
      scaler.scale(m.loss(f.x.narrow(0, 4 * r, 4), f.y.narrow(0, 4 * r, 4))).backward();
      zero.finish();
      if (r == 1) zero.optimizer().param_groups().back().params().back().grad().view(-1)[0] = INFINITY;
      if (agree) zero.agree_on_inf(scaler);
      (agree ? skipped : skipped_alone)[r] = scaler.step(zero.optimizer()) ? 0 : 1;
      scaler.update();
      dist.barrier("test: step");
    }
  });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  EXPECT_EQ(skipped_alone, std::vector<int>({0, 1})) << "without agreement only the rank with the inf skips";
  EXPECT_EQ(skipped, std::vector<int>({1, 1}));
}

// A ZeRO-2 run checkpointed after 3 of 5 steps: the shards assemble into DDP's whole optimizer state, and
// resuming from them with ZeRO-2 (exactly), ZeRO-1 and DDP (another stage: resharded) ends where the
// uninterrupted run does.
TEST(Zero, ShardedCheckpointAssemblesAndResumesInAnyStage) {
  const Fixture f;
  TempDir dir;
  const std::string ckpt = dir.file("step-00000003");
  const RunConfig base{.stage = 2, .optimizer = adamw(), .clip = 0.5};
  std::vector<MlpRun> ddp3(2), zero5(2);
  std::vector<std::vector<at::Tensor>> weights3(2);
  std::vector<std::vector<MlpRun>> resumed(3, std::vector<MlpRun>(2));
  std::vector<TensorMap> assembled(2);
  const auto errors = run_two_ranks([&](int r, DistContext& dist) {
    {
      Mlp m(f.init);
      RunConfig three = base;
      three.stage = 0;
      three.steps = 3;
      ddp3[r] = train_mlp(r, dist, f, three, m);
    }
    {
      Mlp m(f.init);
      zero5[r] = train_mlp(r, dist, f, base, m, ckpt, 3);
    }
    {
      Mlp m(f.init);
      RunConfig three = base;
      three.steps = 3;
      weights3[r] = train_mlp(r, dist, f, three, m).weights;
    }
    assembled[r] = load_checkpoint(ckpt).optimizer;
    for (int stage = 0; stage <= 2; ++stage) {
      Mlp m(weights3[r]);
      RunConfig c = base;
      c.stage = stage;
      resumed[stage][r] = train_mlp(r, dist, f, c, m, "", -1, &assembled[r], 3);
    }
  });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(assembled[r].size(), ddp3[r].whole_state.size());
    for (const auto& [key, t] : ddp3[r].whole_state) {
      ASSERT_TRUE(assembled[r].contains(key)) << key;
      EXPECT_EQ(assembled[r].at(key).sizes(), t.sizes()) << key;
      EXPECT_TRUE(at::allclose(assembled[r].at(key).to(t.scalar_type()), t, 1e-5, 1e-7)) << key;
    }
    for (std::size_t i = 0; i < zero5[r].weights.size(); ++i) {
      EXPECT_TRUE(at::equal(resumed[2][r].weights[i], zero5[r].weights[i])) << "ZeRO-2 resume is not exact at " << i;
    }
    expect_close(resumed[1][r].weights, zero5[r].weights, 1e-6, "resumed as ZeRO-1");
    expect_close(resumed[0][r].weights, zero5[r].weights, 1e-6, "resumed as DDP");
  }
}

TEST(Zero, ManifestNamingAMissingShard) {
  const Fixture f;
  TempDir dir;
  const std::string ckpt = dir.file("step-00000001");
  const auto errors = run_two_ranks([&](int r, DistContext& dist) {
    Mlp m(f.init);
    train_mlp(r, dist, f, {.stage = 1, .optimizer = sgd_momentum(), .steps = 1}, m, ckpt, 1);
  });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  EXPECT_EQ(load_checkpoint(ckpt).optimizer.size(), 5u);  // a momentum buffer per parameter
  std::filesystem::remove(std::filesystem::path(ckpt) / optimizer_shard_file(1, 2));
  try {
    (void)load_checkpoint(ckpt);
    ADD_FAILURE() << "a checkpoint without rank 1's shard was loaded";
  } catch (const hotpath::Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer-shard-00001-of-00002.safetensors: missing; the checkpoint's optimizer "
                                         "state is sharded over 2 ranks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hotpath::train
