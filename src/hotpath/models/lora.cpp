#include "hotpath/models/lora.h"
#include "hotpath/ops/autocast_ops.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>
#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <ostream>
#include <set>
#include <sstream>

#include "hotpath/core/error.h"
#include "hotpath/formats/safetensors.h"
#include "hotpath/models/weights.h"

namespace hotpath::models {
using namespace hotpath::formats;  // LoraConfig, SafetensorsFile, TensorView, lora_target_matches
using namespace hotpath::ops;  // autocast_linear, linear
namespace {

// peft's get_peft_model_state_dict prefixes every key with the PeftModel → LoraModel → model path.
constexpr std::string_view kPeftPrefix = "base_model.model.";
constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// peft's _set_trainable: a plain endswith (no '.'), so "classifier" also matches "pre_classifier".
bool saved_module_matches(const LoraConfig& config, std::string_view path) {
  return std::any_of(config.modules_to_save.begin(), config.modules_to_save.end(),
                     [&](const std::string& name) { return ends_with(path, name); });
}

bool under(std::string_view path, const std::vector<std::string>& parents) {
  return std::any_of(parents.begin(), parents.end(), [&](const std::string& p) {
    return path.size() > p.size() && path.substr(0, p.size()) == p && path[p.size()] == '.';
  });
}

std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

using Json = nlohmann::json;

}  // namespace

// ---- LoraLinear ------------------------------------------------------------------------------------

LoraLinearImpl::LoraLinearImpl(const torch::nn::LinearOptions& options_) : options(options_) { reset(); }

void LoraLinearImpl::reset() {
  weight = register_parameter("weight", at::empty({options.out_features(), options.in_features()}));
  if (options.bias()) {
    bias = register_parameter("bias", at::empty({options.out_features()}));
  } else {
    bias = register_parameter("bias", {}, /*requires_grad=*/false);
  }
  reset_parameters();
  // clone() calls reset() on the copy before copying parameters by name: keep the adapter's names.
  if (has_adapter()) add_adapter(lora_A->options.out_features(), scaling_, lora_dropout.is_empty() ? 0.0 : lora_dropout->options.p());
}

void LoraLinearImpl::reset_parameters() {
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = torch::nn::init::_calculate_fan_in_and_fan_out(weight);
    (void)fan_out;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

void LoraLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "hotpath::models::LoraLinear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << options.bias();
  if (has_adapter()) stream << ", r=" << lora_A->options.out_features() << ", scaling=" << scaling_;
  stream << ")";
}

at::Tensor LoraLinearImpl::forward(const at::Tensor& input) {
  // autocast_linear: at::linear, or under bf16 autocast on a CPU without bf16 kernels the same
  // numbers through fp32 kernels (autocast_ops.h).
  at::Tensor out = autocast_linear(input, weight, bias);
  if (!has_adapter()) return out;
  // peft's Linear.forward: result + lora_B(lora_A(dropout(x))) * scaling, in this order.
  const at::Tensor x = lora_dropout.is_empty() ? input : lora_dropout->forward(input);
  return out + linear(*lora_B, linear(*lora_A, x)) * scaling_;
}

at::Tensor LoraLinearImpl::forward(const at::Tensor& input, const ops::DropoutSource& dropout, std::uint64_t site) {
  if (!dropout.keyed() || !has_adapter() || lora_dropout.is_empty()) return forward(input);
  const at::Tensor out = autocast_linear(input, weight, bias);
  const double p = lora_dropout->is_training() ? lora_dropout->options.p() : 0.0;
  const at::Tensor x = ops::fused_dropout(input, dropout.draw(p, site));
  return out + linear(*lora_B, linear(*lora_A, x)) * scaling_;
}

void LoraLinearImpl::add_adapter(std::int64_t r, double scaling, double dropout) {
  HOTPATH_CHECK(r > 0, "LoraLinear: rank must be positive, got ", r);
  for (const char* name : {"lora_A", "lora_B", "lora_dropout"})
    if (named_children().contains(name)) unregister_module(name);
  const auto opts = weight.options();
  lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(options.in_features(), r).bias(false)));
  lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(r, options.out_features()).bias(false)));
  lora_A->to(opts.device(), opts.dtype().toScalarType());
  lora_B->to(opts.device(), opts.dtype().toScalarType());
  {
    // peft's reset_lora_parameters(init_lora_weights=True): A kaiming-uniform(a=√5), B zeros.
    c10::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0));
    lora_B->weight.zero_();
  }
  lora_dropout = dropout > 0.0 ? register_module("lora_dropout", torch::nn::Dropout(dropout)) : torch::nn::Dropout{nullptr};
  if (!is_training()) {
    lora_A->eval();
    lora_B->eval();
    if (!lora_dropout.is_empty()) lora_dropout->eval();
  }
  scaling_ = scaling;
}

