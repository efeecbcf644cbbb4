#include "hotpath/models/text/adapter.h"

#include <ATen/ops/dropout.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/tanh.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/activation.h>

#include <optional>
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
constexpr const char* kWeightsFile = "adapter.safetensors";
constexpr const char* kHeadConfigFile = "head_config.json";
constexpr const char* kHeadWeightsFile = "model_head.safetensors";
constexpr const char* kModelClass = "BertForSequenceClassification";

bool is_adapter_param(const std::string& name) { return name.find(".adapters.") != std::string::npos; }

}  // namespace

BottleneckAdapterImpl::BottleneckAdapterImpl(const formats::AdapterConfig& config, std::int64_t hidden)
    : config_(config), hidden_(hidden) {
  reset();
}

void BottleneckAdapterImpl::reset() {
  const std::int64_t r = config_.bottleneck(hidden_);
  adapter_down = register_module("adapter_down", torch::nn::Sequential(torch::nn::Linear(hidden_, r)));
  adapter_up = register_module("adapter_up", torch::nn::Linear(r, hidden_));
  // The library's init_weights "bert": N(0, 0.02) weights, zero biases (the adapter starts near, not at, identity).
  const c10::NoGradGuard no_grad;
  for (auto& p : parameters()) {
    if (p.dim() == 2) {
      p.normal_(0.0, 0.02);
    } else {
      p.zero_();
    }
  }
}

at::Tensor BottleneckAdapterImpl::forward(const at::Tensor& x) {
  at::Tensor h = adapter_down->forward(x);
  const std::string& act = config_.non_linearity;
  if (act == "relu") {
    h = at::relu(h);
  } else if (act == "swish" || act == "silu") {
    h = at::silu(h);
  } else if (act == "gelu") {
    h = at::gelu(h);
  } else if (act == "gelu_new") {
    h = at::gelu(h, "tanh");
  } else {
    h = at::tanh(h);
  }
  at::Tensor up = adapter_up->forward(h);
  if (config_.scaling != 1.0) up = up * config_.scaling;
  return config_.dropout > 0.0 ? at::dropout(up, config_.dropout, is_training()) : up;
}

at::Tensor BottleneckAdapterImpl::sublayer(const at::Tensor& h, const at::Tensor& input,
                                           const std::function<at::Tensor(const at::Tensor&)>& norm) {
  const formats::AdapterConfig& c = config_;
  at::Tensor x = c.original_ln_before ? norm(h + input) : h;
  const at::Tensor& residual = c.residual_before_ln ? h : x;
  at::Tensor out = forward(x) + residual;
  return c.original_ln_after ? norm(out + input) : out;
}

LoraReport apply_adapter(BertForSequenceClassification& model, const formats::AdapterConfig& config) {
  const formats::BertConfig& b = model.config();
  HOTPATH_CHECK(b.arch == formats::BertArch::kBert, "adapters: ", formats::base_model_prefix(b),
                " is not supported (hotpath places bottleneck adapters in BERT's layers)");
  for (std::int64_t i = 0; i < model.encoder->num_layers(); ++i) {
    model.encoder->layer(static_cast<std::size_t>(i))->add_adapter(config);
  }
  for (auto& p : model.named_parameters()) p.value().set_requires_grad(is_adapter_param(p.key()));
  for (at::Tensor& p : model.classifier->parameters()) p.set_requires_grad(true);
  LoraReport report = lora_report(model);
  report.adapted = {config.name};
  report.saved = {"classifier"};
  return report;
}

std::map<std::string, at::Tensor> adapter_state_dict(const BertForSequenceClassification& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.named_parameters()) {
    if (is_adapter_param(p.key())) out[p.key()] = p.value().detach().cpu().contiguous();
  }
  HOTPATH_CHECK(!out.empty(), "adapter_state_dict: the model has no adapters (apply_adapter first)");
  return out;
}

std::map<std::string, at::Tensor> adapter_head_state_dict(const BertForSequenceClassification& model) {
  return {{"classifier.weight", model.classifier->weight.detach().cpu().contiguous()},
          {"classifier.bias", model.classifier->bias.detach().cpu().contiguous()}};
}

