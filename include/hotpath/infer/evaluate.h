// hotpath/infer/evaluate.h — classification metrics over a stream of logits: top-1, top-5, loss and the
// majority-class baseline, the same for image and text models.
//
//   infer::TopKMeter meter(num_classes);
//   for (const Batch& b : batches) meter.add(model(b.inputs), b.labels);
//   infer::EvalResult r = meter.result("eval");                  // r.top1, r.top5, r.loss, r.majority_top1
//   infer::EvalResult img = infer::evaluate(model, eval_loader);  // an image model over shards
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/data/loader.h"
#include "hotpath/models/classifier.h"

namespace hotpath::infer {

struct EvalResult {
  double top1 = 0;           // percent
  double top5 = 0;           // percent (top-k with k = min(5, classes))
  double loss = 0;           // mean cross-entropy (no label smoothing)
  double majority_top1 = 0;  // percent: always predicting the most frequent label of these samples
  std::int64_t samples = 0;
};

// Accumulates logits [N, C] and labels [N] (int64, any device) batch by batch. Counts stay on the host;
// one small device→host copy per batch.
class TopKMeter {
 public:
  explicit TopKMeter(std::int64_t num_classes);
  void add(const at::Tensor& logits, const at::Tensor& labels);
  // Throws naming `what` when no sample was added.
  [[nodiscard]] EvalResult result(const std::string& what) const;

 private:
  std::int64_t num_classes_;
  std::int64_t n_ = 0, correct1_ = 0, correct5_ = 0;
  double loss_sum_ = 0;
  std::vector<std::int64_t> label_counts_;
};

struct EvalOptions {
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (autocast)
  std::int64_t max_batches = 0;    // 0 = all
};
// Top-1/top-5/loss of an image model over one pass of `loader` (epoch 0). The model is put in eval mode
// and left so; batches go to the model's device.
EvalResult evaluate(models::ImageClassifier& model, data::Loader& loader, const EvalOptions& options = {});

}  // namespace hotpath::infer
