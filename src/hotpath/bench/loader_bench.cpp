#include "hotpath/bench/loader_bench.h"

#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <ostream>
#include <span>
#include <thread>

#include "hotpath/core/error.h"
#include "hotpath/core/process.h"
#include "hotpath/formats/tar.h"

namespace hotpath::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct TjDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
using TjHandle = std::unique_ptr<void, TjDeleter>;

data::LoaderStats minus(const data::LoaderStats& a, const data::LoaderStats& b) {
  return {a.samples - b.samples,           a.bad_samples - b.bad_samples,       a.batches - b.batches,
          a.plan_seconds - b.plan_seconds, a.decode_seconds - b.decode_seconds, a.store_seconds - b.store_seconds,
          a.wait_seconds - b.wait_seconds,  a.device_seconds - b.device_seconds,
          a.device_decode_seconds - b.device_decode_seconds};
}

}  // namespace

LoaderBenchResult bench_loader(const data::LoaderOptions& options, int warmup_batches, int batches) {
  HOTPATH_CHECK(batches >= 1, "bench: batches must be >= 1, got ", batches);
  data::Loader loader(options);
  auto pull = [&loader]() -> data::Batch {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (auto b = loader.next()) return std::move(*b);  // nullopt = epoch end: go on with the next
    }
    HOTPATH_CHECK(false, "bench: the loader produced no batch");
    return {};
  };
  for (int i = 0; i < warmup_batches; ++i) pull();
  const data::LoaderStats before = loader.stats();
  const auto t0 = Clock::now();
  std::int64_t images = 0;
  for (int i = 0; i < batches; ++i) images += pull().images.size(0);
  LoaderBenchResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.images = images;
  result.images_per_s = static_cast<double>(images) / result.seconds;
  result.stats = minus(loader.stats(), before);
  result.loader = loader.describe();
  return result;
}

