// Image graphs through the engine at batch 1 and at every batch size a server's dynamic batching hands it:
// they take neither the text graphs' batch split nor the batch-1 token row split (each conv keeps oneDNN's
// own parallelism), and a steady-state run allocates its activations only — every conv weight is packed
// into oneDNN's layout once per input shape, never again per call (a weight packed for another shape is
// reordered on every call: 10-75 ms per conv at batch 1, e1c3a93). Their fp32 linears run MKL's packed
// sgemm at small row counts and at::addmm past them: both match the training model.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <string>

#include "hotpath/infer/engine.h"
#include "hotpath/infer/lower.h"
#include "hotpath/models/registry.h"

namespace hotpath::infer {
namespace {

// Counts what ATen allocates through c10's CPU allocator (oneDNN's packed weights included).
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(std::size_t n) override {
    if (counting.load()) bytes += static_cast<std::int64_t>(n);
    return base_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count_bytes) const override {
    base_->copy_data(dest, src, count_bytes);
  }
  std::atomic<bool> counting{false};
  std::atomic<std::int64_t> bytes{0};

 private:
  c10::Allocator* base_;
};

TEST(EngineImageBatch, KeepsPerNodeParallelismAndPacksEachConvWeightOncePerShape) {
  static CountingCpuAllocator counter(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&counter, /*priority=*/100);
  ASSERT_EQ(c10::GetCPUAllocator(), &counter);
  at::manual_seed(3);
  auto model = models::create_model("resnet18_small", {.num_classes = 10, .in_channels = 3});
  model->eval();
  const Graph g = lower_image_model(*model, {.channels = 3, .image_size = 16});
  std::int64_t conv_weight_bytes = 0;
  for (const Node& n : g.nodes) {
    if (n.op == OpKind::kConv2d) conv_weight_bytes += g.params.at(n.params.at("weight")).nbytes();
  }
  const Engine engine = Engine::from_graph(g, {.threads = 2});
  const std::string about = engine.describe();
  EXPECT_NE(about.find("batch: every node parallel on its own (image graph"), std::string::npos) << about;
  EXPECT_NE(about.find("batch 1: every node parallel on its own (image graph"), std::string::npos) << about;
  // Batch sizes 1..8: what `hotpath serve` batches up to by default, more than a handful of shapes.
  for (std::int64_t batch = 1; batch <= 8; ++batch) {
    const at::Tensor x = at::randn({batch, 3, 16, 16});
    const at::Tensor first = engine.run({x}).front();  // records the plan, packs the weights for this shape
    (void)engine.run({x});                             // makes the arena
    counter.bytes = 0;
    counter.counting = true;
    const at::Tensor steady = engine.run({x}).front();
    counter.counting = false;
    const std::int64_t bytes = counter.bytes.load();
    std::cout << "resnet18_small 16x16 batch " << batch << ": steady-state run allocates " << bytes
              << " bytes (conv weights " << conv_weight_bytes << ")\n";
    EXPECT_LT(bytes * 4, conv_weight_bytes) << "batch " << batch << ": a conv weight was packed again";
    EXPECT_TRUE(at::equal(steady, first)) << "batch " << batch;
  }
  for (const Engine::BufferPlanInfo& p : engine.buffer_plans()) EXPECT_FALSE(p.split_rows);
  // The count sees a per-call weight reorder: oneDNN's conv given a plain weight (at::mkldnn_convolution)
  // reorders it on every call into a buffer from c10's allocator (ideep's allocator is c10's).
  const at::Tensor w = at::randn({256, 256, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor x = at::randn({1, 256, 8, 8}).contiguous(at::MemoryFormat::ChannelsLast);
  (void)at::mkldnn_convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, 1);
  counter.bytes = 0;
  counter.counting = true;
  (void)at::mkldnn_convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, 1);
  counter.counting = false;
  std::cout << "at::mkldnn_convolution with a plain weight: " << counter.bytes.load() << " bytes per call (weight "
            << w.nbytes() << ")\n";
  EXPECT_GE(counter.bytes.load(), w.nbytes()) << "the count no longer sees oneDNN's weight reorders";
}

// ViT-tiny (a zero head at init, as torchvision's: randomised here so the logits say something) on 2 threads:
// batches 1 and 2 run the packed weights (197 and 394 rows), 3 is past the 2 packed row counts and 6 past
// 1024 rows — at::addmm; each within 1e-5 of the model.
TEST(EngineImageBatch, VitLinearsOnPackedWeightsAndPastTheBoundMatchTheModel) {
  at::manual_seed(5);
  auto model = models::create_model("vit_tiny", {.num_classes = 7, .in_channels = 3});
  {
    const at::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      if (p.key().find("head") != std::string::npos) p.value().normal_(0.0, 0.5);
    }
  }
  model->eval();
  const Graph g = lower_image_model(*model, {.channels = 3, .image_size = 224});
  const Engine engine = Engine::from_graph(g, {.threads = 2});
  EXPECT_NE(engine.describe().find("linear: fp32 through MKL's packed sgemm"), std::string::npos) << engine.describe();
  for (const std::int64_t batch : {1, 2, 3, 6, 1}) {
    const at::Tensor x = at::randn({batch, 3, 224, 224});
    at::Tensor want;
    {
      const at::NoGradGuard no_grad;
      want = model->forward(x);
    }
    const at::Tensor got = engine.run({x}).front();
    ASSERT_EQ(got.sizes(), want.sizes());
    ASSERT_GT(want.abs().max().item<double>(), 0.1);
    const double rel = (got - want).norm().item<double>() / want.norm().item<double>();
    EXPECT_LT(rel, 1e-5) << "batch " << batch;
  }
}

}  // namespace
}  // namespace hotpath::infer
