// hotpath/train/distributed.h — data-parallel training on torch.distributed (c10d): who this process is
// (torchrun's or Slurm's environment), the store and process group (Gloo on CPU), and GradSync, the
// DDP gradient synchroniser the one training loop (trainer.cpp) runs between backward and the step.
//
//   const DistEnv env = dist_env_from_environment();          // torchrun --nproc-per-node 2 --no-python hotpath ...
//   auto dist = DistContext::connect(env, dist_timeout(), {{"train.batch_size", "32"}});  // typed values: no recipe
//   GradSync sync(*dist, trainable);  /* backward */  sync.finish();  optimizer.step();  sync.zero_grad();
//
// Start-up: the store is torchrun's (TORCHELASTIC_USE_AGENT_STORE: every rank a client) or rank 0's own
// TCPStore; keys live under "hotpath/<restart count>/" so a restarted job never reads the last attempt's.
// Before any collective, every rank's recipe keys and world size are compared with rank 0's; a difference
// stops every rank with one line naming the key. Every wait is bounded (dist_timeout: train.dist_timeout_s,
// default 300 s); a collective that fails or times out names the ranks that stopped answering. The backend is
// Gloo for a CPU device and NCCL (builds with HOTPATH_TORCH_CUDA) for a CUDA one, behind the same calls.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>

#include "hotpath/models/batch_norm.h"
#include "hotpath/train/checkpoint.h"

namespace hotpath::train {

// This process's place in the job. From torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), else Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
// SLURM_NTASKS_PER_NODE; MASTER_ADDR/MASTER_PORT still needed), else a single process.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;  // torchrun's agent hosts the TCPStore: rank 0 must not bind it
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT
  std::string launcher = "none";  // "torchrun", "slurm" or "none"
  [[nodiscard]] bool distributed() const { return world_size > 1; }
};

// Reads the environment; a malformed or inconsistent variable is one error naming it.
DistEnv dist_env_from_environment();
// The store's and every collective's timeout: `seconds` (the recipe's train.dist_timeout_s), overridden by
// $HOTPATH_DIST_TIMEOUT_S (seconds in [0.001, 86400]). Without an argument: the default, 300 s.
inline constexpr double kDefaultDistTimeoutS = 300.0;
std::chrono::milliseconds dist_timeout(double seconds = kDefaultDistTimeoutS);

// A rank that stops on an error of its own (a bad recipe or shard) publishes `message` in the job's store (a
// bounded, best-effort connection of its own), so the others stop at once with one line naming it instead of
// waiting out the timeout: at start-up, and in a failed collective. Nothing for a single process, nor for a
// failure that already names other ranks (a failed collective: the others see it themselves), nor for a wait
// that timed out (the missing ranks are the ones it waited for; reporting would add to the timeout).
void report_rank_error(const DistEnv& env, std::chrono::milliseconds timeout, const std::string& message);
// report_rank_error for a front end's catch block (`hotpath train`, hotpath.train): the first line of `error`,
// with the environment's DistEnv and dist_timeout(). A malformed environment is ignored (the error says enough).
void report_this_rank_error(const std::exception& error) noexcept;

// The values every rank must share, by name ("optimizer.lr" → "0.1", "--resume" → "true"): the start-up check
// compares them with rank 0's (train/from_recipe.h builds them from a recipe and the command line).
using AgreementKeys = std::vector<std::pair<std::string, std::string>>;

// The process group of one job. Collectives are on CPU tensors (Gloo). Not copyable.
class DistContext {
 public:
  struct Impl;
  // Store, agreement check (keys and world size against rank 0's), then the group: Gloo for a CPU `device`,
  // NCCL on that GPU for a CUDA one (an error naming the device when the build has no NCCL).
  static std::unique_ptr<DistContext> connect(const DistEnv& env, std::chrono::milliseconds timeout,
                                              const AgreementKeys& keys, at::Device device = at::kCPU);
  // The same with a FileStore at `path` as the rendezvous (threads or processes of one host; tests).
  static std::unique_ptr<DistContext> connect_file(const std::string& path, int rank, int world_size,
                                                   std::chrono::milliseconds timeout, const AgreementKeys& keys,
                                                   at::Device device = at::kCPU);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  [[nodiscard]] int rank() const;
  [[nodiscard]] int world_size() const;
  [[nodiscard]] at::Device device() const;   // where the backend's tensors live
  [[nodiscard]] const char* backend_name() const;  // "gloo" or "nccl"

