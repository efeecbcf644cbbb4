#include "hotpath/data/bench.h"

#include <turbojpeg.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <thread>

#include "hotpath/core/error.h"
#include "hotpath/core/process.h"
#include "hotpath/data/tar.h"

namespace hotpath::data {
namespace {

using Clock = std::chrono::steady_clock;

struct TjDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
using TjHandle = std::unique_ptr<void, TjDeleter>;

LoaderStats minus(const LoaderStats& a, const LoaderStats& b) {
  return {a.samples - b.samples,           a.bad_samples - b.bad_samples,       a.batches - b.batches,
          a.plan_seconds - b.plan_seconds, a.decode_seconds - b.decode_seconds, a.store_seconds - b.store_seconds,
          a.wait_seconds - b.wait_seconds};
}

}  // namespace

LoaderBenchResult bench_loader(const LoaderOptions& options, int warmup_batches, int batches) {
  HOTPATH_CHECK(batches >= 1, "bench: batches must be >= 1, got ", batches);
  Loader loader(options);
  auto pull = [&loader]() -> Batch {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (auto b = loader.next()) return std::move(*b);  // nullopt = epoch end: go on with the next
    }
    HOTPATH_CHECK(false, "bench: the loader produced no batch");
    return {};
  };
  for (int i = 0; i < warmup_batches; ++i) pull();
  const LoaderStats before = loader.stats();
  const auto t0 = Clock::now();
  std::int64_t images = 0;
  for (int i = 0; i < batches; ++i) images += pull().images.size(0);
  LoaderBenchResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.images = images;
  result.images_per_s = static_cast<double>(images) / result.seconds;
  result.stats = minus(loader.stats(), before);
  return result;
}

double bench_decode_ceiling(const std::vector<std::string>& shards, int threads, std::int64_t min_images) {
  HOTPATH_CHECK(threads >= 1, "bench: threads must be >= 1, got ", threads);
  std::vector<std::unique_ptr<ShardReader>> readers;
  std::vector<std::span<const std::byte>> files;
  for (const auto& path : shards) {
    readers.push_back(std::make_unique<ShardReader>(path));
    for (const TarSample& s : readers.back()->samples()) {
      for (const char* ext : {"jpg", "jpeg", "png"}) {
        if (const SampleMember* m = s.find(ext)) {
          files.push_back(readers.back()->bytes(*m));
          break;
        }
      }
    }
    if (static_cast<std::int64_t>(files.size()) >= min_images) break;
  }
  HOTPATH_CHECK(!files.empty(), "bench: no .jpg/.jpeg/.png members in the shards");
  const std::int64_t total = std::max<std::int64_t>(min_images, 1);
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&] {
    TjHandle tj(tjInitDecompress());
    std::vector<unsigned char> out;
    for (std::int64_t i = next++; i < total; i = next++) {
      const auto bytes = files[static_cast<std::size_t>(i) % files.size()];
      const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
      if (sniff_format(bytes) == ImageFormat::kJpeg) {
        int w = 0, h = 0, subsamp = 0, colorspace = 0;
        if (tjDecompressHeader3(tj.get(), data, bytes.size(), &w, &h, &subsamp, &colorspace) != 0) {
          failed = true;
          continue;
        }
        out.resize(static_cast<std::size_t>(w) * h * 3);
        if (tjDecompress2(tj.get(), data, bytes.size(), out.data(), w, 0, h, TJPF_RGB, 0) != 0) failed = true;
      } else {
        try {
          decode_image(bytes, 3);
        } catch (const std::exception&) {
          failed = true;
        }
      }
    }
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(total) / seconds;
}

std::string run_torch_data_peer(const TorchPeerOptions& o) {
  const std::string python = peer_python(o.python, "bench --compare torch");
  std::string script = o.script.empty() ? std::string(HOTPATH_SOURCE_DIR) + "/bench/torch_data_peer.py" : o.script;
  HOTPATH_CHECK(std::filesystem::exists(script), "bench --compare torch: peer script not found at ", script);

  std::vector<std::string> argv{python, script, "--shards"};
  argv.insert(argv.end(), o.shards.begin(), o.shards.end());
  for (const auto& [flag, value] :
       {std::pair<const char*, std::string>{"--batch-size", std::to_string(o.batch_size)},
        {"--workers", std::to_string(o.workers)}, {"--size", std::to_string(o.size)},
        {"--channels", std::to_string(o.channels)}, {"--warmup-batches", std::to_string(o.warmup_batches)},
        {"--batches", std::to_string(o.batches)}, {"--seed", std::to_string(o.seed)}, {"--json-out", "-"}}) {
    argv.push_back(flag);
    argv.push_back(value);
  }
  const CommandResult r = run_command(argv);
  HOTPATH_CHECK(r.exit_code == 0, "bench --compare torch: the PyTorch peer failed (exit ", r.exit_code, "): ", script);
  std::string out = r.output;
  // The report is the last non-empty line (the peer may log before it).
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  const auto nl = out.rfind('\n');
  return nl == std::string::npos ? out : out.substr(nl + 1);
}

}  // namespace hotpath::data
