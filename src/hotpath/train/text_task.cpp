// TextTask: a Hugging Face BERT-family classifier fine-tuned on text shards (data.kind: text), full or
// LoRA (PEFT format), with bucketed / token-budget micro-batches. The loop is trainer.cpp.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/formats/bert_config.h"
#include "hotpath/formats/lora_config.h"
#include "hotpath/formats/adapter_config.h"
#include "hotpath/formats/prefix_config.h"
#include "hotpath/models/lora.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/text/hf_weights.h"
#include "hotpath/models/text/prefix.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/activation_checkpoint.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/text/text_batch_tensor.h"
#include "hotpath/text/text_loader.h"
#include "hotpath/train/task.h"
#include "hotpath/train/text_loader_options.h"
#include "cuda/cuda_training.h"
#include "tasks.h"

namespace hotpath::train {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
namespace {

// Shards of a recipe key that must exist on disk (the text loader reads them all up front).
std::vector<std::string> existing_shards(const std::vector<std::string>& patterns, const Recipe& recipe,
                                         const char* key) {
  std::vector<std::string> shards = resolve_recipe_shards(patterns, key, recipe);
  for (const auto& s : shards) HOTPATH_CHECK(fs::exists(s), recipe.source, ": ", key, ": shard not found: ", s);
  return shards;
}

text::TextLoaderOptions loader_options(const Recipe& recipe, std::vector<std::string> shards, bool training) {
  const auto& d = recipe.data;
  text::TextLoaderOptions o;
  o.shards = std::move(shards);
  o.tokenizer_dir = d.tokenizer.empty() ? recipe.model.pretrained : d.tokenizer;
  o.max_length = static_cast<std::size_t>(d.max_length);
  o.workers = static_cast<unsigned>(d.workers);
  // Micro-batches: an optimizer step takes train.accum_steps of them (eval uses the same size).
  o.batching.batch_size = static_cast<int>(recipe.train.micro_batch_size());
  o.batching.max_tokens = d.max_tokens;
  o.batching.pad_to_multiple_of = static_cast<std::size_t>(d.pad_to_multiple_of);
  o.batching.bucket_batches = d.bucket ? 100 : 0;
  o.batching.shuffle = training;
  o.batching.seed = recipe.train.seed;
  return o;
}

// config.json of the fine-tuned model: the pretrained one with the head's labels, loadable by
// transformers' Bert/DistilBert/LongformerForSequenceClassification and by hotpath's load_bert_classifier.
std::string finetuned_config(const Recipe& recipe, const std::vector<std::string>& labels) {
  // Parsed std::map-backed (linear-log in the keys: ordered_json's lookup is quadratic), then ordered.
  const std::string config_path = (fs::path(recipe.model.pretrained) / "config.json").string();
  json config = parse_json(read_file(config_path, read_limit::kConfig, "config"), config_path);
  const std::string type = config.value("model_type", "bert");
  config["architectures"] = {type == "distilbert"   ? "DistilBertForSequenceClassification"
                             : type == "longformer" ? "LongformerForSequenceClassification"
                                                    : "BertForSequenceClassification"};
  json id2label = json::object(), label2id = json::object();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    id2label[std::to_string(i)] = labels[i];
    label2id[labels[i]] = i;
  }
  config["id2label"] = id2label;
  config["label2id"] = label2id;
  config["num_labels"] = labels.size();
  return config.dump(2) + "\n";
}

void copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"}) {
    if (fs::exists(from / name)) fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
  }
}

// The weights a model directory gets: LoRA adapters merged into their base weights as LoraLinearImpl::merge
// does (W + scaling·B·A in W's dtype), computed beside the live model so training can go on.
TensorMap merged_state(torch::nn::Module& model) {
  TensorMap state = models::named_state(model);
  at::NoGradGuard no_grad;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto lora = std::dynamic_pointer_cast<models::LoraLinearImpl>(item.value());
    if (!lora || !lora->has_adapter()) continue;
    const std::string& path = item.key();
    const at::Tensor delta = at::matmul(lora->lora_B->weight, lora->lora_A->weight) * lora->scaling();
    state[path + ".weight"] = lora->weight + delta.to(lora->weight.scalar_type());
    state.erase(path + ".lora_A.weight");
    state.erase(path + ".lora_B.weight");
  }
  return state;
}

