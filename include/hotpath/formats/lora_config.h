// hotpath/formats/lora_config.h — PEFT's adapter_config.json for LoRA, parsed without LibTorch (the
// fuzz build compiles this file; lora.h applies, saves and loads the adapters themselves).
//
//   LoraConfig c = LoraConfig::from_file("adapter/adapter_config.json");  // hotpath::Error when bad
//   bool hit = lora_target_matches(c, "bert.encoder.layer.0.attention.self.query");
//   std::string text = c.to_json();                                       // what peft 0.21 writes
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::formats {

// Longest target_modules regex accepted: std::regex compiles recursively, so a pathological pattern
// of unbounded length could exhaust the stack; real ones are a few dozen characters.
inline constexpr std::size_t kLoraMaxRegex = 1000;

// PEFT's LoraConfig, the fields hotpath uses (adapter_config.json keeps PEFT's names).
struct LoraConfig {
  std::int64_t r = 8;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  // A module is targeted when its dotted path equals an entry or ends with "." + entry (PEFT's rule).
  std::vector<std::string> target_modules;
  // When non-empty, replaces target_modules: the path must fully match this regex (PEFT: a string
  // target_modules is re.fullmatch'ed). ECMAScript syntax, which agrees with Python's for the usual
  // patterns (".*\\.(query|value)").
  std::string target_regex;
  std::string bias = "none";  // only "none" is supported
  // Modules trained fully and saved beside the adapters (a classifier head), matched like targets.
  std::vector<std::string> modules_to_save;
  bool use_rslora = false;          // scaling alpha/√r instead of alpha/r
  std::string task_type;            // "" (null) | "SEQ_CLS" | "FEATURE_EXTRACTION" | ...
  std::string base_model_name_or_path;
  bool inference_mode = false;

  [[nodiscard]] double scaling() const;
  // PEFT's adapter_config.json (peft_type "LORA"). Errors name `source` and the field: another
  // peft_type, a missing or non-positive r, fan_in_fan_out, use_dora, an unsupported bias, ...
  static LoraConfig from_json(std::string_view json_text, std::string_view source = "adapter_config.json");
  static LoraConfig from_file(const std::filesystem::path& path);
  [[nodiscard]] std::string to_json() const;
};

// Does `path` match config's targets (PEFT's rule, see LoraConfig::target_modules)?
bool lora_target_matches(const LoraConfig& config, std::string_view path);

}  // namespace hotpath::formats
