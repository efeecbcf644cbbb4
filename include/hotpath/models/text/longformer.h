// hotpath/models/text/longformer.h — Longformer's self-attention block (transformers' LongformerSelfAttention),
// the piece that makes a BERT layer a Longformer layer (bert.h builds the rest: embeddings, feed-forward, heads).
//
//   LongformerSelfAttention attn(config, /*window=*/256);            // one-sided: attention_window / 2
//   at::Tensor ctx = attn->forward(hidden, ops::token_roles(mask, global_mask));  // [B, L, H] → [B, L, H]
//
// Every token attends over its window and the global tokens through query/key/value
// (ops::sliding_window_attention: the fused kernel, memory linear in L); each global token's row is then
// replaced by attention of query_global over key_global/value_global of every token (ops::attention). Keys
// are HF's: query, key, value, query_global, key_global, value_global. The projections are LoraLinear, so
// LoRA can target them.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "hotpath/formats/bert_config.h"
#include "hotpath/models/lora.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/dropout.h"

namespace hotpath::models {

class LongformerSelfAttentionImpl : public torch::nn::Module {
 public:
  // window: one-sided (HF's attention_window[layer] / 2).
  LongformerSelfAttentionImpl(const formats::BertConfig& config, std::int64_t window);

  // hidden [B, L, H], roles [B, L] (int8: 0 padding, 1 local, 2 global) → the context [B, L, H] before the
  // output projection. global_dropout: on the global rows' attention probabilities (training only). A keyed
  // `dropout` draws the projections' LoRA dropout at sites first_site + 3..5 (local) and + 9..11 (global).
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& roles,
                     const ops::AttentionDropout& global_dropout = {}, const ops::DropoutSource& dropout = {},
                     std::uint64_t first_site = 0);

  void set_kernel(ops::AttentionKernel kernel) { kernel_ = kernel; }
  [[nodiscard]] std::int64_t window() const { return window_; }

  LoraLinear query{nullptr}, key{nullptr}, value{nullptr};
  LoraLinear query_global{nullptr}, key_global{nullptr}, value_global{nullptr};

 private:
  std::int64_t heads_ = 1;
  std::int64_t window_ = 0;
  ops::AttentionKernel kernel_ = ops::AttentionKernel::kAuto;  // the local part's: kReference = the dense twin
};
TORCH_MODULE(LongformerSelfAttention);

}  // namespace hotpath::models
