// The adapters library's adapter_config.json for bottleneck adapters, torch-free so that
// fuzz/fuzz_model_config.cpp runs it under ASan+UBSan. Every rejection names the file and the field.
#include "hotpath/formats/adapter_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"

namespace hotpath::formats {
namespace {

using Json = nlohmann::json;

constexpr const char* kActivations[] = {"relu", "swish", "silu", "gelu", "gelu_new", "tanh"};

void check_activation(const std::string& act, std::string_view source) {
  const bool ok = std::any_of(std::begin(kActivations), std::end(kActivations), [&](const char* a) { return act == a; });
  HOTPATH_CHECK(ok, source, ": field \"non_linearity\" is ", json_brief(Json(act)),
                "; supported: relu, swish (silu), gelu, gelu_new, tanh");
}

}  // namespace

std::int64_t AdapterConfig::bottleneck(std::int64_t hidden) const {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(static_cast<double>(hidden) / reduction_factor)));
}

AdapterConfig AdapterConfig::preset(std::string_view name) {
  AdapterConfig c;
  if (name == "seq_bn" || name == "pfeiffer") return c;
  if (name == "double_seq_bn" || name == "houlsby") {
    c.mh_adapter = true;
    c.original_ln_before = false;
    c.non_linearity = "swish";
    return c;
  }
  // json_brief quotes and escapes the name: a newline in it stays inside the one-line message (fuzz_model_config).
  HOTPATH_CHECK(false, "adapter config ", json_brief(Json(std::string(name))),
                " is not supported: seq_bn (pfeiffer) or double_seq_bn (houlsby)");
  return c;
}

AdapterConfig AdapterConfig::from_json(std::string_view json_text, std::string_view source) {
  const Json j = parse_json(json_text, source);
  HOTPATH_CHECK(j.is_object(), source, ": expected a JSON object");
  const JsonFields top{j, source};
  HOTPATH_CHECK(!top.has("peft_type"), source, ": this is a PEFT adapter (peft_type ", json_brief(j.at("peft_type")),
                "), not an adapters-library bottleneck adapter");
  HOTPATH_CHECK(top.has("config"), source, ": missing required field \"config\" (a preset name or the adapter's settings)");
  const std::string name = top.text("name", "");
  HOTPATH_CHECK(!name.empty(), source, ": missing required field \"name\" (the adapter's name)");
  HOTPATH_CHECK(name.find_first_of(". /\\") == std::string::npos && name.size() <= 100, source,
                ": field \"name\" ", json_brief(Json(name)),
                " must be at most 100 characters without '.', '/', '\\' or spaces (it is part of every weight key)");
  const Json& config = j.at("config");
  AdapterConfig c;
  if (config.is_string()) {
    c = preset(config.get<std::string>());
  } else {
    HOTPATH_CHECK(config.is_object(), source, ": field \"config\" must be a preset name or an object, found ",
                  json_brief(config));
    const std::string where = std::string(source) + ": config";
    const JsonFields f{config, where};
    const std::string arch = f.text("architecture", "");
    HOTPATH_CHECK(arch.empty() || arch == "bottleneck", where, ": architecture ", json_brief(Json(arch)),
                  " is not supported (bottleneck adapters only)");
    for (const char* key : {"mh_adapter", "output_adapter", "reduction_factor", "non_linearity"}) {
      HOTPATH_CHECK(f.has(key), where, ": missing required field \"", key, "\"");
    }
    c.mh_adapter = f.boolean("mh_adapter", false);
    c.output_adapter = f.boolean("output_adapter", true);
    HOTPATH_CHECK(config.at("reduction_factor").is_number(), where,
                  ": field \"reduction_factor\" must be a number (per-layer mappings are not supported), found ",
                  json_brief(config.at("reduction_factor")));
    c.reduction_factor = f.real("reduction_factor", 16, 1e-3, 1e6);
    c.non_linearity = f.text("non_linearity", "relu");
    // As the library: configs saved before it recorded a version meant gelu_new by "gelu".
    if (c.non_linearity == "gelu" && !top.has("version")) c.non_linearity = "gelu_new";
    c.original_ln_before = f.boolean("original_ln_before", false);  // the library's BnConfig defaults
    c.original_ln_after = f.boolean("original_ln_after", true);
    HOTPATH_CHECK(!f.has("residual_before_ln") || config.at("residual_before_ln").is_boolean(), where,
                  ": field \"residual_before_ln\" ", json_brief(config.at("residual_before_ln")),
                  " is not supported (true or false)");
    c.residual_before_ln = f.boolean("residual_before_ln", true);
    HOTPATH_CHECK(!f.has("scaling") || config.at("scaling").is_number_float(), where, ": field \"scaling\" ",
                  json_brief(config.at("scaling")), " is not supported (a number such as 1.0; learned scaling is not)");
    c.scaling = f.real("scaling", 1.0, -1e6, 1e6);
    c.dropout = f.real("dropout", 0.0, 0.0, 0.999);
    for (const char* flag : {"ln_before", "ln_after", "is_parallel", "use_gating", "cross_adapter", "phm_layer",
                             "adapter_residual_before_ln"}) {
      HOTPATH_CHECK(!f.boolean(flag, false), where, ": \"", flag, "\": true is not supported");
    }
    HOTPATH_CHECK(!f.has("inv_adapter"), where, ": invertible adapters (\"inv_adapter\") are not supported");
    HOTPATH_CHECK(f.real("stochastic_depth", 0.0) == 0.0, where, ": \"stochastic_depth\" is not supported (0)");
    HOTPATH_CHECK(!f.has("leave_out") || (config.at("leave_out").is_array() && config.at("leave_out").empty()), where,
                  ": \"leave_out\" is not supported (every layer gets the adapter)");
  }
  c.name = name;
  check_activation(c.non_linearity, source);
  HOTPATH_CHECK(c.mh_adapter || c.output_adapter, source, ": neither mh_adapter nor output_adapter: no adapter at all");
  return c;
}