// The kernels ATen's SDPA picks for this model's attention in a training step on a CUDA device: q, k, v
// [1, heads, length, head_dim] in the autocast dtype (fp32 when nullopt), requiring grad, the attention
// dropout; without a mask (batches with every token attended: next() passes none on CUDA) and with one
// (padded batches). "SDPA flash", or "SDPA flash; padded batches: SDPA memory-efficient".
std::string sdpa_kernels(const at::Device& device, const formats::BertConfig& config, std::int64_t length,
                         std::optional<at::ScalarType> dtype) {
  const auto options = at::TensorOptions(device).dtype(dtype.value_or(at::kFloat));
  const at::Tensor q = at::zeros({1, config.num_attention_heads, length, config.head_dim()}, options).requires_grad_(true);
  const at::Tensor mask = at::ones({1, length}, at::TensorOptions(device).dtype(at::kLong));
  const double p = config.attention_probs_dropout_prob;
  const std::string full = ops::sdpa_backend_name(q, q, q, at::Tensor(), p);
  const std::string padded = ops::sdpa_backend_name(q, q, q, mask, p);
  return "SDPA " + full + (padded == full ? "" : "; padded batches: SDPA " + padded);
}

class TextTask final : public Task {
 public:
  TextTask(const Recipe& recipe, const TaskOptions& options) : recipe_(recipe), device_(options.device) {
    const auto& m = recipe.model;
    HOTPATH_CHECK(fs::exists(fs::path(m.pretrained) / "config.json"), recipe.source,
                  ": model.pretrained: no config.json in ", m.pretrained);
    loader_ = std::make_unique<text::TextLoader>(text_loader_options(recipe, true, options.rank, options.world_size));
    if (!recipe.data.eval.empty()) {
      eval_loader_ = std::make_unique<text::TextLoader>(text_loader_options(recipe, false));
    }
    labels_ = class_names_for(recipe);
    if (labels_.empty()) {
      for (std::int64_t i = 0; i < m.num_classes; ++i) labels_.push_back("LABEL_" + std::to_string(i));
    }
    const auto num_labels = static_cast<std::int64_t>(labels_.size());
    for (const std::int64_t label : loader_->corpus().labels) {
      HOTPATH_CHECK(label >= 0 && label < num_labels, recipe.source, ": data.train holds label ", label,
                    " outside the ", num_labels, " classes (set data.class_names or model.num_classes)");
    }
    if (eval_loader_) {  // checked before step 1 too: the metric must not meet a label the head lacks
      for (const std::int64_t label : eval_loader_->corpus().labels) {
        HOTPATH_CHECK(label >= 0 && label < num_labels, recipe.source, ": data.eval holds label ", label,
                      " outside the ", num_labels, " classes (set data.class_names or model.num_classes)");
      }
    }

    // The pretrained encoder and a new classification head with the data's labels.
    formats::BertConfig config = formats::BertConfig::from_file(fs::path(m.pretrained) / "config.json");
    config.num_labels = num_labels;
    config.id2label = labels_;
    models::BertOptions bert_options;
    bert_options.attention = m.attention == "fused" ? static_cast<models::AttentionFn>(&ops::fused_attention)
                                                    : static_cast<models::AttentionFn>(&models::bert_eager_attention);
    bert_options.gradient_checkpointing = m.gradient_checkpointing;
    // Longformer's local attention: the fused sliding-window kernel, or its dense twin under attention: eager.
    bert_options.sliding_kernel =
        m.attention == "fused" ? ops::AttentionKernel::kAuto : ops::AttentionKernel::kReference;
    model_ = std::make_shared<models::BertForSequenceClassification>(config, bert_options);
    const std::string base_prefix(formats::base_model_prefix(config));
    const models::LoadReport report = models::load_state_dict(
        *model_, models::read_hf_state_dict(m.pretrained), m.pretrained, {.allow_partial = true},
        {.base_prefix = base_prefix});
    if (options.out) *options.out << "weights: " << report.summary() << "\n";
    if (m.lora_r > 0) {
      std::vector<std::string> head = {"classifier"};
      if (config.arch == formats::BertArch::kDistilBert) head.push_back("pre_classifier");
      lora_ = formats::LoraConfig{};
      lora_->r = m.lora_r;
      lora_->lora_alpha = m.lora_alpha;
      lora_->lora_dropout = m.lora_dropout;
      lora_->target_modules = m.lora_target_modules;
      lora_->modules_to_save = head;
      lora_->task_type = "SEQ_CLS";
      lora_->base_model_name_or_path = m.pretrained;
      const models::LoraReport lr = models::apply_lora(*model_, *lora_);
      if (options.out) *options.out << "lora: " << lr.adapted.size() << " layers adapted; " << lr.summary() << "\n";
    }
    if (m.prefix_tokens > 0) {
      HOTPATH_CHECK(m.prefix_tokens + recipe.data.max_length <= config.max_position_embeddings, recipe.source,
                    ": model.prefix_tokens (", m.prefix_tokens, ") + data.max_length (", recipe.data.max_length,
                    ") exceed the model's max_position_embeddings (", config.max_position_embeddings,
                    "): the text's positions start after the prefix");
      try {
        prefix_ = models::prefix_config_for(*model_, {.num_virtual_tokens = m.prefix_tokens,
                                                      .prefix_projection = m.prefix_projection,
                                                      .encoder_hidden_size = m.prefix_hidden});
      } catch (const Error& e) {
        HOTPATH_CHECK(false, recipe.source, ": model.prefix_tokens: ", e.what());
      }
      prefix_->base_model_name_or_path = m.pretrained;
      const models::LoraReport pr = models::apply_prefix(*model_, *prefix_);
      if (options.out) {
        *options.out << "prefix: " << m.prefix_tokens << " virtual tokens in each of " << config.num_hidden_layers
                     << " layers" << (m.prefix_projection ? ", through an MLP of width " + std::to_string(prefix_->encoder_hidden_size) : "")
                     << "; " << pr.summary() << "\n";
      }
    }
    if (!m.adapter.config.empty()) {
      adapter_ = formats::AdapterConfig::preset(m.adapter.config);
      adapter_->reduction_factor = m.adapter.reduction_factor;
      if (!m.adapter.non_linearity.empty()) adapter_->non_linearity = m.adapter.non_linearity;
      HOTPATH_CHECK(config.arch == formats::BertArch::kBert, recipe.source, ": model.adapter: ",
                    formats::base_model_prefix(config), " is not supported (BERT models only); use model.lora_r");
      const models::LoraReport ar = models::apply_adapter(*model_, *adapter_);
      if (options.out) {
        *options.out << "adapter: " << m.adapter.config << " (" << (adapter_->mh_adapter ? "attention and " : "")
                     << "feed-forward, bottleneck " << adapter_->bottleneck(config.hidden_size) << ", "
                     << adapter_->non_linearity << ") in each of " << config.num_hidden_layers << " layers; "
                     << ar.summary() << "\n";
      }
    }
    freeze_prefixes(*model_, recipe);
    model_->to(device_);
    trainable_ = trainable_parameters(*model_, recipe);
    describe_ = base_prefix + " " +
                std::to_string(config.num_hidden_layers) + "×" + std::to_string(config.hidden_size) + " classifier, " +
                std::to_string(num_labels) + " classes, attention " + m.attention +
                (m.gradient_checkpointing ? ", activation checkpointing" : "") +
                (lora_ ? ", LoRA r=" + std::to_string(m.lora_r) : "") +
                (prefix_ ? ", prefix of " + std::to_string(m.prefix_tokens) + " tokens" : "") +
                (adapter_ ? ", " + m.adapter.config + " adapters" : "");
    if (device_.is_cuda() && m.attention == "fused") {  // the dispatch report: which SDPA kernel ATen picks
      const auto& tr = recipe.train;
      const std::optional<at::ScalarType> dtype = tr.precision == "fp16"   ? std::optional(at::kHalf)
                                                  : tr.precision == "bf16" ? std::optional(at::kBFloat16)
                                                                           : std::nullopt;
      describe_ += " (on CUDA: " + sdpa_kernels(device_, config, recipe.data.max_length, dtype) + ")";
    }
    // Peak tensor memory from here on (profile.json): what activation checkpointing is measured by.
    peak_.emplace();
  }

