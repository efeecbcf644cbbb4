// hotpath/models/text/hf_weights.h — the weights of a Hugging Face model directory, without executing pickle.
//
//   std::map<std::string, at::Tensor> state = read_hf_state_dict("bert-dir");  // safetensors or .bin
//   LoadReport r = load_state_dict(*model, std::move(state), "bert-dir", {}, {.base_prefix = "bert"});
//   std::map<std::string, at::Tensor> sd = read_torch_state_dict("pytorch_model.bin");
//
// pytorch_model.bin is torch.save's zip format (data.pkl + data/N storages), read without LibTorch's
// reader: torch_zip.h (bounds-checked STORED/ZIP64 container) and torch_pickle.h (a weights-only
// unpickler: the only globals it accepts are collections.OrderedDict, torch._utils._rebuild_tensor_v2 /
// _rebuild_parameter and torch.*Storage; any other (os.system, ...) is refused by name, and nothing
// from the file is ever called). Both are torch-free and fuzzed (fuzz/fuzz_torch_bin.cpp). The
// legacy non-zip format is refused.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <map>
#include <string>

#include "hotpath/models/weights.h"

namespace hotpath::models {

// model.safetensors if present, else pytorch_model.bin (a directory), or the file itself; every tensor
// as a CPU tensor of the file's dtype. Errors name the file.
std::map<std::string, at::Tensor> read_hf_state_dict(const std::filesystem::path& dir_or_file);
// A torch.save'd dict of tensors (state_dict), read weights-only: non-tensor values are skipped, the
// tensors of nested dicts are keyed "outer.inner". Every tensor is contiguous; two keys viewing the
// whole of one storage (tied weights) may share memory.
std::map<std::string, at::Tensor> read_torch_state_dict(const std::filesystem::path& path);
// The weights file read_hf_state_dict would use.
std::filesystem::path hf_weights_file(const std::filesystem::path& dir_or_file);

struct HfKeyOptions {
  // HF's base_model_prefix ("bert", "distilbert"). When the module's keys start with "<prefix>." and
  // the file's do not (a bare encoder checkpoint into a model with a head), the prefix is added; when
  // the file's do and the module's do not (a head checkpoint into the bare encoder), the prefixed keys
  // are used with the prefix removed and the head's keys are dropped.
  std::string base_prefix;
};

// Renames the file's keys as HF's from_pretrained does (legacy LayerNorm gamma/beta → weight/bias,
// the prefix rule above) and drops the non-persistent position_ids buffer old checkpoints carry.
std::map<std::string, at::Tensor> remap_hf_keys(std::map<std::string, at::Tensor> state,
                                                const torch::nn::Module& module, const HfKeyOptions& keys);

// load_safetensors' rules (weights.h) for tensors already in memory, after remap_hf_keys: missing,
// unexpected and shape-mismatched keys are reported by name, and refused unless allow_partial; a
// shape mismatch adds "does config.json match the weights?". With a base_prefix, a mismatch inside the
// base model (not the head) is refused even with allow_partial. Nothing is written on refusal.
LoadReport load_state_dict(torch::nn::Module& module, std::map<std::string, at::Tensor> state,
                           const std::string& source, const LoadOptions& options = {},
                           const HfKeyOptions& keys = {});

}  // namespace hotpath::models
