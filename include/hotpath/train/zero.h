// hotpath/train/zero.h — ZeRO-1 and ZeRO-2 data parallelism (recipe key train.zero: 1 | 2): the optimizer
// state, and with stage 2 the reduced gradients, sharded across the ranks of a DistContext.
//
//   ZeroSync zero(dist, trainable, optimizer_config, {.stage = 2});   // after rank 0's weights are broadcast
//   /* backward */  zero.finish();  zero.clip_grad_norm(1.0);  zero.optimizer().step();
//   zero.refresh_parameters();  zero.zero_grad();
//
// The trainable parameters become views into one flat buffer on their device (flat order: reverse
// registration, as GradSync's buckets). Rank r owns the contiguous slice [r·S, (r+1)·S) of it (S = numel /
// world rounded up to 64 bytes) and its optimizer is a torch optimizer over the parts of the parameters in
// that slice, so it keeps Adam/AdamW moments or SGD momentum for 1/world of the model. After the step each
// rank's slice is all-gathered into every rank's flat buffer, i.e. straight into the parameters (on Gloo as
// one broadcast per rank: its allgather would allocate a model-sized buffer every step).
//   Stage 1: gradients all-reduced as DDP does (GradSync: buckets, overlap with backward, no-sync).
//   Stage 2: each bucket's gradients are copied out of the parameters' .grad (which is then freed) as backward
//   produces them and the bucket reduced; a rank keeps only its slice and frees the bucket once reduced. Gloo
//   has no reduce-scatter for uneven slices: the bucket is all-reduced and the rest dropped (NCCL would
//   reduce to the owners).
// Gradient clipping uses the global norm, DDP's bit for bit (ZeroNorm); the fp16 loss scaler's
// inf check is agreed over ranks (GradScaler::agree_on_inf). Checkpoints: each rank writes its slice
// (shard_state, checkpoint.h's write_optimizer_shard), load_state takes the whole per-parameter state.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/train/checkpoint.h"
#include "hotpath/train/distributed.h"
#include "hotpath/train/optimizer.h"

namespace torch::optim {
class Optimizer;
}

namespace hotpath::train {

class GradScaler;

// How clip_grad_norm gets the global norm. kWhole: from each parameter's whole averaged gradient — ZeRO-1
// has them, ZeRO-2 takes each parameter's norm while the whole reduced bucket is at hand (Gloo all-reduces
// it anyway) — then torch's norm of the norms: DDP's clip_grad_norm bit for bit. kSlices: each rank's
// squared slice norm summed over ranks (one more all-reduce): what a real reduce-scatter (NCCL) leaves,
// equal to DDP's within float rounding.
enum class ZeroNorm { kWhole, kSlices };

struct ZeroOptions {
  int stage = 1;                       // 1: optimizer state sharded; 2: gradients too
  GradSyncOptions buckets;             // bucket sizes and overlap, as DDP's
  std::int64_t align_bytes = 64;       // slice boundaries are multiples of this
  ZeroNorm norm = ZeroNorm::kWhole;
};

// Per rank, per synchronised step; bytes are what this rank hands to (and gets from) the collectives.
struct ZeroStats {
  int stage = 0;
  std::int64_t buckets = 0;
  std::int64_t reduce_bytes = 0;            // gradient bytes reduced per step (the whole gradient: Gloo all-reduces)
  std::int64_t allgather_bytes = 0;         // parameter bytes all-gathered per step (world × slice)
  std::int64_t optimizer_state_bytes = 0;   // this rank's optimizer state after the first step
  std::int64_t gradient_bytes_kept = 0;     // gradient bytes held between the reduction and the step
  std::int64_t flat_numel = 0, shard_numel = 0;
  double wait_s = 0;                        // blocked in finish() and refresh_parameters()
  double launched_in_backward = 0;          // fraction of buckets launched from backward's hooks
  std::int64_t steps = 0;
};

class ZeroSync {
 public:
  ZeroSync(DistContext& dist, const NamedParameters& trainable, const OptimizerConfig& config,
           const ZeroOptions& options);
  ~ZeroSync();
  ZeroSync(const ZeroSync&) = delete;
  ZeroSync& operator=(const ZeroSync&) = delete;

  // The optimizer over this rank's slice (set_lr, the schedule and the loss scaler work on it as on any).
  [[nodiscard]] torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // false for accumulation micro-batches (no-sync: gradients accumulate in each .grad); true for the last.
  void set_sync(bool sync);
  // After the last backward of a step: gradients reduced and averaged, this rank's slice ready. Seconds waited.
  double finish();
  // The global L2 norm of the gradients (ZeroOptions::norm says how), then this rank's slice scaled by
  // min(1, max_norm / (norm + 1e-6)). Returns the norm (inf/NaN when a gradient is); the same on every rank.
  double clip_grad_norm(double max_norm);
  // fp16: the loss scaler's inf/NaN findings on this rank's slice summed over ranks (before scaler.step).
  void agree_on_inf(GradScaler& scaler);
  // After the optimizer stepped: every rank's slice all-gathered into the parameters.
  void refresh_parameters();
  void zero_grad();

  [[nodiscard]] const ShardLayout& layout() const { return layout_; }
  [[nodiscard]] int stage() const { return options_.stage; }
  [[nodiscard]] ZeroStats stats() const;
  // This rank's optimizer state, keyed "<param>.<field>" over its parts of the parameters (1-D).
  [[nodiscard]] TensorMap shard_state();
  // Restores this rank's part of a whole per-parameter state (optimizer_state()'s format; from any world
  // size or stage: load_checkpoint assembles sharded checkpoints). Throws naming the key on a mismatch.
  void load_state(const TensorMap& whole);

  class Reducer;  // stage 2's gradient reduction (zero.cpp)

 private:
  DistContext& dist_;
  ZeroOptions options_;
  ShardLayout layout_;
  std::vector<at::Tensor> params_;       // flat order
  at::Tensor flat_;                      // world × shard_numel elements; the parameters are views into it
  std::vector<ShardLayout::Segment> segments_;
  NamedParameters segment_params_;       // views into this rank's slice of flat_, named after their parameters
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<GradSync> grad_sync_;  // stage 1
  std::unique_ptr<Reducer> reducer_;     // stage 2
  at::Tensor grad_shard_;                // stage 2: this rank's reduced gradients (shard_numel)
  double gather_wait_s_ = 0;
};

}  // namespace hotpath::train
