// hotpath/data/bench.h — measure the loader, the JPEG decoder's ceiling, and the PyTorch peer.
//
//   LoaderBenchResult r = bench_loader(options, /*warmup_batches=*/2, /*batches=*/20);
//   double ceiling = bench_decode_ceiling(options.shards, options.workers, r.images);
//   nlohmann::json peer = run_torch_data_peer({...});   // same shards, batch, workers, size
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hotpath/data/loader.h"

namespace hotpath::data {

struct LoaderBenchResult {
  double images_per_s = 0;
  std::int64_t images = 0;
  double seconds = 0;
  LoaderStats stats{};  // counters of the timed part only
};

// Pulls `warmup_batches` untimed, then `batches` timed batches (epochs roll over as needed).
LoaderBenchResult bench_loader(const LoaderOptions& options, int warmup_batches, int batches);

// Full-size decode of the image members of `shards` (libjpeg-turbo's tjDecompress2 to RGB for
// JPEG, libpng for PNG) on `threads` threads, each reusing its output buffer: the speed of
// the decoder alone, the ceiling a loader that decodes every pixel cannot pass. Decodes at least
// `min_images` images (cycling over the files), returns images per second.
double bench_decode_ceiling(const std::vector<std::string>& shards, int threads, std::int64_t min_images);

struct TorchPeerOptions {
  std::string python;        // venv python; "" = $HOTPATH_PYTHON or ~/.cache/hotpath/venv/bin/python
  std::string script;        // "" = <source dir>/bench/torch_data_peer.py
  std::vector<std::string> shards;
  int batch_size = 256;
  int workers = 2;
  int size = 224;
  int channels = 3;
  int warmup_batches = 2;
  int batches = 20;
  std::uint64_t seed = 0;
};

// Runs the PyTorch DataLoader + webdataset + PIL + torchvision pipeline in the venv and
// returns its JSON report as text ({"images_per_s": ..., "images": ..., ...}).
std::string run_torch_data_peer(const TorchPeerOptions& options);

}  // namespace hotpath::data
