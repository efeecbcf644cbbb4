// config.json (BERT / DistilBERT) and sentence-transformers' module files, torch-free so that
// fuzz/fuzz_model_config.cpp runs them under ASan+UBSan. Every rejection is one hotpath::Error line.
#include "hotpath/formats/bert_config.h"

#include <nlohmann/json.hpp>

#include <exception>
#include <optional>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"

namespace hotpath::formats {
namespace {

using Json = nlohmann::json;

Json parse(std::string_view text, std::string_view name) { return parse_json(text, name); }

// config.json's fields with BERT's bounds by default: integers in [1, kBertMaxSize], reals in [0, 1e30]
// (nlohmann refuses literals that overflow a double; 1e30 keeps later arithmetic, eps² and σ·x, finite).
struct ConfigReader : JsonFields {
  [[nodiscard]] std::int64_t integer(const char* key, std::optional<std::int64_t> fallback, std::int64_t min = 1,
                                     std::int64_t max = kBertMaxSize) const {
    return JsonFields::integer(key, fallback, min, max);
  }
  [[nodiscard]] double real(const char* key, double fallback) const { return JsonFields::real(key, fallback, 0.0, 1e30); }
};

// Bounds far above any BERT (large: 1024 hidden, 24 layers, 16 heads), far below an allocation that
// cannot succeed.
constexpr std::int64_t kMaxHidden = 65536;
constexpr std::int64_t kMaxLayers = 1024;
constexpr std::int64_t kMaxHeads = 1024;
constexpr double kMaxParams = 4e9;

BertActivation parse_activation(const std::string& act, std::string_view name, const char* key) {
  if (act == "gelu") return BertActivation::kGelu;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return BertActivation::kGeluNew;
  if (act == "relu") return BertActivation::kRelu;
  HOTPATH_CHECK(false, name, ": field \"", key, "\" is ", json_brief(Json(act)),
                "; supported: gelu, gelu_new, gelu_pytorch_tanh, relu");
  return BertActivation::kGelu;
}

void read_labels(const ConfigReader& r, BertConfig& c) {
  if (r.has("id2label")) {
    const Json& m = r.json.at("id2label");
    HOTPATH_CHECK(m.is_object(), r.name, ": field \"id2label\" must be an object {\"0\": \"label\", ...}");
    HOTPATH_CHECK(!m.empty(), r.name, ": field \"id2label\" is empty");
    c.id2label.assign(m.size(), "");
    std::vector<bool> seen(m.size(), false);
    for (const auto& [key, value] : m.items()) {
      // Decimal digits only: "01" or " 1" would name an id twice and leave another unnamed.
      const bool digits = !key.empty() && key.size() <= 18 && (key == "0" || key[0] != '0') &&
                          key.find_first_not_of("0123456789") == std::string::npos;
      const std::size_t id = digits ? std::stoull(key) : m.size();
      HOTPATH_CHECK(id < m.size(), r.name, ": field \"id2label\": key ", json_brief(Json(key)), " is not an id in [0, ",
                    m.size(), ")");
      HOTPATH_CHECK(!seen[id], r.name, ": field \"id2label\": id ", id, " appears twice");
      HOTPATH_CHECK(value.is_string(), r.name, ": field \"id2label\": label of id ", id, " must be a string");
      seen[id] = true;
      c.id2label[id] = value.get<std::string>();
    }
    c.num_labels = static_cast<std::int64_t>(m.size());
    if (r.has("num_labels")) {
      HOTPATH_CHECK(r.integer("num_labels", {}) == c.num_labels, r.name, ": field \"num_labels\" (",
                    json_brief(r.json.at("num_labels")), ") disagrees with id2label's ", c.num_labels, " labels");
    }
  } else {
    c.num_labels = r.integer("num_labels", 2);
    for (std::int64_t i = 0; i < c.num_labels; ++i) c.id2label.push_back("LABEL_" + std::to_string(i));
  }
  if (r.has("label2id")) {
    const Json& m = r.json.at("label2id");
    HOTPATH_CHECK(m.is_object(), r.name, ": field \"label2id\" must be an object {\"label\": 0, ...}");
    for (const auto& [key, value] : m.items()) {
      HOTPATH_CHECK(value.is_number_integer(), r.name, ": field \"label2id\": id of ", json_brief(Json(key)),
                    " must be an integer");
      c.label2id[key] = value.get<std::int64_t>();
    }
  } else {
    for (std::size_t i = 0; i < c.id2label.size(); ++i) c.label2id[c.id2label[i]] = static_cast<std::int64_t>(i);
  }
  c.problem_type = r.text("problem_type", "");
}

// Longformer's attention_window: one even, positive size for every layer, or a list of one per layer.
void read_attention_window(const ConfigReader& r, BertConfig& c) {
  const std::size_t layers = static_cast<std::size_t>(c.num_hidden_layers);
  if (!r.has("attention_window")) {
    c.attention_window.assign(layers, 512);  // LongformerConfig's default
  } else if (r.json.at("attention_window").is_array()) {
    const Json& list = r.json.at("attention_window");
    HOTPATH_CHECK(list.size() == layers, r.name, ": field \"attention_window\" lists ", list.size(),
                  " windows for ", layers, " layers");
    for (const Json& w : list) {
      HOTPATH_CHECK(w.is_number_integer(), r.name, ": field \"attention_window\" must hold integers, found ",
                    json_brief(w));
      c.attention_window.push_back(w.get<std::int64_t>());
    }
  } else {
    c.attention_window.assign(layers, r.integer("attention_window", {}));
  }
  for (std::size_t i = 0; i < c.attention_window.size(); ++i) {
    const std::int64_t w = c.attention_window[i];
    HOTPATH_CHECK(w > 0 && w % 2 == 0 && w <= kBertMaxSize, r.name, ": field \"attention_window\" of layer ", i,
                  " is ", w, "; expected an even size > 0");
  }
  HOTPATH_CHECK(c.max_position_embeddings > c.pad_token_id + 1, r.name, ": max_position_embeddings (",
                c.max_position_embeddings, ") leaves no position after pad_token_id + 1 (", c.pad_token_id + 1,
                "): Longformer's positions start there");
}

}  // namespace

// ---- BertConfig ----------------------------------------------------------------------------------

BertConfig BertConfig::from_json(std::string_view json_text, std::string_view name) {
  const Json json = parse(json_text, name);
  HOTPATH_CHECK(json.is_object(), name, ": expected a JSON object");
  const ConfigReader r{{json, name}};
  HOTPATH_CHECK(r.has("model_type"), name, ": missing required field \"model_type\" (bert, distilbert or longformer)");
  const std::string type = r.text("model_type", "");
  BertConfig c;
  if (type == "bert" || type == "longformer") {
    c.arch = type == "bert" ? BertArch::kBert : BertArch::kLongformer;
    c.vocab_size = r.integer("vocab_size", {});
    c.hidden_size = r.integer("hidden_size", {}, 1, kMaxHidden);
    c.num_hidden_layers = r.integer("num_hidden_layers", {}, 1, kMaxLayers);
    c.num_attention_heads = r.integer("num_attention_heads", {}, 1, kMaxHeads);
    c.intermediate_size = r.integer("intermediate_size", {}, 1, 4 * kMaxHidden);
    c.max_position_embeddings = r.integer("max_position_embeddings", 512);
    c.type_vocab_size = r.integer("type_vocab_size", 2, 1, 1024);
    c.layer_norm_eps = r.real("layer_norm_eps", 1e-12);
    c.hidden_dropout_prob = r.real("hidden_dropout_prob", 0.1);
    c.attention_probs_dropout_prob = r.real("attention_probs_dropout_prob", 0.1);
    c.classifier_dropout = r.real("classifier_dropout", c.hidden_dropout_prob);
    c.hidden_act = parse_activation(r.text("hidden_act", "gelu"), name, "hidden_act");
    const std::string pos = r.text("position_embedding_type", "absolute");
    HOTPATH_CHECK(pos == "absolute", name, ": field \"position_embedding_type\" is ", json_brief(Json(pos)),
                  "; only \"absolute\" is supported");
  } else if (type == "distilbert") {
    c.arch = BertArch::kDistilBert;
    c.vocab_size = r.integer("vocab_size", {});
    c.hidden_size = r.integer("dim", {}, 1, kMaxHidden);
    c.num_hidden_layers = r.integer("n_layers", {}, 1, kMaxLayers);
    c.num_attention_heads = r.integer("n_heads", {}, 1, kMaxHeads);
    c.intermediate_size = r.integer("hidden_dim", {}, 1, 4 * kMaxHidden);
    c.max_position_embeddings = r.integer("max_position_embeddings", 512);
    c.type_vocab_size = 0;
    c.layer_norm_eps = 1e-12;  // DistilBERT hard-codes it
    c.hidden_dropout_prob = r.real("dropout", 0.1);
    c.attention_probs_dropout_prob = r.real("attention_dropout", 0.1);
    c.classifier_dropout = r.real("seq_classif_dropout", 0.2);
    c.hidden_act = parse_activation(r.text("activation", "gelu"), name, "activation");
    c.sinusoidal_pos_embds = r.boolean("sinusoidal_pos_embds", false);
  } else {
    HOTPATH_CHECK(false, name, ": field \"model_type\" is ", json_brief(Json(type)),
                  "; supported: bert, distilbert, longformer");
  }
  for (const auto& [key, p] : {std::pair{"hidden_dropout_prob", c.hidden_dropout_prob},
                               std::pair{"attention_probs_dropout_prob", c.attention_probs_dropout_prob},
                               std::pair{"classifier_dropout", c.classifier_dropout}}) {
    HOTPATH_CHECK(p < 1.0, name, ": dropout probability \"", key, "\" must be below 1, found ", p);
  }
  // Parameters the config asks for, before anything is allocated: a typo (num_hidden_layers: 100000)
  // must be one line, not minutes of allocation and then a mismatch with the weights.
  const double h = static_cast<double>(c.hidden_size);
  const double params = h * static_cast<double>(c.vocab_size + c.max_position_embeddings + c.type_vocab_size) +
                        static_cast<double>(c.num_hidden_layers) *
                            (4 * h * h + 2 * h * static_cast<double>(c.intermediate_size));
  HOTPATH_CHECK(params <= kMaxParams, name, ": the sizes ask for ~", params, " parameters, more than the ", kMaxParams,
                " hotpath builds (check hidden_size, num_hidden_layers, intermediate_size, vocab_size)");
  c.pad_token_id = r.integer("pad_token_id", c.arch == BertArch::kLongformer ? 1 : 0, 0);
  if (c.arch == BertArch::kLongformer) read_attention_window(r, c);
  c.initializer_range = r.real("initializer_range", 0.02);
  HOTPATH_CHECK(c.hidden_size % c.num_attention_heads == 0, name, ": hidden size ", c.hidden_size,
                " is not a multiple of the number of attention heads ", c.num_attention_heads);
  HOTPATH_CHECK(c.pad_token_id < c.vocab_size, name, ": field \"pad_token_id\" (", c.pad_token_id,
                ") must be below vocab_size (", c.vocab_size, ")");
  read_labels(r, c);
  return c;
}

std::string_view base_model_prefix(const BertConfig& config) {
  switch (config.arch) {
    case BertArch::kBert: return "bert";
    case BertArch::kDistilBert: return "distilbert";
    case BertArch::kLongformer: return "longformer";
  }
  return "bert";
}

BertConfig BertConfig::from_file(const std::filesystem::path& path) {
  return from_json(read_file(path.string(), read_limit::kConfig, "config"), path.string());  // read_file's error names the path
}

// ---- sentence-transformers -------------------------------------------------------------------------

void parse_sentence_modules(std::string_view json_text, std::string_view name, SentencePipeline& pipeline) {
  const Json modules = parse(json_text, name);
  HOTPATH_CHECK(modules.is_array(), name, ": expected an array of modules");
  bool pooling = false;
  pipeline.normalize = false;
  for (const Json& m : modules) {
    HOTPATH_CHECK(m.is_object() && m.contains("type") && m.at("type").is_string(), name,
                  ": each module needs a string \"type\"");
    const std::string type = m.at("type").get<std::string>();
    if (type.ends_with(".Transformer")) continue;
    if (type.ends_with(".Pooling")) {
      pooling = true;
    } else if (type.ends_with(".Normalize")) {
      pipeline.normalize = true;
    } else {
      HOTPATH_CHECK(false, name, ": module type ", json_brief(Json(type)),
                    " is not supported (Transformer, Pooling, Normalize)");
    }
  }
  HOTPATH_CHECK(pooling, name, ": no Pooling module");
}

void parse_sentence_pooling(std::string_view json_text, std::string_view name, SentencePipeline& pipeline) {
  const Json pooling = parse(json_text, name);
  HOTPATH_CHECK(pooling.is_object(), name, ": expected a JSON object");
  bool mean = false;
  for (const auto& [key, value] : pooling.items()) {
    if (!key.starts_with("pooling_mode_")) continue;
    HOTPATH_CHECK(value.is_boolean(), name, ": ", json_brief(Json(key)), " must be true or false, found ", json_brief(value));
    const bool is_mean = key == "pooling_mode_mean_tokens";
    HOTPATH_CHECK(value.get<bool>() == is_mean, name, ": ", json_brief(Json(key)), " is ", value.dump(),
                  "; only mean pooling (pooling_mode_mean_tokens) is supported");
    mean = mean || is_mean;
  }
  HOTPATH_CHECK(mean, name, ": \"pooling_mode_mean_tokens\" is not set; only mean pooling is supported");
  const ConfigReader r{{pooling, name}};
  pipeline.dimension = r.integer("word_embedding_dimension", 0, 0);
}

SentencePipeline read_sentence_pipeline(const std::filesystem::path& dir) {
  SentencePipeline pipeline;
  for (const auto& [file, parse_one] : {std::pair{dir / "modules.json", &parse_sentence_modules},
                                        std::pair{dir / "1_Pooling" / "config.json", &parse_sentence_pooling}}) {
    if (!std::filesystem::exists(file)) continue;
    parse_one(read_file(file.string(), read_limit::kConfig, "config"), file.string(), pipeline);
  }
  return pipeline;
}

}  // namespace hotpath::formats
