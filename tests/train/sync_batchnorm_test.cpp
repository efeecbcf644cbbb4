// model.sync_batchnorm (models/batch_norm.h) on a real two-rank Gloo group in one process (threads, FileStore):
// forward, backward and running statistics of a synchronised BatchNorm on 2 ranks == plain BatchNorm on the
// concatenated batch (fp32, within 1e-5), uneven batches and channels-last included; a model trained DDP-style
// (mean loss per rank, gradients averaged) == the whole batch on one process; eval and one-rank groups are plain
// BatchNorm with no collective; layers that cannot synchronise are named.
#include "hotpath/models/batch_norm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/models/registry.h"
#include "hotpath/ops/fused_bn_relu.h"
#include "hotpath/train/distributed.h"
#include "support/test_support.h"
#include "support/two_ranks.h"

namespace hotpath::models {
namespace {

using test::run_two_ranks;
using train::DistContext;

// A group that must not be used: eval and one-rank paths take no collective.
class NoCollective final : public BatchNormGroup {
 public:
  explicit NoCollective(int world) : world_(world) {}
  [[nodiscard]] int world_size() const override { return world_; }
  void all_reduce_sum(at::Tensor&, const std::string& what) override {
    throw std::runtime_error("unexpected collective: " + what);
  }

 private:
  int world_;
};

// A BatchNorm2d of `channels` with non-trivial affine parameters and running statistics (same on every call).
torch::nn::BatchNorm2d make_bn(std::int64_t channels, bool sync_capable) {
  auto bn = sync_capable ? batch_norm2d(torch::nn::BatchNormOptions(channels).momentum(0.3))
                         : torch::nn::BatchNorm2d(torch::nn::BatchNormOptions(channels).momentum(0.3));
  at::NoGradGuard no_grad;
  const at::Generator gen = at::detail::createCPUGenerator(11);
  bn->weight.copy_(at::rand({channels}, gen) + 0.5);
  bn->bias.copy_(at::randn({channels}, gen));
  bn->running_mean.copy_(at::randn({channels}, gen) * 0.1);
  bn->running_var.copy_(at::rand({channels}, gen) + 0.5);
  return bn;
}

struct Result {
  at::Tensor y, grad_x, grad_w, grad_b, running_mean, running_var, batches;
};

// y = [relu](bn(x)); loss = Σ y·r; gradients of x, weight, bias and the buffers afterwards.
Result run_bn(torch::nn::BatchNorm2d& bn, const at::Tensor& x_in, const at::Tensor& r, bool relu, bool sync_path) {
  at::Tensor x = x_in.clone().requires_grad_(true);
  at::Tensor y = sync_path ? (relu ? batch_norm_relu(*bn, x) : batch_norm(*bn, x))
                           : (relu ? bn->forward(x).relu() : bn->forward(x));
  (y * r).sum().backward();
  return {y.detach(),          x.grad(),
          bn->weight.grad(),   bn->bias.grad(),
          bn->running_mean.clone(), bn->running_var.clone(),
          bn->num_batches_tracked.clone()};
}

void expect_close(const at::Tensor& a, const at::Tensor& b, const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(diff, tol) << what << ": max |diff| " << diff;
}

// Two ranks with rows [0, split) and [split, N) of x against plain BatchNorm on all of x.
void check_two_ranks_equal_whole_batch(const at::Tensor& x, std::int64_t split, bool relu) {
  const at::Tensor r = at::randn(x.sizes(), at::detail::createCPUGenerator(5));
  auto whole_bn = make_bn(x.size(1), /*sync_capable=*/false);
  const Result whole = run_bn(whole_bn, x, r, relu, /*sync_path=*/false);
  std::vector<Result> ranks(2);
  const auto errors = run_two_ranks([&](int rank, DistContext& dist) {
    auto bn = make_bn(x.size(1), /*sync_capable=*/true);
    EXPECT_EQ(attach_batchnorm_group(*bn, train::batchnorm_group(dist)), 1);
    const std::int64_t lo = rank == 0 ? 0 : split, hi = rank == 0 ? split : x.size(0);
    ranks[rank] = run_bn(bn, x.slice(0, lo, hi), r.slice(0, lo, hi), relu, /*sync_path=*/true);
  });
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  expect_close(at::cat({ranks[0].y, ranks[1].y}), whole.y, "forward");
  expect_close(at::cat({ranks[0].grad_x, ranks[1].grad_x}), whole.grad_x, "grad of the input");
  // weight/bias: each rank's local gradient; their sum (what DDP's all-reduce makes) is the whole batch's.
  expect_close(ranks[0].grad_w + ranks[1].grad_w, whole.grad_w, "grad of the weight");
  expect_close(ranks[0].grad_b + ranks[1].grad_b, whole.grad_b, "grad of the bias");
  for (int rank = 0; rank < 2; ++rank) {
    expect_close(ranks[rank].running_mean, whole.running_mean, "running_mean on rank " + std::to_string(rank));
    expect_close(ranks[rank].running_var, whole.running_var, "running_var on rank " + std::to_string(rank));
    EXPECT_TRUE(ranks[rank].batches.equal(whole.batches));
  }
}

at::Tensor activations(std::vector<std::int64_t> sizes) {
  return at::randn(sizes, at::detail::createCPUGenerator(7)) * 3 + 1.5;  // off-centre: mean and variance matter
}

TEST(SyncBatchNorm, TwoRanksEqualPlainBatchNormOnTheWholeBatch) {
  check_two_ranks_equal_whole_batch(activations({8, 3, 5, 5}), 4, /*relu=*/false);
}

TEST(SyncBatchNorm, FusedReluTwoRanksEqualPlainBatchNormRelu) {
  check_two_ranks_equal_whole_batch(activations({8, 4, 6, 6}), 4, /*relu=*/true);
}

TEST(SyncBatchNorm, UnevenBatchesUseTheGlobalCount) {
  check_two_ranks_equal_whole_batch(activations({7, 3, 4, 4}), 2, /*relu=*/false);
}

TEST(SyncBatchNorm, ChannelsLastInput) {
  check_two_ranks_equal_whole_batch(activations({6, 5, 4, 3}).contiguous(at::MemoryFormat::ChannelsLast), 3,
                                    /*relu=*/true);
}

// DDP-style: each rank the mean loss of its half, gradients all-reduced and divided by 2 == the whole batch's.
TEST(SyncBatchNorm, SmallCnnTwoRanksEqualTheWholeBatch) {
  const at::Tensor images = at::randn({8, 1, 12, 12}, at::detail::createCPUGenerator(3));
  const at::Tensor labels = at::randint(0, 10, {8}, at::detail::createCPUGenerator(4));
  const auto make = [] {
    at::manual_seed(9);
    return create_model("cnn_small", {.num_classes = 10, .in_channels = 1});
  };
  ModelHandle whole = make();
  at::cross_entropy_loss(whole->forward(images), labels).backward();
  const std::vector<ModelHandle> models{make(), make()};  // here: the threads would race for the generator
  std::vector<std::vector<at::Tensor>> grads(2), buffers(2);
  const auto errors = run_two_ranks([&](int rank, DistContext& dist) {
    const ModelHandle& m = models[rank];
    EXPECT_EQ(attach_batchnorm_group(*m, train::batchnorm_group(dist)), 5);
    const auto rows = [&](const at::Tensor& t) { return t.slice(0, 4 * rank, 4 * rank + 4); };
    at::cross_entropy_loss(m->forward(rows(images)), rows(labels)).backward();
    for (const auto& p : m->parameters()) {
      at::Tensor g = p.grad().clone();
      dist.all_reduce_sum(g, "test gradients");
      grads[rank].push_back(g / 2);
    }
    for (const auto& b : m->buffers()) buffers[rank].push_back(b.clone());
  });
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  const auto params = whole->named_parameters();
  const auto bufs = whole->named_buffers();
  for (int rank = 0; rank < 2; ++rank) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      expect_close(grads[rank][i], params[i].value().grad(), "grad of " + params[i].key());
    }
    for (std::size_t i = 0; i < bufs.size(); ++i) expect_close(buffers[rank][i], bufs[i].value(), bufs[i].key());
  }
}

