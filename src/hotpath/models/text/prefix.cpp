#include "hotpath/models/text/prefix.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/tanh.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <set>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/formats/safetensors.h"
#include "hotpath/models/lora.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"

namespace hotpath::models {
namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";
// peft's get_peft_model_state_dict for prompt learning: the table under this key, modules_to_save under
// "base_model." + their path in the transformers model.
constexpr const char* kTableKey = "prompt_embeddings";
constexpr const char* kHeadPrefix = "base_model.classifier.";

std::string describe(const formats::BertConfig& c) {
  return std::to_string(c.num_hidden_layers) + "-layer, " + std::to_string(c.hidden_size) + "-wide BERT";
}

}  // namespace

// ---- PrefixEncoder ----------------------------------------------------------------------------------

PrefixEncoderImpl::PrefixEncoderImpl(const formats::PrefixConfig& config) : config_(config) { reset(); }

void PrefixEncoderImpl::reset() {
  const formats::PrefixConfig& c = config_;
  const bool project = c.prefix_projection && !c.inference_mode;
  // torch.nn.Embedding's init, N(0, 1), as PEFT's PrefixEncoder leaves it.
  embedding = register_module("embedding", torch::nn::Embedding(c.num_virtual_tokens, project ? c.token_dim : c.table_width()));
  if (project) {
    HOTPATH_CHECK(c.encoder_hidden_size > 0, "prefix tuning: prefix_projection needs encoder_hidden_size > 0");
    transform = register_module("transform", torch::nn::Sequential(torch::nn::Linear(c.token_dim, c.encoder_hidden_size),
                                                                   torch::nn::Tanh(),
                                                                   torch::nn::Linear(c.encoder_hidden_size, c.table_width())));
  } else {
    transform = nullptr;
  }
}

at::Tensor PrefixEncoderImpl::forward() {
  const at::Tensor& table = embedding->weight;
  return transform.is_empty() ? table : transform->forward(table);
}

at::Tensor PrefixEncoderImpl::layer_kv(const at::Tensor& table, std::int64_t layer) const {
  const formats::PrefixConfig& c = config_;
  // PEFT: view(n, 2·layers, heads, head_dim).permute(2, 0, 3, 1, 4)[2i : 2i + 2] (its batch dim left out).
  return table.view({c.num_virtual_tokens, 2 * c.num_layers, c.num_attention_heads, c.head_dim()})
      .narrow(1, 2 * layer, 2)
      .permute({1, 2, 0, 3});
}

// ---- on the BERT classifier -------------------------------------------------------------------------

formats::PrefixConfig prefix_config_for(const BertForSequenceClassification& model, const PrefixOptions& options) {
  const formats::BertConfig& b = model.config();
  HOTPATH_CHECK(b.arch == formats::BertArch::kBert, "prefix tuning: ", formats::base_model_prefix(b),
                " is not supported (hotpath adds prefixes to BERT's attention only; transformers' "
                "DistilBertModel takes no past_key_values); use LoRA (model.lora_r) or a BERT model");
  HOTPATH_CHECK(options.num_virtual_tokens >= 1, "prefix tuning: num_virtual_tokens must be >= 1, got ",
                options.num_virtual_tokens);
  HOTPATH_CHECK(options.num_virtual_tokens < b.max_position_embeddings, "prefix tuning: ", options.num_virtual_tokens,
                " virtual tokens leave no position for the text (max_position_embeddings ", b.max_position_embeddings,
                "; the text's positions start after the prefix)");
  formats::PrefixConfig c;
  c.num_virtual_tokens = options.num_virtual_tokens;
  c.token_dim = b.hidden_size;
  c.num_layers = b.num_hidden_layers;
  c.num_attention_heads = b.num_attention_heads;
  c.prefix_projection = options.prefix_projection;
  c.encoder_hidden_size = options.encoder_hidden_size > 0 ? options.encoder_hidden_size : b.hidden_size;
  c.task_type = "SEQ_CLS";
  return c;
}