  [[nodiscard]] std::string describe() const override { return describe_; }
  [[nodiscard]] torch::nn::Module& module() override { return *model_; }
  [[nodiscard]] NamedParameters trainable() const override { return trainable_; }
  [[nodiscard]] std::int64_t train_samples() const override {
    return static_cast<std::int64_t>(loader_->corpus().size());
  }
  [[nodiscard]] const char* sample_unit() const override { return "samples/s"; }

  [[nodiscard]] std::int64_t micro_batches_in_epoch(std::int64_t epoch) const override {
    return loader_->batches_in_epoch(epoch);
  }
  void seek(BatchPosition p) override { loader_->seek(p); }
  [[nodiscard]] BatchPosition position() const override { return loader_->position(); }
  std::optional<MicroBatch> next() override {
    std::optional<text::TextBatch> batch = loader_->next();
    if (!batch) return std::nullopt;
    padding_.batches += 1;
    padding_.samples += batch->batch_size;
    padding_.real_tokens += batch->real_tokens;
    padding_.padded_tokens += batch->padded_tokens;
    text::TextBatchTensors t = text::to_tensors(*batch);
    MicroBatch mb;
    mb.inputs = {to_device(t.input_ids, device_), device_mask(*batch, t.attention_mask),
                 to_device(t.token_type_ids, device_)};
    mb.labels = to_device(t.labels, device_);
    mb.samples = batch->batch_size;
    // Dropout keyed by (train.seed, epoch, corpus index): the masks a sample gets do not depend on the
    // rank, the batch it shares or its padded length (docs/distributed.md).
    mb.dropout = ops::DropoutSource::per_sample(
        recipe_.train.seed, batch->epoch,
        at::from_blob(batch->samples.data(), {batch->batch_size}, at::kLong).clone());
    return mb;
  }

