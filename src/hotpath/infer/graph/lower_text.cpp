// Lowering of the text encoders: BERT / DistilBERT classifiers and sentence embedders.
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/infer/lower.h"
#include "hotpath/models/lora.h"
#include "graph_builder.h"

namespace hotpath::infer {
namespace {

using detail::GraphBuilder;
using ModulePtr = std::shared_ptr<torch::nn::Module>;

class TextLowering {
 public:
  TextLowering(const torch::nn::Module& root, std::string prefix) : prefix_(std::move(prefix)) {
    for (const auto& item : root.named_modules("", /*include_self=*/false)) modules_[item.key()] = item.value();
  }

  GraphBuilder b;

  // (weight, bias) of a Linear or LoraLinear at `path`, the adapter merged: W + scaling · B·A.
  std::pair<at::Tensor, at::Tensor> linear_weights(const std::string& path) const {
    const ModulePtr& m = module(path);
    if (const auto* lora = m->as<models::LoraLinearImpl>()) {
      at::Tensor w = lora->weight.detach();
      if (lora->has_adapter()) {
        w = w + lora->scaling() * at::matmul(lora->lora_B->weight.detach(), lora->lora_A->weight.detach());
      }
      return {w, lora->bias.defined() ? lora->bias.detach() : at::Tensor()};
    }
    const auto* linear = m->as<torch::nn::LinearImpl>();
    HOTPATH_CHECK(linear != nullptr, "lowering: ", path, " is a ", m->name(), ", expected a Linear");
    return {linear->weight.detach(), linear->bias.defined() ? linear->bias.detach() : at::Tensor()};
  }

  std::string linear(const std::string& path, const std::string& input, const std::string& act = "none",
                     const std::string& residual = "") {
    auto [w, bias] = linear_weights(path);
    return linear_from(path, w, bias, input, act, residual);
  }

  std::string linear_from(const std::string& path, const at::Tensor& w, const at::Tensor& bias,
                          const std::string& input, const std::string& act = "none", const std::string& residual = "") {
    const std::string name = full(path);
    std::map<std::string, std::string> params = {{"weight", b.param(name + ".weight", w)}};
    if (bias.defined()) params["bias"] = b.param(name + ".bias", bias);
    std::vector<std::string> inputs = {input};
    if (!residual.empty()) inputs.push_back(residual);
    return b.node(OpKind::kLinear, name, inputs, params, {{"act", act}});
  }

  std::string layer_norm(const std::string& path, const std::string& input) {
    const auto* ln = module(path)->as<torch::nn::LayerNormImpl>();
    HOTPATH_CHECK(ln != nullptr, "lowering: ", path, " is not a LayerNorm");
    const std::string name = full(path);
    return b.node(OpKind::kLayerNorm, name, {input},
                  {{"weight", b.param(name + ".weight", ln->weight)}, {"bias", b.param(name + ".bias", ln->bias)}},
                  {{"eps", ln->options.eps()}});
  }

  std::pair<at::Tensor, at::Tensor> layer_norm_weights(const std::string& path) const {
    const auto* ln = module(path)->as<torch::nn::LayerNormImpl>();
    HOTPATH_CHECK(ln != nullptr && ln->options.elementwise_affine(), "lowering: ", full(path),
                  " is not an affine LayerNorm");
    return {ln->weight.detach(), ln->bias.detach()};
  }

  at::Tensor embedding(const std::string& path) const {
    const auto* e = module(path)->as<torch::nn::EmbeddingImpl>();
    HOTPATH_CHECK(e != nullptr, "lowering: ", path, " is not an Embedding");
    return e->weight.detach();
  }

  [[nodiscard]] bool has(const std::string& path) const { return modules_.count(path) != 0; }
  [[nodiscard]] std::string full(const std::string& path) const { return prefix_.empty() ? path : prefix_ + "." + path; }

 private:
  const ModulePtr& module(const std::string& path) const {
    auto it = modules_.find(path);
    HOTPATH_CHECK(it != modules_.end(), "lowering: the model has no module ", full(path));
    return it->second;
  }

