// Fine-tuning a Hugging Face BERT-family classifier on text shards: the text half of `hotpath train`
// (data.kind: text). See train_text in trainer.h for what it does; checkpoints, metrics.jsonl and
// TensorBoard go through run_util.h, shared with the image loop in trainer.cpp.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/ops/activation_checkpoint.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/text/hf_weights.h"
#include "hotpath/models/lora.h"
#include "hotpath/models/weights.h"
#include "hotpath/text/text_batch_tensor.h"
#include "hotpath/text/text_loader.h"
#include "hotpath/core/tensorboard.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/train/optimizer.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/schedule.h"
#include "hotpath/train/trainer.h"
#include "run_util.h"

namespace hotpath::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Shards of a recipe key that must exist on disk (the text loader reads them all up front).
std::vector<std::string> existing_shards(const std::vector<std::string>& patterns, const Recipe& recipe,
                                         const char* key) {
  std::vector<std::string> shards = resolve_recipe_shards(patterns, key, recipe);
  for (const auto& s : shards) HOTPATH_CHECK(fs::exists(s), recipe.source, ": ", key, ": shard not found: ", s);
  return shards;
}

text::TextLoaderOptions loader_options(const Recipe& recipe, const std::vector<std::string>& shards, bool training) {
  const auto& d = recipe.data;
  text::TextLoaderOptions o;
  o.shards = shards;
  o.tokenizer_dir = d.tokenizer.empty() ? recipe.model.pretrained : d.tokenizer;
  o.max_length = static_cast<std::size_t>(d.max_length);
  o.workers = static_cast<unsigned>(d.workers);
  // Micro-batches: an optimizer step takes train.accum_steps of them (eval uses the same size).
  o.batching.batch_size = static_cast<int>(recipe.train.batch_size / recipe.train.accum_steps);
  o.batching.max_tokens = d.max_tokens;
  o.batching.pad_to_multiple_of = static_cast<std::size_t>(d.pad_to_multiple_of);
  o.batching.bucket_batches = d.bucket ? 100 : 0;
  o.batching.shuffle = training;
  o.batching.seed = recipe.train.seed;
  return o;
}

std::optional<at::ScalarType> autocast_dtype_of(const std::string& precision) {
  if (precision == "bf16") return at::kBFloat16;
  return std::nullopt;
}

struct TextEval {
  EvalResult result;
  double majority_top1 = 0;  // the accuracy of always predicting the eval set's most frequent class
};

TextEval evaluate_text(models::BertForSequenceClassification& model, text::TextLoader& loader,
                       std::optional<at::ScalarType> autocast, std::int64_t num_labels) {
  model.eval();
  at::NoGradGuard no_grad;
  std::int64_t n = 0, correct1 = 0, correct5 = 0;
  double loss_sum = 0;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(num_labels), 0);
  loader.seek({0, 0});
  while (auto batch = loader.next()) {
    const text::TextBatchTensors t = text::to_tensors(*batch);
    at::Tensor logits;
    {
      ops::AutocastGuard guard(at::kCPU, autocast);
      logits = model.forward(t.input_ids, t.attention_mask, t.token_type_ids);
    }
    logits = logits.to(at::kFloat);
    const std::int64_t k = std::min<std::int64_t>(5, logits.size(1));
    const at::Tensor hit = std::get<1>(logits.topk(k, 1)).eq(t.labels.unsqueeze(1));
    correct1 += hit.select(1, 0).sum().item<std::int64_t>();
    correct5 += hit.any(1).sum().item<std::int64_t>();
    loss_sum += at::cross_entropy_loss(logits, t.labels, {}, at::Reduction::Sum).item<double>();
    n += batch->batch_size;
    for (const std::int64_t label : batch->labels) {
      if (label >= 0 && label < num_labels) ++counts[static_cast<std::size_t>(label)];
    }
  }
  HOTPATH_CHECK(n > 0, "eval: the eval shards yielded no samples");
  TextEval e;
  e.result.samples = n;
  e.result.top1 = 100.0 * static_cast<double>(correct1) / static_cast<double>(n);
  e.result.top5 = 100.0 * static_cast<double>(correct5) / static_cast<double>(n);
  e.result.loss = loss_sum / static_cast<double>(n);
  e.majority_top1 = 100.0 * static_cast<double>(*std::max_element(counts.begin(), counts.end())) / static_cast<double>(n);
  return e;
}

