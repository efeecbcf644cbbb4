// Label gpu: attention() on CUDA tensors runs ATen's SDPA and agrees with the CPU reference in fp16 and
// fp32, forward and gradients; the backend report names a fused kernel (not math) for BERT-like shapes.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <iostream>
#include <string>
#include <vector>

#include "hotpath/ops/attention.h"
#include "support/cuda_test_support.h"

namespace hotpath::ops {
namespace {

at::Tensor right_padding(std::int64_t batch, std::int64_t lk) {
  at::Tensor mask = at::ones({batch, lk}, at::kLong);
  for (std::int64_t b = 1; b < batch; ++b) mask[b].slice(0, std::max<std::int64_t>(1, lk - 9 * b)).fill_(0);
  return mask;
}

TEST(CudaAttention, AutoRunsSdpaAndMatchesTheCpuReference) {
  HOTPATH_REQUIRE_CUDA();
  at::manual_seed(1);
  const at::Tensor q = at::randn({4, 12, 128, 64}), k = at::randn({4, 12, 128, 64}), v = at::randn({4, 12, 128, 64});
  const at::Tensor mask = right_padding(4, 128);
  const at::Tensor want = reference_attention(q, k, v, mask);
  const at::Device cuda(at::kCUDA, 0);
  // fp16: inputs rounded to half, so ~1e-3 relative error is the dtype's, not the kernel's.
  for (const at::ScalarType type : {at::kFloat, at::kHalf}) {
    const at::Tensor got = attention(q.to(cuda, type), k.to(cuda, type), v.to(cuda, type), mask.to(cuda),
                                     AttentionKernel::kAuto)
                               .to(at::kCPU, at::kFloat);
    const double tol = type == at::kHalf ? 5e-3 : 1e-4;
    EXPECT_TRUE(at::allclose(got, want, tol, tol)) << c10::toString(type) << " max diff "
                                                   << (got - want).abs().max().item<double>();
  }
}

TEST(CudaAttention, GradientsMatchTheCpuReference) {
  HOTPATH_REQUIRE_CUDA();
  const at::Tensor mask = right_padding(3, 40);
  std::vector<at::Tensor> grads[2];
  for (int on_cuda = 0; on_cuda < 2; ++on_cuda) {
    at::manual_seed(2);
    std::vector<at::Tensor> qkv;
    for (int i = 0; i < 3; ++i) qkv.push_back(at::randn({3, 4, 40, 32}));
    const at::Device device = on_cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    for (auto& t : qkv) t = t.to(device).requires_grad_();
    const at::Tensor out = on_cuda ? attention(qkv[0], qkv[1], qkv[2], mask.to(device), AttentionKernel::kAuto)
                                   : reference_attention(qkv[0], qkv[1], qkv[2], mask);
    grads[on_cuda] = torch::autograd::grad({(out * out).sum()}, qkv);
  }
  for (std::size_t i = 0; i < 3; ++i) {
    const at::Tensor got = grads[1][i].to(at::kCPU);
    EXPECT_TRUE(at::allclose(got, grads[0][i], 1e-3, 1e-4)) << "grad " << i << " max diff "
                                                            << (got - grads[0][i]).abs().max().item<double>();
  }
}

TEST(CudaAttention, ReportsAFusedKernelForBertShapes) {
  HOTPATH_REQUIRE_CUDA();
  const at::Tensor q = at::zeros({8, 12, 128, 64}, at::TensorOptions(at::Device(at::kCUDA, 0)).dtype(at::kHalf));
  const std::string no_mask = sdpa_backend_name(q, q, q, at::Tensor());
  const std::string masked = sdpa_backend_name(q, q, q, at::ones({8, 128}, at::kLong));
  EXPECT_NE(no_mask, "math") << "fp16 without a mask";
  EXPECT_NE(masked, "math") << "fp16 with a key padding mask";
  std::cout << "SDPA on this GPU: no mask -> " << no_mask << ", key padding mask -> " << masked << "\n";
}

}  // namespace
}  // namespace hotpath::ops
