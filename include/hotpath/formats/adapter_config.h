// hotpath/formats/adapter_config.h — the `adapters` library's (AdapterHub) adapter_config.json for
// bottleneck adapters, parsed without LibTorch (the fuzz build compiles this file;
// models/text/adapter.h applies, saves and loads the adapters themselves).
//
//   AdapterConfig c = AdapterConfig::preset("seq_bn");            // Pfeiffer: after the feed-forward block
//   AdapterConfig h = AdapterConfig::preset("double_seq_bn");     // Houlsby: after attention and feed-forward
//   AdapterConfig f = AdapterConfig::from_file("adapter/adapter_config.json");   // hotpath::Error when bad
//   std::string text = f.to_json(384, "BertForSequenceClassification");          // what adapters 1.3 writes
//
// A bottleneck adapter is up(act(down(x)))·scaling with down [H/reduction_factor, H] and up
// [H, H/reduction_factor]; where it sits in a sublayer (h = dropout(dense(x)), inp = the sublayer's input,
// LN its LayerNorm) follows the library's BottleneckLayer:
//   residual = h (residual_before_ln) ; x = original_ln_before ? LN(h + inp) : h ; residual = x (otherwise)
//   out = adapter(x) + residual ; out = original_ln_after ? LN(out + inp) : out
// seq_bn (Pfeiffer): output_adapter, original_ln_before, relu. double_seq_bn (Houlsby): mh_adapter too,
// no original_ln_before, swish (SiLU). Options hotpath does not implement (ln_before/ln_after, parallel,
// gating, PHM, invertible adapters, stochastic depth, leave_out, learned scaling) are refused by name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace hotpath::formats {

struct AdapterConfig {
  std::string name = "adapter";   // the adapter's name: part of every weight key (…adapters.<name>.…)
  bool mh_adapter = false;        // after the attention block (BertSelfOutput)
  bool output_adapter = true;     // after the feed-forward block (BertOutput)
  double reduction_factor = 16;   // bottleneck width = max(1, floor(hidden / reduction_factor))
  std::string non_linearity = "relu";  // relu | swish (= silu) | gelu | gelu_new | tanh
  bool original_ln_before = true;
  bool original_ln_after = true;
  bool residual_before_ln = true;
  double scaling = 1.0;
  double dropout = 0.0;           // on the adapter's output, in training

  [[nodiscard]] std::int64_t bottleneck(std::int64_t hidden) const;
  // "seq_bn" / "pfeiffer" or "double_seq_bn" / "houlsby"; anything else is an error listing them.
  static AdapterConfig preset(std::string_view name);
  // adapters' adapter_config.json: {"name": ..., "config": {...} or "seq_bn", ...}. Errors name `source` and the field.
  static AdapterConfig from_json(std::string_view json_text, std::string_view source = "adapter_config.json");
  static AdapterConfig from_file(const std::filesystem::path& path);
  // The file adapters 1.3's save_adapter writes (every config field, version "adapters.1.3.0").
  [[nodiscard]] std::string to_json(std::int64_t hidden_size, std::string_view model_class,
                                    std::string_view model_name = "") const;
};

}  // namespace hotpath::formats