// config.json of the fine-tuned model: the pretrained one with the head's labels, loadable by
// transformers' BertForSequenceClassification and by hotpath's load_bert_classifier.
std::string finetuned_config(const Recipe& recipe, const std::vector<std::string>& labels) {
  json config = json::parse(read_file((fs::path(recipe.model.pretrained) / "config.json").string()));
  const bool distil = config.value("model_type", "bert") == "distilbert";
  config["architectures"] = {distil ? "DistilBertForSequenceClassification" : "BertForSequenceClassification"};
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

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// What trainer.json of a text checkpoint holds besides the tensors: the loader position of the next
// micro-batch, the best metric, and the running sums behind the next metrics line, so a resumed
// run logs exactly the lines an uninterrupted one would.
struct TextTrainerState {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t batch = 0;  // micro-batch index within `epoch`
  std::optional<double> best_metric;
  std::int64_t best_step = -1;
  double loss_window = 0;  // summed step losses since the last metrics line
  std::int64_t window = 0;
  text::PaddingStats padding;
};

std::string text_state_json(const TextTrainerState& s, const Recipe& recipe, std::int64_t train_samples) {
  json j;
  j["kind"] = "text";
  j["step"] = s.step;
  j["epoch"] = s.epoch;
  j["batch"] = s.batch;
  if (s.best_metric) j["best_metric"] = *s.best_metric;
  j["best_step"] = s.best_step;
  j["loss_window"] = s.loss_window;  // nlohmann writes doubles so that they read back bit-exact
  j["window"] = s.window;
  j["padding"] = {{"batches", s.padding.batches}, {"samples", s.padding.samples},
                  {"real_tokens", s.padding.real_tokens}, {"padded_tokens", s.padding.padded_tokens}};
  j["recipe"] = recipe.name;
  j["seed"] = recipe.train.seed;
  j["batch_size"] = recipe.train.batch_size;
  j["accum_steps"] = recipe.train.accum_steps;
  j["max_tokens"] = recipe.data.max_tokens;
  j["lora_r"] = recipe.model.lora_r;
  j["max_length"] = recipe.data.max_length;
  j["pad_to_multiple_of"] = recipe.data.pad_to_multiple_of;
  j["bucket"] = recipe.data.bucket ? 1 : 0;
  j["train_samples"] = train_samples;
  return j.dump(2) + "\n";
}

TextTrainerState text_state_from_json(const std::string& json_text, const std::string& where, const Recipe& recipe,
                                      std::int64_t train_samples) {
  TextTrainerState s;
  try {
    const auto j = nlohmann::json::parse(json_text);
    HOTPATH_CHECK(j.value("kind", std::string()) == "text", where,
                  ": not a text-recipe checkpoint (the run directory holds an image run)");
    s.step = j.at("step").get<std::int64_t>();
    s.epoch = j.at("epoch").get<std::int64_t>();
    s.batch = j.at("batch").get<std::int64_t>();
    if (j.contains("best_metric")) s.best_metric = j.at("best_metric").get<double>();
    s.best_step = j.value("best_step", std::int64_t{-1});
    s.loss_window = j.at("loss_window").get<double>();
    s.window = j.at("window").get<std::int64_t>();
    const auto& p = j.at("padding");
    s.padding.batches = p.at("batches").get<std::int64_t>();
    s.padding.samples = p.at("samples").get<std::int64_t>();
    s.padding.real_tokens = p.at("real_tokens").get<std::int64_t>();
    s.padding.padded_tokens = p.at("padded_tokens").get<std::int64_t>();
    // The loader plan and the checkpoint's tensors depend on these: another value cannot resume.
    const auto same = [&](const char* key, std::int64_t now, const char* recipe_key) {
      const auto then = j.at(key).get<std::int64_t>();
      HOTPATH_CHECK(then == now, where, ": the checkpoint was made with ", recipe_key, "=", then,
                    "; the recipe now says ", now, " (resume needs the same batches and model layout)");
    };
    same("batch_size", recipe.train.batch_size, "train.batch_size");
    same("accum_steps", recipe.train.accum_steps, "train.accum_steps");
    same("max_tokens", recipe.data.max_tokens, "data.max_tokens");
    same("lora_r", recipe.model.lora_r, "model.lora_r");
    // The epoch plan (order, lengths, buckets) comes from these and the data: the same batch index
    // under another plan would repeat or skip samples.
    same("max_length", recipe.data.max_length, "data.max_length");
    same("pad_to_multiple_of", recipe.data.pad_to_multiple_of, "data.pad_to_multiple_of");
    same("bucket", recipe.data.bucket ? 1 : 0, "data.bucket");
    same("train_samples", train_samples, "the number of samples in data.train");
    const auto seed = j.at("seed").get<std::uint64_t>();
    HOTPATH_CHECK(seed == recipe.train.seed, where, ": the checkpoint was made with train.seed=", seed,
                  "; the recipe now says ", recipe.train.seed, " (resume needs the same batches and model layout)");
    HOTPATH_CHECK(s.step >= 0 && s.epoch >= 0 && s.batch >= 0, where, ": negative step, epoch or batch");
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, where, ": invalid trainer state: ", e.what());
  }
  return s;
}

