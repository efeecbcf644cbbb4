// hotpath/models/text/adapter.h — bottleneck adapters (Houlsby, Pfeiffer) for the BERT classifiers, saved
// and loaded in the `adapters` library's (AdapterHub) format.
//
//   formats::AdapterConfig c = formats::AdapterConfig::preset("seq_bn");   // Pfeiffer; "double_seq_bn": Houlsby
//   c.reduction_factor = 16;
//   LoraReport r = apply_adapter(*model, c);   // freezes the encoder; trains the adapters and the classifier
//   save_adapter(*model, c, "adapter/");       // adapter_config.json, adapter.safetensors, head_config.json,
//                                              // model_head.safetensors: model.load_adapter(dir, use_safetensors=True)
//   load_adapter(*other, "adapter/");          // adapters' own save_adapter(..., use_safetensors=True) output
//
// An adapter is down → activation → up (adapter_down.0 [H/r, H], adapter_up [H, H/r], "bert" init: N(0, 0.02)
// weights, zero biases), placed in a sublayer as formats/adapter_config.h describes. Parameter names are the
// library's: "bert.encoder.layer.<i>.output.adapters.<name>.adapter_down.0.weight" (and attention.output.… for
// Houlsby), so a state dict moves between the two unchanged.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "hotpath/formats/adapter_config.h"

namespace hotpath::models {

class BertForSequenceClassification;
struct LoraReport;

// One bottleneck: up(act(down(x))) · scaling, dropout in training.
class BottleneckAdapterImpl : public torch::nn::Cloneable<BottleneckAdapterImpl> {
 public:
  BottleneckAdapterImpl(const formats::AdapterConfig& config, std::int64_t hidden);
  void reset() override;
  at::Tensor forward(const at::Tensor& x);
  // The sublayer with the adapter in it: h = dropout(dense(x)), input = the sublayer's input, norm = its LayerNorm.
  at::Tensor sublayer(const at::Tensor& h, const at::Tensor& input, const std::function<at::Tensor(const at::Tensor&)>& norm);
  [[nodiscard]] const formats::AdapterConfig& config() const { return config_; }

  torch::nn::Sequential adapter_down{nullptr};  // "0": Linear(H, H/r); the activation has no parameters
  torch::nn::Linear adapter_up{nullptr};

 private:
  formats::AdapterConfig config_;
  std::int64_t hidden_;
};
TORCH_MODULE(BottleneckAdapter);

// Adds `config`'s adapters to every layer (fresh, the library's "bert" init) and freezes every parameter but
// theirs and the classifier's. Errors: DistilBERT (its layers are named otherwise in the library), a second adapter.
LoraReport apply_adapter(BertForSequenceClassification& model, const formats::AdapterConfig& config);

// The adapters' tensors under the library's key names, and the head's ("classifier.weight", ".bias"); CPU copies.
std::map<std::string, at::Tensor> adapter_state_dict(const BertForSequenceClassification& model);
std::map<std::string, at::Tensor> adapter_head_state_dict(const BertForSequenceClassification& model);

// Writes what adapters 1.3's save_adapter(dir, name, with_head=True, use_safetensors=True) writes.
void save_adapter(const BertForSequenceClassification& model, const formats::AdapterConfig& config,
                  const std::filesystem::path& dir);

// Reads an adapters directory (adapter.safetensors; head_config.json + model_head.safetensors when present):
// apply_adapter with its config, then every tensor copied in. Every adapter tensor must be in the file with
// its shape and every file tensor must land; errors name the file and the key. Checked before the model changes.
formats::AdapterConfig load_adapter(BertForSequenceClassification& model, const std::filesystem::path& dir);

}  // namespace hotpath::models