double bench_decode_ceiling(const std::vector<std::string>& shards, int threads, std::int64_t min_images) {
  HOTPATH_CHECK(threads >= 1, "bench: threads must be >= 1, got ", threads);
  std::vector<std::unique_ptr<formats::ShardReader>> readers;
  std::vector<std::span<const std::byte>> files;
  for (const auto& path : shards) {
    readers.push_back(std::make_unique<formats::ShardReader>(path));
    for (const formats::TarSample& s : readers.back()->samples()) {
      for (const char* ext : {"jpg", "jpeg", "png"}) {
        if (const formats::SampleMember* m = s.find(ext)) {
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
      const auto* ptr = reinterpret_cast<const unsigned char*>(bytes.data());
      if (data::sniff_format(bytes) == data::ImageFormat::kJpeg) {
        int w = 0, h = 0, subsamp = 0, colorspace = 0;
        if (tjDecompressHeader3(tj.get(), ptr, bytes.size(), &w, &h, &subsamp, &colorspace) != 0) {
          failed = true;
          continue;
        }
        out.resize(static_cast<std::size_t>(w) * h * 3);
        if (tjDecompress2(tj.get(), ptr, bytes.size(), out.data(), w, 0, h, TJPF_RGB, 0) != 0) failed = true;
      } else {
        try {
          data::decode_image(bytes, 3);
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

BenchReport run_data_bench(const DataBenchOptions& a, std::ostream* log) {
  const data::LoaderOptions& o = a.loader;
  HOTPATH_CHECK(a.compare.empty() || a.compare == "torch", "data bench: --compare accepts 'torch', got '", a.compare,
                "'");
  if (log) {
    *log << "hotpath data bench: " << o.shards.size() << " shard(s), batch " << o.batch_size << ", " << o.workers
         << " worker(s), " << o.size << "x" << o.size << ", " << a.warmup_batches << "+" << a.batches
         << " batches, best of " << a.repeats << " (interleaved)\n";
  }
  // The stage counters of each hotpath run, kept with the run.
  auto stats_json = [](const data::LoaderStats& s) {
    return Json{{"plan", s.plan_seconds},
                {"decode_crop_resize", s.decode_seconds},
                {"store_normalize", s.store_seconds},
                {"consumer_wait", s.wait_seconds},
                {"device_stage", s.device_seconds},
                {"device_stage_in_nvjpeg", s.device_decode_seconds}};
  };
  const bool on_device = o.device.is_cuda();
  Benchmark bench("loader", "images/s", a.repeats);
  const auto loader_contender = [&](const data::LoaderOptions& options) {
    return [&, options](int) {
      const LoaderBenchResult r = bench_loader(options, a.warmup_batches, a.batches);
      return RunFigures{r.images_per_s, {{"images", r.images},
                                         {"seconds", r.seconds},
                                         {"bad_samples", r.stats.bad_samples},
                                         {"loader", r.loader},
                                         {"stage_seconds", stats_json(r.stats)}}};
    };
  };
  bench.add({"hotpath",
             on_device ? std::string("hotpath::data::Loader, CUDA mode: ") +
                             (o.decode == data::DecodeBackend::kNvjpeg
                                  ? "each batch split: whole JPEGs decoded by nvJPEG, RandomResizedCrop/flip as ATen ops on "
                                    "the GPU (own stream), the other rows by the decode threads (libjpeg-turbo) into "
                                    "pinned uint8; normalized on the GPU, batches on the device"
                                  : "libjpeg-turbo crop+scale during decode into pinned uint8, copied non_blocking, "
                                    "normalized on the GPU (own stream), batches on the device")
                       : "hotpath::data::Loader: shard mmap, libjpeg-turbo crop+scale during decode, RandomResizedCrop, "
                         "flip, normalize into pinned batches",
             loader_contender(o)});
  if (on_device) {
    data::LoaderOptions cpu = o;
    cpu.device = at::kCPU;
    cpu.decode = data::DecodeBackend::kCpu;
    bench.add({"cpu_decode", "the same loader on the CPU path (libjpeg-turbo, the same threads), host batches",
               loader_contender(cpu)});
  }
  const std::int64_t ceiling_images = static_cast<std::int64_t>(a.batches) * o.batch_size;
  bench.add({"ceiling", "full-size libjpeg-turbo decode alone (tjDecompress2 to RGB) on the same threads",
             [&](int) { return RunFigures{bench_decode_ceiling(o.shards, o.workers, ceiling_images)}; }});
  if (a.compare == "torch") {
    std::vector<std::string> argv{peer_python(a.python, "data bench --compare torch"), peer_script("torch_data_peer.py"),
                                  "--shards"};
    argv.insert(argv.end(), o.shards.begin(), o.shards.end());
    for (const auto& [flag, value] :
         {std::pair<const char*, std::string>{"--batch-size", std::to_string(o.batch_size)},
          {"--workers", std::to_string(o.workers)}, {"--size", std::to_string(o.size)},
          {"--channels", std::to_string(o.channels)}, {"--warmup-batches", std::to_string(a.warmup_batches)},
          {"--batches", std::to_string(a.batches)}, {"--seed", std::to_string(o.seed)}, {"--json-out", "-"}}) {
      argv.emplace_back(flag);
      argv.push_back(value);
    }
    bench.add({"torch", "torch.utils.data.DataLoader + webdataset + PIL + torchvision RandomResizedCrop/flip/normalize",
               [argv](int) {
                 Json peer = run_peer(argv, "data bench --compare torch", "images_per_s");
                 const double rate = peer["images_per_s"].get<double>();
                 return RunFigures{rate, std::move(peer)};
               }});
  }
  const BenchmarkResult r = bench.run(log);

  const ContenderResult& hp = r.at("hotpath");
  const Json& best = hp.best().details;
  const double ceiling = r.at("ceiling").best_per_s;
  Json report{
      {"hotpath_images_per_s", hp.best_per_s},
      {"decode_ceiling_images_per_s", ceiling},
      {"fraction_of_ceiling", hp.best_per_s / ceiling},
      {"workers", o.workers},
      {"images", best.value("images", std::int64_t{0})},
      {"batch_size", o.batch_size},
      {"size", o.size},
      {"dtype", a.dtype},
      {"layout", a.layout},
      {"dct_scaling", o.allow_dct_scaling},
      {"shards", o.shards.size()},
      {"hotpath_stage_seconds", best.value("stage_seconds", Json::object())},
      {"bad_samples", best.value("bad_samples", std::int64_t{0})},
      {"repeats", a.repeats},
      {"hotpath_runs_images_per_s", hp.rates()},
      {"ceiling_runs_images_per_s", r.at("ceiling").rates()},
      {"torch_images_per_s", nullptr},
      {"ratio", nullptr},
      {"device", o.device.str()},
      {"decode", o.decode == data::DecodeBackend::kNvjpeg ? "nvjpeg" : "cpu"},
      {"loader", best.value("loader", std::string())},
  };
  if (on_device) {
    const ContenderResult& cpu = r.at("cpu_decode");
    report["cpu_decode_images_per_s"] = cpu.best_per_s;
    report["cpu_decode_runs_images_per_s"] = cpu.rates();
    report["ratio_vs_cpu_decode"] = r.ratio_vs("cpu_decode");
    if (log) {
      *log << "  CUDA mode:        " << best.value("loader", std::string()) << "\n  CPU path:         "
           << rate_text(cpu.best_per_s) << " images/s (" << o.workers << " decode threads)\n  CUDA / CPU:       "
           << r.ratio_vs("cpu_decode") << "x\n";
    }
  }
  if (log) {
    *log << "  hotpath loader:   " << rate_text(hp.best_per_s) << " images/s (median " << rate_text(hp.median_per_s)
         << ")\n  decode ceiling:   " << rate_text(ceiling) << " images/s (full-size libjpeg-turbo decode, "
         << o.workers << " thread(s))\n";
  }
  if (r.has("torch")) {
    const ContenderResult& torch = r.at("torch");
    report["torch_images_per_s"] = torch.best_per_s;
    report["torch_runs_images_per_s"] = torch.rates();
    report["torch_images"] = torch.best().details.value("images", 0);
    report["ratio"] = r.ratio_vs("torch");
    if (log) {
      *log << "  PyTorch peer:     " << rate_text(torch.best_per_s) << " images/s (DataLoader, webdataset, PIL, "
           << "torchvision)\n  ratio:            " << r.ratio_vs("torch") << "x\n";
    }
  }
  if (log) *log << "  fraction of ceiling: " << hp.best_per_s / ceiling << "\n";
  add_benchmark_fields(report, r);
  return {std::move(report), r.table_row()};
}

}  // namespace hotpath::bench
