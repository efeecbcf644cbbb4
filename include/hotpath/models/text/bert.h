// hotpath/models/text/bert.h — BERT, MiniLM, DistilBERT and Longformer encoders whose parameter names are Hugging
// Face's state_dict keys, so a HF model directory's model.safetensors / pytorch_model.bin loads unchanged.
//
//   auto model = hotpath::models::load_bert_classifier("my-bert-dir");      // config.json + weights
//   at::Tensor logits = model->forward(input_ids, attention_mask, token_type_ids);  // [B, num_labels]
//   auto embedder = hotpath::models::load_sentence_embedder("all-MiniLM-L6-v2");  // mean pool + L2 norm
//
// Matches transformers' BertModel / DistilBertModel in eval mode (eager attention): post-norm layers,
// exact (erf) GELU for "gelu", LayerNorm eps from config.json (DistilBERT: 1e-12), absolute position
// embeddings only. Attention goes through one switchable function (BertOptions::attention) over
// q, k, v [B, heads, L, head_dim], the key padding mask [B, L] (1 = keep) and the dropout probability
// on the attention probabilities (config.attention_probs_dropout_prob in training, 0 in eval), so a
// fused kernel can replace the ATen reference without touching the layers.
//
// Longformer (config.json model_type "longformer", transformers' LongformerModel): the same layers with
// sliding-window attention (ops/sliding_attention.h: each token sees attention_window / 2 tokens either side and
// the global tokens) plus separate query/key/value_global projections for the global tokens, which attend to
// every token (ops::attention); RoBERTa positions. Its attention_mask holds HF's merged roles: 0 padding,
// 1 local, 2 global (LongformerModel._merge_to_attention_mask; ops::token_roles builds it from HF's two masks).
// The classifier makes the first token global, as LongformerForSequenceClassification does by default. Memory
// and work grow linearly with the length. Not offered on Longformer: prefixes, adapters, the engine; in
// training the attention-probability dropout of the local part (hidden dropout is applied as usual).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/formats/bert_config.h"
#include "hotpath/models/lora.h"
#include "hotpath/models/text/adapter.h"
#include "hotpath/models/text/longformer.h"
#include "hotpath/models/text/prefix.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/dropout.h"

namespace hotpath::models {

// dropout(softmax(q·kᵀ/√d + mask))·v with q, k, v [B, heads, L, head_dim] and key_padding_mask [B, L]
// (nonzero = attend; undefined = attend everywhere) → [B, heads, L, head_dim]. dropout.p > 0 only in
// training: the layer passes either a draw from LibTorch's default CPU generator (at::manual_seed repeats
// it, activation checkpointing replays it) or, with a keyed ops::DropoutSource, a draw keyed per sample
// (dropout.sample_index; the same on every data-parallel rank). ops::fused_attention (attention.h) has
// this signature.
using AttentionFn = at::Tensor (*)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_padding_mask, const ops::AttentionDropout& dropout);

// Plain ATen, as transformers' eager attention: matmul, ·1/√d, masked keys set to the dtype's lowest
// value, softmax, at::dropout(probs, dropout_p) when dropout_p > 0, matmul.
at::Tensor bert_eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& key_padding_mask, double dropout_p = 0.0);
// The AttentionFn form: unkeyed dropout is at::dropout(probs, dropout.p) as above (its seed unused); keyed
// (dropout.sample_index set) applies ops::attention_dropout_mask's mask, as ops::reference_attention does —
// on the CPU; CUDA tensors take at::dropout as unkeyed (that mask is made on the host), as the SDPA path does.
at::Tensor bert_eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& key_padding_mask, const ops::AttentionDropout& dropout);

struct BertOptions {
  AttentionFn attention = &bert_eager_attention;
  // Recompute each layer in backward (the hook is BertModel::run_layer).
  bool gradient_checkpointing = false;
  bool add_pooling_layer = true;  // BERT's pooler (dense + tanh on [CLS]); DistilBERT has none
  // Longformer's local attention: kAuto (the fused kernel on the CPU), or kReference (the dense twin, O(L²)).
  ops::AttentionKernel sliding_kernel = ops::AttentionKernel::kAuto;
};

