#include "hotpath/models/text/bert.h"
#include "hotpath/ops/autocast_ops.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/nn/init.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/ops/activation_checkpoint.h"
#include "hotpath/ops/dropout.h"
#include "hotpath/models/text/hf_weights.h"

namespace hotpath::models {
using namespace hotpath::formats;  // BertActivation, BertArch, BertConfig, SentencePipeline
using namespace hotpath::ops;  // autocast_matmul, checkpoint, dropout_add, fused_dropout
namespace {

// ---- layers --------------------------------------------------------------------------------------

// Longformer's roles from a mask that already holds them (0 padding, 1 local, 2 global), or all local.
at::Tensor longformer_roles(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  return attention_mask.defined() ? attention_mask.to(at::kChar)
                                  : at::ones(input_ids.sizes(), input_ids.options().dtype(at::kChar));
}

std::string prefix_of(const BertConfig& c) { return std::string(base_model_prefix(c)); }

torch::nn::Linear make_linear(std::int64_t in, std::int64_t out) { return torch::nn::Linear(in, out); }
// The encoder's projections: LoRA targets (lora.h).
LoraLinear make_projection(std::int64_t in, std::int64_t out) { return LoraLinear(in, out); }

torch::nn::LayerNorm make_norm(const BertConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps));
}

// HF's _init_weights: N(0, initializer_range) weights, zero biases, the padding row zero, LayerNorm 1/0.
void init_weights(torch::nn::Module& module, const BertConfig& c) {
  const at::NoGradGuard no_grad;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    at::Tensor p = item.value();
    const bool norm = name.find("LayerNorm") != std::string::npos || name.find("layer_norm") != std::string::npos;
    if (norm) {
      name.ends_with(".weight") ? p.fill_(1.0) : p.zero_();
    } else if (name.ends_with(".bias")) {
      p.zero_();
    } else {
      p.normal_(0.0, c.initializer_range);
    }
  }
}

at::Tensor activation(const at::Tensor& x, BertActivation act) {
  switch (act) {
    case BertActivation::kGelu: return at::gelu(x);
    case BertActivation::kGeluNew: return at::gelu(x, "tanh");
    case BertActivation::kRelu: return at::relu(x);
  }
  return x;
}

// Hidden, embedding and classifier dropout: the fused kernels of dropout.h (one parallel pass, the
// residual add folded in, no mask kept for backward). HOTPATH_BERT_DROPOUT=aten puts at::dropout back
// (bernoulli_ + a saved float mask + a separate add): the A/B switch behind docs/benchmarks.md's numbers.
bool aten_dropout() {
  const char* v = std::getenv("HOTPATH_BERT_DROPOUT");
  return v != nullptr && std::string_view(v) == "aten";
}

// A keyed source (ops::DropoutSource) wins over HOTPATH_BERT_DROPOUT=aten: at::dropout cannot be keyed.
at::Tensor hidden_dropout(const at::Tensor& x, double p, bool training, const DropoutSource& source,
                          std::uint64_t site) {
  if (source.keyed()) return fused_dropout(x, source.draw(training ? p : 0.0, site));
  return aten_dropout() ? at::dropout(x, p, training) : fused_dropout(x, p, training);
}

// dropout(x) + residual.
at::Tensor hidden_dropout_add(const at::Tensor& x, const at::Tensor& residual, double p, bool training,
                              const DropoutSource& source, std::uint64_t site) {
  if (source.keyed()) return dropout_add(x, residual, source.draw(training ? p : 0.0, site));
  return aten_dropout() ? at::dropout(x, p, training) + residual : dropout_add(x, residual, p, training);
}

// Dropout sites of a keyed source (DropoutSource::draw's offset): one fixed number per place in the
// model, so recomputing a checkpointed layer draws its masks again. Layer i owns [16·(i+1), 16·(i+2)).
constexpr std::uint64_t kEmbeddingSite = 0;
constexpr std::uint64_t kClassifierSite = 1;
constexpr std::uint64_t kPoolerSite = 2;
constexpr std::uint64_t layer_site(std::size_t i) { return 16 * (static_cast<std::uint64_t>(i) + 1); }

double lowest(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return std::numeric_limits<double>::lowest();
    case at::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case at::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    default: return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}

