// The three data-parallel strategies behind data_parallel.h: one process, DDP, ZeRO.
#include "data_parallel.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <utility>
#include <vector>

#include "hotpath/train/grad_scaler.h"
#include "hotpath/train/zero.h"

namespace hotpath::train {
namespace {

using json = nlohmann::ordered_json;

std::vector<at::Tensor> tensors_of(const NamedParameters& params) {
  std::vector<at::Tensor> out;
  out.reserve(params.size());
  for (const auto& [name, p] : params) out.push_back(p);
  return out;
}

// One process: the optimizer over every trainable parameter.
class SingleProcess final : public DataParallel {
 public:
  SingleProcess(const NamedParameters& trainable, const OptimizerConfig& config,
                const std::optional<TensorMap>& state)
      : trainable_(trainable), tensors_(tensors_of(trainable)), optimizer_(make_optimizer(config, trainable)) {
    if (state) load_optimizer_state(*optimizer_, trainable_, *state);
  }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  double clip_grad_norm(double max_norm) override { return train::clip_grad_norm(tensors_, max_norm); }
  void zero_grad() override { optimizer_->zero_grad(/*set_to_none=*/true); }
  void save_optimizer(CheckpointData& data, const std::string& dir, std::int64_t step, bool is_main) override {
    (void)dir, (void)step, (void)is_main;
    data.optimizer = optimizer_state(*optimizer_, trainable_);
  }
  [[nodiscard]] std::int64_t state_bytes() {
    std::int64_t bytes = 0;
    for (const auto& [key, t] : optimizer_state(*optimizer_, trainable_)) bytes += static_cast<std::int64_t>(t.nbytes());
    return bytes;
  }

 private:
  NamedParameters trainable_;
  std::vector<at::Tensor> tensors_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// What every multi-rank strategy shares: the process group, the step's totals over the ranks.
StepTotals sum_over_ranks(DistContext& dist, const StepTotals& mine) {
  const auto n = static_cast<double>(mine.samples);
  at::Tensor v = at::tensor({mine.loss * n, n, mine.stop ? 1.0 : 0.0}, at::kDouble);
  dist.all_reduce_sum(v, "the step's loss");
  return {.loss = v[0].item<double>() / v[1].item<double>(),
          .samples = static_cast<std::int64_t>(v[1].item<double>()),
          .stop = v[2].item<double>() > 0};
}

std::string ranks_phrase(DistContext& dist, std::int64_t buckets) {
  return " on each of " + std::to_string(dist.world_size()) + " ranks (" + dist.backend_name() + ", " +
         std::to_string(buckets) + " gradient buckets";
}

// DDP: every rank steps its whole optimizer on gradients all-reduced in buckets while backward runs.
class Ddp final : public DataParallel {
 public:
  Ddp(DistContext& dist, const NamedParameters& trainable, const DataParallelOptions& options,
      const std::optional<TensorMap>& state)
      : dist_(dist), local_(trainable, options.optimizer, state), grad_sync_(dist, trainable, options.buckets) {}
  torch::optim::Optimizer& optimizer() override { return local_.optimizer(); }
  int world_size() const override { return dist_.world_size(); }
  std::string describe() const override { return ranks_phrase(dist_, grad_sync_.stats().buckets) + ")"; }
  void set_sync(bool last_micro_batch) override { grad_sync_.set_sync(last_micro_batch); }
  bool finish() override {
    (void)grad_sync_.finish();
    return true;
  }
  double clip_grad_norm(double max_norm) override { return local_.clip_grad_norm(max_norm); }
  void zero_grad() override { grad_sync_.zero_grad(); }  // the gradients stay views into the buckets
  StepTotals agree(const StepTotals& mine) override { return sum_over_ranks(dist_, mine); }
  void save_optimizer(CheckpointData& data, const std::string& dir, std::int64_t step, bool is_main) override {
    local_.save_optimizer(data, dir, step, is_main);
  }
  void add_profile(json& profile) override {
    const GradSyncStats& gs = grad_sync_.stats();
    profile["distributed"] = {{"world_size", dist_.world_size()},
                              {"buckets", gs.buckets},
                              {"allreduce_bytes_per_step", gs.bucket_bytes_total},
                              {"buckets_launched_in_backward", gs.launched_in_backward},
                              {"allreduce_wait_s", gs.wait_s},
                              {"optimizer_state_bytes", local_.state_bytes()}};  // every rank holds all of it
  }

