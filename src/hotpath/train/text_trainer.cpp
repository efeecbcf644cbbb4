// Fine-tuning a Hugging Face BERT-family classifier on text shards: the text half of `hotpath train`
// (data.kind: text). See train_text in trainer.h for what it does and does not do yet.
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
#include <thread>
#include <vector>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/models/activation_checkpoint.h"
#include "hotpath/models/attention.h"
#include "hotpath/models/autocast_ops.h"
#include "hotpath/models/bert.h"
#include "hotpath/models/hf_weights.h"
#include "hotpath/models/lora.h"
#include "hotpath/models/weights.h"
#include "hotpath/text/text_batch_tensor.h"
#include "hotpath/text/text_loader.h"
#include "hotpath/train/optimizer.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/schedule.h"
#include "hotpath/train/trainer.h"

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
  o.batching.batch_size = static_cast<int>(recipe.train.batch_size);
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
      models::AutocastGuard guard(at::kCPU, autocast);
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

}  // namespace

TrainResult train_text(const Recipe& recipe, const TrainOptions& options) {
  const auto t_start = Clock::now();
  std::ostream& out = options.out ? *options.out : std::cerr;
  const auto& tr = recipe.train;
  const auto& m = recipe.model;
  HOTPATH_CHECK(!options.resume, recipe.source,
                ": --resume is not supported for text recipes yet (they write no mid-run checkpoints)");
  HOTPATH_CHECK(tr.device != "cuda", recipe.source, ": train.device: text fine-tuning runs on the CPU for now");
  HOTPATH_CHECK(tr.precision != "fp16", recipe.source, ": train.precision: fp16 needs CUDA; use bf16 on CPU");
  HOTPATH_CHECK(tr.accum_steps == 1, recipe.source, ": train.accum_steps: text recipes take 1 (token-budget batches "
                "already vary in size); use data.max_tokens");
  HOTPATH_CHECK(tr.ema_decay == 0, recipe.source, ": train.ema_decay: EMA is not supported for text recipes yet");
  HOTPATH_CHECK(fs::exists(fs::path(m.pretrained) / "config.json"), recipe.source,
                ": model.pretrained: no config.json in ", m.pretrained);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(tr.threads > 0 ? static_cast<int>(tr.threads) : cores);
  at::manual_seed(tr.seed);

  const fs::path run_dir(recipe.output_dir);
  fs::create_directories(run_dir);
  write_file_atomic((run_dir / "config.yaml").string(), to_yaml(recipe));

  // Data.
  text::TextLoader train_loader(loader_options(recipe, existing_shards(recipe.data.train, recipe, "data.train"), true));
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
  models::BertConfig config = models::BertConfig::from_file(fs::path(m.pretrained) / "config.json");
  config.num_labels = num_labels;
  config.id2label = labels;
  models::BertOptions bert_options;
  bert_options.attention = m.attention == "fused" ? &models::fused_attention : &models::bert_eager_attention;
  bert_options.gradient_checkpointing = m.gradient_checkpointing;
  auto model = std::make_shared<models::BertForSequenceClassification>(config, bert_options);
  const std::string base_prefix = config.arch == models::BertArch::kDistilBert ? "distilbert" : "bert";
  const models::LoadReport report = models::load_state_dict(
      *model, models::read_hf_state_dict(m.pretrained), m.pretrained, {.allow_partial = true},
      {.base_prefix = base_prefix});
  if (!options.quiet) out << "weights: " << report.summary() << "\n";
  std::vector<std::string> head = {"classifier"};
  if (config.arch == models::BertArch::kDistilBert) head.push_back("pre_classifier");
  std::optional<models::LoraConfig> lora;
  if (m.lora_r > 0) {
    lora = models::LoraConfig{};
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

  const std::int64_t steps_per_epoch = train_loader.batches_in_epoch(0);
  HOTPATH_CHECK(steps_per_epoch >= 1, recipe.source, ": data.train yields no batch");
  std::int64_t total_steps = tr.epochs * steps_per_epoch;
  if (tr.max_steps > 0) total_steps = std::min(total_steps, tr.max_steps);
  auto optimizer = make_optimizer(optimizer_config_for(recipe), trainable);
  const Schedule schedule(schedule_config_for(recipe, steps_per_epoch, tr.epochs * steps_per_epoch));
  const auto autocast = autocast_dtype_of(tr.precision);

  if (!options.quiet) {
    out << "train: " << (config.arch == models::BertArch::kDistilBert ? "distilbert" : "bert") << " "
        << config.num_hidden_layers << "×" << config.hidden_size << " classifier, " << num_labels << " classes ("
        << n_trainable << " of " << n_params << " parameters trainable, "
        << fixed(100.0 * static_cast<double>(n_trainable) / static_cast<double>(n_params), 2) << "%), "
        << at::get_num_threads() << " threads, " << tr.precision
        << (tr.precision == "bf16" ? std::string(" (") + models::bf16_math_name() + ")" : "") << ", attention "
        << m.attention << (m.gradient_checkpointing ? ", activation checkpointing" : "") << "; "
        << train_loader.corpus().size() << " samples, " << steps_per_epoch << " steps/epoch × " << tr.epochs
        << " epochs\n";
  }

  std::ofstream metrics(run_dir / "metrics.jsonl", std::ios::trunc);
  models::PeakMemory peak;
  TrainResult result;
  result.run_dir = run_dir.string();
  std::int64_t step = 0, samples = 0;
  StepBreakdown& bd = result.breakdown;
  double best_metric = 0;
  bool have_best = false;
  text::PaddingStats padding;
  for (std::int64_t epoch = 0; epoch < tr.epochs && step < total_steps; ++epoch) {
    model->train();
    train_loader.seek({epoch, 0});
    double loss_window = 0;
    std::int64_t window = 0;
    const auto epoch_start = Clock::now();
    while (step < total_steps) {
      if (options.stop != nullptr && options.stop->load()) {
        result.interrupted = true;
        break;
      }
      const auto t0 = Clock::now();
      const auto batch = train_loader.next();
      if (!batch) break;
      padding.batches += 1;
      padding.samples += batch->batch_size;
      padding.real_tokens += batch->real_tokens;
      padding.padded_tokens += batch->padded_tokens;
      const text::TextBatchTensors t = text::to_tensors(*batch);
      const auto t1 = Clock::now();
      schedule.apply(*optimizer, step);
      at::Tensor loss;
      {
        models::AutocastGuard guard(at::kCPU, autocast);
        const at::Tensor logits = model->forward(t.input_ids, t.attention_mask, t.token_type_ids);
        loss = at::cross_entropy_loss(logits.to(at::kFloat), t.labels, {}, at::Reduction::Mean, -100,
                                      tr.label_smoothing);
      }
      const auto t2 = Clock::now();
      loss.backward();
      const auto t3 = Clock::now();
      const double loss_value = loss.item<double>();
      HOTPATH_CHECK(std::isfinite(loss_value), "train: the loss is ", loss_value, " at step ", step,
                    " (lower optimizer.lr, or train.clip_grad_norm)");
      if (tr.clip_grad_norm > 0) clip_grad_norm(trainable_tensors, tr.clip_grad_norm);
      optimizer->step();
      optimizer->zero_grad(/*set_to_none=*/true);
      const auto t4 = Clock::now();
      bd.data_s += seconds_between(t0, t1);
      bd.forward_s += seconds_between(t1, t2);
      bd.backward_s += seconds_between(t2, t3);
      bd.optimizer_s += seconds_between(t3, t4);
      bd.steps += 1;
      ++step;
      samples += batch->batch_size;
      loss_window += loss_value;
      ++window;
      if (step % tr.log_every == 0 || step == total_steps) {
        const double lr = get_lr(*optimizer);
        metrics << json{{"split", "train"}, {"step", step}, {"epoch", epoch}, {"loss", loss_window / window},
                        {"lr", lr}, {"padding_fraction", padding.padding_fraction()}}
                       .dump()
                << "\n";
        metrics.flush();
        if (!options.quiet) {
          const double elapsed = seconds_between(epoch_start, Clock::now());
          out << "epoch " << epoch + 1 << "/" << tr.epochs << "  step " << step << "/" << total_steps << "  loss "
              << fixed(loss_window / window, 4) << "  lr " << lr << "  "
              << fixed(static_cast<double>(batch->index + 1) * static_cast<double>(tr.batch_size) / std::max(elapsed, 1e-9), 1)
              << " samples/s  padding " << fixed(100.0 * padding.padding_fraction(), 1) << "%\n";
        }
        loss_window = 0;
        window = 0;
      }
    }
    if (result.interrupted) break;
    result.epochs_completed = epoch + 1;
    const bool last = epoch + 1 == tr.epochs || step >= total_steps;
    if (eval_loader && (last || (tr.eval_every > 0 && (epoch + 1) % tr.eval_every == 0))) {
      const TextEval e = evaluate_text(*model, *eval_loader, autocast, num_labels);
      result.eval = e.result;
      metrics << json{{"split", "eval"}, {"epoch", epoch + 1}, {"step", step}, {"top1", e.result.top1},
                      {"top5", e.result.top5}, {"loss", e.result.loss}, {"majority_top1", e.majority_top1}}
                     .dump()
              << "\n";
      metrics.flush();
      if (!options.quiet) {
        out << "eval epoch " << epoch + 1 << ": accuracy " << fixed(e.result.top1, 2) << "% (majority class "
            << fixed(e.majority_top1, 2) << "%)  loss " << fixed(e.result.loss, 4) << " on " << e.result.samples
            << " samples\n";
      }
      const double metric = recipe.checkpoint.metric == "loss" ? -e.result.loss : e.result.top1;
      if (!have_best || metric > best_metric) {
        best_metric = metric;
        have_best = true;
      }
    }
  }

  // The fine-tuned model as a Hugging Face directory; with LoRA also the PEFT adapter, then merged.
  if (options.benchmark_warmup_steps < 0) {
    if (lora) {
      const fs::path adapter = run_dir / "adapter";
      models::save_lora(*model, *lora, adapter);
      copy_tokenizer_files(m.pretrained, adapter);
      models::merge_lora(*model);
    }
    const fs::path model_dir = run_dir / "model";
    fs::create_directories(model_dir);
    models::save_safetensors(*model, (model_dir / "model.safetensors").string(), {{"format", "pt"}});
    write_file_atomic((model_dir / "config.json").string(), finetuned_config(recipe, labels));
    copy_tokenizer_files(m.pretrained, model_dir);
  }

  result.steps = step;
  result.seconds = seconds_between(t_start, Clock::now());
  const double train_s = bd.total_s();
  result.samples_per_s = train_s > 0 ? static_cast<double>(samples) / train_s : 0;
  result.steady_samples_per_s = result.samples_per_s;
  result.steady_steps = step;
  json profile = json::parse(bd.to_json());
  profile["peak_memory_bytes"] = peak.peak_bytes();
  profile["padding_fraction"] = padding.padding_fraction();
  write_file_atomic((run_dir / "profile.json").string(), profile.dump(2) + "\n");
  if (!options.quiet) {
    out << bd.summary() << "\n";
    out << "trained: " << step << " steps in " << fixed(result.seconds, 1) << " s (" << fixed(result.samples_per_s, 1)
        << " samples/s), padding " << fixed(100.0 * padding.padding_fraction(), 1) << "% of tokens, peak tensor memory "
        << fixed(static_cast<double>(peak.peak_bytes()) / (1 << 20), 1) << " MiB";
    if (result.eval) out << "; eval accuracy " << fixed(result.eval->top1, 2) << "%";
    out << "\nrun directory: " << run_dir.string() << "\n";
  }
  return result;
}

}  // namespace hotpath::train