// DistilBERT's create_sinusoidal_embeddings: even columns sin, odd columns cos of pos / 10000^(2⌊j/2⌋/dim)
// (computed in double, as numpy does there).
void fill_sinusoidal(at::Tensor& table) {
  const std::int64_t n = table.size(0);
  const std::int64_t dim = table.size(1);
  at::Tensor out = at::empty({n, dim}, at::kDouble);
  double* p = out.data_ptr<double>();
  for (std::int64_t pos = 0; pos < n; ++pos) {
    for (std::int64_t j = 0; j < dim; ++j) {
      const double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * static_cast<double>(j / 2) / static_cast<double>(dim));
      p[pos * dim + j] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  }
  const at::NoGradGuard no_grad;
  table.copy_(out);
}

}  // namespace

// ---- attention -----------------------------------------------------------------------------------

at::Tensor bert_eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& key_padding_mask, double dropout_p) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor scores = autocast_matmul(q, k.transpose(-2, -1)) * scale;
  if (key_padding_mask.defined()) {
    const at::Tensor drop = (key_padding_mask == 0).view({key_padding_mask.size(0), 1, 1, key_padding_mask.size(1)});
    scores = scores.masked_fill(drop, lowest(scores.scalar_type()));
  }
  at::Tensor probs = at::softmax(scores, -1);
  if (dropout_p > 0.0) probs = at::dropout(probs, dropout_p, /*train=*/true);
  return autocast_matmul(probs, v);
}

