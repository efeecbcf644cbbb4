// GradSync (distributed.h): DDP's bucketed all-reduce, overlapped with backward through
// post-accumulate-grad hooks. Gradients are views into the flat buckets, so AccumulateGrad adds into the
// bucket in place and the all-reduce needs no copy (PyTorch's gradient_as_bucket_view).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>

#include "bucket_plan.h"
#include "dist_impl.h"
#include "hotpath/core/error.h"

namespace hotpath::train {

struct GradSync::Bucket {
  at::Tensor flat;                    // the bucket's gradients, one after the other
  std::vector<std::size_t> params;    // indices into params_
  std::size_t pending = 0;            // gradients not yet accumulated this step
  c10::intrusive_ptr<c10d::Work> work;  // the in-flight all-reduce
};

namespace {

class ReadyHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  ReadyHook(GradSync* sync, std::size_t index) : sync_(sync), index_(index) {}
  void operator()(const torch::autograd::Variable& /*tensor*/) override { sync_->on_grad_ready(index_); }

 private:
  GradSync* sync_;
  std::size_t index_;
};

}  // namespace

std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<at::Tensor>& params,
                                                   std::int64_t first_bucket_bytes, std::int64_t bucket_bytes) {
  std::vector<std::vector<std::size_t>> out;
  std::vector<std::size_t> current;
  std::int64_t current_bytes = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    const bool other_dtype = !current.empty() && params[current[0]].scalar_type() != p.scalar_type();
    const std::int64_t cap = out.empty() ? first_bucket_bytes : bucket_bytes;
    const auto bytes = static_cast<std::int64_t>(p.nbytes());
    if (other_dtype || (!current.empty() && current_bytes + bytes > cap)) {
      out.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

GradSync::GradSync(DistContext& dist, const NamedParameters& params, const GradSyncOptions& options)
    : dist_(dist), options_(options) {
  HOTPATH_CHECK(!params.empty(), "GradSync: no parameters to synchronise");
  HOTPATH_CHECK(options.first_bucket_bytes > 0 && options.bucket_bytes > 0, "GradSync: bucket sizes must be > 0");
  // Reverse registration order: backward produces the last layers' gradients first.
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    HOTPATH_CHECK(it->second.device().is_cpu(), "GradSync: ", it->first, " is on ", it->second.device().str(),
                  "; the Gloo group synchronises CPU tensors");
    names_.push_back(it->first);
    params_.push_back(it->second);
  }
  bucket_of_.resize(params_.size());
  for (const std::vector<std::size_t>& members : plan_buckets(params_, options.first_bucket_bytes, options.bucket_bytes)) {
    auto b = std::make_unique<Bucket>();
    std::int64_t numel = 0;
    for (std::size_t i : members) numel += params_[i].numel();
    b->flat = at::zeros({numel}, params_[members[0]].options().requires_grad(false));
    std::int64_t offset = 0;
    for (std::size_t i : members) {
      at::Tensor& p = params_[i];
      at::Tensor view = b->flat.narrow(0, offset, p.numel()).view(p.sizes());
      if (p.grad().defined()) view.copy_(p.grad());
      p.mutable_grad() = view;
      offset += p.numel();
      bucket_of_[i] = buckets_.size();
    }
    b->params = members;
    b->pending = members.size();
    stats_.bucket_bytes_total += numel * static_cast<std::int64_t>(b->flat.element_size());
    buckets_.push_back(std::move(b));
  }
  stats_.buckets = static_cast<std::int64_t>(buckets_.size());
  if (options_.overlap) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<ReadyHook>(this, i));
    }
  }
}

GradSync::~GradSync() {
  for (auto& p : params_) {
    if (options_.overlap) torch::autograd::impl::post_acc_grad_hooks(p).reset();
  }
  for (auto& b : buckets_) {
    if (!b->work) continue;
    try {
      b->work->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): unwinding after a failed step; the error is reported
    }
  }
}

void GradSync::set_sync(bool sync) { sync_ = sync; }

void GradSync::on_grad_ready(std::size_t param_index) {
  if (!sync_) return;
  Bucket& b = *buckets_[bucket_of_[param_index]];
  if (b.pending > 0) --b.pending;
  // Launch in bucket order only: every rank issues the same sequence of collectives.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) {
    launch(next_launch_++);
    ++launched_from_hooks_;
  }
}

void GradSync::launch(std::size_t bucket) {
  Bucket& b = *buckets_[bucket];
  std::vector<at::Tensor> one{b.flat};
  try {
    b.work = dist_.impl().backend->allreduce(one);
  } catch (const std::exception& e) {
    dist_.fail("all-reduce of gradient bucket " + std::to_string(bucket), exception_line(e));
  }
}

double GradSync::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  // What the hooks did not launch: buckets with unused parameters (their zeros count), or every bucket
  // in the reference twin (overlap off).
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  const double world = static_cast<double>(dist_.world_size());
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = *buckets_[i];
    try {
      b.work->wait();
    } catch (const std::exception& e) {
      b.work.reset();
      dist_.fail("all-reduce of gradient bucket " + std::to_string(i), exception_line(e));
    }
    b.work.reset();
    b.flat.div_(world);  // Gloo has no AVG: SUM, then divide
    b.pending = b.params.size();
  }
  stats_.launched_in_backward =
      (stats_.launched_in_backward * static_cast<double>(stats_.steps) +
       static_cast<double>(launched_from_hooks_) / static_cast<double>(buckets_.size())) /
      static_cast<double>(stats_.steps + 1);
  ++stats_.steps;
  launched_from_hooks_ = 0;
  next_launch_ = 0;
  sync_ = true;
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.wait_s += waited;
  return waited;
}

void GradSync::zero_grad() {
  for (auto& b : buckets_) b->flat.zero_();
}

std::vector<std::vector<std::string>> GradSync::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (std::size_t i : b->params) out.back().push_back(names_[i]);
  }
  return out;
}

}  // namespace hotpath::train