  at::Tensor loss(const MicroBatch& b, double label_smoothing) override {
    const at::Tensor logits = model_->forward(b.inputs[0], b.inputs[1], b.inputs[2], b.dropout);
    return at::cross_entropy_loss(logits.to(at::kFloat), b.labels, {}, at::Reduction::Mean, -100, label_smoothing);
  }

  [[nodiscard]] bool has_eval() const override { return eval_loader_ != nullptr; }
  infer::EvalResult evaluate(std::optional<at::ScalarType> autocast) override {
    HOTPATH_ASSERT(eval_loader_ != nullptr);
    model_->eval();
    at::NoGradGuard no_grad;
    infer::TopKMeter meter(static_cast<std::int64_t>(labels_.size()));
    eval_loader_->seek({0, 0});
    while (auto batch = eval_loader_->next()) {
      const text::TextBatchTensors t = text::to_tensors(*batch);
      at::Tensor logits;
      {
        ops::AutocastGuard guard(device_.type(), autocast);
        logits = model_->forward(to_device(t.input_ids, device_), device_mask(*batch, t.attention_mask),
                                 to_device(t.token_type_ids, device_));
      }
      meter.add(logits.to(at::kCPU), t.labels);
    }
    return meter.result("eval");
  }

  // With LoRA or a prefix only the trained tensors (adapters or prefix, and the head): the frozen encoder
  // is model.pretrained's and is loaded again on resume. Without, every parameter and buffer.
  [[nodiscard]] TensorMap checkpoint_tensors() override {
    if (!lora_ && !prefix_ && !adapter_) return models::named_state(*model_);
    TensorMap out;
    for (const auto& [name, p] : trainable_) out[name] = p;
    return out;
  }
  // The text loader deals the epoch's permutation round robin (rank r takes every world_size-th sample) and
  // each rank batches, buckets and budgets tokens over its own share, and keeps its own last partial batch:
  // the samples of a step depend on the world size.
  [[nodiscard]] std::string world_size_change_refusal() const override {
    return "text batches are planned per rank (rank r batches every world_size-th sample of the epoch; length "
           "buckets, token budgets and the epoch's last partial batch depend on the world size)";
  }
  [[nodiscard]] json resume_key() const override {
    // The epoch plan (order, lengths, buckets) comes from the recipe table's resume keys and the data: the same
    // batch index under another plan would repeat or skip samples; lora_r, the prefix and the adapter change the
    // checkpoint's tensors.
    json key = resume_values(recipe_);
    key["the number of samples in data.train"] = train_samples();
    return key;
  }
  [[nodiscard]] json state() const override {
    return {{"padding",
             {{"batches", padding_.batches},
              {"samples", padding_.samples},
              {"real_tokens", padding_.real_tokens},
              {"padded_tokens", padding_.padded_tokens}}}};
  }
  void load_state(const nlohmann::json& state, const std::string& where) override {
    HOTPATH_CHECK(state.contains("padding") && state["padding"].is_object(), where, ": padding: missing");
    const auto& p = state["padding"];
    const auto get = [&](const char* key) {
      HOTPATH_CHECK(p.contains(key) && p[key].is_number_integer() && p[key].get<std::int64_t>() >= 0, where,
                    ": padding.", key, ": expected a non-negative integer");
      return p[key].get<std::int64_t>();
    };
    padding_.batches = get("batches");
    padding_.samples = get("samples");
    padding_.real_tokens = get("real_tokens");
    padding_.padded_tokens = get("padded_tokens");
  }
  void add_metrics(json& line) const override { line["padding_fraction"] = padding_.padding_fraction(); }
  void add_profile(json& profile) const override {
    profile["padding_fraction"] = padding_.padding_fraction();
    profile["peak_memory_bytes"] = peak_->peak_bytes();
  }
  [[nodiscard]] Remedies remedies() const override {
    return {"input-bound: pack pre-tokenized shards with data pack-text --tokenizer",
            "optimizer-bound: LoRA trains a fraction of the parameters; no EMA",
            "compute-bound: a smaller model, bucketing (less padding), bf16 or more threads help"};
  }