at::Tensor bert_eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& key_padding_mask, const AttentionDropout& dropout) {
  // CUDA: at::dropout's device generator, as the hidden dropout there (dropout.h) — the keyed mask is made on
  // the CPU ([B, heads, Lq, Lk] per layer and step) and would be copied to the device each time.
  if (!dropout.sample_index.defined() || dropout.p == 0.0 || q.is_cuda()) {
    return bert_eager_attention(q, k, v, key_padding_mask, dropout.p);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor scores = autocast_matmul(q, k.transpose(-2, -1)) * scale;
  if (key_padding_mask.defined()) {
    const at::Tensor drop = (key_padding_mask == 0).view({key_padding_mask.size(0), 1, 1, key_padding_mask.size(1)});
    scores = scores.masked_fill(drop, lowest(scores.scalar_type()));
  }
  const at::Tensor keep = attention_dropout_mask(dropout, q.size(0), q.size(1), q.size(2), k.size(2));
  const at::Tensor probs =
      at::softmax(scores, -1).masked_fill(keep.logical_not().to(scores.device()), 0.0) * (1.0 / (1.0 - dropout.p));
  return autocast_matmul(probs, v);
}

// ---- BertLayer -----------------------------------------------------------------------------------

BertLayer::BertLayer(const BertConfig& config, const BertOptions& options, std::int64_t index)
    : torch::nn::Module("BertLayer"), config_(config), options_(options) {
  const std::int64_t h = config.hidden_size;
  if (config.arch == BertArch::kBert || config.arch == BertArch::kLongformer) {
    // attention.self.{query,key,value}, attention.output.{dense,LayerNorm}, intermediate.dense, output.{dense,LayerNorm}
    auto attention = register_module("attention", std::make_shared<torch::nn::Module>("BertAttention"));
    if (config.arch == BertArch::kLongformer) {
      HOTPATH_CHECK(index >= 0 && index < static_cast<std::int64_t>(config.attention_window.size()),
                    "Longformer layer ", index, ": config has ", config.attention_window.size(), " attention windows");
      longformer_ = attention->register_module(
          "self", LongformerSelfAttention(config, config.attention_window[static_cast<std::size_t>(index)] / 2));
      longformer_->set_kernel(options.sliding_kernel);
      query_ = longformer_->query;
      key_ = longformer_->key;
      value_ = longformer_->value;
    } else {
      auto self = attention->register_module("self", std::make_shared<torch::nn::Module>("BertSelfAttention"));
      query_ = self->register_module("query", make_projection(h, h));
      key_ = self->register_module("key", make_projection(h, h));
      value_ = self->register_module("value", make_projection(h, h));
    }
    auto self_output = attention->register_module("output", std::make_shared<torch::nn::Module>("BertSelfOutput"));
    attention_out_ = self_output->register_module("dense", make_projection(h, h));
    attention_norm_ = self_output->register_module("LayerNorm", make_norm(config));
    auto intermediate = register_module("intermediate", std::make_shared<torch::nn::Module>("BertIntermediate"));
    intermediate_ = intermediate->register_module("dense", make_projection(h, config.intermediate_size));
    auto output = register_module("output", std::make_shared<torch::nn::Module>("BertOutput"));
    output_ = output->register_module("dense", make_projection(config.intermediate_size, h));
    output_norm_ = output->register_module("LayerNorm", make_norm(config));
  } else {
    // attention.{q_lin,k_lin,v_lin,out_lin}, sa_layer_norm, ffn.{lin1,lin2}, output_layer_norm
    auto attention = register_module("attention", std::make_shared<torch::nn::Module>("MultiHeadSelfAttention"));
    query_ = attention->register_module("q_lin", make_projection(h, h));
    key_ = attention->register_module("k_lin", make_projection(h, h));
    value_ = attention->register_module("v_lin", make_projection(h, h));
    attention_out_ = attention->register_module("out_lin", make_projection(h, h));
    attention_norm_ = register_module("sa_layer_norm", make_norm(config));
    auto ffn = register_module("ffn", std::make_shared<torch::nn::Module>("FFN"));
    intermediate_ = ffn->register_module("lin1", make_projection(h, config.intermediate_size));
    output_ = ffn->register_module("lin2", make_projection(config.intermediate_size, h));
    output_norm_ = register_module("output_layer_norm", make_norm(config));
  }
}

at::Tensor BertLayer::forward(const at::Tensor& hidden, const at::Tensor& mask, const DropoutSource& dropout,
                             std::uint64_t first_site, const at::Tensor& prefix_kv) {
  const std::int64_t b = hidden.size(0);
  const std::int64_t l = hidden.size(1);
  const std::int64_t heads = config_.num_attention_heads;
  const std::int64_t d = config_.head_dim();
  const auto split = [&](const at::Tensor& x) { return x.view({b, l, heads, d}).transpose(1, 2); };
  // As transformers: dropout on the attention probabilities in training only.
  const double attention_p = is_training() ? config_.attention_probs_dropout_prob : 0.0;
  AttentionDropout attention_dropout;
  if (dropout.keyed()) {
    attention_dropout = {attention_p, dropout.seed, first_site, dropout.sample_index};
  } else {
    attention_dropout = AttentionDropout::from_generator(attention_p);
  }
  const auto project = [&](LoraLinear& linear, const at::Tensor& x, std::uint64_t site) {
    return linear->forward(x, dropout, first_site + site);
  };
  const bool longformer = config_.arch == BertArch::kLongformer;
  at::Tensor keys = longformer ? at::Tensor() : split(project(key_, hidden, 4));
  at::Tensor values = longformer ? at::Tensor() : split(project(value_, hidden, 5));
  if (prefix_kv.defined() && !longformer) {  // [2, heads, P, d] in front of the L keys and values of every row
    const at::Tensor kv = prefix_kv.to(keys.scalar_type()).unsqueeze(1).expand({2, b, heads, prefix_kv.size(2), d});
    keys = at::cat({kv[0], keys}, 2);
    values = at::cat({kv[1], values}, 2);
  }
  at::Tensor context;
  if (config_.arch == BertArch::kLongformer) {
    HOTPATH_CHECK(!prefix_kv.defined(), "Longformer: prefix tuning is not supported");
    context = longformer_->forward(hidden, mask, attention_dropout, dropout, first_site);
  } else {
    context = options_.attention(split(project(query_, hidden, 3)), keys, values, mask, attention_dropout)
                  .transpose(1, 2)
                  .reshape({b, l, heads * d});
  }
  const double p = config_.hidden_dropout_prob;
  // A sublayer: LayerNorm(dropout(dense) + input), or with an adapter in it adapter.h's placement.
  const auto sublayer = [&](const at::Tensor& dense, const at::Tensor& input, torch::nn::LayerNorm& norm,
                            BottleneckAdapter& adapter, std::uint64_t site) {
    if (adapter.is_empty()) return norm(hidden_dropout_add(dense, input, p, is_training(), dropout, site));
    return adapter->sublayer(hidden_dropout(dense, p, is_training(), dropout, site), input,
                             [&norm](const at::Tensor& x) { return norm(x); });
  };
  const at::Tensor attended =
      sublayer(project(attention_out_, context, 6), hidden, attention_norm_, attention_adapter_, first_site + 1);
  const at::Tensor inner = activation(project(intermediate_, attended, 7), config_.hidden_act);
  return sublayer(project(output_, inner, 8), attended, output_norm_, output_adapter_, first_site + 2);
}

void BertLayer::set_sliding_kernel(AttentionKernel kernel) {
  options_.sliding_kernel = kernel;
  if (longformer_) longformer_->set_kernel(kernel);
}

void BertLayer::add_adapter(const formats::AdapterConfig& config) {
  HOTPATH_CHECK(config_.arch == BertArch::kBert, "adapters: ", base_model_prefix(config_), " is not supported");
  HOTPATH_CHECK(attention_adapter_.is_empty() && output_adapter_.is_empty(),
                "adapters: the layer already has an adapter (one at a time)");
  const auto add = [&](const std::string& place, BottleneckAdapter& slot) {
    std::shared_ptr<torch::nn::Module> parent;
    for (const auto& item : named_modules("", /*include_self=*/false)) {
      if (item.key() == place) parent = item.value();
    }
    HOTPATH_CHECK(parent != nullptr, "adapters: the layer has no ", place);
    auto adapters = parent->register_module("adapters", std::make_shared<torch::nn::Module>("Adapters"));
    slot = adapters->register_module(config.name, BottleneckAdapter(config, config_.hidden_size));
  };
  if (config.mh_adapter) add("attention.output", attention_adapter_);
  if (config.output_adapter) add("output", output_adapter_);
}

// ---- BertModel -----------------------------------------------------------------------------------

BertModel::BertModel(const BertConfig& config, const BertOptions& options)
    : torch::nn::Module(config.arch == BertArch::kDistilBert ? "DistilBertModel"
                        : config.arch == BertArch::kLongformer ? "LongformerModel"
                                                               : "BertModel"),
      config_(config),
      options_(options) {
  HOTPATH_CHECK(options.attention != nullptr, "BertModel: BertOptions::attention is null");
  const std::int64_t h = config.hidden_size;
  auto embeddings = register_module("embeddings", std::make_shared<torch::nn::Module>("Embeddings"));
  auto word = torch::nn::EmbeddingOptions(config.vocab_size, h).padding_idx(config.pad_token_id);
  word_embeddings_ = embeddings->register_module("word_embeddings", torch::nn::Embedding(word));
  position_embeddings_ =
      embeddings->register_module("position_embeddings", torch::nn::Embedding(config.max_position_embeddings, h));
  if (config.arch != BertArch::kDistilBert) {
    token_type_embeddings_ =
        embeddings->register_module("token_type_embeddings", torch::nn::Embedding(config.type_vocab_size, h));
  }
  embedding_norm_ = embeddings->register_module("LayerNorm", make_norm(config));

  auto encoder = register_module(config.arch == BertArch::kDistilBert ? "transformer" : "encoder",
                                 std::make_shared<torch::nn::Module>("Encoder"));
  auto list = encoder->register_module("layer", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config.num_hidden_layers; ++i) {
    layers_.push_back(std::make_shared<BertLayer>(config, options, i));
    list->push_back(layers_.back());
  }
  if (config.arch != BertArch::kDistilBert && options.add_pooling_layer) {
    auto pooler = register_module("pooler", std::make_shared<torch::nn::Module>("BertPooler"));
    pooler_ = pooler->register_module("dense", make_projection(h, h));
  }
  init_weights(*this, config);
  {
    const at::NoGradGuard no_grad;
    word_embeddings_->weight[config.pad_token_id].zero_();
    // RoBERTa's position table has padding_idx too.
    if (config.arch == BertArch::kLongformer) position_embeddings_->weight[config.pad_token_id].zero_();
  }
  // transformers 5 initialises the table sinusoidally and leaves it trainable (4.x froze it).
  if (config.sinusoidal_pos_embds) fill_sinusoidal(position_embeddings_->weight);
}

void BertModel::set_attention(AttentionFn attention) {
  HOTPATH_CHECK(attention != nullptr, "BertModel::set_attention: null attention function");
  options_.attention = attention;
  for (auto& layer : layers_) layer->set_attention(attention);
}

void BertModel::set_sliding_kernel(AttentionKernel kernel) {
  options_.sliding_kernel = kernel;
  for (auto& layer : layers_) layer->set_sliding_kernel(kernel);
}

void BertModel::set_prefix(PrefixEncoder prefix) {
  if (!prefix.is_empty()) {
    const formats::PrefixConfig& c = prefix->config();
    c.check_model(config_.num_hidden_layers, config_.hidden_size, config_.num_attention_heads, "this BERT model");
  }
  if (!prefix_.is_empty()) unregister_module("prefix_encoder");
  prefix_ = prefix.is_empty() ? PrefixEncoder(nullptr) : register_module("prefix_encoder", std::move(prefix));
}

at::Tensor BertModel::embed(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                            const DropoutSource& dropout, std::int64_t first_position) {
  const std::int64_t l = input_ids.size(1);
  at::Tensor positions;
  if (config_.arch == BertArch::kLongformer) {
    // RoBERTa (create_position_ids_from_input_ids): pad_token_id + the count of non-padding tokens so far;
    // padding tokens get pad_token_id.
    const std::int64_t pad = config_.pad_token_id;
    HOTPATH_CHECK(pad + 1 + l <= config_.max_position_embeddings, "Longformer: sequence length ", l,
                  " exceeds max_position_embeddings ", config_.max_position_embeddings, " - ", pad + 1,
                  " (positions start after pad_token_id)");
    const at::Tensor real = input_ids.ne(pad).to(at::kLong);
    positions = real.cumsum(1) * real + pad;
  } else {
    HOTPATH_CHECK(first_position + l <= config_.max_position_embeddings, "BertModel: sequence length ", l,
                first_position > 0 ? " after a prefix of " + std::to_string(first_position) + " tokens" : std::string(),
                  " exceeds max_position_embeddings ", config_.max_position_embeddings);
    positions = at::arange(first_position, first_position + l, input_ids.options().dtype(at::kLong)).unsqueeze(0);
  }
  at::Tensor x = word_embeddings_(input_ids) + position_embeddings_(positions);
  if (token_type_embeddings_) {
    x = x + (token_type_ids.defined() ? token_type_embeddings_(token_type_ids)
                                      : token_type_embeddings_->weight[0].view({1, 1, -1}));
  }
  return hidden_dropout(embedding_norm_(x), config_.hidden_dropout_prob, is_training(), dropout, kEmbeddingSite);
}

at::Tensor BertModel::run_layer(std::size_t i, const at::Tensor& hidden, const at::Tensor& mask,
                                const DropoutSource& dropout, const at::Tensor& prefix_kv) {
  // As transformers: checkpoint only when training (eval and no_grad keep nothing anyway). The prefix is an
  // input of the checkpointed block, so its gradient comes back from the recomputation.
  if (options_.gradient_checkpointing && is_training() && at::GradMode::is_enabled()) {
    const std::shared_ptr<BertLayer> layer = layers_[i];
    return checkpoint(
        [layer, dropout, site = layer_site(i)](const std::vector<at::Tensor>& in) {
          return layer->forward(in[0], in[1], dropout, site, in[2]);
        },
        {hidden, mask, prefix_kv});
  }
  return layers_[i]->forward(hidden, mask, dropout, layer_site(i), prefix_kv);
}

at::Tensor BertModel::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                              const at::Tensor& token_type_ids, const DropoutSource& dropout) {
  HOTPATH_CHECK(input_ids.dim() == 2, "BertModel: input_ids must be [batch, length], got ", input_ids.sizes());
  HOTPATH_CHECK(!attention_mask.defined() || attention_mask.sizes() == input_ids.sizes(),
                "BertModel: attention_mask ", attention_mask.sizes(), " does not match input_ids ", input_ids.sizes());
  HOTPATH_CHECK(!token_type_ids.defined() || token_type_ids.sizes() == input_ids.sizes(),
                "BertModel: token_type_ids ", token_type_ids.sizes(), " does not match input_ids ", input_ids.sizes());
  HOTPATH_CHECK(!dropout.keyed() || dropout.sample_index.numel() == input_ids.size(0),
                "BertModel: expected one dropout sample index per row of input_ids (", input_ids.size(0), "), got ",
                dropout.sample_index.numel());
  if (config_.arch == BertArch::kLongformer) {
    // The roles (0 padding, 1 local, 2 global) stand in for the mask in every layer.
    const at::Tensor roles = longformer_roles(input_ids, attention_mask);
    at::Tensor hidden = embed(input_ids, token_type_ids, dropout, 0);
    for (std::size_t i = 0; i < layers_.size(); ++i) hidden = run_layer(i, hidden, roles, dropout, {});
    return hidden;
  }
  if (prefix_.is_empty()) {
    at::Tensor hidden = embed(input_ids, token_type_ids, dropout, 0);
    for (std::size_t i = 0; i < layers_.size(); ++i) hidden = run_layer(i, hidden, attention_mask, dropout, {});
    return hidden;
  }
  // Prefix tuning (prefix.h): positions start after the prefix, every row attends to all of it.
  const std::int64_t p = prefix_->config().num_virtual_tokens;
  at::Tensor hidden = embed(input_ids, token_type_ids, dropout, p);
  const at::Tensor mask =
      attention_mask.defined() ? at::cat({at::ones({input_ids.size(0), p}, attention_mask.options()), attention_mask}, 1)
                               : attention_mask;
  const at::Tensor table = prefix_->forward();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    hidden = run_layer(i, hidden, mask, dropout, prefix_->layer_kv(table, static_cast<std::int64_t>(i)));
  }
  return hidden;
}