 private:
  DistContext& dist_;
  SingleProcess local_;  // the optimizer, the clipping and the checkpoint state are one process's
  GradSync grad_sync_;
};

// ZeRO-1/2: each rank steps the optimizer over its slice of the parameters, then the slices are gathered.
class Zero final : public DataParallel {
 public:
  Zero(DistContext& dist, const NamedParameters& trainable, const DataParallelOptions& options,
       const std::optional<TensorMap>& state)
      : dist_(dist),
        zero_(dist, trainable, options.optimizer, ZeroOptions{.stage = options.zero_stage, .buckets = options.buckets}) {
    if (state) zero_.load_state(*state);
  }
  torch::optim::Optimizer& optimizer() override { return zero_.optimizer(); }
  int world_size() const override { return dist_.world_size(); }
  std::string describe() const override {
    return ranks_phrase(dist_, zero_.stats().buckets) + ", ZeRO-" + std::to_string(zero_.stage()) + ")";
  }
  void set_sync(bool last_micro_batch) override { zero_.set_sync(last_micro_batch); }
  bool finish() override {
    (void)zero_.finish();
    return true;
  }
  // The global norm of the slices (an all-reduce of their squared norms).
  double clip_grad_norm(double max_norm) override { return zero_.clip_grad_norm(max_norm); }
  void before_step(GradScaler& scaler) override {
    if (scaler.is_enabled()) zero_.agree_on_inf(scaler);  // each rank saw only its slice
  }
  void after_step(bool stepped) override {
    if (stepped) zero_.refresh_parameters();  // every rank's slice all-gathered into the model
  }
  void zero_grad() override { zero_.zero_grad(); }
  StepTotals agree(const StepTotals& mine) override { return sum_over_ranks(dist_, mine); }
  bool writes_checkpoint(bool is_main) const override {
    (void)is_main;
    return true;
  }
  // Each rank its optimizer shard into DIR.tmp/, then rank 0 the rest and the manifest.
  void save_optimizer(CheckpointData& data, const std::string& dir, std::int64_t step, bool is_main) override {
    if (is_main) begin_checkpoint(dir);
    dist_.barrier("checkpoint " + dir + ": the directory for the optimizer shards");
    write_optimizer_shard(dir, dist_.rank(), zero_.layout(), zero_.shard_state());
    dist_.barrier("checkpoint " + dir + ": every rank's optimizer shard written");
    if (is_main) data.optimizer_manifest = optimizer_manifest_json(zero_.layout(), zero_.stage(), step);
  }
  void add_profile(json& profile) override {
    const ZeroStats zs = zero_.stats();
    profile["distributed"] = {{"world_size", dist_.world_size()},
                              {"zero", zs.stage},
                              {"buckets", zs.buckets},
                              {"flat_numel", zs.flat_numel},
                              {"shard_numel", zs.shard_numel},
                              {"allreduce_bytes_per_step", zs.reduce_bytes},
                              {"allgather_bytes_per_step", zs.allgather_bytes},
                              {"optimizer_state_bytes", zs.optimizer_state_bytes},
                              {"gradient_bytes_kept", zs.gradient_bytes_kept},
                              {"buckets_launched_in_backward", zs.launched_in_backward},
                              {"allreduce_wait_s", zs.wait_s}};
  }

 private:
  DistContext& dist_;
  ZeroSync zero_;
};

// Every rank starts from rank 0's parameters and buffers.
void broadcast_from_rank0(DistContext& dist, torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (const auto& t : model.parameters()) tensors.push_back(t);
  for (const auto& t : model.buffers()) tensors.push_back(t);
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t.contiguous()};
    dist.broadcast(one, 0, "the initial broadcast of the model from rank 0");
    if (!one[0].is_same(t)) t.copy_(one[0]);
  }
}

}  // namespace

std::unique_ptr<DataParallel> make_data_parallel(DistContext* dist, torch::nn::Module& model,
                                                 const NamedParameters& trainable, const DataParallelOptions& options,
                                                 const std::optional<TensorMap>& optimizer_state) {
  if (dist == nullptr) return std::make_unique<SingleProcess>(trainable, options.optimizer, optimizer_state);
  broadcast_from_rank0(*dist, model);
  if (options.zero_stage == 0) return std::make_unique<Ddp>(*dist, trainable, options, optimizer_state);
  return std::make_unique<Zero>(*dist, trainable, options, optimizer_state);
}

}  // namespace hotpath::train
