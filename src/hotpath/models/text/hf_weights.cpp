#include "hotpath/models/text/hf_weights.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/formats/torch_pickle.h"

namespace hotpath::models {
using namespace hotpath::formats;  // TorchCheckpoint, TorchDtype, TorchTensorRecord, read_torch_checkpoint
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool any_key_starts_with(const std::map<std::string, at::Tensor>& state, const std::string& prefix) {
  return std::any_of(state.begin(), state.end(), [&](const auto& kv) { return starts_with(kv.first, prefix); });
}

// Old TF-converted checkpoints name LayerNorm's parameters gamma/beta (HF renames them on load).
std::string legacy_rename(std::string key) {
  const auto ends_with = [&](std::string_view tail) {
    return key.size() >= tail.size() && key.compare(key.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with(".gamma")) return key.substr(0, key.size() - 6) + ".weight";
  if (ends_with(".beta")) return key.substr(0, key.size() - 5) + ".bias";
  return key;
}

}  // namespace

std::filesystem::path hf_weights_file(const std::filesystem::path& dir_or_file) {
  if (!std::filesystem::is_directory(dir_or_file)) {
    HOTPATH_CHECK(std::filesystem::exists(dir_or_file), dir_or_file.string(), ": no such file or directory");
    return dir_or_file;
  }
  for (const char* name : {"model.safetensors", "pytorch_model.bin"}) {
    if (std::filesystem::exists(dir_or_file / name)) return dir_or_file / name;
  }
  HOTPATH_CHECK(!std::filesystem::exists(dir_or_file / "model.safetensors.index.json") &&
                    !std::filesystem::exists(dir_or_file / "pytorch_model.bin.index.json"),
                dir_or_file.string(), ": sharded checkpoints (*.index.json) are not supported; merge the shards");
  HOTPATH_CHECK(false, dir_or_file.string(), ": no model.safetensors or pytorch_model.bin");
  return {};
}

namespace {

at::ScalarType scalar_type(TorchDtype dtype) {
  switch (dtype) {
    case TorchDtype::kFloat32: return at::kFloat;
    case TorchDtype::kFloat64: return at::kDouble;
    case TorchDtype::kFloat16: return at::kHalf;
    case TorchDtype::kBFloat16: return at::kBFloat16;
    case TorchDtype::kInt64: return at::kLong;
    case TorchDtype::kInt32: return at::kInt;
    case TorchDtype::kInt16: return at::kShort;
    case TorchDtype::kInt8: return at::kChar;
    case TorchDtype::kUInt8: return at::kByte;
    case TorchDtype::kBool: return at::kBool;
  }
  return at::kFloat;
}

}  // namespace

std::map<std::string, at::Tensor> read_torch_state_dict(const std::filesystem::path& path) {
  const std::string source = path.string();
  const MappedFile file(source);
  // Container, pickle and every bound are checked torch-free (torch_pickle.h, fuzzed); what is left
  // here is copying the storages out of the map and taking the views.
  const TorchCheckpoint checkpoint = read_torch_checkpoint(file.bytes(), source);
  std::map<std::string, at::Tensor> storages;  // storage name → flat tensor (shared by tied weights)
  std::map<std::string, at::Tensor> out;
  for (const TorchTensorRecord& t : checkpoint.tensors) {
    const at::ScalarType type = scalar_type(t.dtype);
    if (t.numel() == 0) {
      out.emplace(t.key, at::empty(t.sizes, at::TensorOptions().dtype(type)));
      continue;
    }
    auto it = storages.find(t.storage);
    if (it == storages.end()) {
      // A copy, not a view of the map: the file closes on return, and the zip only aligns records
      // to 64 bytes when torch wrote it.
      const std::span<const std::byte> bytes = checkpoint.storages.at(t.storage);
      at::Tensor flat = at::empty({t.storage_numel}, at::TensorOptions().dtype(type));
      std::memcpy(flat.data_ptr(), bytes.data(), bytes.size());
      it = storages.emplace(t.storage, std::move(flat)).first;
    }
    out.emplace(t.key, it->second.as_strided(t.sizes, t.strides, t.offset).contiguous());
  }
  HOTPATH_CHECK(!out.empty(), source, ": the dict holds no tensors");
  return out;
}

std::map<std::string, at::Tensor> read_hf_state_dict(const std::filesystem::path& dir_or_file) {
  const std::filesystem::path file = hf_weights_file(dir_or_file);
  if (file.extension() == ".safetensors") return read_tensors(file.string());
  return read_torch_state_dict(file);
}

std::map<std::string, at::Tensor> remap_hf_keys(std::map<std::string, at::Tensor> state,
                                                const torch::nn::Module& module, const HfKeyOptions& keys) {
  std::map<std::string, at::Tensor> renamed;
  for (auto& [key, tensor] : state) {
    // A buffer transformers stopped saving (non-persistent since 4.31); never a parameter of ours.
    if (key == "position_ids" || (key.size() > 13 && key.ends_with(".position_ids"))) continue;
    renamed.emplace(legacy_rename(key), std::move(tensor));
  }
  if (keys.base_prefix.empty()) return renamed;

  const std::string prefix = keys.base_prefix + ".";
  const std::map<std::string, at::Tensor> own = named_state(module);
  const bool module_prefixed = any_key_starts_with(own, prefix);
  const bool file_prefixed = any_key_starts_with(renamed, prefix);
  std::map<std::string, at::Tensor> out;
  if (module_prefixed && !file_prefixed) {
    for (auto& [key, tensor] : renamed) out.emplace(prefix + key, std::move(tensor));
  } else if (!module_prefixed && file_prefixed) {
    for (auto& [key, tensor] : renamed) {
      if (starts_with(key, prefix)) out.emplace(key.substr(prefix.size()), std::move(tensor));
    }
  } else {
    out = std::move(renamed);
  }
  return out;
}

LoadReport load_state_dict(torch::nn::Module& module, std::map<std::string, at::Tensor> state,
                           const std::string& source, const LoadOptions& options, const HfKeyOptions& keys) {
  state = remap_hf_keys(std::move(state), module, keys);
  std::map<std::string, at::Tensor> own = named_state(module);
  LoadReport report;
  report.source = source;

  // Decide everything first: a refused load must leave the module as it was.
  std::vector<std::pair<at::Tensor*, const at::Tensor*>> plan;
  for (const auto& [name, tensor] : state) {
    const auto it = own.find(name);
    if (it == own.end()) {
      report.unexpected.push_back(name);
      continue;
    }
    if (it->second.sizes() != tensor.sizes()) {
      report.mismatched.push_back({name, it->second.sizes().vec(), tensor.sizes().vec()});
      continue;
    }
    HOTPATH_CHECK(at::isFloatingType(tensor.scalar_type()) == at::isFloatingType(it->second.scalar_type()), source,
                  ": tensor '", name, "' is ", c10::toString(tensor.scalar_type()), " in the file but ",
                  c10::toString(it->second.scalar_type()), " in the module; only float<->float and int<->int convert");
    plan.emplace_back(&it->second, &tensor);
    report.loaded.push_back(name);
  }
  for (const auto& [name, tensor] : own) {
    if (state.find(name) == state.end()) report.missing.push_back(name);
  }
  // std::map iteration is sorted already; the report's lists stay sorted.
  const std::string hint = report.mismatched.empty() ? "" : "; does config.json match the weights?";
  // Partial loading is for a new head on a pretrained base; a base-model tensor of another shape means
  // config.json and the weights disagree, which would otherwise train or embed with random values.
  const std::string prefix = keys.base_prefix + ".";
  const bool module_prefixed = !keys.base_prefix.empty() && any_key_starts_with(own, prefix);
  const bool base_mismatch =
      !keys.base_prefix.empty() && std::any_of(report.mismatched.begin(), report.mismatched.end(), [&](const auto& m) {
        return !module_prefixed || starts_with(m.name, prefix);
      });
  HOTPATH_CHECK(!base_mismatch, report.summary(), hint,
                "; refusing to load (the base model's shapes must match even when loading partially)");
  HOTPATH_CHECK(report.complete() || options.allow_partial, report.summary(), hint,
                "; refusing to load (allow partial loading to keep the module's values for these)");
  HOTPATH_CHECK(!report.loaded.empty() || own.empty(), report.summary(),
                "; no tensor of the file matches the module, is it the right file?");
  const at::NoGradGuard no_grad;
  for (const auto& [target, tensor] : plan) target->copy_(*tensor);
  return report;
}

}  // namespace hotpath::models
