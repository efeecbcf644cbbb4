// PEFT's PREFIX_TUNING adapter_config.json, torch-free so that fuzz/fuzz_model_config.cpp runs it under
// ASan+UBSan. Every rejection names the file and the field, on one line.
#include "hotpath/formats/prefix_config.h"

#include <nlohmann/json.hpp>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"

namespace hotpath::formats {
namespace {

using Json = nlohmann::json;

// Far above any BERT (hidden 1024, 24 layers, 16 heads) and prefix (PEFT's examples use 10–100 tokens),
// far below a table that cannot be allocated: 4096 · 2 · 1024 · 65536 floats would be; the product is
// bounded below as well.
constexpr std::int64_t kMaxTokens = 4096;
constexpr std::int64_t kMaxDim = 65536;
constexpr std::int64_t kMaxLayers = 1024;
constexpr std::int64_t kMaxTableElements = std::int64_t{1} << 31;

}  // namespace

std::string peft_type_of(std::string_view json_text, std::string_view source) {
  const Json j = parse_json(json_text, source);
  HOTPATH_CHECK(j.is_object(), source, ": expected a JSON object");
  return JsonFields{j, source}.text("peft_type", "");
}

void PrefixConfig::check_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                               std::string_view model) const {
  HOTPATH_CHECK(num_layers == layers, "prefix tuning: the prefix has num_layers ", num_layers, " but ", model, " has ",
                layers, " layers");
  HOTPATH_CHECK(token_dim == hidden, "prefix tuning: the prefix has token_dim ", token_dim, " but ", model,
                " has hidden size ", hidden);
  HOTPATH_CHECK(num_attention_heads == heads, "prefix tuning: the prefix has num_attention_heads ",
                num_attention_heads, " but ", model, " has ", heads, " heads");
}

PrefixConfig PrefixConfig::from_json(std::string_view json_text, std::string_view source) {
  const Json j = parse_json(json_text, source);
  HOTPATH_CHECK(j.is_object(), source, ": expected a JSON object");
  const JsonFields f{j, source};
  const std::string peft_type = f.text("peft_type", "");
  HOTPATH_CHECK(!peft_type.empty(), source, ": missing \"peft_type\" (expected \"PREFIX_TUNING\")");
  HOTPATH_CHECK(peft_type == "PREFIX_TUNING", source, ": peft_type ", json_brief(Json(peft_type)),
                " is not prefix tuning (expected \"PREFIX_TUNING\")");

  PrefixConfig c;
  c.num_virtual_tokens = f.integer("num_virtual_tokens", std::nullopt, 1, kMaxTokens);
  c.token_dim = f.integer("token_dim", std::nullopt, 1, kMaxDim);
  c.num_layers = f.integer("num_layers", std::nullopt, 1, kMaxLayers);
  c.num_attention_heads = f.integer("num_attention_heads", std::nullopt, 1, kMaxDim);
  HOTPATH_CHECK(c.token_dim % c.num_attention_heads == 0, source, ": field \"token_dim\" (", c.token_dim,
                ") must be a multiple of \"num_attention_heads\" (", c.num_attention_heads, ")");
  c.num_transformer_submodules = f.integer("num_transformer_submodules", 1, 1, 2);
  HOTPATH_CHECK(c.num_transformer_submodules == 1, source,
                ": field \"num_transformer_submodules\" is 2 (an encoder-decoder prefix); hotpath's BERT encoders take 1");
  HOTPATH_CHECK(c.table_width() <= kMaxTableElements / c.num_virtual_tokens, source, ": a prefix table of ",
                c.num_virtual_tokens, " x 2 x ", c.num_layers, " x ", c.token_dim, " is larger than the ",
                kMaxTableElements, " elements supported");
  c.prefix_projection = f.boolean("prefix_projection", false);
  c.encoder_hidden_size = f.integer("encoder_hidden_size", c.prefix_projection ? std::nullopt : std::optional<std::int64_t>(0),
                                    c.prefix_projection ? 1 : 0, kMaxDim);
  c.task_type = f.text("task_type", "");
  HOTPATH_CHECK(c.task_type.empty() || c.task_type == "SEQ_CLS" || c.task_type == "FEATURE_EXTRACTION", source,
                ": task_type ", json_brief(Json(c.task_type)),
                " is not supported (hotpath's BERT encoders: \"SEQ_CLS\" or \"FEATURE_EXTRACTION\")");
  c.base_model_name_or_path = f.text("base_model_name_or_path", "");
  c.inference_mode = f.boolean("inference_mode", false);
  const std::string init = f.text("init_weights", "");
  HOTPATH_CHECK(init.empty() || init == "zero", source, ": init_weights ", json_brief(Json(init)),
                " is not supported (null or \"zero\")");
  return c;
}

PrefixConfig PrefixConfig::from_file(const std::filesystem::path& path) {
  return from_json(read_file(path.string(), read_limit::kConfig, "config"), path.string());
}

std::string PrefixConfig::to_json() const {
  Json j = Json::object();
  // The fields peft 0.21 writes for a PrefixTuningConfig (save_pretrained sets inference_mode true).
  j["peft_type"] = "PREFIX_TUNING";
  j["task_type"] = task_type.empty() ? Json(nullptr) : Json(task_type);
  j["base_model_name_or_path"] = base_model_name_or_path.empty() ? Json(nullptr) : Json(base_model_name_or_path);
  j["revision"] = nullptr;
  j["inference_mode"] = inference_mode;
  j["num_virtual_tokens"] = num_virtual_tokens;
  j["token_dim"] = token_dim;
  j["num_transformer_submodules"] = num_transformer_submodules;
  j["num_attention_heads"] = num_attention_heads;
  j["num_layers"] = num_layers;
  j["encoder_hidden_size"] = encoder_hidden_size;
  j["prefix_projection"] = prefix_projection;
  j["init_weights"] = nullptr;
  j["modules_to_save"] = task_type == "SEQ_CLS" ? Json({"classifier", "score"}) : Json(nullptr);
  j["auto_mapping"] = nullptr;
  return j.dump(2) + "\n";
}

}  // namespace hotpath::formats
