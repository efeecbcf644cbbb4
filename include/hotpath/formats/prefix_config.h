// hotpath/formats/prefix_config.h — PEFT's adapter_config.json for prefix tuning (peft_type
// "PREFIX_TUNING"), parsed without LibTorch (the fuzz build compiles this file; models/prefix.h applies,
// saves and loads the prefixes themselves).
//
//   PrefixConfig c = PrefixConfig::from_file("adapter/adapter_config.json");   // hotpath::Error when bad
//   c.check_model(12, 768, 12, "bert-base");     // layers, hidden size, heads: one line naming the mismatch
//   std::string text = c.to_json();              // what peft 0.21 writes
//
// Prefix tuning (Li & Liang 2021) prepends num_virtual_tokens trained key/value vectors to every layer's
// attention; P-Tuning v2's "deep prompts" are the same thing, so this one format serves both. With
// prefix_projection the prefix is produced by an MLP (embedding [n, token_dim] → Linear(token_dim,
// encoder_hidden_size) → tanh → Linear(…, 2·num_layers·token_dim)) while training; the saved file holds
// its output, as peft's does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace hotpath::formats {

// peft_type of an adapter_config.json ("LORA", "PREFIX_TUNING", ...), "" when absent. Errors: not JSON, not
// an object, a peft_type that is not a string.
std::string peft_type_of(std::string_view json_text, std::string_view source = "adapter_config.json");

struct PrefixConfig {
  std::int64_t num_virtual_tokens = 20;
  std::int64_t token_dim = 0;            // the model's hidden size
  std::int64_t num_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_transformer_submodules = 1;  // 1: an encoder (2, encoder-decoder, is refused)
  std::int64_t encoder_hidden_size = 0;  // the reparameterisation MLP's width (prefix_projection)
  bool prefix_projection = false;
  std::string task_type;                 // "" (null) | "SEQ_CLS" | "FEATURE_EXTRACTION"
  std::string base_model_name_or_path;
  bool inference_mode = false;

  [[nodiscard]] std::int64_t head_dim() const { return token_dim / num_attention_heads; }
  // Columns of the prefix table: 2 (key, value) · num_layers · token_dim.
  [[nodiscard]] std::int64_t table_width() const { return 2 * num_layers * token_dim; }

  // Throws naming `model` and the field when the prefix was made for another shape.
  void check_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::string_view model) const;

  // PEFT's adapter_config.json with peft_type "PREFIX_TUNING". Errors name `source` and the field:
  // another peft_type, missing or non-positive sizes, token_dim not a multiple of the heads, two
  // transformer submodules, init_weights other than null/"zero".
  static PrefixConfig from_json(std::string_view json_text, std::string_view source = "adapter_config.json");
  static PrefixConfig from_file(const std::filesystem::path& path);
  [[nodiscard]] std::string to_json() const;
};

}  // namespace hotpath::formats