AdapterConfig AdapterConfig::from_file(const std::filesystem::path& path) {
  return from_json(read_file(path.string(), read_limit::kConfig, "config"), path.string());
}

std::string AdapterConfig::to_json(std::int64_t hidden_size, std::string_view model_class, std::string_view model_name) const {
  Json c = Json::object();
  c["adapter_residual_before_ln"] = false;
  c["cross_adapter"] = false;
  c["dropout"] = dropout;
  c["factorized_phm_W"] = true;
  c["factorized_phm_rule"] = false;
  c["hypercomplex_nonlinearity"] = "glorot-uniform";
  c["init_weights"] = "bert";
  c["init_weights_seed"] = nullptr;
  c["inv_adapter"] = nullptr;
  c["inv_adapter_reduction_factor"] = nullptr;
  c["is_parallel"] = false;
  c["learn_phm"] = true;
  c["leave_out"] = Json::array();
  c["ln_after"] = false;
  c["ln_before"] = false;
  c["mh_adapter"] = mh_adapter;
  c["non_linearity"] = non_linearity;
  c["original_ln_after"] = original_ln_after;
  c["original_ln_before"] = original_ln_before;
  c["output_adapter"] = output_adapter;
  c["phm_bias"] = true;
  c["phm_c_init"] = "normal";
  c["phm_dim"] = 4;
  c["phm_init_range"] = 0.0001;
  c["phm_layer"] = false;
  c["phm_rank"] = 1;
  // An integral factor as an integer, as the library writes 16; a float keeps its fraction.
  if (reduction_factor == std::floor(reduction_factor) && reduction_factor < 1e9) {
    c["reduction_factor"] = static_cast<std::int64_t>(reduction_factor);
  } else {
    c["reduction_factor"] = reduction_factor;
  }
  c["residual_before_ln"] = residual_before_ln;
  c["scaling"] = scaling;  // a float: the library refuses an integer scaling
  c["shared_W_phm"] = false;
  c["shared_phm_rule"] = true;
  c["stochastic_depth"] = 0.0;
  c["use_gating"] = false;
  Json j = {{"config", c},
            {"hidden_size", hidden_size},
            {"model_class", std::string(model_class)},
            {"model_name", std::string(model_name)},
            {"model_type", "bert"},
            {"name", name},
            {"version", "adapters.1.3.0"}};
  return j.dump(2) + "\n";
}

}  // namespace hotpath::formats
