// ZeroSync (zero.h): ZeRO-1/2 over flat buffers. Stage 1 reduces gradients with GradSync (DDP's buckets);
// stage 2's Reducer copies each parameter's gradient into its bucket from a post-accumulate-grad hook, frees
// the .grad, reduces full buckets while backward goes on and keeps only this rank's slice.
#include "hotpath/train/zero.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "bucket_plan.h"
#include "dist_impl.h"
#include "hotpath/core/error.h"
#include "hotpath/train/grad_scaler.h"

namespace hotpath::train {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---- stage 2: gradients reduced bucket by bucket, this rank's slice kept ------------------------------

class ZeroSync::Reducer {
 public:
  // whole_norms: each parameter's norm of its whole averaged gradient, taken before the bucket is freed.
  Reducer(DistContext& dist, const std::vector<at::Tensor>& params, const ShardLayout& layout, at::Tensor grad_shard,
          const GradSyncOptions& options, bool whole_norms)
      : dist_(dist), params_(params), grad_shard_(std::move(grad_shard)), overlap_(options.overlap),
        whole_norms_(whole_norms) {
    shard_begin_ = static_cast<std::int64_t>(dist.rank()) * layout.shard_numel;
    bucket_of_.resize(params_.size());
    offset_in_bucket_.resize(params_.size());
    taken_.assign(params_.size(), false);
    norms_.resize(params_.size());
    for (const auto& members : plan_buckets(params_, options.first_bucket_bytes, options.bucket_bytes)) {
      Bucket b;
      b.params = members;
      b.begin = layout.params[members.front()].offset;
      for (std::size_t i : members) {
        bucket_of_[i] = buckets_.size();
        offset_in_bucket_[i] = b.numel;
        b.numel += params_[i].numel();
      }
      b.pending = members.size();
      buckets_.push_back(std::move(b));
    }
    if (overlap_) {
      for (std::size_t i = 0; i < params_.size(); ++i) {
        torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<Hook>(this, i));
      }
    }
  }
  ~Reducer() {
    for (auto& p : params_) {
      if (overlap_) torch::autograd::impl::post_acc_grad_hooks(p).reset();
    }
    for (auto& b : buckets_) {
      if (!b.work) continue;
      try {
        b.work->wait();
      } catch (...) {  // NOLINT(bugprone-empty-catch): unwinding after a failed step; the error is reported
      }
    }
  }
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void set_sync(bool sync) { sync_ = sync; }