at::Tensor BertModel::pool(const at::Tensor& last_hidden, const DropoutSource& dropout) {
  HOTPATH_CHECK(pooler_, "BertModel: this model has no pooler (DistilBERT, or add_pooling_layer = false)");
  return at::tanh(pooler_->forward(last_hidden.select(1, 0), dropout, kPoolerSite));
}

// ---- heads ---------------------------------------------------------------------------------------

BertForSequenceClassification::BertForSequenceClassification(const BertConfig& config, BertOptions options)
    : torch::nn::Module(config.arch == BertArch::kDistilBert    ? "DistilBertForSequenceClassification"
                        : config.arch == BertArch::kLongformer ? "LongformerForSequenceClassification"
                                                               : "BertForSequenceClassification") {
  options.add_pooling_layer = config.arch == BertArch::kBert;
  encoder = register_module(prefix_of(config), std::make_shared<BertModel>(config, options));
  if (config.arch == BertArch::kDistilBert) {
    pre_classifier = register_module("pre_classifier", make_linear(config.hidden_size, config.hidden_size));
  }
  if (config.arch == BertArch::kLongformer) {  // LongformerClassificationHead
    auto head = register_module("classifier", std::make_shared<torch::nn::Module>("LongformerClassificationHead"));
    pre_classifier = head->register_module("dense", make_linear(config.hidden_size, config.hidden_size));
    classifier = head->register_module("out_proj", make_linear(config.hidden_size, config.num_labels));
  } else {
    classifier = register_module("classifier", make_linear(config.hidden_size, config.num_labels));
  }
  const at::NoGradGuard no_grad;
  for (auto* linear : {&pre_classifier, &classifier}) {
    if (!*linear) continue;
    (*linear)->weight.normal_(0.0, config.initializer_range);
    (*linear)->bias.zero_();
  }
}

