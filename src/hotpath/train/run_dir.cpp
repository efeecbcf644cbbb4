#include "run_dir.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/remove_tree.h"

namespace hotpath::train {
namespace fs = std::filesystem;
namespace {

struct LineKey {
  std::int64_t step = -1;
  bool eval = false;
  bool parsed = false;  // false: not a JSON object line (one a crash cut short)
};

LineKey line_key(const std::string& line) {
  try {
    check_json_depth(line, "metrics.jsonl");
    const auto j = nlohmann::json::parse(line);
    if (!j.is_object()) return {};
    return {j.value("step", std::int64_t{-1}), j.value("split", std::string()) == "eval", true};
  } catch (const std::exception&) {  // nlohmann's errors, a too-deep line: torn or foreign
    return {};
  }
}

void set_generator_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

std::ofstream open_metrics(const fs::path& path, std::optional<std::int64_t> resume_step, MetricsRewind rewind) {
  std::string kept;
  if (resume_step && fs::exists(path)) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const LineKey k = line_key(line);
      if (!k.parsed) continue;  // torn by the crash that made this resume necessary
      const bool at_step = k.step == *resume_step;
      if (k.step > *resume_step || (at_step && (k.eval ? rewind.drop_eval_at_step : rewind.drop_train_at_step))) {
        continue;
      }
      kept += line + "\n";
    }
  }
  write_file_atomic(path.string(), kept);
  std::ofstream out(path, std::ios::app);
  HOTPATH_CHECK(out.good(), path.string(), ": cannot open for writing");
  return out;
}

void write_metrics_line(std::ostream& metrics, const nlohmann::ordered_json& line) {
  metrics << line.dump() << "\n";
  metrics.flush();
}

void add_train_scalars(TensorBoardWriter& tb, double loss, double lr, double samples_per_s, std::int64_t step) {
  tb.add_scalar("train/loss", loss, step);
  tb.add_scalar("train/lr", lr, step);
  tb.add_scalar("train/samples_per_s", samples_per_s, step);
}

void add_eval_scalars(TensorBoardWriter& tb, const infer::EvalResult& eval, std::int64_t step) {
  tb.add_scalar("eval/top1", eval.top1, step);
  tb.add_scalar("eval/top5", eval.top5, step);
  tb.add_scalar("eval/loss", eval.loss, step);
}

double metric_value(const infer::EvalResult& eval, const std::string& metric) {
  if (metric == "top5") return eval.top5;
  if (metric == "loss") return eval.loss;
  return eval.top1;
}

bool metric_better(const std::string& metric, double candidate, double best) {
  return metric == "loss" ? candidate < best : candidate > best;
}