  void on_grad_ready(std::size_t i) {
    if (!sync_) return;  // no-sync: the gradient accumulates in .grad until the last micro-batch
    take(i);
    Bucket& b = buckets_[bucket_of_[i]];
    if (b.pending > 0) --b.pending;
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      launch(next_launch_++);
      ++launched_from_hooks_;
    }
    // Buckets whose reduction already completed give up their memory now, not at the end of backward.
    while (next_collect_ < next_launch_ && buckets_[next_collect_].work->isCompleted()) collect(next_collect_++);
  }

  double finish() {
    const auto t0 = std::chrono::steady_clock::now();
    while (next_launch_ < buckets_.size()) {  // unused parameters (zeros), or everything without overlap
      for (std::size_t i : buckets_[next_launch_].params) {
        if (!taken_[i]) take(i);
      }
      launch(next_launch_++);
    }
    while (next_collect_ < buckets_.size()) collect(next_collect_++);
    next_collect_ = 0;
    std::fill(taken_.begin(), taken_.end(), false);
    launched_in_backward_ = (launched_in_backward_ * static_cast<double>(steps_) +
                             static_cast<double>(launched_from_hooks_) / static_cast<double>(buckets_.size())) /
                            static_cast<double>(steps_ + 1);
    ++steps_;
    launched_from_hooks_ = 0;
    next_launch_ = 0;
    sync_ = true;
    const double waited = since(t0);
    wait_s_ += waited;
    return waited;
  }

  // Parameter i's (flat order) whole-gradient norm of the last finish() (whole_norms only).
  [[nodiscard]] const std::vector<at::Tensor>& norms() const { return norms_; }
  [[nodiscard]] std::int64_t buckets() const { return static_cast<std::int64_t>(buckets_.size()); }
  [[nodiscard]] double wait_s() const { return wait_s_; }
  [[nodiscard]] double launched_in_backward() const { return launched_in_backward_; }
  [[nodiscard]] std::int64_t steps() const { return steps_; }

 private:
  class Hook final : public torch::autograd::PostAccumulateGradHook {
   public:
    Hook(Reducer* reducer, std::size_t index) : reducer_(reducer), index_(index) {}
    void operator()(const torch::autograd::Variable& /*tensor*/) override { reducer_->on_grad_ready(index_); }

   private:
    Reducer* reducer_;
    std::size_t index_;
  };
  struct Bucket {
    std::vector<std::size_t> params;
    std::int64_t begin = 0;  // in the flat space
    std::int64_t numel = 0;
    at::Tensor flat;         // allocated by the bucket's first gradient, freed once reduced
    std::size_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };

  // Moves parameter i's gradient into its bucket and frees the .grad (none: the bucket's zeros stand).
  void take(std::size_t i) {
    Bucket& b = buckets_[bucket_of_[i]];
    at::Tensor& p = params_[i];
    if (!b.flat.defined()) b.flat = at::zeros({b.numel}, p.options().requires_grad(false));
    if (const at::Tensor& g = p.grad(); g.defined()) {
      b.flat.narrow(0, offset_in_bucket_[i], p.numel()).view(p.sizes()).copy_(g);
      p.mutable_grad() = at::Tensor();
    }
    taken_[i] = true;
  }

  // Waits for bucket k's reduction, keeps this rank's slice of it (averaged: Gloo has no AVG) and frees it.
  void collect(std::size_t k) {
    Bucket& b = buckets_[k];
    try {
      b.work->wait();
    } catch (const std::exception& e) {
      b.work.reset();
      dist_.fail("reduction of gradient bucket " + std::to_string(k), exception_line(e));
    }
    b.work.reset();
    const double world = static_cast<double>(dist_.world_size());
    const std::int64_t shard_end = shard_begin_ + grad_shard_.numel();
    const std::int64_t lo = std::max(shard_begin_, b.begin), hi = std::min(shard_end, b.begin + b.numel);
    if (whole_norms_) {  // the whole bucket averaged (as DDP does), each parameter's norm, then the slice
      b.flat.div_(world);
      std::vector<at::Tensor> views;
      for (std::size_t i : b.params) {
        views.push_back(b.flat.narrow(0, offset_in_bucket_[i], params_[i].numel()).view(params_[i].sizes()));
      }
      const std::vector<at::Tensor> n = at::_foreach_norm(views, 2.0);
      for (std::size_t j = 0; j < b.params.size(); ++j) norms_[b.params[j]] = n[j];
      if (lo < hi) grad_shard_.narrow(0, lo - shard_begin_, hi - lo).copy_(b.flat.narrow(0, lo - b.begin, hi - lo));
    } else if (lo < hi) {
      grad_shard_.narrow(0, lo - shard_begin_, hi - lo).copy_(b.flat.narrow(0, lo - b.begin, hi - lo)).div_(world);
    }
    b.flat = at::Tensor();
    b.pending = b.params.size();
  }

  void launch(std::size_t k) {
    std::vector<at::Tensor> one{buckets_[k].flat};
    try {
      // Gloo: an all-reduce of the whole bucket (its reduce-scatter needs equal chunks of one tensor); with
      // NCCL, a reduce of each owner's part to its owner moves (world - 1)/world less.
      buckets_[k].work = dist_.impl().backend->allreduce(one);
    } catch (const std::exception& e) {
      dist_.fail("reduction of gradient bucket " + std::to_string(k), exception_line(e));
    }
  }

  DistContext& dist_;
  std::vector<at::Tensor> params_;
  at::Tensor grad_shard_;
  bool overlap_;
  bool whole_norms_;
  std::vector<at::Tensor> norms_;
  std::int64_t shard_begin_ = 0;
  std::vector<std::size_t> bucket_of_;
  std::vector<std::int64_t> offset_in_bucket_;
  std::vector<bool> taken_;
  std::vector<Bucket> buckets_;
  std::size_t next_launch_ = 0;
  std::size_t next_collect_ = 0;  // buckets before it are reduced and freed this step
  bool sync_ = true;
  std::int64_t launched_from_hooks_ = 0;
  double launched_in_backward_ = 0;
  double wait_s_ = 0;
  std::int64_t steps_ = 0;
};

// ---- ZeroSync ------------------------------------------------------------------------------------

