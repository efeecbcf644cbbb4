#include "hotpath/train/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/weights.h"

namespace hotpath::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "step-";

bool is_checkpoint_name(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() <= 5) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
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
  data.trainer_json = read_file(json.string());
  return data;
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && is_checkpoint_name(name)) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    const auto step = [](const std::string& p) { return std::stoll(fs::path(p).filename().string().substr(5)); };
    return step(a) < step(b);
  });
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
  const auto take = [&](const std::string& key, const at::Tensor& like) -> at::Tensor {
    const auto it = state.find(key);
    if (it == state.end()) return {};
    HOTPATH_CHECK(it->second.sizes() == like.sizes(), "optimizer.safetensors: ", key, ": shape ", it->second.sizes(),
                  " does not match the parameter's ", like.sizes());
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
      s->step(step->second.item<std::int64_t>());
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