void LoraLinearImpl::merge() {
  if (!has_adapter()) return;
  {
    c10::NoGradGuard no_grad;
    // peft's get_delta_weight: (B @ A) * scaling, added in the weight's dtype.
    weight.add_((at::matmul(lora_B->weight, lora_A->weight) * scaling_).to(weight.scalar_type()));
  }
  for (const char* name : {"lora_A", "lora_B", "lora_dropout"})
    if (named_children().contains(name)) unregister_module(name);
  lora_A = torch::nn::Linear{nullptr};
  lora_B = torch::nn::Linear{nullptr};
  lora_dropout = torch::nn::Dropout{nullptr};
}

// ---- tree operations ---------------------------------------------------------------------------------

double LoraReport::trainable_fraction() const {
  return all_params == 0 ? 0.0 : static_cast<double>(trainable_params) / static_cast<double>(all_params);
}

std::string LoraReport::summary() const {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(4);
  s << "trainable params: " << with_commas(trainable_params) << " || all params: " << with_commas(all_params)
    << " || trainable%: " << 100.0 * trainable_fraction();
  return s.str();
}

LoraReport lora_report(const torch::nn::Module& module) {
  LoraReport report;
  for (const at::Tensor& p : module.parameters()) {
    report.all_params += p.numel();
    if (p.requires_grad()) report.trainable_params += p.numel();
  }
  return report;
}

LoraReport apply_lora(torch::nn::Module& module, const LoraConfig& config) {
  HOTPATH_CHECK(config.r > 0, "apply_lora: r must be positive, got ", config.r);
  HOTPATH_CHECK(config.bias == "none", "apply_lora: bias \"", config.bias, "\" is not supported (only \"none\")");
  HOTPATH_CHECK(!config.target_modules.empty() || !config.target_regex.empty(), "apply_lora: no target_modules");
  std::vector<std::string> adapted;
  std::vector<std::string> saved;
  std::vector<std::shared_ptr<LoraLinearImpl>> to_adapt;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    const std::string& path = item.key();
    // The adapters' own Linear children never count as targets.
    if (under(path, adapted)) continue;
    if (!config.modules_to_save.empty() && saved_module_matches(config, path) && !under(path, saved)) {
      saved.push_back(path);
      continue;
    }
    if (!lora_target_matches(config, path)) continue;
    const std::shared_ptr<torch::nn::Module>& m = item.value();
    if (auto lora = std::dynamic_pointer_cast<LoraLinearImpl>(m)) {
      to_adapt.push_back(lora);
      adapted.push_back(path);
    } else if (std::dynamic_pointer_cast<torch::nn::LinearImpl>(m)) {
      HOTPATH_CHECK(false, "apply_lora: target \"", path,
                    "\" is a torch::nn::Linear, which cannot be adapted in place; declare it "
                    "hotpath::models::LoraLinear in the model");
    } else {
      // peft raises here too ("Target module ... is not supported"): a suffix that hits a container.
      HOTPATH_CHECK(false, "apply_lora: target \"", path, "\" is a ", m->name(),
                    ", not a linear layer; name the Linear inside it");
    }
  }
  HOTPATH_CHECK(!adapted.empty(), "apply_lora: no module matches target_modules ",
                config.target_regex.empty() ? Json(config.target_modules).dump() : config.target_regex);
  // modules_to_save entries that match nothing are fine, as in peft (SEQ_CLS adds "score" for every model).
  for (at::Tensor& p : module.parameters()) p.set_requires_grad(false);
  for (auto& lora : to_adapt) lora->add_adapter(config.r, config.scaling(), config.lora_dropout);
  for (const auto& item : module.named_modules("", false)) {
    const std::string& path = item.key();
    const bool trainable = std::find(saved.begin(), saved.end(), path) != saved.end() ||
                           ends_with(path, ".lora_A") || ends_with(path, ".lora_B");
    if (!trainable) continue;
    for (at::Tensor& p : item.value()->parameters()) p.set_requires_grad(true);
  }
  LoraReport report = lora_report(module);
  std::sort(adapted.begin(), adapted.end());
  std::sort(saved.begin(), saved.end());
  report.adapted = std::move(adapted);
  report.saved = std::move(saved);
  return report;
}

