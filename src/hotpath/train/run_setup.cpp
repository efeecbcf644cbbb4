// Where a run takes place, and its header line (run_setup.h).
#include "run_setup.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <thread>

#include "hotpath/core/error.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/train/from_recipe.h"
#include "hotpath/train/trainer.h"
#include "cuda/cuda_training.h"

namespace hotpath::train {
namespace {

at::Device pick_device(const std::string& name) {
  if (name == "cuda") {
    HOTPATH_CHECK(at::hasCUDA(), "train.device: cuda was asked for but no CUDA device is available");
    return at::Device(at::kCUDA, 0);
  }
  if (name == "auto" && at::hasCUDA()) return at::Device(at::kCUDA, 0);
  return at::Device(at::kCPU);
}

}  // namespace

Recipe with_precision_resolved(Recipe recipe) {
  auto& precision = recipe.train.precision;
  if (precision != "auto") return recipe;
  const at::Device device = pick_device(recipe.train.device);
  // On the CPU: the autocast ops' own choice (ops/autocast_ops.h), so auto is bf16 exactly where they run native bf16.
  const bool native_bf16 = device.is_cuda() ? cuda_has_bf16(device) : ops::bf16_math() == ops::Bf16Math::kNative;
  precision = native_bf16 ? "bf16" : "fp32";
  return recipe;
}

std::optional<at::ScalarType> autocast_dtype(const std::string& precision) {
  if (precision == "bf16") return at::kBFloat16;
  if (precision == "fp16") return at::kHalf;
  return std::nullopt;
}

RunSetup set_up_run(const Recipe& recipe, RunDirFlags flags, bool quiet) {
  const auto& tr = recipe.train;
  RunSetup s;
  // Data parallel on CUDA: rank r of a host takes GPU LOCAL_RANK (NCCL needs one GPU per rank).
  const DistEnv env = dist_env_from_environment();
  s.device = pick_device(tr.device);
  if (s.device.is_cuda() && env.distributed()) {
    const int gpus = static_cast<int>(at::getNumGPUs());
    HOTPATH_CHECK(env.local_world_size <= gpus, recipe.source, ": train.device: cuda with ", env.local_world_size,
                  " ranks on this host but ", gpus,
                  " GPU(s): NCCL needs one GPU per rank (fewer ranks per host, or train.device: cpu for Gloo)");
    s.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  }
  HOTPATH_CHECK(tr.precision != "fp16" || s.device.is_cuda(), recipe.source,
                ": train.precision: fp16 needs a CUDA device; use bf16 on CPU");
  // cuDNN benchmark, bf16 only where the GPU has it (cuda/cuda_training.h).
  s.cuda_settings = configure_cuda_training(s.device, tr.precision, recipe.source);
  // Default intra-op threads: this host's cores shared by its ranks.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(tr.threads > 0 ? static_cast<int>(tr.threads)
                                     : std::max(1, cores / std::max(1, env.local_world_size)));
  // Data parallel when torchrun (or Slurm) says so: one process group for the run, checked at start (every
  // rank the same recipe keys, command-line flags and world size). Gloo on the CPU, NCCL on this rank's GPU.
  if (env.distributed()) {
    s.dist = DistContext::connect(env, dist_timeout_for(recipe),
                                  recipe_agreement_keys(recipe, {.resume = flags.resume, .overwrite = flags.overwrite}),
                                  s.device);
  }
  s.is_main = !s.dist || s.dist->rank() == 0;
  s.world_size = s.dist ? s.dist->world_size() : 1;
  s.quiet = quiet || !s.is_main;
  s.run_dir = recipe.output_dir;
  flags.is_main = s.is_main;
  s.claim = claim_run_dir(s.run_dir, flags);
  if (flags.resume) {
    if (s.dist) {  // rank 0's choice (the directory is shared; rank 0 alone writes it)
      const std::string chosen = s.dist->broadcast_string("resume_checkpoint", s.claim.latest.value_or(""));
      s.claim.latest = chosen.empty() ? std::nullopt : std::optional<std::string>(chosen);
    }
    HOTPATH_CHECK(s.claim.latest.has_value(), (s.run_dir / "checkpoints").string(), ": no checkpoint to resume from");
  }
  // Initial weights (a new head, LoRA's A) and dropout until a checkpoint restores its state.
  at::manual_seed(tr.seed);
  return s;
}

std::string run_banner(const Recipe& recipe, const RunSetup& setup, const Task& task, torch::nn::Module& model,
                       const NamedParameters& trainable, std::int64_t steps_per_epoch, const std::string& parallel) {
  const auto& tr = recipe.train;
  std::int64_t n_trainable = 0, n_params = 0;
  for (const auto& [name, p] : trainable) n_trainable += p.numel();
  for (const auto& p : model.parameters()) n_params += p.numel();
  std::ostringstream out;
  out << "train: " << task.describe() << " (" << n_trainable << " of " << n_params << " parameters trainable, "
      << std::fixed << std::setprecision(2)
      << 100.0 * static_cast<double>(n_trainable) / static_cast<double>(std::max<std::int64_t>(n_params, 1)) << "%) on "
      << setup.device.str() << (setup.cuda_settings.empty() ? "" : " (" + setup.cuda_settings + ")") << ", "
      << at::get_num_threads() << " threads, " << tr.precision
      << (tr.precision == "bf16" && setup.device.is_cpu() ? std::string(" (") + ops::bf16_math_name() + ")" : "")
      << "; " << task.train_samples() << " samples, " << steps_per_epoch << " steps/epoch × " << tr.epochs
      << " epochs, batch " << tr.batch_size
      << (tr.accum_steps > 1 ? " (" + std::to_string(tr.accum_steps) + " micro-batches a step)" : "") << parallel;
  return out.str();
}

}  // namespace hotpath::train