  // A Hugging Face model directory (config.json with the labels, model.safetensors with LoRA merged,
  // tokenizer files) and, with LoRA, the PEFT adapter: DIR/model + DIR/adapter at the end of a run,
  // DIR + DIR/adapter for best/. A prefix cannot be merged into the weights: only DIR/adapter (PEFT's
  // PREFIX_TUNING files, the head included, over model.pretrained), no model directory that would drop it.
  void export_model(const fs::path& dir, ExportPlace place) override {
    const fs::path model_dir = place == ExportPlace::kRunDir ? dir / "model" : dir;
    const fs::path adapter_dir = dir / "adapter";
    if (adapter_) {
      models::save_adapter(*model_, *adapter_, adapter_dir);
      copy_tokenizer_files(recipe_.model.pretrained, adapter_dir);
      return;
    }
    if (prefix_) {
      models::save_prefix(*model_, *prefix_, adapter_dir);
      copy_tokenizer_files(recipe_.model.pretrained, adapter_dir);
      return;
    }
    if (lora_) {
      models::save_lora(*model_, *lora_, adapter_dir);
      copy_tokenizer_files(recipe_.model.pretrained, adapter_dir);
    }
    fs::create_directories(model_dir);
    models::write_tensors((model_dir / "model.safetensors").string(), merged_state(*model_), {{"format", "pt"}});
    write_file_atomic((model_dir / "config.json").string(), finetuned_config(recipe_, labels_));
    copy_tokenizer_files(recipe_.model.pretrained, model_dir);
  }

 private:
  // The batch's attention mask on the device. On CUDA a batch with every token attended (no padding, known
  // here on the host) gets none: an all-ones mask changes no score, and without one ATen's SDPA may take
  // FlashAttention (which takes no mask) and no additive mask is built per layer. The CPU keeps the mask,
  // so its kernels and results are as they were.
  [[nodiscard]] at::Tensor device_mask(const text::TextBatch& batch, const at::Tensor& mask) const {
    if (device_.is_cuda() && batch.real_tokens == batch.padded_tokens) return {};
    return to_device(mask, device_);
  }

  Recipe recipe_;
  at::Device device_;
  std::unique_ptr<text::TextLoader> loader_;
  std::unique_ptr<text::TextLoader> eval_loader_;
  std::vector<std::string> labels_;
  std::shared_ptr<models::BertForSequenceClassification> model_;
  std::optional<formats::LoraConfig> lora_;
  std::optional<formats::PrefixConfig> prefix_;
  std::optional<formats::AdapterConfig> adapter_;
  NamedParameters trainable_;
  text::PaddingStats padding_;
  std::string describe_;
  std::optional<ops::PeakMemory> peak_;
};

}  // namespace

text::TextLoaderOptions text_loader_options(const Recipe& recipe, bool training, int rank, int world_size) {
  const char* key = training ? "data.train" : "data.eval";
  text::TextLoaderOptions o =
      loader_options(recipe, existing_shards(training ? recipe.data.train : recipe.data.eval, recipe, key), training);
  o.batching.rank = rank;  // every world_size-th sample of the epoch's permutation
  o.batching.world_size = world_size;
  return o;
}

std::unique_ptr<Task> make_text_task(const Recipe& recipe, const TaskOptions& options) {
  return std::make_unique<TextTask>(recipe, options);
}

}  // namespace hotpath::train
