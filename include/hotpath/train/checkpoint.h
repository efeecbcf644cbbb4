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
//
// Sharded optimizer state (ZeRO, zero.h): instead of optimizer.safetensors, every rank writes its slice
// optimizer-shard-RRRRR-of-WWWWW.safetensors into DIR.tmp/ (begin_checkpoint, write_optimizer_shard:
// atomic files), then — after a barrier — rank 0 writes the rest and optimizer.json (the manifest: world
// size, flat layout, step) and renames DIR.tmp to DIR. load_checkpoint assembles the whole per-parameter
// state from the shards, so any world size and any train.zero resumes it (resharding).
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
  // Save: non-empty for sharded optimizer state — optimizer.json is written instead of optimizer.safetensors
  // (`optimizer` unused) and the shards must already be in DIR.tmp/. Load: the manifest read (the
  // assembled state is in `optimizer`), empty for an unsharded checkpoint.
  std::string optimizer_manifest;
};

// The flat layout of ZeRO's sharded optimizer state: the trainable parameters one after the other (flat
// order), rank r owning elements [r·shard_numel, (r+1)·shard_numel) ∩ [0, numel). The same on every rank.
struct ShardLayout {
  struct Param {
    std::string name;
    std::vector<std::int64_t> shape;
    std::int64_t offset = 0;  // in the flat space
    std::int64_t numel = 0;
  };
  // The part of one parameter a rank owns: elements [begin, begin + length) of the flattened parameter.
  struct Segment {
    std::size_t param = 0;
    std::int64_t begin = 0;
    std::int64_t length = 0;
  };
  std::vector<Param> params;
  std::int64_t numel = 0;
  std::int64_t shard_numel = 0;
  int world_size = 1;
  [[nodiscard]] std::vector<Segment> segments(int rank) const;
};
// `flat_order` in the order of the flat space; shard_numel = ceil(numel / world) rounded up to `align` elements.
ShardLayout make_shard_layout(const NamedParameters& flat_order, int world_size, std::int64_t align);
// "optimizer-shard-00001-of-00002.safetensors"
std::string optimizer_shard_file(int rank, int world_size);
// optimizer.json: {"format", "sharded": "zero", "zero", "world_size", "numel", "shard_numel", "step", "params",
// "files"}.
std::string optimizer_manifest_json(const ShardLayout& layout, int zero_stage, std::int64_t step);
// Empties and creates DIR.tmp/ (rank 0, before the ranks write their shards).
void begin_checkpoint(const std::string& dir);
// This rank's optimizer state over its segments ("<param>.<field>", 1-D slices; "<param>.step" whole),
// written atomically to DIR.tmp/optimizer_shard_file(rank, world).
void write_optimizer_shard(const std::string& dir, int rank, const ShardLayout& layout, const TensorMap& state);
// The whole per-parameter state (optimizer_state()'s keys and shapes) from a sharded checkpoint's manifest
// and shard files; throws naming the file and field when a shard is missing, mis-sized or incomplete.
TensorMap assemble_optimizer_shards(const std::string& dir, const std::string& manifest_json);

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
