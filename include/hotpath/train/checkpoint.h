// hotpath/train/checkpoint.h — training checkpoints: one directory per checkpoint, written atomically.
//
//   save_checkpoint("run/checkpoints/step-00000500", data);      // DIR.tmp/ → fsync → rename → DIR
//   if (auto dir = latest_checkpoint("run/checkpoints")) { CheckpointData d = load_checkpoint(*dir); }
//   prune_checkpoints("run/checkpoints", /*keep_last=*/2);
//
// A checkpoint directory holds model.safetensors (parameters + buffers by dotted name),
// optimizer.safetensors ("<param>.momentum_buffer", "<param>.exp_avg", ...), ema.safetensors (when
// EMA is on), rng.safetensors (generator states) and trainer.json (step, loader position, scaler,
// best metric: whatever the trainer puts there). A directory is complete once its name has no
// ".tmp" suffix, so a run killed mid-save leaves the previous checkpoint as the latest.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace hotpath::train {

using TensorMap = std::map<std::string, at::Tensor>;
using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

struct CheckpointData {
  TensorMap model;
  TensorMap optimizer;
  TensorMap ema;  // empty: no ema.safetensors
  TensorMap rng;
  std::string trainer_json;
};

// "step-00000500" for step 500; the names sort in step order.
std::string checkpoint_name(std::int64_t step);
void save_checkpoint(const std::string& dir, const CheckpointData& data);
// Throws hotpath::Error naming the file when a part is missing or unreadable.
CheckpointData load_checkpoint(const std::string& dir);
// Complete checkpoints under `root`, oldest first.
std::vector<std::string> list_checkpoints(const std::string& root);
std::optional<std::string> latest_checkpoint(const std::string& root);
// Removes all but the newest `keep_last` complete checkpoints, and leftover *.tmp directories.
void prune_checkpoints(const std::string& root, std::int64_t keep_last);

// The optimizer's per-parameter state (SGD momentum buffers; AdamW step, exp_avg, exp_avg_sq) keyed
// "<param name>.<field>"; parameters without state yet are absent.
TensorMap optimizer_state(torch::optim::Optimizer& optimizer, const NamedParameters& params);
// Restores what optimizer_state() produced into an optimizer built for the same parameters.
// Throws naming the key when a tensor is missing or has the wrong shape.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParameters& params,
                          const TensorMap& state);

}  // namespace hotpath::train