void save_adapter(const BertForSequenceClassification& model, const formats::AdapterConfig& config,
                  const std::filesystem::path& dir) {
  const formats::BertConfig& b = model.config();
  std::filesystem::create_directories(dir);
  write_tensors((dir / kWeightsFile).string(), adapter_state_dict(model), {{"format", "pt"}});
  write_file_atomic((dir / kConfigFile).string(), config.to_json(b.hidden_size, kModelClass));
  write_tensors((dir / kHeadWeightsFile).string(), adapter_head_state_dict(model), {{"format", "pt"}});
  nlohmann::json labels = nlohmann::json::object();
  for (std::size_t i = 0; i < b.id2label.size(); ++i) labels[b.id2label[i]] = i;
  const nlohmann::json head = {{"config", nullptr},       {"hidden_size", b.hidden_size}, {"label2id", labels},
                               {"model_class", kModelClass}, {"model_name", ""},           {"model_type", "bert"},
                               {"name", nullptr},         {"num_labels", b.num_labels},    {"version", "adapters.1.3.0"}};
  write_file_atomic((dir / kHeadConfigFile).string(), head.dump(2) + "\n");
}

formats::AdapterConfig load_adapter(BertForSequenceClassification& model, const std::filesystem::path& dir) {
  const formats::AdapterConfig config = formats::AdapterConfig::from_file(dir / kConfigFile);
  const std::string weights_path = (dir / kWeightsFile).string();
  HOTPATH_CHECK(std::filesystem::exists(weights_path), weights_path,
                ": missing (hotpath reads adapter.safetensors: save with save_adapter(..., use_safetensors=True), "
                "not pytorch_adapter.bin)");
  const formats::BertConfig& b = model.config();
  HOTPATH_CHECK(b.arch == formats::BertArch::kBert, "adapters: ", formats::base_model_prefix(b), " is not supported");
  // The shapes the adapters will have, by name, checked against the file before the model changes.
  const std::int64_t h = b.hidden_size;
  const std::int64_t r = config.bottleneck(h);
  std::map<std::string, std::vector<std::int64_t>> expected;
  for (std::int64_t i = 0; i < b.num_hidden_layers; ++i) {
    std::vector<std::string> places;
    if (config.mh_adapter) places.push_back("attention.output");
    if (config.output_adapter) places.push_back("output");
    for (const std::string& place : places) {
      const std::string base = "bert.encoder.layer." + std::to_string(i) + "." + place + ".adapters." + config.name + ".";
      expected[base + "adapter_down.0.weight"] = {r, h};
      expected[base + "adapter_down.0.bias"] = {r};
      expected[base + "adapter_up.weight"] = {h, r};
      expected[base + "adapter_up.bias"] = {h};
    }
  }
  const formats::SafetensorsFile file(weights_path);
  for (const auto& [key, shape] : expected) {
    const formats::TensorView* t = file.find(key);
    HOTPATH_CHECK(t != nullptr, weights_path, ": missing tensor \"", key, "\" (the config places an adapter there)");
    HOTPATH_CHECK(t->shape == shape, weights_path, ": tensor \"", key, "\" has shape ", at::IntArrayRef(t->shape),
                  ", expected ", at::IntArrayRef(shape), " (hidden ", h, ", reduction_factor ", config.reduction_factor,
                  ")");
  }
  for (const formats::TensorView& t : file.tensors()) {
    HOTPATH_CHECK(expected.count(t.name) != 0, weights_path, ": tensor \"", t.name,
                  "\" is not one of adapter \"", config.name, "\"'s tensors in this ", b.num_hidden_layers,
                  "-layer model");
  }
  const std::string head_path = (dir / kHeadWeightsFile).string();
  std::optional<formats::SafetensorsFile> head;
  if (std::filesystem::exists(head_path)) {
    head.emplace(head_path);
    for (const auto& [key, shape] : std::map<std::string, std::vector<std::int64_t>>{
             {"classifier.weight", {b.num_labels, h}}, {"classifier.bias", {b.num_labels}}}) {
      const formats::TensorView* t = head->find(key);
      HOTPATH_CHECK(t != nullptr && t->shape == shape, head_path, ": expected tensor \"", key, "\" of shape ",
                    at::IntArrayRef(shape), " (the classifier's)");
    }
  }
  apply_adapter(model, config);
  const c10::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> params;
  for (const auto& p : model.named_parameters()) params[p.key()] = p.value();
  for (const auto& [key, unused] : expected) {
    (void)unused;
    params.at(key).copy_(to_tensor(*file.find(key)));
  }
  if (head) {
    model.classifier->weight.copy_(to_tensor(*head->find("classifier.weight")));
    model.classifier->bias.copy_(to_tensor(*head->find("classifier.bias")));
  }
  return config;
}

}  // namespace hotpath::models