LoraReport apply_prefix(BertForSequenceClassification& model, const formats::PrefixConfig& config) {
  const formats::BertConfig& b = model.config();
  HOTPATH_CHECK(b.arch == formats::BertArch::kBert, "prefix tuning: ", formats::base_model_prefix(b),
                " is not supported (BERT models only)");
  config.check_model(b.num_hidden_layers, b.hidden_size, b.num_attention_heads, describe(b));
  HOTPATH_CHECK(config.num_virtual_tokens < b.max_position_embeddings, "prefix tuning: ", config.num_virtual_tokens,
                " virtual tokens leave no position for the text (max_position_embeddings ", b.max_position_embeddings, ")");
  for (at::Tensor& p : model.parameters()) p.set_requires_grad(false);
  auto prefix = PrefixEncoder(config);
  model.encoder->set_prefix(prefix);
  for (at::Tensor& p : prefix->parameters()) p.set_requires_grad(true);
  for (at::Tensor& p : model.classifier->parameters()) p.set_requires_grad(true);
  LoraReport report = lora_report(model);
  report.adapted = {"prefix_encoder"};
  report.saved = {"classifier"};
  return report;
}

std::map<std::string, at::Tensor> prefix_state_dict(BertForSequenceClassification& model) {
  PrefixEncoder prefix = model.encoder->prefix();
  HOTPATH_CHECK(!prefix.is_empty(), "prefix_state_dict: the model has no prefix (apply_prefix first)");
  const c10::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> out;
  out[kTableKey] = prefix->forward().detach().to(at::kFloat).cpu().contiguous();
  out[std::string(kHeadPrefix) + "weight"] = model.classifier->weight.detach().cpu().contiguous();
  out[std::string(kHeadPrefix) + "bias"] = model.classifier->bias.detach().cpu().contiguous();
  return out;
}

void save_prefix(BertForSequenceClassification& model, const formats::PrefixConfig& config,
                 const std::filesystem::path& dir) {
  const std::map<std::string, at::Tensor> tensors = prefix_state_dict(model);
  std::filesystem::create_directories(dir);
  write_tensors((dir / kWeightsFile).string(), tensors, {{"format", "pt"}});
  formats::PrefixConfig saved = config;
  saved.inference_mode = true;  // as save_pretrained: the file holds the table, not the MLP
  write_file_atomic((dir / kConfigFile).string(), saved.to_json());
}

formats::PrefixConfig load_prefix(BertForSequenceClassification& model, const std::filesystem::path& dir) {
  formats::PrefixConfig config = formats::PrefixConfig::from_file(dir / kConfigFile);
  const std::string weights_path = (dir / kWeightsFile).string();
  HOTPATH_CHECK(std::filesystem::exists(weights_path), weights_path,
                ": missing (only safetensors adapters are read, not adapter_model.bin)");
  const formats::BertConfig& b = model.config();
  config.check_model(b.num_hidden_layers, b.hidden_size, b.num_attention_heads,
                     (dir / kConfigFile).string() + "'s model, the " + describe(b));
  const formats::SafetensorsFile file(weights_path);
  const std::map<std::string, std::vector<std::int64_t>> expected = {
      {kTableKey, {config.num_virtual_tokens, config.table_width()}},
      {std::string(kHeadPrefix) + "weight", {b.num_labels, b.hidden_size}},
      {std::string(kHeadPrefix) + "bias", {b.num_labels}}};
  for (const auto& [key, shape] : expected) {
    const formats::TensorView* t = file.find(key);
    HOTPATH_CHECK(t != nullptr, weights_path, ": missing tensor \"", key, "\"");
    HOTPATH_CHECK(t->shape == shape, weights_path, ": tensor \"", key, "\" has shape ", at::IntArrayRef(t->shape),
                  ", expected ", at::IntArrayRef(shape),
                  key == kTableKey ? " (num_virtual_tokens x 2·num_layers·token_dim)" : " (the classifier's)");
  }
  for (const formats::TensorView& t : file.tensors()) {
    HOTPATH_CHECK(expected.count(t.name) != 0, weights_path, ": tensor \"", t.name,
                  "\" is not part of a BERT classifier's prefix (expected prompt_embeddings and base_model.classifier.*)");
  }
  config.inference_mode = true;  // the file holds the table: no MLP
  apply_prefix(model, config);
  const c10::NoGradGuard no_grad;
  const auto copy = [&](const std::string& key, at::Tensor dst) {
    dst.copy_(to_tensor(*file.find(key)).to(dst.scalar_type()));
  };
  copy(kTableKey, model.encoder->prefix()->embedding->weight);
  copy(std::string(kHeadPrefix) + "weight", model.classifier->weight);
  copy(std::string(kHeadPrefix) + "bias", model.classifier->bias);
  return config;
}

}  // namespace hotpath::models