  // Blocking collectives; `what` names the operation in an error. A tensor on another device than the
  // backend's goes through a copy on it.
  void all_reduce_sum(at::Tensor& tensor, const std::string& what);
  void broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what);
  // Rank 0's `value` on every rank (through the store).
  std::string broadcast_string(const std::string& key, const std::string& value);
  void barrier(const std::string& what);

  // Throws one line: what failed, which ranks stopped answering (they did not report an error of their
  // own, nor the failure, within 1.5 s), the timeout, the cause. Called by collectives' error paths (GradSync's too).
  [[noreturn]] void fail(const std::string& what, const std::string& cause);

  [[nodiscard]] Impl& impl() { return *impl_; }

 private:
  explicit DistContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// DDP gradient synchronisation. Gradients are views into flat buckets (reverse registration order — the
// order backward produces them — a small first bucket, then `bucket_bytes`; the same on every rank). A
// post-accumulate-grad hook counts each bucket's gradients; a full bucket is all-reduced asynchronously
// while backward goes on (buckets launched in order, so every rank issues the same sequence). finish()
// launches what is left (unused parameters' zeros included), waits, divides by the world size (Gloo has
// no AVG). overlap=false is the reference twin: every bucket all-reduced after backward.
struct GradSyncOptions {
  std::int64_t first_bucket_bytes = std::int64_t{1} << 20;
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  bool overlap = true;
};

// `options` (the recipe's train.ddp_overlap and train.ddp_bucket_mb) with $HOTPATH_DDP_OVERLAP (0|1) and
// $HOTPATH_DDP_BUCKET_MB applied when set. A bad value is one error naming the variable.
GradSyncOptions grad_sync_options_with_environment(GradSyncOptions options);

// model.sync_batchnorm: the group a synchronised BatchNorm's statistics span (every rank of `dist`, through
// its backend). `dist` must outlive the model that holds it.
std::shared_ptr<models::BatchNormGroup> batchnorm_group(DistContext& dist);

struct GradSyncStats {
  std::int64_t buckets = 0;
  std::int64_t bucket_bytes_total = 0;  // bytes all-reduced per synchronised step (= gradient bytes)
  double wait_s = 0;                    // time blocked in finish() (the all-reduce wait phase)
  double launched_in_backward = 0;      // fraction of buckets launched from hooks (overlapped)
  std::int64_t steps = 0;
};

class GradSync {
 public:
  GradSync(DistContext& dist, const NamedParameters& params, const GradSyncOptions& options = {});
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // false for accumulation micro-batches (no-sync: gradients accumulate locally); true for the last.
  void set_sync(bool sync);
  // After the last backward of a step: every bucket all-reduced and averaged. Returns seconds waited.
  double finish();
  // Zeros the buckets (the gradients stay views: never set them to none).
  void zero_grad();
  [[nodiscard]] const GradSyncStats& stats() const { return stats_; }
  // Bucket b's parameter names, in bucket order (tests: identical on every rank).
  [[nodiscard]] std::vector<std::vector<std::string>> bucket_names() const;

  struct Bucket;
  void on_grad_ready(std::size_t param_index);  // the hook's entry point

 private:
  void launch(std::size_t bucket);
  DistContext& dist_;
  GradSyncOptions options_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::size_t> bucket_of_;  // param index → bucket
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::size_t next_launch_ = 0;
  bool sync_ = true;
  std::int64_t launched_from_hooks_ = 0;
  GradSyncStats stats_;
};

}  // namespace hotpath::train