at::Tensor BertForSequenceClassification::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                                  const at::Tensor& token_type_ids, const DropoutSource& dropout) {
  const double p = encoder->config().classifier_dropout;
  if (encoder->config().arch == BertArch::kLongformer) {
    // LongformerForSequenceClassification's default: the first token global (where it is a token).
    at::Tensor roles = longformer_roles(input_ids, attention_mask).clone();
    roles.select(1, 0).masked_fill_(roles.select(1, 0).ne(0), 2);
    const at::Tensor hidden = encoder->forward(input_ids, roles, token_type_ids, dropout);
    const at::Tensor x = hidden_dropout(hidden.select(1, 0), p, is_training(), dropout, kClassifierSite);
    return classifier(hidden_dropout(at::tanh(pre_classifier(x)), p, is_training(), dropout, kPoolerSite));
  }
  const at::Tensor hidden = encoder->forward(input_ids, attention_mask, token_type_ids, dropout);
  if (pre_classifier) {  // DistilBERT: [CLS] → pre_classifier → ReLU → dropout → classifier
    const at::Tensor x = at::relu(pre_classifier(hidden.select(1, 0)));
    return classifier(hidden_dropout(x, p, is_training(), dropout, kClassifierSite));
  }
  return classifier(hidden_dropout(encoder->pool(hidden, dropout), p, is_training(), dropout, kClassifierSite));
}

