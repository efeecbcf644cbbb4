// PEFT's adapter_config.json, torch-free so that fuzz/fuzz_model_config.cpp runs it under ASan+UBSan.
// Every rejection names the file and the key, on one line.
#include "hotpath/formats/lora_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>
#include <string_view>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"

namespace hotpath::formats {
namespace {

using Json = nlohmann::json;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// std::regex matches by backtracking: a repeated group that itself repeats or alternates ((a*)*,
// (a|b)+) or a repetition of a repetition (a**) takes exponential time, and k repetitions in a row
// polynomial time n^k, on a module path of ~50 characters; libstdc++'s compiler also overflows on
// huge counts (a{99999999999999999999}) and back-reference numbers. Refuse these shapes up front;
// PEFT's patterns (".*\\.(query|value)") use one or two repetitions and plain alternations. Returns
// what is wrong, or "".
std::string regex_hazard(std::string_view re) {
  constexpr int kMaxRepeats = 3;
  constexpr std::uint64_t kMaxCount = 1000;
  int repeats = 0;
  bool after_repeat = false;       // the previous token was a repetition (or a '?')
  std::vector<bool> group_varies;  // per open group: holds a repetition or an alternation
  const auto repeat_at = [&](std::size_t at) {
    return at < re.size() && (re[at] == '*' || re[at] == '+' || re[at] == '{');
  };
  for (std::size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    const bool was_repeat = after_repeat;
    after_repeat = false;
    if (c == '\\') {
      // An escaped character is a literal or a class (\d); \1.. is a back-reference, which forces
      // backtracking (and libstdc++ reads its number without an overflow check).
      if (i + 1 < re.size() && re[i + 1] >= '1' && re[i + 1] <= '9') return "a back-reference";
      ++i;
    } else if (c == '[') {
      // A character class: skip to its closing ']' (a ']' right after '[' or '[^' is literal).
      std::size_t j = i + 1;
      if (j < re.size() && re[j] == '^') ++j;
      if (j < re.size() && re[j] == ']') ++j;
      while (j < re.size() && re[j] != ']') j += re[j] == '\\' ? 2 : 1;
      i = j;
    } else if (c == '(') {
      group_varies.push_back(false);
    } else if (c == ')' && !group_varies.empty()) {
      const bool varies = group_varies.back();
      group_varies.pop_back();
      if (varies && repeat_at(i + 1)) return "a repeated group that itself repeats or alternates";
      if (varies && !group_varies.empty()) group_varies.back() = true;
    } else if (c == '|') {
      if (!group_varies.empty()) group_varies.back() = true;
    } else if (c == '?' || repeat_at(i)) {
      if (c != '?' && was_repeat) return "a repetition of a repetition";
      if (!group_varies.empty()) group_varies.back() = true;
      after_repeat = true;
      if (c == '?') continue;
      if (++repeats > kMaxRepeats) return "more than 3 repetitions (*, +, {n,m})";
      if (c == '{') {  // {n}, {n,}, {n,m}: every count at most kMaxCount
        std::uint64_t count = 0;
        for (++i; i < re.size() && re[i] != '}'; ++i) {
          if (re[i] == ',') count = 0;
          if (re[i] < '0' || re[i] > '9') continue;
          count = count * 10 + static_cast<std::uint64_t>(re[i] - '0');
          if (count > kMaxCount) return "a repetition count above 1000";
        }
      }
    }
  }
  return "";
}

}  // namespace

double LoraConfig::scaling() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / static_cast<double>(r);
}

