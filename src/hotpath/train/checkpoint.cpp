#include "hotpath/train/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/weights.h"
#include "hotpath/core/remove_tree.h"

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

void begin_checkpoint(const std::string& dir) {
  const fs::path tmp = dir + ".tmp";
  std::error_code ec;
  hotpath::remove_tree(tmp, ec);
  fs::create_directories(tmp, ec);
  HOTPATH_CHECK(!ec, tmp.string(), ": cannot create the checkpoint directory: ", ec.message());
}

void save_checkpoint(const std::string& dir, const CheckpointData& data) {
  const fs::path final_dir(dir);
  const fs::path tmp = final_dir.string() + ".tmp";
  std::error_code ec;
  if (data.optimizer_manifest.empty()) {
    begin_checkpoint(dir);
    write_part(tmp, "optimizer.safetensors", data.optimizer);
  } else {
    // Sharded: the ranks' shards are in DIR.tmp/ already (begin_checkpoint, write_optimizer_shard, barrier).
    const auto j = parse_json(data.optimizer_manifest, "optimizer.json");
    for (const auto& f : j.at("files")) {
      const fs::path shard = tmp / f.get<std::string>();
      HOTPATH_CHECK(fs::exists(shard), shard.string(), ": a rank's optimizer shard is missing from the checkpoint "
                                                        "being written (did every rank write before the barrier?)");
    }
    write_file_atomic((tmp / "optimizer.json").string(), data.optimizer_manifest);
  }
  write_part(tmp, "model.safetensors", data.model);
  if (!data.ema.empty()) write_part(tmp, "ema.safetensors", data.ema);
  write_part(tmp, "rng.safetensors", data.rng);
  write_file_atomic((tmp / "trainer.json").string(), data.trainer_json);
  // Every file is fsynced by its writer; now swap the directory in and make the rename durable.
  hotpath::remove_tree(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  HOTPATH_CHECK(!ec, final_dir.string(), ": cannot rename ", tmp.string(), " to it: ", ec.message());
  sync_directory(final_dir.parent_path().empty() ? "." : final_dir.parent_path().string());
}

CheckpointData load_checkpoint(const std::string& dir) {
  const fs::path d(dir);
  HOTPATH_CHECK(fs::is_directory(d), dir, ": not a checkpoint directory");
  CheckpointData data;
  data.model = read_part(d, "model.safetensors");
  if (fs::exists(d / "optimizer.json")) {
    data.optimizer_manifest = read_file((d / "optimizer.json").string(), read_limit::kConfig, "optimizer manifest");
    data.optimizer = assemble_optimizer_shards(dir, data.optimizer_manifest);
  } else {
    data.optimizer = read_part(d, "optimizer.safetensors");
  }
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
    hotpath::remove_tree(all[i], ec);
  }
  if (!fs::is_directory(root, ec)) return;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.size() > 4 && name.ends_with(".tmp")) hotpath::remove_tree(entry.path(), ec);
  }
}

// ---- sharded optimizer state (ZeRO) ------------------------------------------------------------

std::vector<ShardLayout::Segment> ShardLayout::segments(int rank) const {
  std::vector<Segment> out;
  const std::int64_t lo = std::min(numel, static_cast<std::int64_t>(rank) * shard_numel);
  const std::int64_t hi = std::min(numel, lo + shard_numel);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    const std::int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
    if (a < b) out.push_back({i, a - p.offset, b - a});
  }
  return out;
}

ShardLayout make_shard_layout(const NamedParameters& flat_order, int world_size, std::int64_t align) {
  HOTPATH_CHECK(world_size >= 1 && align >= 1, "shard layout: world size ", world_size, " and alignment ", align,
                " must be >= 1");
  ShardLayout layout;
  layout.world_size = world_size;
  for (const auto& [name, t] : flat_order) {
    layout.params.push_back({name, t.sizes().vec(), layout.numel, t.numel()});
    layout.numel += t.numel();
  }
  const std::int64_t per_rank = (layout.numel + world_size - 1) / world_size;
  layout.shard_numel = std::max<std::int64_t>(align, (per_rank + align - 1) / align * align);
  return layout;
}

std::string optimizer_shard_file(int rank, int world_size) {
  const auto five = [](int v) {
    std::string d = std::to_string(v);
    return std::string(d.size() < 5 ? 5 - d.size() : 0, '0') + d;
  };
  return "optimizer-shard-" + five(rank) + "-of-" + five(world_size) + ".safetensors";
}

std::string optimizer_manifest_json(const ShardLayout& layout, int zero_stage, std::int64_t step) {
  nlohmann::ordered_json j;
  j["format"] = 1;
  j["sharded"] = "zero";
  j["zero"] = zero_stage;
  j["world_size"] = layout.world_size;
  j["numel"] = layout.numel;
  j["shard_numel"] = layout.shard_numel;
  j["step"] = step;
  j["params"] = nlohmann::ordered_json::array();
  for (const auto& p : layout.params) {
    j["params"].push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}});
  }
  j["files"] = nlohmann::ordered_json::array();
  for (int r = 0; r < layout.world_size; ++r) j["files"].push_back(optimizer_shard_file(r, layout.world_size));
  return j.dump(2) + "\n";
}

void write_optimizer_shard(const std::string& dir, int rank, const ShardLayout& layout, const TensorMap& state) {
  const fs::path tmp = dir + ".tmp";
  HOTPATH_CHECK(fs::is_directory(tmp), tmp.string(), ": missing; rank 0 creates it before the ranks write their shards");
  models::write_tensors((tmp / optimizer_shard_file(rank, layout.world_size)).string(), state);
}

