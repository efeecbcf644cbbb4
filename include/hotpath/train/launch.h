// hotpath/train/launch.h — `hotpath train --nproc N`: a small torchrun for one host. The process becomes the
// launcher of N copies of itself (its command line without --nproc) with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (rank 0 hosts the store on a free loopback port), forwards
// SIGINT/SIGTERM to them, stops the others when one fails and exits with the first failure's code.
//
//   if (nproc > 1) train::launch_local(nproc);   // never returns
//   train::train(recipe, options);              // each rank, as under torchrun
#pragma once

namespace hotpath::train {

// Refused under torchrun or Slurm (RANK already set). Never returns: exits with the ranks' status.
[[noreturn]] void launch_local(int nproc);

}  // namespace hotpath::train
