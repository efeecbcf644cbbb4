#include "hotpath/train/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/weights.h"

namespace hotpath::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "step-";

// Steps beyond 2^40 are no run's: a name claiming one is corrupt or foreign.
constexpr std::int64_t kMaxStep = std::int64_t{1} << 40;

// The step of "step-NNNNNNNN"; nullopt for a name that is not a checkpoint's (a ".tmp" leftover, other
// files); throws for a "step-" name that is malformed or out of range, so that it is reported, never
// pruned into or resumed from.
std::optional<std::int64_t> checkpoint_step(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name.rfind(kPrefix, 0) != 0 || name.ends_with(".tmp")) return std::nullopt;
  return parse_int(std::string_view(name).substr(5), 0, kMaxStep,
                   path.string() + ": not a checkpoint name (step-<digits>); move it out of the run directory");
}

void write_part(const fs::path& dir, const char* file, const TensorMap& tensors) {
  models::write_tensors((dir / file).string(), tensors);
}

TensorMap read_part(const fs::path& dir, const char* file) {
  const fs::path p = dir / file;
  HOTPATH_CHECK(fs::exists(p), p.string(), ": missing from the checkpoint (expected model.safetensors, "
                                           "optimizer.safetensors, rng.safetensors and trainer.json)");
  return models::read_tensors(p.string());
}

}  // namespace

std::string checkpoint_name(std::int64_t step) {
  check_int_in(step, 0, kMaxStep, "checkpoint step");
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  return kPrefix + digits;
}

void save_checkpoint(const std::string& dir, const CheckpointData& data) {
  const fs::path final_dir(dir);
  const fs::path tmp = final_dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  HOTPATH_CHECK(!ec, tmp.string(), ": cannot create the checkpoint directory: ", ec.message());
  write_part(tmp, "model.safetensors", data.model);
  write_part(tmp, "optimizer.safetensors", data.optimizer);
  if (!data.ema.empty()) write_part(tmp, "ema.safetensors", data.ema);
  write_part(tmp, "rng.safetensors", data.rng);
  write_file_atomic((tmp / "trainer.json").string(), data.trainer_json);
  // Every file is fsynced by its writer; now swap the directory in and make the rename durable.
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  HOTPATH_CHECK(!ec, final_dir.string(), ": cannot rename ", tmp.string(), " to it: ", ec.message());
  sync_directory(final_dir.parent_path().empty() ? "." : final_dir.parent_path().string());
}

CheckpointData load_checkpoint(const std::string& dir) {
  const fs::path d(dir);
  HOTPATH_CHECK(fs::is_directory(d), dir, ": not a checkpoint directory");
  CheckpointData data;
  data.model = read_part(d, "model.safetensors");
  data.optimizer = read_part(d, "optimizer.safetensors");
  if (fs::exists(d / "ema.safetensors")) data.ema = read_part(d, "ema.safetensors");
  data.rng = read_part(d, "rng.safetensors");
  const fs::path json = d / "trainer.json";
  HOTPATH_CHECK(fs::exists(json), json.string(), ": missing from the checkpoint");
  data.trainer_json = read_file(json.string(), read_limit::kConfig, "trainer state");
  return data;
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto step = checkpoint_step(entry.path());
    if (!step) continue;
    HOTPATH_CHECK(entry.is_directory(), entry.path().string(), ": a checkpoint name but not a directory");
    found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  for (std::size_t i = 1; i < found.size(); ++i) {
    HOTPATH_CHECK(found[i].first != found[i - 1].first, found[i].second, ": the same step as ", found[i - 1].second);
  }
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& root) {
  auto all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

void prune_checkpoints(const std::string& root, std::int64_t keep_last) {
  std::error_code ec;
  const auto all = list_checkpoints(root);
  for (std::size_t i = 0; i + static_cast<std::size_t>(std::max<std::int64_t>(keep_last, 1)) < all.size(); ++i) {
    fs::remove_all(all[i], ec);
  }
  if (!fs::is_directory(root, ec)) return;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.size() > 4 && name.ends_with(".tmp")) fs::remove_all(entry.path(), ec);
  }
}

