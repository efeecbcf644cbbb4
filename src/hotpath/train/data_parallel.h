// data_parallel.h (private to hotpath_train) — the training loop's one gradient-sync interface: how this
// process's gradients become an optimizer step, in a job of one rank or many. make_data_parallel picks the
// strategy once: one process (the optimizer alone), DDP (GradSync: bucketed all-reduce overlapping backward)
// or ZeRO-1/2 (ZeroSync: the optimizer state, and at stage 2 the gradients, sharded). The loop (trainer.cpp)
// calls the same hooks in the same order whichever it is, and never asks which.
//
//   auto parallel = make_data_parallel(dist.get(), model, trainable, options, resumed_optimizer_state);
//   for each micro-batch: parallel->set_sync(last); backward;
//   parallel->finish();  norm = parallel->clip_grad_norm(1.0);  parallel->before_step(scaler);
//   stepped = scaler.step(parallel->optimizer());  parallel->after_step(stepped);  parallel->zero_grad();
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "hotpath/train/checkpoint.h"
#include "hotpath/train/distributed.h"
#include "hotpath/train/optimizer.h"

namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace hotpath::train {

class GradScaler;

// One step's loss and samples on a rank, or summed over the ranks; a stop request on any rank stops all.
struct StepTotals {
  double loss = 0;  // the mean over the step's samples
  std::int64_t samples = 0;
  bool stop = false;
};

struct DataParallelOptions {
  OptimizerConfig optimizer;
  int zero_stage = 0;        // 1 | 2 with several ranks: ZeRO; 0: DDP (or one process)
  GradSyncOptions buckets;   // DDP's and ZeRO's bucket sizes and overlap
};

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  DataParallel() = default;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The optimizer the schedule and the loss scaler work on (ZeRO: over this rank's slice).
  [[nodiscard]] virtual torch::optim::Optimizer& optimizer() = 0;
  [[nodiscard]] virtual int world_size() const { return 1; }
  // The run's header: " on each of 2 ranks (gloo, 3 gradient buckets, ZeRO-2)"; "" for one process.
  [[nodiscard]] virtual std::string describe() const { return {}; }

  // Before each micro-batch's backward: whether it is the step's last (the one whose gradients are
  // synchronised; the others accumulate locally).
  virtual void set_sync(bool last_micro_batch) { (void)last_micro_batch; }
  // After the step's last backward: gradients synchronised. False when there was nothing to wait for.
  virtual bool finish() { return false; }
  // The global gradient norm, after clipping every gradient to max_norm (torch's clip_grad_norm_).
  virtual double clip_grad_norm(double max_norm) = 0;
  // Around the loss scaler's step: ZeRO agrees on its inf findings before and gathers the parameters after.
  virtual void before_step(GradScaler& scaler) { (void)scaler; }
  virtual void after_step(bool stepped) { (void)stepped; }
  virtual void zero_grad() = 0;
  // The step's totals over every rank.
  virtual StepTotals agree(const StepTotals& mine) { return mine; }

  // Checkpoints: whether this rank writes part of one (one process and DDP: rank 0 alone, every rank holds
  // the same state; ZeRO: every rank its optimizer shard), and the optimizer's part of the checkpoint at
  // `dir` (ZeRO: the shards written into it, then the manifest in `data` on rank 0).
  [[nodiscard]] virtual bool writes_checkpoint(bool is_main) const { return is_main; }
  virtual void save_optimizer(CheckpointData& data, const std::string& dir, std::int64_t step, bool is_main) = 0;
  // profile.json's "distributed" section (nothing for one process).
  virtual void add_profile(nlohmann::ordered_json& profile) { (void)profile; }
};

// The strategy for this job. With `dist`: rank 0's parameters and buffers are broadcast to every rank first,
// then DDP (options.zero_stage 0) or ZeRO. `optimizer_state` (a resumed checkpoint's whole per-parameter state,
// from any world size or stage) is loaded into the new optimizer.
std::unique_ptr<DataParallel> make_data_parallel(DistContext* dist, torch::nn::Module& model,
                                                 const NamedParameters& trainable, const DataParallelOptions& options,
                                                 const std::optional<TensorMap>& optimizer_state);

}  // namespace hotpath::train