at::Tensor masked_mean_pool(const at::Tensor& hidden, const at::Tensor& attention_mask) {
  if (!attention_mask.defined()) return hidden.mean(1);
  const at::Tensor m = attention_mask.unsqueeze(-1).to(hidden.scalar_type());
  return (hidden * m).sum(1) / at::clamp_min(m.sum(1), 1e-9);
}

SentenceEmbedder::SentenceEmbedder(std::shared_ptr<BertModel> bert, const SentenceEmbedderOptions& options)
    : model(std::move(bert)), options_(options) {
  HOTPATH_CHECK(model != nullptr, "SentenceEmbedder: null model");
}

at::Tensor SentenceEmbedder::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                     const at::Tensor& token_type_ids) const {
  const at::Tensor pooled = masked_mean_pool(model->forward(input_ids, attention_mask, token_type_ids), attention_mask);
  if (!options_.normalize) return pooled;
  // torch.nn.functional.normalize(p=2, dim=1): x / max(‖x‖, 1e-12).
  return pooled / at::clamp_min(pooled.norm(2, {1}, /*keepdim=*/true), 1e-12);
}

// ---- loading -------------------------------------------------------------------------------------

namespace {

struct LoadedState {
  BertConfig config;
  std::map<std::string, at::Tensor> state;
  std::string source;
};

LoadedState read_dir(const std::filesystem::path& dir) {
  LoadedState s;
  s.config = BertConfig::from_file(dir / "config.json");
  s.source = hf_weights_file(dir).string();
  s.state = read_hf_state_dict(dir);
  return s;
}

bool has_pooler(const std::map<std::string, at::Tensor>& state, const BertConfig& c) {
  return state.count("pooler.dense.weight") != 0 || state.count(prefix_of(c) + ".pooler.dense.weight") != 0;
}

template <typename M>
void load_into(M& model, LoadedState& s, const BertLoadOptions& options, LoadReport* report) {
  LoadReport r = load_state_dict(model, std::move(s.state), s.source, {.allow_partial = options.allow_partial},
                                 {.base_prefix = prefix_of(s.config)});
  if (report != nullptr) *report = std::move(r);
  model.eval();  // as from_pretrained: dropout off until the caller trains
}

}  // namespace

