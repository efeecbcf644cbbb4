// hotpath/models/text/prefix.h — prefix tuning (P-Tuning v2's deep prompts) for the BERT classifiers,
// saved and loaded in PEFT's PREFIX_TUNING format.
//
//   formats::PrefixConfig c = prefix_config_for(*model, {.num_virtual_tokens = 20, .prefix_projection = true});
//   LoraReport r = apply_prefix(*model, c);   // freezes the encoder; trains the prefix and the classifier
//   ... train ...
//   save_prefix(*model, c, "adapter/");       // adapter_config.json + adapter_model.safetensors, as peft writes
//   load_prefix(*other, "adapter/");          // peft's files too: PeftModel.save_pretrained's output
//
// What a prefix is: num_virtual_tokens key and value vectors per layer and head, prepended to that
// layer's keys and values, so every real token can attend to them; the real tokens' attention mask gets
// num_virtual_tokens ones in front, and their position ids start at num_virtual_tokens — as transformers'
// BertModel does with PEFT's past_key_values (position_ids = past_length + i), which is what makes the
// logits equal PEFT's. The table is [num_virtual_tokens, 2·layers·hidden]; column block 2i is layer i's
// key and 2i+1 its value, each [heads, head_dim] (PEFT's view + permute(2, 0, 3, 1, 4)).
//
// With prefix_projection the table is the output of PEFT's reparameterisation MLP (embedding
// [n, hidden] → Linear(hidden, encoder_hidden_size) → tanh → Linear(…, 2·layers·hidden)), which
// trains more stably than the table itself; the saved file holds the MLP's output, as PEFT's
// get_peft_model_state_dict writes it, so a loaded prefix is the plain table.
//
// Activation checkpointing: each layer's prefix is an input of its checkpointed block, so the
// recomputation in backward gives the prefix its gradient (PEFT users report this breaking with
// transformers' checkpointing).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "hotpath/formats/prefix_config.h"

namespace hotpath::models {

class BertForSequenceClassification;
class BertModel;
struct LoraReport;

// PEFT's PrefixEncoder: `embedding` (and `transform`, the MLP, while training with prefix_projection).
class PrefixEncoderImpl : public torch::nn::Cloneable<PrefixEncoderImpl> {
 public:
  explicit PrefixEncoderImpl(const formats::PrefixConfig& config);
  void reset() override;
  // The table [num_virtual_tokens, 2·num_layers·token_dim] (through the MLP when there is one).
  at::Tensor forward();
  // Layer `layer`'s keys and values as one [2, heads, num_virtual_tokens, head_dim] view of `table`.
  [[nodiscard]] at::Tensor layer_kv(const at::Tensor& table, std::int64_t layer) const;
  [[nodiscard]] const formats::PrefixConfig& config() const { return config_; }
  [[nodiscard]] bool projected() const { return !transform.is_empty(); }

  torch::nn::Embedding embedding{nullptr};
  torch::nn::Sequential transform{nullptr};

 private:
  formats::PrefixConfig config_;
};
TORCH_MODULE(PrefixEncoder);

struct PrefixOptions {
  std::int64_t num_virtual_tokens = 20;
  bool prefix_projection = false;
  std::int64_t encoder_hidden_size = 0;  // 0 = the model's hidden size
};

// A PrefixConfig (SEQ_CLS) for `model`'s shape. Errors: DistilBERT (transformers' DistilBertModel takes no
// past_key_values, so PEFT cannot prefix-tune it), a prefix that leaves no room for a token in
// max_position_embeddings.
formats::PrefixConfig prefix_config_for(const BertForSequenceClassification& model, const PrefixOptions& options);

// Attaches a fresh prefix (PEFT's initialisation: N(0, 1) table, torch's Linear init for the MLP) and
// freezes every parameter but the prefix's and the classifier's. Errors name what does not match.
LoraReport apply_prefix(BertForSequenceClassification& model, const formats::PrefixConfig& config);

// The adapter's tensors under PEFT's key names (CPU copies): "prompt_embeddings" (the table, the MLP
// evaluated) and "base_model.classifier.weight" / ".bias".
std::map<std::string, at::Tensor> prefix_state_dict(BertForSequenceClassification& model);

// Writes dir/adapter_config.json (inference_mode true, as save_pretrained does) and dir/adapter_model.safetensors.
void save_prefix(BertForSequenceClassification& model, const formats::PrefixConfig& config,
                 const std::filesystem::path& dir);

// Reads a PEFT prefix directory into `model` (apply_prefix with the file's config, the MLP folded: the
// file holds the table) and copies the classifier in. Every tensor must be there with its shape; errors
// name the file and the key. Checked before the model changes.
formats::PrefixConfig load_prefix(BertForSequenceClassification& model, const std::filesystem::path& dir);

}  // namespace hotpath::models