TEST(SyncBatchNorm, EvalAndOneRankGroupsArePlainBatchNormWithoutCollectives) {
  const at::Tensor x = activations({4, 3, 5, 5});
  auto plain = make_bn(3, /*sync_capable=*/false);
  auto two = make_bn(3, /*sync_capable=*/true);
  auto one = make_bn(3, /*sync_capable=*/true);
  attach_batchnorm_group(*two, std::make_shared<NoCollective>(2));
  attach_batchnorm_group(*one, std::make_shared<NoCollective>(1));
  // Training with a one-rank group: bit for bit the plain module (and the fused BN+ReLU op).
  EXPECT_TRUE(batch_norm(*one, x).equal(plain->forward(x)));
  EXPECT_TRUE(one->running_var.equal(plain->running_var));
  EXPECT_TRUE(batch_norm_relu(*one, x).equal(ops::fused_bn_relu(*plain, x)));
  // Eval: the running statistics, no collective (NoCollective would throw).
  auto fresh = make_bn(3, /*sync_capable=*/false);
  fresh->eval();
  two->eval();
  EXPECT_TRUE(batch_norm(*two, x).equal(fresh->forward(x)));
  EXPECT_TRUE(batch_norm_relu(*two, x).equal(ops::fused_bn_relu(*fresh, x)));
}

TEST(SyncBatchNorm, LayersThatCannotSynchroniseAreNamed) {
  torch::nn::Sequential seq(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)), torch::nn::BatchNorm2d(2));
  try {
    attach_batchnorm_group(*seq, std::make_shared<NoCollective>(2));
    FAIL() << "a plain torch::nn::BatchNorm2d was accepted";
  } catch (const hotpath::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.sync_batchnorm: 1 is a plain torch::nn::BatchNorm2d"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(attach_batchnorm_group(*create_model("resnet18_small", {.num_classes = 10}), nullptr), 20);
  EXPECT_EQ(attach_batchnorm_group(*create_model("vit_tiny", {.num_classes = 10}), nullptr), 0);
}

}  // namespace
}  // namespace hotpath::models