// The tensors of a text checkpoint's model.safetensors. With LoRA only the trained ones (adapters and
// modules_to_save): the frozen encoder is model.pretrained's and is loaded again on resume. Without,
// every parameter and buffer, as the image trainer saves them.
TensorMap checkpoint_model_state(const torch::nn::Module& model, const NamedParameters& trainable, bool lora) {
  if (!lora) return models::named_state(model);
  TensorMap out;
  for (const auto& [name, p] : trainable) out[name] = p;
  return out;
}

// Copies `saved` into the model's tensors `expected` (same names and shapes, all of them, nothing else).
void restore_model_state(const TensorMap& expected, const TensorMap& saved, const std::string& where) {
  for (const auto& [name, t] : saved) {
    const auto it = expected.find(name);
    HOTPATH_CHECK(it != expected.end(), where, ": ", name,
                  ": not a trained tensor of this model (was the checkpoint made with other model.* keys?)");
    HOTPATH_CHECK(it->second.sizes() == t.sizes(), where, ": ", name, ": shape ", t.sizes(),
                  " does not match the model's ", it->second.sizes());
  }
  for (const auto& [name, t] : expected) HOTPATH_CHECK(saved.contains(name), where, ": ", name, ": missing");
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : expected) t.copy_(saved.at(name));
}

// The weights run/model gets: LoRA adapters merged into their base weights as LoraLinearImpl::merge
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

// A Hugging Face model directory (config.json with the labels, model.safetensors, tokenizer files)
// and, with LoRA, the PEFT adapter in `adapter_dir`.
void write_model_dirs(const fs::path& model_dir, const fs::path& adapter_dir, torch::nn::Module& model,
                      const std::optional<formats::LoraConfig>& lora, const Recipe& recipe,
                      const std::vector<std::string>& labels) {
  if (lora) {
    models::save_lora(model, *lora, adapter_dir);
    copy_tokenizer_files(recipe.model.pretrained, adapter_dir);
  }
  fs::create_directories(model_dir);
  models::write_tensors((model_dir / "model.safetensors").string(), merged_state(model), {{"format", "pt"}});
  write_file_atomic((model_dir / "config.json").string(), finetuned_config(recipe, labels));
  copy_tokenizer_files(recipe.model.pretrained, model_dir);
}

// Exponential moving average of the trained tensors (train.ema_decay). The frozen ones never change,
// so only these are averaged (for LoRA a few thousand numbers, not the encoder).
class TrainedEma {
 public:
  TrainedEma(const NamedParameters& trainable, double decay) : decay_(decay) {
    at::NoGradGuard no_grad;
    for (const auto& [name, p] : trainable) {
      names_.push_back(name);
      params_.push_back(p);
      averages_.push_back(p.detach().clone());
    }
  }
  // average += (1 - decay) · (param - average), after each optimizer step.
  void update() {
    at::NoGradGuard no_grad;
    at::_foreach_lerp_(averages_, params_, 1.0 - decay_);
  }
  // name → average (aliases: restore_model_state copies into them).
  [[nodiscard]] TensorMap state() const {
    TensorMap out;
    for (std::size_t i = 0; i < names_.size(); ++i) out[names_[i]] = averages_[i];
    return out;
  }
  // Swaps the averages and the trained values in the model (twice = back): eval, best/ and run/model
  // see the averaged weights, as the image trainer's EMA model.
  void swap() {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor trained = params_[i].detach().clone();
      params_[i].copy_(averages_[i]);
      averages_[i].copy_(trained);
    }
  }

 private:
  double decay_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_, averages_;
};