  std::string prefix_;
  std::map<std::string, ModulePtr> modules_;
};

void add_text_inputs(GraphBuilder& b) {
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    b.input({name, at::kLong, {-1, -1}, {"batch", "sequence"}});
  }
}

const char* activation(formats::BertActivation a) {
  switch (a) {
    case formats::BertActivation::kGelu: return "gelu";
    case formats::BertActivation::kGeluNew: return "gelu_tanh";
    case formats::BertActivation::kRelu: return "relu";
  }
  return "gelu";
}

// Embeddings + every encoder layer of `model` (whose modules `t` indexes) → the last hidden state's name.
std::string lower_encoder(TextLowering& t, const models::BertModel& model) {
  const formats::BertConfig& c = model.config();
  const bool bert = c.arch == formats::BertArch::kBert;
  HOTPATH_CHECK(c.arch != formats::BertArch::kLongformer,
                "lowering: Longformer's sliding-window attention is not in the engine; run the model eagerly "
                "(hotpath.TextClassifier, or models::load_bert_classifier in C++)");
  HOTPATH_CHECK(model.prefix().is_empty(),
                "lowering: the model carries a prefix (prefix tuning), which the engine does not run; "
                "evaluate it with hotpath.TextClassifier's eager path or PEFT, or fine-tune with LoRA to export");
  for (std::int64_t i = 0; i < model.num_layers(); ++i) {
    const auto layer = model.layer(static_cast<std::size_t>(i));
    HOTPATH_CHECK(layer->attention_adapter().is_empty() && layer->output_adapter().is_empty(),
                  "lowering: the model carries bottleneck adapters, which the engine does not run; fine-tune with "
                  "LoRA to export");
  }
  std::map<std::string, std::string> embed = {
      {"word", t.b.param(t.full("embeddings.word_embeddings.weight"), t.embedding("embeddings.word_embeddings"))},
      {"position",
       t.b.param(t.full("embeddings.position_embeddings.weight"), t.embedding("embeddings.position_embeddings"))}};
  if (t.has("embeddings.token_type_embeddings")) {
    embed["token_type"] = t.b.param(t.full("embeddings.token_type_embeddings.weight"),
                                    t.embedding("embeddings.token_type_embeddings"));
  }
  const auto [ln_weight, ln_bias] = t.layer_norm_weights("embeddings.LayerNorm");
  embed["ln_weight"] = t.b.param(t.full("embeddings.LayerNorm.weight"), ln_weight);
  embed["ln_bias"] = t.b.param(t.full("embeddings.LayerNorm.bias"), ln_bias);
  std::string x = t.b.node(OpKind::kBertEmbed, t.full("embeddings"), {"input_ids", "token_type_ids"}, embed,
                           {{"eps", c.layer_norm_eps}});

  const std::string act = activation(c.hidden_act);
  for (std::int64_t i = 0; i < model.num_layers(); ++i) {
    const std::string layer = (bert ? "encoder.layer." : "transformer.layer.") + std::to_string(i) + ".";
    const std::string q = layer + (bert ? "attention.self.query" : "attention.q_lin");
    const std::string k = layer + (bert ? "attention.self.key" : "attention.k_lin");
    const std::string v = layer + (bert ? "attention.self.value" : "attention.v_lin");
    // q | k | v packed into one [3H, H] projection: one GEMM instead of three.
    const auto [wq, bq] = t.linear_weights(q);
    const auto [wk, bk] = t.linear_weights(k);
    const auto [wv, bv] = t.linear_weights(v);
    HOTPATH_CHECK(bq.defined() && bk.defined() && bv.defined(), "lowering: ", t.full(layer),
                  " q/k/v projections without bias");
    const std::string qkv_path = layer + (bert ? "attention.self.qkv" : "attention.qkv");
    std::string h = t.linear_from(qkv_path, at::cat({wq, wk, wv}, 0), at::cat({bq, bk, bv}, 0), x);
    h = t.b.node(OpKind::kAttention, t.full(layer + (bert ? "attention.self" : "attention")), {h, "attention_mask"}, {},
                 {{"heads", c.num_attention_heads}});
    h = t.linear(layer + (bert ? "attention.output.dense" : "attention.out_lin"), h, "none", x);
    x = t.layer_norm(layer + (bert ? "attention.output.LayerNorm" : "sa_layer_norm"), h);
    h = t.linear(layer + (bert ? "intermediate.dense" : "ffn.lin1"), x, act);
    h = t.linear(layer + (bert ? "output.dense" : "ffn.lin2"), h, "none", x);
    x = t.layer_norm(layer + (bert ? "output.LayerNorm" : "output_layer_norm"), h);
  }
  return x;
}

}  // namespace

Graph lower_text_classifier(const models::BertForSequenceClassification& model) {
  const at::NoGradGuard no_grad;
  const bool bert = model.config().arch == formats::BertArch::kBert;
  TextLowering t(model, "");
  TextLowering enc(*model.encoder, std::string(formats::base_model_prefix(model.config())));
  add_text_inputs(enc.b);
  std::string x = lower_encoder(enc, *model.encoder);
  x = enc.b.node(OpKind::kSelect, enc.full("cls"), {x}, {}, {{"dim", std::int64_t{1}}, {"index", std::int64_t{0}}});
  if (bert) {
    HOTPATH_CHECK(enc.has("pooler.dense"), "lowering: the BERT classifier has no pooler");
    x = enc.linear("pooler.dense", x, "tanh");
  }
  // The heads live on the classifier, outside the encoder: lower them with the classifier's names.
  const auto head = [&](const char* path, const std::string& input, const std::string& act) {
    auto [w, b] = t.linear_weights(path);
    std::map<std::string, std::string> params = {{"weight", enc.b.param(std::string(path) + ".weight", w)}};
    if (b.defined()) params["bias"] = enc.b.param(std::string(path) + ".bias", b);
    return enc.b.node(OpKind::kLinear, path, {input}, params, {{"act", act}});
  };
  if (!bert) x = head("pre_classifier", x, "relu");
  x = head("classifier", x, "none");
  enc.b.output_as(x, "logits");
  return enc.b.finish();
}

Graph lower_sentence_embedder(const models::SentenceEmbedder& embedder) {
  const at::NoGradGuard no_grad;
  HOTPATH_CHECK(embedder.model != nullptr, "lowering: the sentence embedder has no model");
  TextLowering t(*embedder.model, "");
  add_text_inputs(t.b);
  std::string x = lower_encoder(t, *embedder.model);
  x = t.b.node(OpKind::kMeanPool, "pooling", {x, "attention_mask"});
  if (embedder.options().normalize) x = t.b.node(OpKind::kL2Normalize, "normalize", {x});
  t.b.output_as(x, "sentence_embedding");
  return t.b.finish();
}

}  // namespace hotpath::infer
