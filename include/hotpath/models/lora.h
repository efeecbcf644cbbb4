// hotpath/models/lora.h — LoRA adapters on any module tree, saved and loaded in PEFT's format.
//
//   LoraReport r = apply_lora(*model, {.r = 8, .lora_alpha = 16, .target_modules = {"query", "value"}});
//   std::cout << r.summary() << "\n";   // "trainable params: 73,728 || all params: ... || trainable%: 0.27"
//   save_lora(*model, config, "adapter/");  merge_lora(*model);   // PEFT's adapter_config.json + safetensors
//
// Why a LoraLinear type: LibTorch modules call their layers through typed members
// (`query_->forward(x)`), so a generic tree walk cannot swap a torch::nn::Linear for something else
// the way PEFT's setattr does. A model makes a projection adaptable by declaring it LoraLinear, a
// drop-in for torch::nn::Linear (same options, `weight`/`bias` names, forward); without an adapter it
// is exactly a Linear. apply_lora then attaches lora_A [r, in] (kaiming-uniform, a = √5, as PEFT) and
// lora_B [out, r] (zeros) to the matching ones: y = x·Wᵀ + b + B(A(dropout(x)))·alpha/r, and the
// parameter names become PEFT's without the adapter name: "<path>.lora_A.weight".
//
// Files: adapter_model.safetensors keys are "base_model.model.<path>.lora_A.weight" (and ".lora_B.",
// and "base_model.model.<path>.<param>" for modules_to_save), as peft's get_peft_model_state_dict
// writes them, so `peft.PeftModel.from_pretrained(hf_model, dir)` loads a hotpath adapter when the
// hotpath paths are HF's (the BERT models' are).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/formats/lora_config.h"
#include "hotpath/ops/dropout.h"

namespace hotpath::models {

// A torch::nn::Linear with an optional LoRA adapter (see the top of this file).
class LoraLinearImpl : public torch::nn::Cloneable<LoraLinearImpl> {
 public:
  LoraLinearImpl(std::int64_t in_features, std::int64_t out_features)
      : LoraLinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit LoraLinearImpl(const torch::nn::LinearOptions& options);

  void reset() override;
  void reset_parameters();  // as torch::nn::Linear (kaiming-uniform a = √5, bias U(±1/√in))
  void pretty_print(std::ostream& stream) const override;
  at::Tensor forward(const at::Tensor& input);
  // The same with the adapter's dropout keyed per sample (dropout.h): site `site` of `dropout` when it
  // is keyed, the default generator's draw (forward(input)) when not.
  at::Tensor forward(const at::Tensor& input, const ops::DropoutSource& dropout, std::uint64_t site);

  // Registers lora_A, lora_B (and lora_dropout when dropout > 0); replaces an existing adapter.
  void add_adapter(std::int64_t r, double scaling, double dropout);
  // W += scaling · B·A, then drops the adapter: the module is a plain Linear again.
  void merge();
  [[nodiscard]] bool has_adapter() const { return !lora_A.is_empty(); }
  [[nodiscard]] double scaling() const { return scaling_; }

  torch::nn::LinearOptions options;
  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined
  torch::nn::Linear lora_A{nullptr};  // [r, in], no bias
  torch::nn::Linear lora_B{nullptr};  // [out, r], no bias
  torch::nn::Dropout lora_dropout{nullptr};

 private:
  double scaling_ = 1.0;
};
TORCH_MODULE(LoraLinear);

struct LoraReport {
  std::vector<std::string> adapted;  // module paths that got an adapter, sorted
  std::vector<std::string> saved;    // modules_to_save paths, sorted
  std::int64_t trainable_params = 0;
  std::int64_t all_params = 0;
  [[nodiscard]] double trainable_fraction() const;
  // PEFT's print_trainable_parameters line: "trainable params: 1,234 || all params: 5,678 || trainable%: 21.7329".
  [[nodiscard]] std::string summary() const;
};

// Attaches adapters to every LoraLinear whose path matches, freezes every other parameter except those
// of modules_to_save, and returns the counts. Errors: no module matches; a matching torch::nn::Linear
// (it cannot be adapted: declare it LoraLinear) or a target that is not a linear layer. As in peft,
// modules_to_save entries that match nothing are ignored.
LoraReport apply_lora(torch::nn::Module& module, const formats::LoraConfig& config);

// The counts for a module as it stands (requires_grad parameters vs all).
LoraReport lora_report(const torch::nn::Module& module);

// The adapter's tensors under PEFT's key names (CPU copies).
std::map<std::string, at::Tensor> lora_state_dict(const torch::nn::Module& module, const formats::LoraConfig& config);

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (creates dir).
void save_lora(const torch::nn::Module& module, const formats::LoraConfig& config, const std::filesystem::path& dir);

// Reads a PEFT adapter directory, applies it to `module` (apply_lora with the file's config) and copies
// the saved tensors in. Every adapter and modules_to_save tensor of the module must be in the file and
// every file tensor must land somewhere, with equal shapes; errors name the file and the key. The
// config and file are checked before the module changes; a key or shape error leaves fresh adapters.
formats::LoraConfig load_lora(torch::nn::Module& module, const std::filesystem::path& dir);

// Merges every adapter into its base weight (LoraLinear::merge); returns how many were merged.
std::int64_t merge_lora(torch::nn::Module& module);

}  // namespace hotpath::models