// One encoder layer, registered under BERT's or DistilBERT's names (see bert.cpp).
class BertLayer : public torch::nn::Module {
 public:
  // index: the layer's place in the encoder (Longformer's attention_window is per layer).
  BertLayer(const formats::BertConfig& config, const BertOptions& options, std::int64_t index = 0);
  // hidden [B, L, H], mask [B, L] (Longformer: the roles, int8 0/1/2) → [B, L, H]. A keyed `dropout` draws this
  // layer's masks at its sites
  // first_site + 0 (attention probabilities), + 1, + 2 (hidden) and + 3 … + 8 (LoRA adapters).
  // prefix_kv [2, heads, P, head_dim] (prefix.h; undefined = none) is prepended to the keys and values;
  // mask then covers P + L keys.
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& mask, const ops::DropoutSource& dropout = {},
                     std::uint64_t first_site = 0, const at::Tensor& prefix_kv = {});
  void set_sliding_kernel(ops::AttentionKernel kernel);
  void set_attention(AttentionFn attention) { options_.attention = attention; }
  // Bottleneck adapters (adapter.h) after the attention block (config.mh_adapter) and after the feed-forward
  // block (config.output_adapter), registered as "attention.output.adapters.<name>" / "output.adapters.<name>".
  void add_adapter(const formats::AdapterConfig& config);
  [[nodiscard]] BottleneckAdapter attention_adapter() const { return attention_adapter_; }
  [[nodiscard]] BottleneckAdapter output_adapter() const { return output_adapter_; }

 private:
  formats::BertConfig config_;
  BertOptions options_;
  BottleneckAdapter attention_adapter_{nullptr}, output_adapter_{nullptr};
  // LoraLinear: a torch::nn::Linear that apply_lora (lora.h) can give an adapter.
  LoraLinear query_{nullptr}, key_{nullptr}, value_{nullptr}, attention_out_{nullptr};
  LongformerSelfAttention longformer_{nullptr};  // Longformer: the whole attention block (query_ … are its own)
  torch::nn::LayerNorm attention_norm_{nullptr};
  LoraLinear intermediate_{nullptr}, output_{nullptr};
  torch::nn::LayerNorm output_norm_{nullptr};
};

// BertModel / DistilBertModel: embeddings + encoder (+ BERT's pooler). Keys as in HF without the
// "bert." / "distilbert." prefix (embeddings.*, encoder.layer.N.* or transformer.layer.N.*, pooler.*).
class BertModel : public torch::nn::Module {
 public:
  explicit BertModel(const formats::BertConfig& config, const BertOptions& options = {});

  // input_ids [B, L] (integer), attention_mask [B, L] (1 = token, 0 = padding; undefined = all ones; Longformer:
  // 2 = a global token),
  // token_type_ids [B, L] (undefined = zeros; ignored by DistilBERT) → last hidden state [B, L, H].
  // dropout: keyed (ops::DropoutSource, one global sample index per row of input_ids) makes every
  // dropout mask in training a function of (its seed, the sample, the site) — data-parallel ranks and
  // any padding draw what one large batch would; not keyed: the default CPU generator, per call.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                     const at::Tensor& token_type_ids = {}, const ops::DropoutSource& dropout = {});
  // BERT's pooler on hidden[:, 0]: tanh(dense(x)) → [B, H]. Throws when the model has no pooler.
  at::Tensor pool(const at::Tensor& last_hidden, const ops::DropoutSource& dropout = {});

  [[nodiscard]] const formats::BertConfig& config() const { return config_; }
  [[nodiscard]] const BertOptions& options() const { return options_; }
  void set_attention(AttentionFn attention);
  void set_gradient_checkpointing(bool on) { options_.gradient_checkpointing = on; }
  void set_sliding_kernel(ops::AttentionKernel kernel);
  [[nodiscard]] std::int64_t num_layers() const { return static_cast<std::int64_t>(layers_.size()); }
  [[nodiscard]] std::shared_ptr<BertLayer> layer(std::size_t i) const { return layers_.at(i); }
  // A prefix (prefix.h) registered as "prefix_encoder", replacing any earlier one; nullptr removes it.
  void set_prefix(PrefixEncoder prefix);
  [[nodiscard]] PrefixEncoder prefix() const { return prefix_; }  // shares the module (nullptr: none)