ZeroSync::ZeroSync(DistContext& dist, const NamedParameters& trainable, const OptimizerConfig& config,
                   const ZeroOptions& options)
    : dist_(dist), options_(options) {
  HOTPATH_CHECK(options.stage == 1 || options.stage == 2, "train.zero: expected 0, 1 or 2, got ", options.stage);
  HOTPATH_CHECK(!trainable.empty(), "ZeRO: no trainable parameters to shard");
  const NamedParameters flat_order(trainable.rbegin(), trainable.rend());  // the order backward produces
  const at::Tensor& first = flat_order.front().second;
  for (const auto& [name, p] : flat_order) {
    HOTPATH_CHECK(p.scalar_type() == first.scalar_type() && p.device() == first.device() && p.is_floating_point(),
                  "ZeRO: ", name, " is ", p.scalar_type(), " on ", p.device().str(), ", but ", flat_order.front().first,
                  " is ", first.scalar_type(), " on ", first.device().str(),
                  "; the flat buffer needs one floating-point dtype on one device");
    params_.push_back(p);
  }
  const int world = dist.world_size(), rank = dist.rank();
  const std::int64_t align = std::max<std::int64_t>(1, options.align_bytes / static_cast<std::int64_t>(first.element_size()));
  layout_ = make_shard_layout(flat_order, world, align);
  const std::int64_t s = layout_.shard_numel;
  // The parameters become views into the flat buffer (on their device): the optimizer's in-place update of
  // this rank's slice and the all-gather of the others' write straight into the model.
  // at::empty: each page is touched when its parameter is copied in, right before the parameter's old
  // storage is freed, so building the buffer does not hold the model twice. The padding is zeroed.
  flat_ = at::empty({world * s}, first.options().requires_grad(false));
  flat_.narrow(0, layout_.numel, world * s - layout_.numel).zero_();
  {
    c10::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      at::Tensor view = flat_.narrow(0, layout_.params[i].offset, params_[i].numel()).view(params_[i].sizes());
      view.copy_(params_[i]);
      params_[i].set_data(view);
    }
  }
  segments_ = layout_.segments(rank);
  HOTPATH_CHECK(!segments_.empty(), "train.zero: rank ", rank, " owns no parameters (", layout_.numel,
                " trainable elements over ", world, " ranks in slices of ", s, "); use fewer ranks or train.zero 0");
  if (options.stage == 1) {
    grad_sync_ = std::make_unique<GradSync>(dist, trainable, options.buckets);  // .grad: views into its buckets
  } else {
    grad_shard_ = at::zeros({s}, first.options().requires_grad(false));
    reducer_ = std::make_unique<Reducer>(dist, params_, layout_, grad_shard_, options.buckets,
                                         options.norm == ZeroNorm::kWhole);
  }
  for (const auto& seg : segments_) {
    const ShardLayout::Param& p = layout_.params[seg.param];
    at::Tensor part = flat_.narrow(0, p.offset + seg.begin, seg.length);
    part.mutable_grad() = options.stage == 1
                              ? params_[seg.param].grad().view(-1).narrow(0, seg.begin, seg.length)
                              : grad_shard_.narrow(0, p.offset + seg.begin - static_cast<std::int64_t>(rank) * s, seg.length);
    segment_params_.emplace_back(p.name, part);
  }
  // Weight-decay groups decided on the whole parameters (a bias's slice is 1-D like a weight's).
  optimizer_ = make_optimizer(config, segment_params_, split_weight_decay(config, trainable));
}

ZeroSync::~ZeroSync() = default;

void ZeroSync::set_sync(bool sync) {
  if (grad_sync_) grad_sync_->set_sync(sync);
  if (reducer_) reducer_->set_sync(sync);
}

double ZeroSync::finish() { return grad_sync_ ? grad_sync_->finish() : reducer_->finish(); }

double ZeroSync::clip_grad_norm(double max_norm) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& [name, part] : segment_params_) grads.push_back(part.grad());
  at::Tensor total;
  if (options_.norm == ZeroNorm::kWhole) {
    // torch's clip_grad_norm_ (optimizer.h): the parameters' norms in registration order (the reverse of the
    // flat order), their norm, in the gradients' dtype.
    std::vector<at::Tensor> norms;
    if (grad_sync_) {
      std::vector<at::Tensor> whole;
      for (auto it = params_.rbegin(); it != params_.rend(); ++it) whole.push_back(it->grad());
      norms = at::_foreach_norm(whole, 2.0);
    } else {
      norms.assign(reducer_->norms().rbegin(), reducer_->norms().rend());
    }
    total = at::linalg_vector_norm(at::stack(norms), 2.0);
  } else {
    at::Tensor sq = at::stack(at::_foreach_norm(grads, 2.0)).to(at::kDouble).pow(2).sum().reshape({1});
    dist_.all_reduce_sum(sq, "the gradient norm (sum of the ranks' squared slice norms)");
    total = sq.sqrt().reshape({}).to(grads.front().scalar_type());  // 0-dim: _foreach_mul_ takes a scalar tensor
  }
  const at::Tensor coef = at::clamp((total + 1e-6).reciprocal() * max_norm, std::nullopt, 1.0);
  at::_foreach_mul_(grads, coef);
  return total.item<double>();
}