std::map<std::string, at::Tensor> lora_state_dict(const torch::nn::Module& module, const LoraConfig& config) {
  std::map<std::string, at::Tensor> out;
  std::vector<std::string> saved;
  for (const auto& item : module.named_modules("", false)) {
    const std::string& path = item.key();
    if (auto lora = std::dynamic_pointer_cast<LoraLinearImpl>(item.value()); lora && lora->has_adapter()) {
      out[std::string(kPeftPrefix) + path + ".lora_A.weight"] = lora->lora_A->weight.detach().cpu().contiguous();
      out[std::string(kPeftPrefix) + path + ".lora_B.weight"] = lora->lora_B->weight.detach().cpu().contiguous();
    }
    if (!config.modules_to_save.empty() && saved_module_matches(config, path) && !under(path, saved)) {
      saved.push_back(path);
      for (const auto& p : item.value()->named_parameters(/*recurse=*/true))
        out[std::string(kPeftPrefix) + path + "." + p.key()] = p.value().detach().cpu().contiguous();
    }
  }
  HOTPATH_CHECK(!out.empty(), "lora_state_dict: the module has no LoRA adapters (apply_lora first)");
  return out;
}

void save_lora(const torch::nn::Module& module, const LoraConfig& config, const std::filesystem::path& dir) {
  const std::map<std::string, at::Tensor> tensors = lora_state_dict(module, config);
  std::filesystem::create_directories(dir);
  write_tensors((dir / kWeightsFile).string(), tensors, {{"format", "pt"}});
  const std::filesystem::path config_path = dir / kConfigFile;
  std::ofstream out(config_path, std::ios::binary | std::ios::trunc);
  HOTPATH_CHECK(out, config_path.string(), ": cannot write");
  out << config.to_json();
  out.close();
  HOTPATH_CHECK(out, config_path.string(), ": write failed");
}

LoraConfig load_lora(torch::nn::Module& module, const std::filesystem::path& dir) {
  const LoraConfig config = LoraConfig::from_file(dir / kConfigFile);
  const std::string weights_path = (dir / kWeightsFile).string();
  HOTPATH_CHECK(std::filesystem::exists(weights_path), weights_path,
                ": missing (only safetensors adapters are read, not adapter_model.bin)");
  const SafetensorsFile file(weights_path);
  apply_lora(module, config);
  const std::map<std::string, at::Tensor> own = lora_state_dict(module, config);
  std::map<std::string, at::Tensor> params;
  for (const auto& p : module.named_parameters(true)) params[std::string(kPeftPrefix) + p.key()] = p.value();
  for (const auto& [key, unused] : own) {
    (void)unused;
    HOTPATH_CHECK(file.find(key) != nullptr, weights_path, ": missing tensor \"", key, "\" (the config targets it)");
  }
  for (const TensorView& t : file.tensors()) {
    // Older peft versions kept the adapter name ("lora_A.default.weight"); so does a named adapter.
    HOTPATH_CHECK(own.count(t.name) != 0, weights_path, ": tensor \"", t.name,
                  "\" matches no adapter or modules_to_save parameter of the model");
    const at::Tensor& dst = params.at(t.name);
    HOTPATH_CHECK(dst.sizes() == at::IntArrayRef(t.shape), weights_path, ": tensor \"", t.name, "\" has shape ",
                  at::IntArrayRef(t.shape), ", the model's is ", dst.sizes());
  }
  c10::NoGradGuard no_grad;
  for (const TensorView& t : file.tensors()) {
    at::Tensor dst = params.at(t.name);
    dst.copy_(to_tensor(t).to(dst.scalar_type()));
  }
  return config;
}

std::int64_t merge_lora(torch::nn::Module& module) {
  std::int64_t merged = 0;
  // include_self=false: a module on the stack has no shared_ptr to itself.
  if (auto* self = dynamic_cast<LoraLinearImpl*>(&module); self != nullptr && self->has_adapter()) {
    self->merge();
    return 1;
  }
  for (const auto& m : module.modules(/*include_self=*/false)) {
    if (auto lora = std::dynamic_pointer_cast<LoraLinearImpl>(m); lora && lora->has_adapter()) {
      lora->merge();
      ++merged;
    }
  }
  return merged;
}

}  // namespace hotpath::models