 private:
  at::Tensor embed(const at::Tensor& input_ids, const at::Tensor& token_type_ids, const ops::DropoutSource& dropout,
                   std::int64_t first_position);
  // Every layer runs through here: the single place to wrap a layer in activation checkpointing
  // (options_.gradient_checkpointing) or anything else per layer.
  at::Tensor run_layer(std::size_t i, const at::Tensor& hidden, const at::Tensor& mask,
                       const ops::DropoutSource& dropout, const at::Tensor& prefix_kv);

  formats::BertConfig config_;
  BertOptions options_;
  torch::nn::Embedding word_embeddings_{nullptr}, position_embeddings_{nullptr}, token_type_embeddings_{nullptr};
  torch::nn::LayerNorm embedding_norm_{nullptr};
  std::vector<std::shared_ptr<BertLayer>> layers_;
  LoraLinear pooler_{nullptr};
  PrefixEncoder prefix_{nullptr};
};

// BertForSequenceClassification ("bert." + "classifier."), DistilBertForSequenceClassification
// ("distilbert." + "pre_classifier." + "classifier.") or LongformerForSequenceClassification ("longformer." +
// "classifier.dense." + "classifier.out_proj.": tanh(dense(first token)) → out_proj, the first token global).
class BertForSequenceClassification : public torch::nn::Module {
 public:
  explicit BertForSequenceClassification(const formats::BertConfig& config, BertOptions options = {});
  // → logits [B, num_labels]. dropout: as BertModel::forward (the head's dropout included).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                     const at::Tensor& token_type_ids = {}, const ops::DropoutSource& dropout = {});

  [[nodiscard]] const formats::BertConfig& config() const { return encoder->config(); }

  std::shared_ptr<BertModel> encoder;                // "bert", "distilbert" or "longformer"
  torch::nn::Linear pre_classifier{nullptr};         // DistilBERT; Longformer's classifier.dense
  torch::nn::Linear classifier{nullptr};             // Longformer: classifier.out_proj
};

struct SentenceEmbedderOptions {
  bool normalize = true;  // sentence-transformers' Normalize module (L2)
};

// sentence-transformers' Transformer → Pooling(mean) → Normalize: the masked mean of the last hidden
// state, L2-normalised. A handle (not a Module) because the checkpoint's keys are BertModel's with no
// prefix: train, move or load `model` itself.
class SentenceEmbedder {
 public:
  explicit SentenceEmbedder(std::shared_ptr<BertModel> model, const SentenceEmbedderOptions& options = {});
  // → [B, H] in the model's dtype.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                     const at::Tensor& token_type_ids = {}) const;
  [[nodiscard]] const SentenceEmbedderOptions& options() const { return options_; }

  std::shared_ptr<BertModel> model;

 private:
  SentenceEmbedderOptions options_;
};

// Mean over the tokens whose mask is nonzero (sentence-transformers' Pooling, mean mode): [B, L, H] → [B, H].
at::Tensor masked_mean_pool(const at::Tensor& hidden, const at::Tensor& attention_mask);

// ---- from a Hugging Face model directory (config.json + model.safetensors or pytorch_model.bin) ----

struct BertLoadOptions {
  BertOptions model = {};
  // Keep initial values for missing tensors (e.g. a fresh classifier on a pretrained encoder) and
  // ignore unexpected ones; off: any mismatch is an error.
  bool allow_partial = false;
};

std::shared_ptr<BertModel> load_bert_model(const std::filesystem::path& dir, const BertLoadOptions& options = {},
                                           LoadReport* report = nullptr);
std::shared_ptr<BertForSequenceClassification> load_bert_classifier(const std::filesystem::path& dir,
                                                                    const BertLoadOptions& options = {},
                                                                    LoadReport* report = nullptr);
// Reads modules.json and 1_Pooling/config.json when present: anything but mean pooling (optionally
// followed by Normalize) is a hotpath::Error naming the file; without them, mean + normalize.
SentenceEmbedder load_sentence_embedder(const std::filesystem::path& dir, const BertLoadOptions& options = {},
                                        LoadReport* report = nullptr);

}  // namespace hotpath::models