LoraConfig LoraConfig::from_json(std::string_view json_text, std::string_view source) {
  const Json j = parse_json(json_text, source);
  HOTPATH_CHECK(j.is_object(), source, ": expected a JSON object");
  const std::string peft_type = JsonFields{j, source}.text("peft_type", "");
  HOTPATH_CHECK(!peft_type.empty(), source, ": missing \"peft_type\" (expected \"LORA\")");
  HOTPATH_CHECK(peft_type == "LORA", source, ": peft_type ", json_brief(Json(peft_type)),
                " is not supported (only \"LORA\")");

  LoraConfig c;
  const JsonFields f{j, source};
  HOTPATH_CHECK(f.has("r"), source, ": missing \"r\" (the LoRA rank)");
  const Json& r = j.at("r");
  // is_number_unsigned() first: a value above INT64_MAX would wrap to a negative one in get<int64_t>.
  HOTPATH_CHECK(r.is_number_integer() && (!r.is_number_unsigned() || r.get<std::uint64_t>() <= (1u << 20)) &&
                    r.get<std::int64_t>() > 0 && r.get<std::int64_t>() <= (1 << 20),
                source, ": \"r\" must be a positive integer (at most 1048576), got ", json_brief(r));
  c.r = r.get<std::int64_t>();
  c.lora_alpha = f.real("lora_alpha", 8.0);
  c.lora_dropout = f.real("lora_dropout", 0.0);
  HOTPATH_CHECK(c.lora_dropout >= 0.0 && c.lora_dropout < 1.0, source, ": \"lora_dropout\" must be in [0, 1), got ",
                c.lora_dropout);
  HOTPATH_CHECK(f.has("target_modules"), source, ": missing \"target_modules\" (hotpath has no per-model defaults)");
  if (j.at("target_modules").is_string()) {
    c.target_regex = f.text("target_modules", "");
    HOTPATH_CHECK(!c.target_regex.empty(), source, ": \"target_modules\" is an empty regex");
    HOTPATH_CHECK(c.target_regex != "all-linear", source, ": target_modules \"all-linear\" is not supported; list the modules");
    HOTPATH_CHECK(c.target_regex.size() <= kLoraMaxRegex, source, ": target_modules regex of ", c.target_regex.size(),
                  " characters is longer than the ", kLoraMaxRegex, " supported");
    const std::string hazard = regex_hazard(c.target_regex);
    HOTPATH_CHECK(hazard.empty(), source, ": target_modules regex ", json_brief(Json(c.target_regex)), " has ", hazard,
                  ", which std::regex can take exponential time to match; list the modules or simplify it");
    try {
      std::regex check(c.target_regex);
    } catch (const std::regex_error& e) {
      HOTPATH_CHECK(false, source, ": target_modules regex ", json_brief(Json(c.target_regex)), " does not compile: ",
                    e.what());
    }
  } else {
    c.target_modules = f.texts("target_modules");
    HOTPATH_CHECK(!c.target_modules.empty(), source, ": \"target_modules\" is empty");
  }
  c.bias = f.text("bias", "none");
  HOTPATH_CHECK(c.bias == "none", source, ": bias ", json_brief(Json(c.bias)), " is not supported (only \"none\")");
  c.modules_to_save = f.texts("modules_to_save");
  c.use_rslora = f.boolean("use_rslora", false);
  c.task_type = f.text("task_type", "");
  c.base_model_name_or_path = f.text("base_model_name_or_path", "");
  c.inference_mode = f.boolean("inference_mode", false);

  // Variants hotpath does not implement: refuse rather than load a different model.
  for (const char* flag : {"fan_in_fan_out", "use_dora", "lora_bias", "use_qalora"})
    HOTPATH_CHECK(!f.boolean(flag, false), source, ": \"", flag, "\": true is not supported");
  for (const char* key : {"layers_to_transform", "layers_pattern", "exclude_modules", "target_parameters",
                          "layer_replication", "trainable_token_indices"})
    HOTPATH_CHECK(!f.has(key) || (j.at(key).is_array() && j.at(key).empty()), source, ": \"", key,
                  "\" is not supported (got ", json_brief(j.at(key)), ")");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    HOTPATH_CHECK(!f.has(key) || j.at(key).empty(), source, ": \"", key, "\" is not supported (got ",
                  json_brief(j.at(key)), ")");
  return c;
}

LoraConfig LoraConfig::from_file(const std::filesystem::path& path) {
  return from_json(read_file(path.string(), read_limit::kConfig, "config"), path.string());  // read_file's error names the path
}

std::string LoraConfig::to_json() const {
  Json j = Json::object();
  // The fields peft 0.21 writes for a plain LoRA adapter; unknown ones would only draw a warning.
  j["peft_type"] = "LORA";
  j["task_type"] = task_type.empty() ? Json(nullptr) : Json(task_type);
  j["base_model_name_or_path"] = base_model_name_or_path.empty() ? Json(nullptr) : Json(base_model_name_or_path);
  j["revision"] = nullptr;
  j["inference_mode"] = inference_mode;
  j["r"] = r;
  j["lora_alpha"] = lora_alpha;
  j["lora_dropout"] = lora_dropout;
  j["target_modules"] = target_regex.empty() ? Json(target_modules) : Json(target_regex);
  j["exclude_modules"] = nullptr;
  j["bias"] = bias;
  j["fan_in_fan_out"] = false;
  j["use_rslora"] = use_rslora;
  j["use_dora"] = false;
  j["lora_bias"] = false;
  j["modules_to_save"] = modules_to_save.empty() ? Json(nullptr) : Json(modules_to_save);
  j["init_lora_weights"] = true;
  j["layers_to_transform"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["rank_pattern"] = Json::object();
  j["alpha_pattern"] = Json::object();
  return j.dump(2) + "\n";
}

bool lora_target_matches(const LoraConfig& config, std::string_view path) {
  if (!config.target_regex.empty()) {
    return std::regex_match(path.begin(), path.end(), std::regex(config.target_regex));
  }
  for (const std::string& t : config.target_modules) {
    if (path == t) return true;
    if (path.size() > t.size() && ends_with(path, t) && path[path.size() - t.size() - 1] == '.') return true;
  }
  return false;
}

}  // namespace hotpath::formats