TensorMap rng_state(const at::Device& device) {
  TensorMap out;
  out["cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  if (device.is_cuda()) out["cuda"] = at::globalContext().defaultGenerator(device).get_state();
  return out;
}

void load_rng_state(const TensorMap& state, const at::Device& device) {
  if (const auto it = state.find("cpu"); it != state.end()) {
    set_generator_state(at::detail::getDefaultCPUGenerator(), it->second);
  }
  if (const auto it = state.find("cuda"); it != state.end() && device.is_cuda()) {
    set_generator_state(at::globalContext().defaultGenerator(device), it->second);
  }
}

void save_checkpoint_and_prune(const fs::path& root, std::int64_t step, const CheckpointData& data,
                               std::int64_t keep_last) {
  save_checkpoint((root / checkpoint_name(step)).string(), data);
  prune_checkpoints(root.string(), keep_last);
}

RunDirLock::RunDirLock(const fs::path& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  HOTPATH_CHECK(!ec, run_dir.string(), ": cannot create the run directory: ", ec.message());
  const fs::path lock = run_dir / ".lock";
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  HOTPATH_CHECK(fd_ >= 0, lock.string(), ": cannot open the run directory's lock: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
    ::close(fd_);
    fd_ = -1;
    HOTPATH_CHECK(err != EWOULDBLOCK, run_dir.string(), ": another `hotpath train` (pid ",
                  n > 0 ? printable(std::string_view(pid, static_cast<std::size_t>(n)), 20) : std::string("?"),
                  ") is using this run directory; wait for it or choose another output_dir");
    HOTPATH_CHECK(false, lock.string(), ": cannot lock: ", std::strerror(err));
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t w = ::pwrite(fd_, me.data(), me.size(), 0);
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

std::vector<std::string> run_outputs(const fs::path& run_dir) {
  std::vector<std::string> found;
  std::error_code ec;
  const fs::path metrics = run_dir / "metrics.jsonl";
  if (fs::exists(metrics, ec) && (!fs::is_regular_file(metrics, ec) || fs::file_size(metrics, ec) > 0)) {
    found.push_back("metrics.jsonl");
  }
  const fs::path ckpt = run_dir / "checkpoints";
  if (fs::exists(ckpt, ec) && !(fs::is_directory(ckpt, ec) && fs::is_empty(ckpt, ec))) found.push_back("checkpoints/");
  for (const char* name : {"best", "model.safetensors", "model.json", "model", "adapter"}) {
    if (fs::exists(run_dir / name, ec)) found.push_back(fs::is_directory(run_dir / name, ec) ? std::string(name) + "/" : name);
  }
  return found;
}

void clear_run_outputs(const fs::path& run_dir) {
  for (const char* name : {"checkpoints", "best", "best.tmp", "best.old", "model.safetensors", "model.json", "model",
                           "adapter", "metrics.jsonl", "config.yaml", "tensorboard", "profile.json"}) {
    std::error_code ec;
    hotpath::remove_tree(run_dir / name, ec);
    HOTPATH_CHECK(!ec, (run_dir / name).string(), ": cannot remove it (--overwrite): ", ec.message());
  }
  sync_directory(run_dir.string());
}

RunDirClaim claim_run_dir(const fs::path& run_dir, const RunDirFlags& flags) {
  HOTPATH_CHECK(!(flags.resume && flags.overwrite), "--resume and --overwrite exclude each other");
  RunDirClaim claim;
  if (flags.is_main) claim.lock = std::make_unique<RunDirLock>(run_dir);
  if (!flags.resume && !flags.benchmark && flags.is_main) {
    std::string held;
    for (const auto& name : run_outputs(run_dir)) held += (held.empty() ? "" : ", ") + name;
    HOTPATH_CHECK(held.empty() || flags.overwrite, run_dir.string(), ": holds another run (", held,
                  "); pass --resume to continue it or --overwrite to clear it, or choose another output_dir");
    claim.clear_first = !held.empty();
  }
  if (flags.resume) claim.latest = latest_checkpoint((run_dir / "checkpoints").string());
  return claim;
}

void swap_in_best(const fs::path& run_dir, const std::function<void(const fs::path&)>& write) {
  const fs::path best = run_dir / "best", tmp = run_dir / "best.tmp", old_best = run_dir / "best.old";
  hotpath::remove_tree(tmp);
  write(tmp);
  std::error_code ec;
  hotpath::remove_tree(old_best);
  if (fs::exists(best)) fs::rename(best, old_best, ec);
  HOTPATH_CHECK(!ec, best.string(), ": cannot rename it to ", old_best.string(), ": ", ec.message());
  fs::rename(tmp, best, ec);
  HOTPATH_CHECK(!ec, best.string(), ": cannot rename ", tmp.string(), " to it: ", ec.message());
  sync_directory(run_dir.string());
  hotpath::remove_tree(old_best);
}

RunLog::RunLog(const fs::path& run_dir, bool is_main, std::optional<std::int64_t> resume_step, MetricsRewind rewind,
               std::function<void(const std::string&)> on_metrics)
    : on_metrics_(std::move(on_metrics)) {
  if (!is_main) return;
  metrics_ = open_metrics(run_dir / "metrics.jsonl", resume_step, rewind);
  tb_.emplace((run_dir / "tensorboard").string());
}

void RunLog::line(const nlohmann::ordered_json& line) {
  if (!tb_) return;
  write_metrics_line(metrics_, line);
  if (on_metrics_) on_metrics_(line.dump());
}

void RunLog::train_scalars(double loss, double lr, double samples_per_s, std::int64_t step) {
  if (tb_) add_train_scalars(*tb_, loss, lr, samples_per_s, step);
}

void RunLog::eval_scalars(const infer::EvalResult& eval, std::int64_t step) {
  if (!tb_) return;
  add_eval_scalars(*tb_, eval, step);
  tb_->flush();
}

void RunLog::flush() {
  if (tb_) tb_->flush();
}

}  // namespace hotpath::train
