#include "hotpath/infer/evaluate.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <optional>

#include "hotpath/core/error.h"
#include "hotpath/ops/autocast_ops.h"

namespace hotpath::infer {

TopKMeter::TopKMeter(std::int64_t num_classes)
    : num_classes_(num_classes), label_counts_(static_cast<std::size_t>(std::max<std::int64_t>(num_classes, 1)), 0) {}

void TopKMeter::add(const at::Tensor& logits_in, const at::Tensor& labels) {
  const at::Tensor logits = logits_in.to(at::kFloat);
  const std::int64_t k = std::min<std::int64_t>(5, logits.size(1));
  const at::Tensor hit = std::get<1>(logits.topk(k, 1)).eq(labels.unsqueeze(1));
  const at::Tensor stats = at::stack({hit.select(1, 0).sum(), hit.any(1).sum()}).cpu();
  correct1_ += stats[0].item<std::int64_t>();
  correct5_ += stats[1].item<std::int64_t>();
  loss_sum_ += at::cross_entropy_loss(logits, labels, {}, at::Reduction::Sum).item<double>();
  const at::Tensor host_labels = labels.to(at::kCPU, at::kLong).contiguous();
  const auto* l = host_labels.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < host_labels.numel(); ++i) {
    if (l[i] >= 0 && l[i] < num_classes_) ++label_counts_[static_cast<std::size_t>(l[i])];
  }
  n_ += labels.size(0);
}

EvalResult TopKMeter::result(const std::string& what) const {
  HOTPATH_CHECK(n_ > 0, what, ": the eval data yielded no samples");
  const auto n = static_cast<double>(n_);
  EvalResult r;
  r.samples = n_;
  r.top1 = 100.0 * static_cast<double>(correct1_) / n;
  r.top5 = 100.0 * static_cast<double>(correct5_) / n;
  r.loss = loss_sum_ / n;
  r.majority_top1 = 100.0 * static_cast<double>(*std::max_element(label_counts_.begin(), label_counts_.end())) / n;
  return r;
}

EvalResult evaluate(models::ImageClassifier& model, data::Loader& loader, const EvalOptions& options) {
  model.eval();
  torch::NoGradGuard no_grad;
  const at::Device device = model.parameters().empty() ? at::Device(at::kCPU) : model.parameters().front().device();
  std::optional<at::ScalarType> dtype;
  if (options.precision == "bf16") dtype = at::kBFloat16;
  if (options.precision == "fp16") dtype = at::kHalf;
  std::optional<TopKMeter> meter;
  std::int64_t batches = 0;
  loader.seek({0, 0});
  while (auto batch = loader.next()) {
    const at::Tensor images = batch->images.to(device, /*non_blocking=*/true);
    const at::Tensor labels = batch->labels.to(device, /*non_blocking=*/true);
    at::Tensor logits;
    {
      ops::AutocastGuard autocast(device.type(), dtype);
      logits = model.forward(images);
    }
    if (!meter) meter.emplace(logits.size(1));
    meter->add(logits, labels);
    if (options.max_batches > 0 && ++batches >= options.max_batches) break;
  }
  HOTPATH_CHECK(meter.has_value(), "eval: the eval shards yielded no samples");
  return meter->result("eval");
}

}  // namespace hotpath::infer
