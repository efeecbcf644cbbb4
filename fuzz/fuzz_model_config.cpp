// libFuzzer target: the JSON files of a model directory. The first byte picks what the rest is:
//   0: config.json (BertConfig)   1: modules.json   2: 1_Pooling/config.json   3: adapter_config.json (LoRA)
//   4: adapter_config.json (prefix tuning)   5: adapter_config.json (the adapters library's bottleneck adapters)
// Bad input must end in hotpath::Error on one line (never a crash, hang, JSON exception escaping);
// a config that parses must keep the invariants the model constructors rely on.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hotpath/core/error.h"
#include "hotpath/formats/bert_config.h"
#include "hotpath/formats/adapter_config.h"
#include "hotpath/formats/lora_config.h"
#include "hotpath/formats/prefix_config.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_model_config: %s\n", what);
  std::abort();
}

void check(const hotpath::formats::BertConfig& c) {
  using hotpath::formats::kBertMaxSize;
  for (const std::int64_t v : {c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                               c.intermediate_size, c.max_position_embeddings, c.num_labels}) {
    if (v < 1 || v > kBertMaxSize) fail("a size is out of range");
  }
  if (c.hidden_size % c.num_attention_heads != 0) fail("hidden size not a multiple of heads");
  if (c.pad_token_id < 0 || c.pad_token_id >= c.vocab_size) fail("pad_token_id out of range");
  if (static_cast<std::int64_t>(c.id2label.size()) != c.num_labels) fail("id2label size != num_labels");
  if (!(c.layer_norm_eps >= 0.0) || !(c.hidden_dropout_prob < 1.0)) fail("bad eps or dropout");
}

void check(const hotpath::formats::LoraConfig& c) {
  if (c.r < 1) fail("rank below 1");
  if (c.target_modules.empty() == c.target_regex.empty()) fail("neither or both of target list and regex");
  if (!(c.lora_dropout >= 0.0 && c.lora_dropout < 1.0)) fail("dropout out of range");
  (void)c.scaling();
  // A regex the parser accepts must match in bounded time (no nested or many repetitions).
  (void)hotpath::formats::lora_target_matches(c, "bert.encoder.layer.10.attention.self.query");
  if (hotpath::formats::LoraConfig::from_json(c.to_json()).r != c.r) fail("to_json does not round-trip");
}

void check(const hotpath::formats::PrefixConfig& c) {
  if (c.num_virtual_tokens < 1 || c.token_dim < 1 || c.num_layers < 1 || c.num_attention_heads < 1) {
    fail("a size below 1");
  }
  if (c.token_dim % c.num_attention_heads != 0) fail("token_dim not a multiple of the heads");
  if (c.num_transformer_submodules != 1) fail("two transformer submodules accepted");
  if (c.table_width() > (std::int64_t{1} << 31) / c.num_virtual_tokens) fail("table larger than the bound");
  if (c.prefix_projection && c.encoder_hidden_size < 1) fail("projection without a width");
  const auto back = hotpath::formats::PrefixConfig::from_json(c.to_json());
  if (back.num_virtual_tokens != c.num_virtual_tokens || back.table_width() != c.table_width()) {
    fail("to_json does not round-trip");
  }
}

void check(const hotpath::formats::AdapterConfig& c) {
  if (!(c.reduction_factor >= 1e-3) || c.bottleneck(768) < 1) fail("bad reduction factor");
  if (!c.mh_adapter && !c.output_adapter) fail("no adapter placed");
  if (c.name.empty()) fail("empty name");
  const auto back = hotpath::formats::AdapterConfig::from_json(c.to_json(768, "BertForSequenceClassification"));
  if (back.bottleneck(768) != c.bottleneck(768) || back.name != c.name) fail("to_json does not round-trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 6) {
      case 0: check(hotpath::formats::BertConfig::from_json(text)); break;
      case 1: {
        hotpath::formats::SentencePipeline p;
        hotpath::formats::parse_sentence_modules(text, "modules.json", p);
        break;
      }
      case 2: {
        hotpath::formats::SentencePipeline p;
        hotpath::formats::parse_sentence_pooling(text, "1_Pooling/config.json", p);
        if (p.dimension < 0) fail("negative dimension");
        break;
      }
      case 3: check(hotpath::formats::LoraConfig::from_json(text)); break;
      case 4:
        (void)hotpath::formats::peft_type_of(text);
        check(hotpath::formats::PrefixConfig::from_json(text));
        break;
      default: check(hotpath::formats::AdapterConfig::from_json(text)); break;
    }
  } catch (const hotpath::Error& e) {
    if (std::string_view(e.what()).find('\n') != std::string_view::npos) fail("error message is not one line");
  }
  return 0;
}