std::shared_ptr<BertModel> load_bert_model(const std::filesystem::path& dir, const BertLoadOptions& options,
                                           LoadReport* report) {
  LoadedState s = read_dir(dir);
  BertOptions model_options = options.model;
  // A checkpoint without the pooler (DistilBERT, or saved with add_pooling_layer=False) loads without one.
  model_options.add_pooling_layer = model_options.add_pooling_layer && has_pooler(s.state, s.config);
  auto model = std::make_shared<BertModel>(s.config, model_options);
  load_into(*model, s, options, report);
  return model;
}

std::shared_ptr<BertForSequenceClassification> load_bert_classifier(const std::filesystem::path& dir,
                                                                    const BertLoadOptions& options,
                                                                    LoadReport* report) {
  LoadedState s = read_dir(dir);
  auto model = std::make_shared<BertForSequenceClassification>(s.config, options.model);
  load_into(*model, s, options, report);
  return model;
}

SentenceEmbedder load_sentence_embedder(const std::filesystem::path& dir, const BertLoadOptions& options,
                                        LoadReport* report) {
  const SentencePipeline pipeline = read_sentence_pipeline(dir);
  std::shared_ptr<BertModel> model = load_bert_model(dir, options, report);
  HOTPATH_CHECK(pipeline.dimension == 0 || pipeline.dimension == model->config().hidden_size,
                (dir / "1_Pooling" / "config.json").string(), ": word_embedding_dimension ", pipeline.dimension,
                " does not match config.json's hidden size ", model->config().hidden_size);
  return SentenceEmbedder(std::move(model), {.normalize = pipeline.normalize});
}

}  // namespace hotpath::models
