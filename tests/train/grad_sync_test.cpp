// GradSync (DDP) and DistContext on a real Gloo group of two ranks in one process (threads, FileStore
// rendezvous): bucketed, overlapped all-reduce == its reference twin (all-reduce after backward) == the
// gradients of the whole batch on one process; no-sync accumulation == the large batch; the start-up
// agreement check names the differing key.
#include "hotpath/train/distributed.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/core/error.h"
#include "support/test_support.h"

namespace hotpath::train {
namespace {

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

// Runs `body(rank, dist)` on two threads joined in one Gloo group; rethrows the first failure's text.
std::vector<std::string> run_two_ranks(const std::function<void(int, DistContext&)>& body,
                                       const std::vector<AgreementKeys>& keys = {{}, {}}) {
  TempDir dir;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto dist = DistContext::connect_file(dir.file("store"), r, 2, std::chrono::seconds(30), keys[r]);
        body(r, *dist);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

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

}  // namespace
}  // namespace hotpath::train
