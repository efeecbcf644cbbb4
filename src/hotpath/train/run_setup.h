// run_setup.h (private to hotpath_train) — where a run takes place, settled before its task is built: the
// device (data parallel on CUDA: GPU LOCAL_RANK), the intra-op threads, the process group when torchrun or
// Slurm started several ranks, the run directory claimed (run_dir.h) with the checkpoint to resume agreed
// on by every rank, the seed of the initial weights; and the run's header line.
//
//   RunSetup setup = set_up_run(recipe, {.resume = true}, /*quiet=*/false);
//   ... build the task on setup.device ...
//   std::cerr << run_banner(recipe, setup, task, module, trainable, steps_per_epoch, parallel->describe());
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "hotpath/train/distributed.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"
#include "run_dir.h"

namespace hotpath::train {

struct RunSetup {
  at::Device device = at::Device(at::kCPU);
  std::string cuda_settings;           // what configure_cuda_training set (cuDNN benchmark, bf16), for the header
  std::unique_ptr<DistContext> dist;   // several ranks: the job's process group
  int world_size = 1;
  bool is_main = true;                 // rank 0: writes the run directory, logs, prints
  bool quiet = false;                  // no console lines (asked for, or not the main rank)
  std::filesystem::path run_dir;
  RunDirClaim claim;                   // claim.latest: the checkpoint every rank resumes from
};

// `flags.is_main` is decided here. Seeds the default generator with train.seed last.
RunSetup set_up_run(const Recipe& recipe, RunDirFlags flags, bool quiet);

// train.precision's autocast type: bf16, fp16, or none for fp32.
std::optional<at::ScalarType> autocast_dtype(const std::string& precision);

// "train: resnet18, 10 classes (11.2M of 11.2M parameters trainable, 100.00%) on cpu, 2 threads, fp32; 60000
// samples, 235 steps/epoch × 8 epochs, batch 256" + `parallel` (DataParallel::describe()).
std::string run_banner(const Recipe& recipe, const RunSetup& setup, const Task& task, torch::nn::Module& model,
                       const NamedParameters& trainable, std::int64_t steps_per_epoch, const std::string& parallel);

}  // namespace hotpath::train
