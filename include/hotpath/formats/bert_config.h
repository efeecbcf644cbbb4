// hotpath/formats/bert_config.h — a Hugging Face BERT / DistilBERT config.json and sentence-transformers'
// modules.json + 1_Pooling/config.json, parsed without LibTorch (the fuzz build compiles this file).
//
//   BertConfig c = BertConfig::from_file("all-MiniLM-L6-v2/config.json");   // hotpath::Error when bad
//   SentencePipeline p = read_sentence_pipeline("all-MiniLM-L6-v2");          // mean pooling, normalize
//   if (p.dimension != 0 && p.dimension != c.hidden_size) { /* the files disagree */ }
//
// Every rejection is one line naming the file and the field: missing or wrong-typed required fields,
// an unknown model_type or activation, sizes that are inconsistent or beyond kBertMaxSize.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::formats {

// config.json model_type "bert" / "distilbert" / "longformer" (RoBERTa embeddings, sliding-window attention).
enum class BertArch { kBert, kDistilBert, kLongformer };
enum class BertActivation { kGelu, kGeluNew, kRelu };  // "gelu" (erf), "gelu_new" (tanh approx.), "relu"

// Upper bound on every size field (vocab, hidden, layers, heads, positions, labels): far above any
// real BERT, low enough that a corrupt config fails here rather than in a terabyte allocation.
inline constexpr std::int64_t kBertMaxSize = std::int64_t{1} << 24;

// config.json, in BERT's names (Longformer's are BERT's plus attention_window); DistilBERT's keys (dim, n_layers,
// n_heads, hidden_dim, activation, ...)
// are read into the same fields.
struct BertConfig {
  BertArch arch = BertArch::kBert;
  std::int64_t vocab_size = 30522;
  std::int64_t hidden_size = 768;
  std::int64_t num_hidden_layers = 12;
  std::int64_t num_attention_heads = 12;
  std::int64_t intermediate_size = 3072;
  std::int64_t max_position_embeddings = 512;
  std::int64_t type_vocab_size = 2;  // 0 for DistilBERT (no token type embeddings)
  std::int64_t pad_token_id = 0;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;  // N(0, σ) for Linear and Embedding weights, as HF's _init_weights
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double classifier_dropout = 0.1;  // BERT: classifier_dropout, else hidden_dropout_prob; DistilBERT: seq_classif_dropout
  BertActivation hidden_act = BertActivation::kGelu;
  bool sinusoidal_pos_embds = false;  // DistilBERT: fixed sinusoidal position table
  // Longformer: attention_window per layer (each even and > 0; the one-sided window is half of it). Positions
  // are RoBERTa's: pad_token_id + 1 + the token's index among the non-padding tokens.
  std::vector<std::int64_t> attention_window;
  // Classification: num_labels (or the size of id2label); id2label[i] is label i's name ("LABEL_i" when absent).
  std::int64_t num_labels = 2;
  std::vector<std::string> id2label;
  std::map<std::string, std::int64_t> label2id;
  std::string problem_type;  // "" | "regression" | "single_label_classification" | "multi_label_classification"

  [[nodiscard]] std::int64_t head_dim() const { return hidden_size / num_attention_heads; }

  // Missing or wrong-typed required fields, an unknown model_type or activation, or inconsistent sizes
  // are a hotpath::Error naming `name` and the field.
  static BertConfig from_json(std::string_view json_text, std::string_view name = "config.json");
  static BertConfig from_file(const std::filesystem::path& path);
};

// HF's base_model_prefix: the encoder's name inside a model with a head ("bert", "distilbert", "longformer").
std::string_view base_model_prefix(const BertConfig& config);

// What a sentence-transformers directory asks for after the encoder. hotpath runs mean pooling,
// optionally followed by Normalize; anything else is refused.
struct SentencePipeline {
  bool normalize = true;       // modules.json lists a Normalize module (true without modules.json)
  std::int64_t dimension = 0;  // 1_Pooling/config.json word_embedding_dimension; 0 when absent
};

// modules.json: an array of {"type": "sentence_transformers.models.X", ...} with a Pooling module and
// only Transformer, Pooling and Normalize. Updates `pipeline.normalize`.
void parse_sentence_modules(std::string_view json_text, std::string_view name, SentencePipeline& pipeline);
// 1_Pooling/config.json: pooling_mode_mean_tokens must be true and every other pooling_mode_* false.
// Updates `pipeline.dimension`.
void parse_sentence_pooling(std::string_view json_text, std::string_view name, SentencePipeline& pipeline);
// Both files of `dir` where present; without them mean pooling + normalize (all-MiniLM-L6-v2's setup).
SentencePipeline read_sentence_pipeline(const std::filesystem::path& dir);

}  // namespace hotpath::formats
