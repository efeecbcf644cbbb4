// The NCCL process group behind DistContext (label gpu; scripts/gpu-check runs it on a GPU machine): a one-rank
// NCCL group on GPU 0 (all-reduce, broadcast from a CPU tensor, barrier), and with two GPUs a two-rank group on
// threads (one GPU each): all-reduce and synchronised BatchNorm on CUDA == plain BatchNorm on the whole batch.
// NCCL refuses two ranks of one communicator on the same GPU, so on a one-GPU machine only the one-rank group
// runs; each test skips with one line where there is no (second) GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/models/batch_norm.h"
#include "hotpath/train/distributed.h"
#include "support/test_support.h"

namespace hotpath::train {
namespace {

TEST(Nccl, OneRankGroupOnGpu0) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the NCCL process group is not exercised";
  test::TempDir dir;
  const at::Device gpu(at::kCUDA, 0);
  auto dist = DistContext::connect_file(dir.file("store"), 0, 1, std::chrono::seconds(60), {}, gpu);
  EXPECT_STREQ(dist->backend_name(), "nccl");
  at::Tensor t = at::arange(8, at::TensorOptions(gpu).dtype(at::kFloat));
  dist->all_reduce_sum(t, "test all-reduce");
  EXPECT_TRUE(t.cpu().equal(at::arange(8, at::kFloat)));
  at::Tensor on_cpu = at::full({4}, 3.0);  // a CPU tensor goes through a copy on the GPU
  dist->all_reduce_sum(on_cpu, "test all-reduce of a CPU tensor");
  EXPECT_TRUE(on_cpu.equal(at::full({4}, 3.0)));
  std::vector<at::Tensor> b{at::ones({3}, at::TensorOptions(gpu))};
  dist->broadcast(b, 0, "test broadcast");
  dist->barrier("test barrier");
  EXPECT_TRUE(b[0].cpu().equal(at::ones({3})));
}

TEST(Nccl, TwoRanksOnTwoGpusSynchroniseBatchNorm) {
  if (!torch::cuda::is_available() || torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "fewer than 2 GPUs: NCCL needs one GPU per rank, the two-rank group is not exercised";
  }
  test::TempDir dir;
  const at::Tensor x = at::randn({8, 3, 5, 5}, at::detail::createCPUGenerator(7)) * 2 + 1;
  torch::nn::BatchNorm2d whole(3);
  at::Tensor xw = x.clone().requires_grad_(true);
  whole->forward(xw).square().sum().backward();
  std::vector<at::Tensor> y(2), gx(2), sums(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(r));
        auto dist = DistContext::connect_file(dir.file("store"), r, 2, std::chrono::seconds(60), {}, gpu);
        at::Tensor one = at::full({2}, static_cast<double>(r + 1), at::TensorOptions(gpu));
        dist->all_reduce_sum(one, "test all-reduce");
        sums[r] = one.cpu();
        auto bn = models::batch_norm2d(3);
        bn->to(gpu);
        models::attach_batchnorm_group(*bn, batchnorm_group(*dist));
        at::Tensor xr = x.slice(0, 4 * r, 4 * r + 4).to(gpu).requires_grad_(true);
        at::Tensor yr = models::batch_norm(*bn, xr);
        yr.square().sum().backward();
        y[r] = yr.detach().cpu();
        gx[r] = xr.grad().cpu();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  EXPECT_TRUE(sums[0].equal(at::full({2}, 3.0)));
  EXPECT_LE((at::cat({y[0], y[1]}) - whole->forward(x).detach()).abs().max().item<double>(), 1e-5);
  EXPECT_LE((at::cat({gx[0], gx[1]}) - xw.grad()).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace hotpath::train