TensorMap optimizer_state(torch::optim::Optimizer& optimizer, const NamedParameters& params) {
  TensorMap out;
  auto& state = optimizer.state();
  for (const auto& [name, p] : params) {
    const auto it = state.find(p.unsafeGetTensorImpl());
    if (it == state.end()) continue;
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
      if (sgd->momentum_buffer().defined()) out[name + ".momentum_buffer"] = sgd->momentum_buffer();
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get())) {
      out[name + ".step"] = at::scalar_tensor(adamw->step(), at::kLong);
      out[name + ".exp_avg"] = adamw->exp_avg();
      out[name + ".exp_avg_sq"] = adamw->exp_avg_sq();
      if (adamw->max_exp_avg_sq().defined()) out[name + ".max_exp_avg_sq"] = adamw->max_exp_avg_sq();
    } else {
      HOTPATH_CHECK(false, "checkpoint: optimizer state of ", name, " is of an unsupported optimizer (SGD, AdamW)");
    }
  }
  return out;
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParameters& params,
                          const TensorMap& state) {
  const bool is_sgd = dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr;
  const bool is_adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr;
  HOTPATH_CHECK(is_sgd || is_adamw, "checkpoint: only SGD and AdamW state can be restored");
  // Every key must be one this optimizer writes for one of these parameters: state of another optimizer
  // (AdamW moments under an SGD recipe) or of another model is refused, not silently half-restored.
  std::set<std::string> expected;
  for (const auto& [name, p] : params) {
    if (is_sgd) {
      expected.insert(name + ".momentum_buffer");
    } else {
      for (const char* field : {".step", ".exp_avg", ".exp_avg_sq", ".max_exp_avg_sq"}) expected.insert(name + field);
    }
  }
  for (const auto& [key, t] : state) {
    HOTPATH_CHECK(expected.contains(key), "optimizer.safetensors: ", printable(key), ": not state of this recipe's ",
                  is_sgd ? "SGD" : "AdamW", " optimizer over the model's trainable parameters (optimizer.name or "
                  "the model changed since the checkpoint?)");
  }
  const auto take = [&](const std::string& key, const at::Tensor& like) -> at::Tensor {
    const auto it = state.find(key);
    if (it == state.end()) return {};
    HOTPATH_CHECK(it->second.sizes() == like.sizes(), "optimizer.safetensors: ", key, ": shape ", it->second.sizes(),
                  " does not match the parameter's ", like.sizes());
    HOTPATH_CHECK(it->second.is_floating_point(), "optimizer.safetensors: ", key, ": dtype ", it->second.scalar_type(),
                  ", expected a floating-point tensor");
    return it->second.to(like.options()).contiguous(like.suggest_memory_format()).clone();
  };
  for (const auto& [name, p] : params) {
    void* key = p.unsafeGetTensorImpl();
    if (is_sgd) {
      at::Tensor buf = take(name + ".momentum_buffer", p);
      if (!buf.defined()) continue;
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(buf);
      optimizer.state()[key] = std::move(s);
    } else {
      const auto step = state.find(name + ".step");
      if (step == state.end()) continue;
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      const at::Tensor& st = step->second;
      HOTPATH_CHECK(st.numel() == 1 && !st.is_floating_point() && !st.is_complex(), "optimizer.safetensors: ", name,
                    ".step: expected one integer, got a ", st.scalar_type(), " tensor of shape ", st.sizes());
      const std::int64_t count = st.item<std::int64_t>();
      check_int_in(count, 0, kMaxStep, "optimizer.safetensors: " + name + ".step");
      s->step(count);
      at::Tensor m = take(name + ".exp_avg", p);
      at::Tensor v = take(name + ".exp_avg_sq", p);
      HOTPATH_CHECK(m.defined() && v.defined(), "optimizer.safetensors: ", name,
                    ": has .step but not .exp_avg and .exp_avg_sq");
      s->exp_avg(m);
      s->exp_avg_sq(v);
      if (at::Tensor mx = take(name + ".max_exp_avg_sq", p); mx.defined()) s->max_exp_avg_sq(mx);
      optimizer.state()[key] = std::move(s);
    }
  }
}

}  // namespace hotpath::train