void ZeroSync::agree_on_inf(GradScaler& scaler) {
  scaler.agree_on_inf(*optimizer_, [&](at::Tensor& found) { dist_.all_reduce_sum(found, "the loss scaler's inf check"); });
}

void ZeroSync::refresh_parameters() {
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t s = layout_.shard_numel;
  // The all-gather as one broadcast per rank of its slice, straight into the flat buffer: Gloo's allgather
  // gathers into a new buffer as large as the model (plus a copy of the input) and copies out, which costs
  // ZeRO's memory saving back at every step; its broadcast writes into the given tensor. Each rank receives
  // the same (world - 1) slices either way. (NCCL: _allgather_base into the flat buffer.)
  for (int r = 0; r < dist_.world_size(); ++r) {
    std::vector<at::Tensor> one{flat_.narrow(0, r * s, s)};
    c10d::BroadcastOptions from;
    from.rootRank = r;
    try {
      auto work = dist_.impl().backend->broadcast(one, from);
      work->wait();
    } catch (const std::exception& e) {
      dist_.fail("all-gather of the parameter slices (rank " + std::to_string(r) + "'s)", exception_line(e));
    }
  }
  gather_wait_s_ += since(t0);
}

void ZeroSync::zero_grad() {
  if (grad_sync_) grad_sync_->zero_grad();
  if (grad_shard_.defined()) grad_shard_.zero_();
}

ZeroStats ZeroSync::stats() const {
  ZeroStats st;
  const auto elt = static_cast<std::int64_t>(flat_.element_size());
  st.stage = options_.stage;
  st.flat_numel = layout_.numel;
  st.shard_numel = layout_.shard_numel;
  st.reduce_bytes = layout_.numel * elt;
  st.allgather_bytes = static_cast<std::int64_t>(dist_.world_size()) * layout_.shard_numel * elt;
  st.gradient_bytes_kept = grad_sync_ ? layout_.numel * elt : layout_.shard_numel * elt;
  for (const auto& [key, t] : optimizer_state(*optimizer_, segment_params_)) {
    st.optimizer_state_bytes += static_cast<std::int64_t>(t.nbytes());
  }
  if (grad_sync_) {
    const GradSyncStats& g = grad_sync_->stats();
    st.buckets = g.buckets;
    st.wait_s = g.wait_s;
    st.launched_in_backward = g.launched_in_backward;
    st.steps = g.steps;
  } else {
    st.buckets = reducer_->buckets();
    st.wait_s = reducer_->wait_s();
    st.launched_in_backward = reducer_->launched_in_backward();
    st.steps = reducer_->steps();
  }
  st.wait_s += gather_wait_s_;
  return st;
}

TensorMap ZeroSync::shard_state() { return optimizer_state(*optimizer_, segment_params_); }

void ZeroSync::load_state(const TensorMap& whole) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < layout_.params.size(); ++i) index[layout_.params[i].name] = i;
  std::map<std::size_t, const ShardLayout::Segment*> mine;
  for (const auto& seg : segments_) mine[seg.param] = &seg;
  TensorMap part;
  for (const auto& [key, t] : whole) {
    const auto dot = key.rfind('.');
    const auto it = dot == std::string::npos ? index.end() : index.find(key.substr(0, dot));
    HOTPATH_CHECK(it != index.end(), "optimizer state: ", printable(key),
                  ": not state of a trainable parameter of this model (the model changed since the checkpoint?)");
    const ShardLayout::Param& p = layout_.params[it->second];
    const std::string field = key.substr(dot + 1);
    HOTPATH_CHECK(field == "step" || t.numel() == p.numel, "optimizer state: ", key, ": ", t.numel(),
                  " elements, the parameter has ", p.numel);
    const auto seg = mine.find(it->second);
    if (seg == mine.end()) continue;  // another rank's
    part[key] = field == "step" ? t : t.reshape({-1}).narrow(0, seg->second->begin, seg->second->length);
  }
  load_optimizer_state(*optimizer_, segment_params_, part);
}

}  // namespace hotpath::train