TensorMap assemble_optimizer_shards(const std::string& dir, const std::string& manifest_json) {
  const std::string where = (fs::path(dir) / "optimizer.json").string();
  ShardLayout layout;
  std::vector<std::string> files;
  try {
    const auto j = parse_json(manifest_json, where);
    HOTPATH_CHECK(j.is_object() && j.value("format", 0) == 1 && j.value("sharded", std::string()) == "zero", where,
                  ": not a ZeRO optimizer manifest of format 1");
    const auto integer = [&](const nlohmann::json& v, const char* key, std::int64_t lo, std::int64_t hi) {
      HOTPATH_CHECK(v.contains(key) && v.at(key).is_number_integer(), where, ": ", key, ": expected an integer");
      const auto n = v.at(key).get<std::int64_t>();
      check_int_in(n, lo, hi, where + ": " + key);
      return n;
    };
    constexpr std::int64_t kMaxNumel = std::int64_t{1} << 40;
    layout.world_size = static_cast<int>(integer(j, "world_size", 1, 1 << 20));
    layout.numel = integer(j, "numel", 0, kMaxNumel);
    layout.shard_numel = integer(j, "shard_numel", 1, kMaxNumel);
    HOTPATH_CHECK(layout.shard_numel * layout.world_size >= layout.numel, where, ": ", layout.world_size, " shards of ",
                  layout.shard_numel, " elements do not cover ", layout.numel);
    std::int64_t offset = 0;
    for (const auto& p : j.at("params")) {
      ShardLayout::Param param;
      param.name = p.at("name").get<std::string>();
      param.shape = p.at("shape").get<std::vector<std::int64_t>>();
      param.offset = integer(p, "offset", 0, kMaxNumel);
      param.numel = 1;
      for (const std::int64_t d : param.shape) {
        check_int_in(d, 0, kMaxNumel, where + ": " + param.name + ": shape");
        param.numel *= d;
        check_int_in(param.numel, 0, kMaxNumel, where + ": " + param.name + ": numel");
      }
      HOTPATH_CHECK(param.offset == offset, where, ": ", printable(param.name), ": offset ", param.offset,
                    ", expected ", offset, " (parameters one after the other)");
      offset += param.numel;
      layout.params.push_back(std::move(param));
    }
    HOTPATH_CHECK(offset == layout.numel, where, ": the parameters hold ", offset, " elements, numel says ", layout.numel);
    files = j.at("files").get<std::vector<std::string>>();
    HOTPATH_CHECK(files.size() == static_cast<std::size_t>(layout.world_size), where, ": ", files.size(),
                  " shard files for world_size ", layout.world_size);
    for (int r = 0; r < layout.world_size; ++r) {
      HOTPATH_CHECK(files[r] == optimizer_shard_file(r, layout.world_size), where, ": files[", r, "] is ",
                    printable(files[r]), ", expected ", optimizer_shard_file(r, layout.world_size));
    }
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, where, ": invalid manifest: ", e.what());
  }
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < layout.params.size(); ++i) index[layout.params[i].name] = i;
  // name.field → the flattened whole state and how many of its elements the shards covered.
  std::map<std::string, std::pair<at::Tensor, std::int64_t>> whole;
  std::map<std::string, std::int64_t> steps;
  TensorMap out;
  for (int r = 0; r < layout.world_size; ++r) {
    const fs::path file = fs::path(dir) / files[r];
    HOTPATH_CHECK(fs::exists(file), file.string(), ": missing; the checkpoint's optimizer state is sharded over ",
                  layout.world_size, " ranks and every shard is needed");
    std::map<std::size_t, ShardLayout::Segment> mine;
    for (const auto& seg : layout.segments(r)) mine[seg.param] = seg;
    for (const auto& [key, t] : models::read_tensors(file.string())) {
      const auto dot = key.rfind('.');
      const auto it = dot == std::string::npos ? index.end() : index.find(key.substr(0, dot));
      HOTPATH_CHECK(it != index.end(), file.string(), ": ", printable(key), ": not state of a parameter in ", where);
      const std::string field = key.substr(dot + 1);
      const auto seg = mine.find(it->second);
      HOTPATH_CHECK(seg != mine.end(), file.string(), ": ", printable(key), ": rank ", r,
                    " owns no part of this parameter in the manifest's layout");
      if (field == "step") {
        HOTPATH_CHECK(t.numel() == 1 && !t.is_floating_point(), file.string(), ": ", key, ": expected one integer");
        const std::int64_t n = t.item<std::int64_t>();
        const auto [s, fresh] = steps.try_emplace(key, n);
        HOTPATH_CHECK(fresh || s->second == n, file.string(), ": ", key, ": step ", n, ", another shard says ", s->second);
        continue;
      }
      const ShardLayout::Param& p = layout.params[it->second];
      HOTPATH_CHECK(t.dim() == 1 && t.size(0) == seg->second.length && t.is_floating_point(), file.string(), ": ", key,
                    ": expected ", seg->second.length, " floating-point elements (rank ", r, "'s part of ", p.name,
                    "), got shape ", t.sizes());
      auto [w, fresh] = whole.try_emplace(key, at::Tensor(), 0);
      if (fresh) w->second.first = at::zeros({p.numel}, t.options());
      w->second.first.narrow(0, seg->second.begin, seg->second.length).copy_(t);
      w->second.second += seg->second.length;
    }
  }
  for (auto& [key, w] : whole) {
    const ShardLayout::Param& p = layout.params[index.at(key.substr(0, key.rfind('.')))];
    HOTPATH_CHECK(w.second == p.numel, where, ": ", key, ": the shards hold ", w.second, " of its ", p.numel,
                  " elements (a shard lacks its part)");
    out[key] = w.first.view(p.shape);
  }
  for (const auto& [key, n] : steps) out[key] = at::scalar_tensor(n, at::kLong);
  return out;
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