// The EMA weights in the model for a scope (no EMA: nothing happens).
class EmaWeightsIn {
 public:
  explicit EmaWeightsIn(TrainedEma* ema) : ema_(ema) {
    if (ema_) ema_->swap();
  }
  // Runs while an eval's exception unwinds too: a failing swap (out of memory) must not terminate;
  // the run is ending with the first error then, and the model it leaves is not saved.
  ~EmaWeightsIn() {
    try {
      if (ema_) ema_->swap();
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
  }
  EmaWeightsIn(const EmaWeightsIn&) = delete;
  EmaWeightsIn& operator=(const EmaWeightsIn&) = delete;

 private:
  TrainedEma* ema_;
};

}  // namespace

TrainResult train_text(const Recipe& recipe, const TrainOptions& options) {
  const auto t_start = Clock::now();
  std::ostream& out = options.out ? *options.out : std::cerr;
  const auto& tr = recipe.train;
  const auto& m = recipe.model;
  HOTPATH_CHECK(tr.device != "cuda", recipe.source, ": train.device: text fine-tuning runs on the CPU for now");
  HOTPATH_CHECK(tr.precision != "fp16", recipe.source, ": train.precision: fp16 needs CUDA; use bf16 on CPU");
  HOTPATH_CHECK(fs::exists(fs::path(m.pretrained) / "config.json"), recipe.source,
                ": model.pretrained: no config.json in ", m.pretrained);
  const bool benchmark = options.benchmark_warmup_steps >= 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(tr.threads > 0 ? static_cast<int>(tr.threads) : cores);
  // Initial weights (the new head, LoRA's A) and dropout until a checkpoint restores its state.
  at::manual_seed(tr.seed);

  const fs::path run_dir(recipe.output_dir);
  const fs::path ckpt_root = run_dir / "checkpoints";
  fs::create_directories(run_dir);
  if (options.resume) {
    HOTPATH_CHECK(latest_checkpoint(ckpt_root.string()).has_value(), ckpt_root.string(),
                  ": no checkpoint to resume from");
  }
  write_file_atomic((run_dir / "config.yaml").string(), to_yaml(recipe));

  // Data: micro-batches of batch_size / accum_steps samples (each within data.max_tokens); an
  // optimizer step takes accum_steps of them.
  const std::int64_t accum = tr.accum_steps;
  text::TextLoader train_loader(loader_options(recipe, existing_shards(recipe.data.train, recipe, "data.train"), true));
  const auto train_samples = static_cast<std::int64_t>(train_loader.corpus().size());
  std::unique_ptr<text::TextLoader> eval_loader;
  if (!recipe.data.eval.empty()) {
    eval_loader = std::make_unique<text::TextLoader>(
        loader_options(recipe, existing_shards(recipe.data.eval, recipe, "data.eval"), false));
  }
  std::vector<std::string> labels = class_names_for(recipe);
  if (labels.empty()) {
    for (std::int64_t i = 0; i < m.num_classes; ++i) labels.push_back("LABEL_" + std::to_string(i));
  }
  const auto num_labels = static_cast<std::int64_t>(labels.size());
  for (const std::int64_t label : train_loader.corpus().labels) {
    HOTPATH_CHECK(label >= 0 && label < num_labels, recipe.source, ": data.train holds label ", label,
                  " outside the ", num_labels, " classes (set data.class_names or model.num_classes)");
  }

  // Model: the pretrained encoder, a new classification head with the data's labels.
  formats::BertConfig config = formats::BertConfig::from_file(fs::path(m.pretrained) / "config.json");
  config.num_labels = num_labels;
  config.id2label = labels;
  models::BertOptions bert_options;
  bert_options.attention = m.attention == "fused" ? &ops::fused_attention : &models::bert_eager_attention;
  bert_options.gradient_checkpointing = m.gradient_checkpointing;
  auto model = std::make_shared<models::BertForSequenceClassification>(config, bert_options);
  const std::string base_prefix = config.arch == formats::BertArch::kDistilBert ? "distilbert" : "bert";
  const models::LoadReport report = models::load_state_dict(
      *model, models::read_hf_state_dict(m.pretrained), m.pretrained, {.allow_partial = true},
      {.base_prefix = base_prefix});
  if (!options.quiet) out << "weights: " << report.summary() << "\n";
  std::vector<std::string> head = {"classifier"};
  if (config.arch == formats::BertArch::kDistilBert) head.push_back("pre_classifier");
  std::optional<formats::LoraConfig> lora;
  if (m.lora_r > 0) {
    lora = formats::LoraConfig{};
    lora->r = m.lora_r;
    lora->lora_alpha = m.lora_alpha;
    lora->lora_dropout = m.lora_dropout;
    lora->target_modules = m.lora_target_modules;
    lora->modules_to_save = head;
    lora->task_type = "SEQ_CLS";
    lora->base_model_name_or_path = m.pretrained;
    const models::LoraReport lr = models::apply_lora(*model, *lora);
    if (!options.quiet) out << "lora: " << lr.adapted.size() << " layers adapted; " << lr.summary() << "\n";
  }
  for (const auto& item : model->named_parameters()) {
    for (const auto& prefix : m.freeze) {
      if (item.key().rfind(prefix, 0) == 0) item.value().set_requires_grad(false);
    }
  }
  NamedParameters trainable;
  std::int64_t n_params = 0, n_trainable = 0;
  for (const auto& item : model->named_parameters()) {
    n_params += item.value().numel();
    if (item.value().requires_grad()) {
      trainable.emplace_back(item.key(), item.value());
      n_trainable += item.value().numel();
    }
  }
  HOTPATH_CHECK(!trainable.empty(), recipe.source, ": model.freeze leaves no parameter to train");
  std::vector<at::Tensor> trainable_tensors;
  for (const auto& np : trainable) trainable_tensors.push_back(np.second);

  // Steps: an epoch's micro-batches in groups of accum_steps, the last group possibly shorter
  // (token-budget plans differ in length from epoch to epoch, so each epoch is counted).
  const auto steps_in_epoch = [&](std::int64_t epoch) {
    return (train_loader.batches_in_epoch(epoch) + accum - 1) / accum;
  };
  const std::int64_t steps_per_epoch = steps_in_epoch(0);
  HOTPATH_CHECK(steps_per_epoch >= 1, recipe.source, ": data.train yields no batch");
  std::int64_t planned_steps = 0;
  for (std::int64_t e = 0; e < tr.epochs; ++e) planned_steps += steps_in_epoch(e);
  const std::int64_t total_steps = tr.max_steps > 0 ? std::min(planned_steps, tr.max_steps) : planned_steps;
  auto optimizer = make_optimizer(optimizer_config_for(recipe), trainable);
  const Schedule schedule(schedule_config_for(recipe, steps_per_epoch, planned_steps));
  const auto autocast = autocast_dtype_of(tr.precision);
  std::unique_ptr<TrainedEma> ema;
  if (tr.ema_decay > 0) ema = std::make_unique<TrainedEma>(trainable, tr.ema_decay);

  // Resume: trained tensors, optimizer state, RNG (dropout) and loader position; everything else was
  // rebuilt above exactly as the first run built it.
  TextTrainerState state;
  if (options.resume) {
    const std::string latest = *latest_checkpoint(ckpt_root.string());
    const CheckpointData data = load_checkpoint(latest);
    state = text_state_from_json(data.trainer_json, latest + "/trainer.json", recipe, train_samples);
    HOTPATH_CHECK(state.step < total_steps, latest, ": the run already finished (step ", state.step, " of ",
                  total_steps, "); raise train.epochs or train.max_steps to train on, or start a new run");
    restore_model_state(checkpoint_model_state(*model, trainable, lora.has_value()), data.model,
                        latest + "/model.safetensors");
    load_optimizer_state(*optimizer, trainable, data.optimizer);
    if (ema) {
      HOTPATH_CHECK(!data.ema.empty(), latest, ": train.ema_decay is on but the checkpoint has no ema.safetensors");
      restore_model_state(ema->state(), data.ema, latest + "/ema.safetensors");
    }
    load_rng_state(data.rng, at::Device(at::kCPU));
    if (!options.quiet) out << "resuming from " << latest << " at step " << state.step << "\n";
  }

  if (!options.quiet) {
    out << "train: " << (config.arch == formats::BertArch::kDistilBert ? "distilbert" : "bert") << " "
        << config.num_hidden_layers << "×" << config.hidden_size << " classifier, " << num_labels << " classes ("
        << n_trainable << " of " << n_params << " parameters trainable, "
        << fixed(100.0 * static_cast<double>(n_trainable) / static_cast<double>(n_params), 2) << "%), "
        << at::get_num_threads() << " threads, " << tr.precision
        << (tr.precision == "bf16" ? std::string(" (") + ops::bf16_math_name() + ")" : "") << ", attention "
        << m.attention << (m.gradient_checkpointing ? ", activation checkpointing" : "") << "; "
        << train_loader.corpus().size() << " samples, " << steps_per_epoch << " steps/epoch × " << tr.epochs
        << " epochs" << (accum > 1 ? ", " + std::to_string(accum) + " micro-batches a step" : "") << "\n";
  }

  // A line at the checkpoint's step that is not a log_every one, or an eval there mid-epoch, was
  // logged because train.max_steps ended the run there: the resumed run goes on as if it had not.
  std::ofstream metrics = open_metrics(run_dir / "metrics.jsonl",
                                       options.resume ? std::optional<std::int64_t>(state.step) : std::nullopt,
                                       {.drop_train_at_step = state.step % tr.log_every != 0,
                                        .drop_eval_at_step = state.batch != 0});
  TensorBoardWriter tb((run_dir / "tensorboard").string());
  ops::PeakMemory peak;
  TrainResult result;
  result.run_dir = run_dir.string();
  result.epochs_completed = state.epoch;
  StepBreakdown& bd = result.breakdown;
  bd.text = true;
  std::int64_t samples = 0;  // this invocation's
  text::PaddingStats& padding = state.padding;

  const auto save = [&] {
    if (benchmark) return;
    CheckpointData data;
    data.model = checkpoint_model_state(*model, trainable, lora.has_value());
    data.optimizer = optimizer_state(*optimizer, trainable);
    if (ema) data.ema = ema->state();
    data.rng = rng_state(at::Device(at::kCPU));
    data.trainer_json = text_state_json(state, recipe, train_samples);
    save_checkpoint_and_prune(ckpt_root, state.step, data, recipe.checkpoint.keep_last);
  };
  // Call with the EMA weights in the model (EmaWeightsIn) when EMA is on.
  const auto run_eval = [&](std::int64_t epoch_label) {
    const TextEval e = evaluate_text(*model, *eval_loader, autocast, num_labels);
    model->train();
    result.eval = e.result;
    write_metrics_line(metrics, {{"split", "eval"}, {"epoch", epoch_label}, {"step", state.step},
                                 {"top1", e.result.top1}, {"top5", e.result.top5}, {"loss", e.result.loss},
                                 {"majority_top1", e.majority_top1}});
    add_eval_scalars(tb, e.result, state.step);
    tb.flush();
    if (!options.quiet) {
      out << "eval epoch " << epoch_label << ": accuracy " << fixed(e.result.top1, 2) << "% (majority class "
          << fixed(e.majority_top1, 2) << "%)  loss " << fixed(e.result.loss, 4) << " on " << e.result.samples
          << " samples" << (ema ? " (EMA weights)" : "") << "\n";
    }
    return e;
  };

  bool stop = false;
  for (std::int64_t epoch = state.epoch; epoch < tr.epochs && !stop && state.step < total_steps; ++epoch) {
    model->train();
    const std::int64_t micro_in_epoch = train_loader.batches_in_epoch(epoch);
    train_loader.seek({epoch, epoch == state.epoch ? state.batch : 0});
    const auto epoch_start = Clock::now();
    std::int64_t epoch_samples = 0;
    bool epoch_done = train_loader.position().batch >= micro_in_epoch;
    while (!epoch_done && state.step < total_steps) {
      const auto t0 = Clock::now();
      std::vector<text::TextBatch> micro;
      std::int64_t step_samples = 0;
      for (std::int64_t a = 0; a < accum; ++a) {
        auto batch = train_loader.next();
        if (!batch) break;
        step_samples += batch->batch_size;
        padding.batches += 1;
        padding.samples += batch->batch_size;
        padding.real_tokens += batch->real_tokens;
        padding.padded_tokens += batch->padded_tokens;
        micro.push_back(std::move(*batch));
      }
      HOTPATH_ASSERT(!micro.empty() && step_samples > 0);
      double t_data = seconds_between(t0, Clock::now()), t_fwd = 0, t_bwd = 0;
      schedule.apply(*optimizer, state.step);
      double step_loss = 0;
      for (const text::TextBatch& batch : micro) {
        const auto a0 = Clock::now();
        const text::TextBatchTensors t = text::to_tensors(batch);
        const auto a1 = Clock::now();
        at::Tensor loss;
        {
          ops::AutocastGuard guard(at::kCPU, autocast);
          const at::Tensor logits = model->forward(t.input_ids, t.attention_mask, t.token_type_ids);
          loss = at::cross_entropy_loss(logits.to(at::kFloat), t.labels, {}, at::Reduction::Mean, -100,
                                        tr.label_smoothing);
        }
        const auto a2 = Clock::now();
        // Each micro-batch's mean weighted by its share of the step's samples: the gradients sum to
        // those of the mean over their union, whatever sizes token-budget batches come in.
        const double weight = static_cast<double>(batch.batch_size) / static_cast<double>(step_samples);
        (micro.size() == 1 ? loss : loss * weight).backward();
        const auto a3 = Clock::now();
        const double loss_value = loss.item<double>();
        HOTPATH_CHECK(std::isfinite(loss_value), "train: the loss is ", loss_value, " at step ", state.step + 1,
                      " (epoch ", epoch + 1, "; lower optimizer.lr, or set train.clip_grad_norm). Last checkpoint: ",
                      latest_checkpoint(ckpt_root.string()).value_or("none"));
        step_loss += micro.size() == 1 ? loss_value : loss_value * weight;
        t_data += seconds_between(a0, a1);
        t_fwd += seconds_between(a1, a2);
        t_bwd += seconds_between(a2, a3);
      }
      const auto t3 = Clock::now();
      if (tr.clip_grad_norm > 0) clip_grad_norm(trainable_tensors, tr.clip_grad_norm);
      optimizer->step();
      optimizer->zero_grad(/*set_to_none=*/true);
      if (ema) ema->update();
      const auto t4 = Clock::now();
      bd.data_s += t_data;
      bd.forward_s += t_fwd;
      bd.backward_s += t_bwd;
      bd.optimizer_s += seconds_between(t3, t4);
      bd.steps += 1;
      const double lr = get_lr(*optimizer);
      samples += step_samples;
      epoch_samples += step_samples;
      state.step += 1;
      state.loss_window += step_loss;
      state.window += 1;
      const std::int64_t next_batch = train_loader.position().batch;
      epoch_done = next_batch >= micro_in_epoch;
      state.epoch = epoch_done ? epoch + 1 : epoch;
      state.batch = epoch_done ? 0 : next_batch;
      const bool regular_line = state.step % tr.log_every == 0;
      if (regular_line || state.step == total_steps) {
        const double loss = state.loss_window / static_cast<double>(state.window);
        const double rate =
            static_cast<double>(epoch_samples) / std::max(seconds_between(epoch_start, Clock::now()), 1e-9);
        write_metrics_line(metrics, {{"split", "train"}, {"step", state.step}, {"epoch", epoch}, {"loss", loss},
                                     {"lr", lr}, {"padding_fraction", padding.padding_fraction()}});
        add_train_scalars(tb, loss, lr, rate, state.step);
        if (!options.quiet) {
          out << "epoch " << epoch + 1 << "/" << tr.epochs << "  step " << state.step << "/" << total_steps
              << "  loss " << fixed(loss, 4) << "  lr " << lr << "  " << fixed(rate, 1) << " samples/s  padding "
              << fixed(100.0 * padding.padding_fraction(), 1) << "%\n";
        }
        // The last step's extra line leaves the window to the checkpoint: resumed, it goes on.
        if (regular_line) {
          state.loss_window = 0;
          state.window = 0;
        }
      }
      // Mid-epoch checkpoints: every checkpoint.every_steps, on a stop request and where max_steps
      // ends the run. The end of an epoch checkpoints below, after its eval (best_metric included).
      const bool interrupted = options.stop != nullptr && options.stop->load();
      const bool periodic = recipe.checkpoint.every_steps > 0 && state.step % recipe.checkpoint.every_steps == 0;
      if (!epoch_done && (periodic || interrupted || state.step >= total_steps)) save();
      if (interrupted) {
        result.interrupted = true;
        stop = true;
        break;
      }
    }
    if (!epoch_done) {
      // Stopped mid-epoch. By max_steps: evaluate what was trained (logged, not a best/ candidate: a
      // resumed run would not see this eval); by a stop request: only the checkpoint above.
      if (!result.interrupted && eval_loader && !benchmark) {
        const EmaWeightsIn ema_in(ema.get());
        run_eval(epoch + 1);
      }
      break;
    }
    result.epochs_completed = epoch + 1;
    const bool last = epoch + 1 == tr.epochs || state.step >= total_steps;
    if (eval_loader && !benchmark && (last || (tr.eval_every > 0 && (epoch + 1) % tr.eval_every == 0))) {
      const EmaWeightsIn ema_in(ema.get());
      const TextEval e = run_eval(epoch + 1);
      const double metric = metric_value(e.result, recipe.checkpoint.metric);
      if (recipe.checkpoint.keep_best &&
          (!state.best_metric || metric_better(recipe.checkpoint.metric, metric, *state.best_metric))) {
        state.best_metric = metric;
        state.best_step = state.step;
        // best/: the HF directory run/model would be at this point (+ adapter/ with LoRA), swapped in whole.
        const fs::path best = run_dir / "best", tmp = run_dir / "best.tmp";
        fs::remove_all(tmp);
        write_model_dirs(tmp, tmp / "adapter", *model, lora, recipe, labels);
        write_file_atomic((tmp / "metrics.json").string(),
                          json{{"step", state.step}, {"epoch", epoch + 1}, {"top1", e.result.top1},
                               {"top5", e.result.top5}, {"loss", e.result.loss},
                               {"majority_top1", e.majority_top1}}.dump(2) + "\n");
        // Never a moment without a best/: the old one steps aside (best.old) until the new one is in.
        const fs::path old_best = run_dir / "best.old";
        std::error_code ec;
        fs::remove_all(old_best);
        if (fs::exists(best)) fs::rename(best, old_best, ec);
        HOTPATH_CHECK(!ec, best.string(), ": cannot rename it to ", old_best.string(), ": ", ec.message());
        fs::rename(tmp, best, ec);
        HOTPATH_CHECK(!ec, best.string(), ": cannot rename ", tmp.string(), " to it: ", ec.message());
        sync_directory(run_dir.string());
        fs::remove_all(old_best);
      }
    }
    const bool periodic = recipe.checkpoint.every_steps > 0 && state.step % recipe.checkpoint.every_steps == 0;
    if (last || stop || periodic ||
        (recipe.checkpoint.every_epochs > 0 && (epoch + 1) % recipe.checkpoint.every_epochs == 0)) {
      save();
    }
    tb.flush();
  }

  // The fine-tuned model as a Hugging Face directory (LoRA merged) and, with LoRA, the PEFT adapter.
  // An interrupted run leaves only its checkpoint: resume finishes the run and writes these.
  if (!benchmark && !result.interrupted) {
    const EmaWeightsIn ema_in(ema.get());  // with EMA on, the averaged weights (what EMA is for)
    write_model_dirs(run_dir / "model", run_dir / "adapter", *model, lora, recipe, labels);
  }
  tb.flush();

  result.steps = state.step;
  result.seconds = seconds_between(t_start, Clock::now());
  const double train_s = bd.total_s();
  result.samples_per_s = train_s > 0 ? static_cast<double>(samples) / train_s : 0;
  result.steady_samples_per_s = result.samples_per_s;
  result.steady_steps = bd.steps;
  json profile = json::parse(bd.to_json());
  profile["peak_memory_bytes"] = peak.peak_bytes();
  profile["padding_fraction"] = padding.padding_fraction();
  write_file_atomic((run_dir / "profile.json").string(), profile.dump(2) + "\n");
  if (!options.quiet) {
    out << "text: padding " << fixed(100.0 * padding.padding_fraction(), 1) << "% of tokens, peak tensor memory "
        << fixed(static_cast<double>(peak.peak_bytes()) / (1 << 20), 1) << " MiB\n";
  }
  return result;
}

}  // namespace hotpath::train
