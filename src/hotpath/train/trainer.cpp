#include "hotpath/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/core/progress.h"
#include "hotpath/core/tensorboard.h"
#include "hotpath/core/trace.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/weights.h"
#include "hotpath/train/checkpoint.h"
#include "hotpath/train/grad_scaler.h"
#include "hotpath/train/optimizer.h"
#include "hotpath/infer/package.h"
#include "hotpath/train/schedule.h"
#include "run_util.h"

namespace hotpath::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::optional<at::ScalarType> autocast_dtype(const std::string& precision) {
  if (precision == "bf16") return at::kBFloat16;
  if (precision == "fp16") return at::kHalf;
  return std::nullopt;
}

at::Device pick_device(const std::string& name) {
  if (name == "cuda") {
    HOTPATH_CHECK(at::hasCUDA(), "train.device: cuda was asked for but no CUDA device is available");
    return at::Device(at::kCUDA, 0);
  }
  if (name == "auto" && at::hasCUDA()) return at::Device(at::kCUDA, 0);
  return at::Device(at::kCPU);
}

void sync(const at::Device& device) {
  if (device.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(device.index());
}

// 4-D parameters and buffers to NHWC strides: oneDNN/cuDNN pick their channels-last kernels.
void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// Exponential moving average of the weights, kept in a second model of the same architecture.
class ModelEma {
 public:
  ModelEma(models::ModelHandle shadow, const models::ImageClassifier& source, double decay)
      : shadow_(std::move(shadow)), decay_(decay) {
    shadow_->eval();
    for (auto& p : shadow_->parameters()) p.requires_grad_(false);
    const auto src = models::named_state(source);
    const auto dst = models::named_state(*shadow_);
    torch::NoGradGuard no_grad;
    for (const auto& [name, t] : dst) {
      t.copy_(src.at(name));
      if (t.is_floating_point()) {
        float_dst_.push_back(t);
        float_src_.push_back(src.at(name));
      } else {
        other_dst_.push_back(t);
        other_src_.push_back(src.at(name));
      }
    }
  }
  void update() {
    torch::NoGradGuard no_grad;
    // ema += (1 - decay) * (param - ema); BN running stats are averaged too (timm's ModelEmaV2).
    at::_foreach_lerp_(float_dst_, float_src_, 1.0 - decay_);
    for (std::size_t i = 0; i < other_dst_.size(); ++i) other_dst_[i].copy_(other_src_[i]);
  }
  [[nodiscard]] models::ImageClassifier& model() { return *shadow_; }

 private:
  models::ModelHandle shadow_;
  double decay_;
  std::vector<at::Tensor> float_dst_, float_src_, other_dst_, other_src_;
};

std::string percent(double v) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << v << "%";
  return s.str();
}

struct TrainerState {
  std::int64_t step = 0;
  std::int64_t epoch = 0;  // loader position of the next micro-batch
  std::int64_t batch = 0;
  std::optional<double> best_metric;
  std::int64_t best_step = -1;
  GradScalerState scaler;
};

std::string trainer_state_json(const TrainerState& s, const Recipe& recipe) {
  json j;
  j["step"] = s.step;
  j["epoch"] = s.epoch;
  j["batch"] = s.batch;
  if (s.best_metric) j["best_metric"] = *s.best_metric;
  j["best_step"] = s.best_step;
  j["scaler"] = json::parse(to_json(s.scaler));
  j["recipe"] = recipe.name;
  j["seed"] = recipe.train.seed;
  j["batch_size"] = recipe.train.batch_size;
  j["accum_steps"] = recipe.train.accum_steps;
  return j.dump(2) + "\n";
}

TrainerState trainer_state_from_json(const std::string& text, const std::string& where, const Recipe& recipe) {
  TrainerState s;
  try {
    const auto j = nlohmann::json::parse(text);
    s.step = j.at("step").get<std::int64_t>();
    s.epoch = j.at("epoch").get<std::int64_t>();
    s.batch = j.at("batch").get<std::int64_t>();
    if (j.contains("best_metric")) s.best_metric = j.at("best_metric").get<double>();
    s.best_step = j.value("best_step", std::int64_t{-1});
    s.scaler = grad_scaler_state_from_json(j.at("scaler").dump());
    const auto bs = j.value("batch_size", recipe.train.batch_size);
    const auto acc = j.value("accum_steps", recipe.train.accum_steps);
    HOTPATH_CHECK(bs == recipe.train.batch_size && acc == recipe.train.accum_steps, where,
                  ": the checkpoint was made with train.batch_size=", bs, " accum_steps=", acc,
                  "; the recipe now says ", recipe.train.batch_size, " and ", recipe.train.accum_steps,
                  " (resume needs the same batch layout)");
  } catch (const nlohmann::json::exception& e) {
    HOTPATH_CHECK(false, where, ": invalid trainer state: ", e.what());
  }
  return s;
}

}  // namespace

// ---- breakdown --------------------------------------------------------------------------------

std::string StepBreakdown::summary() const {
  const double total = total_s();
  if (steps == 0 || total <= 0) return "no steps timed";
  struct Part {
    const char* name;
    double s;
  };
  const Part parts[] = {{"data", data_s}, {"forward", forward_s}, {"backward", backward_s}, {"optimizer", optimizer_s}};
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << "step " << 1000.0 * total / static_cast<double>(steps) << " ms: ";
  const Part* top = &parts[0];
  for (const Part& p : parts) {
    out << (&p == &parts[0] ? "" : " · ") << p.name << " " << 100.0 * p.s / total << "%";
    if (p.s > top->s) top = &p;
  }
  out << " — bottleneck: " << top->name;
  if (top == &parts[0] || data_s / total > 0.2) {
    out << (text ? " (input-bound: pack pre-tokenized shards with data pack-text --tokenizer)"
                 : " (input-bound: raise data.workers, use smaller images or uint8 batches)");
  } else if (top == &parts[3]) {
    out << (text ? " (optimizer-bound: LoRA trains a fraction of the parameters; no EMA)"
                 : " (optimizer-bound: fewer parameters, no EMA, or a fused optimizer)");
  } else {
    out << (text ? " (compute-bound: a smaller model, bucketing (less padding), bf16 or more threads help)"
                 : " (compute-bound: a smaller model, channels-last, bf16 or more threads help)");
  }
  return out.str();
}

std::string StepBreakdown::to_json() const {
  const double total = std::max(total_s(), 1e-12);
  json j;
  j["steps"] = steps;
  j["step_ms"] = steps ? 1000.0 * total_s() / static_cast<double>(steps) : 0.0;
  j["seconds"] = {{"data", data_s}, {"forward", forward_s}, {"backward", backward_s}, {"optimizer", optimizer_s}};
  j["fractions"] = {{"data", data_s / total},
                    {"forward", forward_s / total},
                    {"backward", backward_s / total},
                    {"optimizer", optimizer_s / total}};
  j["summary"] = summary();
  return j.dump(2) + "\n";
}

// ---- data ------------------------------------------------------------------------------------

namespace {

void set_normalization(data::LoaderOptions& o, const DataSection& d) {
  for (std::size_t c = 0; c < d.mean.size() && c < 3; ++c) {
    o.normalization.mean[c] = static_cast<float>(d.mean[c]);
    o.normalization.std[c] = static_cast<float>(d.std[c]);
  }
}


}  // namespace

data::LoaderOptions train_loader_options(const Recipe& recipe) {
  const auto& d = recipe.data;
  data::LoaderOptions o;
  o.shards = resolve_recipe_shards(d.train, "data.train", recipe);
  o.batch_size = static_cast<int>(recipe.train.batch_size / recipe.train.accum_steps);
  o.workers = static_cast<int>(d.workers);
  o.prefetch = static_cast<int>(d.prefetch);
  o.size = static_cast<int>(d.image_size);
  o.channels = static_cast<int>(d.channels);
  o.crop = d.train_crop == "resize" ? data::CropMode::kResize : data::CropMode::kRandomResizedCrop;
  o.rrc.scale_min = d.scale_min;
  o.rrc.scale_max = d.scale_max;
  o.flip_probability = d.flip;
  o.translate = static_cast<int>(d.translate);
  set_normalization(o, d);
  o.format.layout = recipe.model.channels_last ? data::PixelLayout::kHWC : data::PixelLayout::kCHW;
  o.shuffle = true;
  o.shuffle_buffer = static_cast<std::size_t>(d.shuffle_buffer);
  o.drop_last = true;
  o.seed = recipe.train.seed;
  o.max_bad_samples = d.max_bad_samples;
  return o;
}

data::LoaderOptions eval_loader_options(const Recipe& recipe, const std::vector<std::string>& shard_patterns) {
  const auto& d = recipe.data;
  data::LoaderOptions o;
  o.shards = resolve_recipe_shards(shard_patterns, "data.eval", recipe);
  o.batch_size = static_cast<int>(std::max<std::int64_t>(recipe.train.batch_size / recipe.train.accum_steps, 1));
  o.workers = static_cast<int>(d.workers);
  o.prefetch = static_cast<int>(d.prefetch);
  o.size = static_cast<int>(d.image_size);
  o.channels = static_cast<int>(d.channels);
  o.crop = d.eval_crop == "resize" ? data::CropMode::kResize : data::CropMode::kResizeCenterCrop;
  o.resize_shorter = static_cast<int>(d.resize_shorter);
  o.flip_probability = 0;
  o.allow_dct_scaling = false;
  set_normalization(o, d);
  o.format.layout = recipe.model.channels_last ? data::PixelLayout::kHWC : data::PixelLayout::kCHW;
  o.shuffle = false;
  o.drop_last = false;
  o.max_bad_samples = d.max_bad_samples;
  return o;
}

std::vector<std::string> class_names_for(const Recipe& recipe) {
  if (!recipe.data.class_names.empty()) return recipe.data.class_names;
  if (recipe.data.train.empty()) return {};
  const auto shards = data::resolve_shards({recipe.data.train.front()});
  if (shards.empty()) return {};
  // `hotpath data pack -o DIR/train` writes DIR/train-000000.tar ... and DIR/train.json.
  const fs::path first(shards.front());
  std::string stem = first.stem().string();
  if (const auto dash = stem.rfind('-'); dash != std::string::npos) stem.resize(dash);
  const fs::path report = first.parent_path() / (stem + ".json");
  if (!fs::exists(report)) return {};
  try {
    const auto j = nlohmann::json::parse(read_file(report.string()));
    if (j.contains("classes") && j["classes"].is_array()) return j["classes"].get<std::vector<std::string>>();
  } catch (const std::exception&) {
    // A report we cannot read only costs the class names.
  }
  return {};
}

std::vector<std::string> resolve_recipe_shards(const std::vector<std::string>& patterns, const char* key,
                                         const Recipe& recipe) {
  HOTPATH_CHECK(!patterns.empty(), recipe.source, ": ", key, ": no shards given (a list of .tar paths or patterns)");
  std::vector<std::string> shards;
  try {
    shards = data::resolve_shards(patterns);
  } catch (const Error& e) {
    HOTPATH_CHECK(false, recipe.source, ": ", key, ": ", e.what(), " (pack data with `hotpath data pack`)");
  }
  HOTPATH_CHECK(!shards.empty(), recipe.source, ": ", key, ": no shard matches ", patterns.front());
  return shards;
}

// ---- eval ------------------------------------------------------------------------------------

EvalResult evaluate(models::ImageClassifier& model, data::Loader& loader, const EvalOptions& options) {
  model.eval();
  torch::NoGradGuard no_grad;
  const at::Device device = model.parameters().empty() ? at::Device(at::kCPU) : model.parameters().front().device();
  const auto dtype = autocast_dtype(options.precision);
  std::int64_t n = 0, correct1 = 0, correct5 = 0, batches = 0;
  double loss_sum = 0;
  loader.seek({0, 0});
  while (auto batch = loader.next()) {
    const at::Tensor images = batch->images.to(device, /*non_blocking=*/true);
    const at::Tensor labels = batch->labels.to(device, /*non_blocking=*/true);
    at::Tensor logits;
    {
      ops::AutocastGuard autocast(device.type(), dtype);
      logits = model.forward(images);
    }
    logits = logits.to(at::kFloat);
    const std::int64_t k = std::min<std::int64_t>(5, logits.size(1));
    const at::Tensor topk = std::get<1>(logits.topk(k, 1));
    const at::Tensor hit = topk.eq(labels.unsqueeze(1));
    correct1 += hit.select(1, 0).sum().item<std::int64_t>();
    correct5 += hit.any(1).sum().item<std::int64_t>();
    loss_sum += at::cross_entropy_loss(logits, labels, {}, at::Reduction::Sum).item<double>();
    n += labels.size(0);
    if (options.max_batches > 0 && ++batches >= options.max_batches) break;
  }
  HOTPATH_CHECK(n > 0, "eval: the eval shards yielded no samples");
  EvalResult r;
  r.samples = n;
  r.top1 = 100.0 * static_cast<double>(correct1) / static_cast<double>(n);
  r.top5 = 100.0 * static_cast<double>(correct5) / static_cast<double>(n);
  r.loss = loss_sum / static_cast<double>(n);
  return r;
}

OptimizerConfig optimizer_config_for(const Recipe& recipe) {
  const auto& oc = recipe.optimizer;
  return OptimizerConfig{.kind = parse_optimizer_kind(oc.name),
                         .lr = oc.lr,
                         .weight_decay = oc.weight_decay,
                         .no_decay_norm_bias = oc.no_decay_norm_bias,
                         .momentum = oc.momentum,
                         .dampening = oc.dampening,
                         .nesterov = oc.nesterov,
                         .beta1 = oc.beta1,
                         .beta2 = oc.beta2,
                         .eps = oc.eps};
}

ScheduleConfig schedule_config_for(const Recipe& recipe, std::int64_t steps_per_epoch, std::int64_t total_steps) {
  const auto& sc = recipe.schedule;
  const auto epochs_to_steps = [&](double e) {
    return static_cast<std::int64_t>(std::llround(e * static_cast<double>(steps_per_epoch)));
  };
  return ScheduleConfig{.kind = parse_schedule_kind(sc.name),
                        .base_lr = recipe.optimizer.lr,
                        .total_steps = total_steps,
                        .warmup_steps = std::min(epochs_to_steps(sc.warmup_epochs), total_steps),
                        .warmup_start_factor = sc.warmup_start_factor,
                        .min_lr = sc.min_lr,
                        .step_size = std::max<std::int64_t>(1, epochs_to_steps(sc.step_epochs)),
                        .gamma = sc.gamma,
                        .pct_start = sc.pct_start,
                        .div_factor = sc.div_factor,
                        .final_div_factor = sc.final_div_factor,
                        .cycle_momentum = sc.cycle_momentum,
                        .base_momentum = sc.base_momentum,
                        .max_momentum = sc.max_momentum};
}

// ---- train -----------------------------------------------------------------------------------

TrainResult train(const Recipe& recipe, const TrainOptions& options) {
  if (recipe.data.kind == "text") return train_text(recipe, options);
  const auto t_start = Clock::now();
  std::ostream& out = options.out ? *options.out : std::cerr;
  const auto& tr = recipe.train;
  const at::Device device = pick_device(tr.device);
  HOTPATH_CHECK(tr.precision != "fp16" || device.is_cuda(), recipe.source,
                ": train.precision: fp16 needs a CUDA device; use bf16 on CPU");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(tr.threads > 0 ? static_cast<int>(tr.threads) : cores);
  // Initial weights (and dropout until a checkpoint restores its state) follow train.seed.
  at::manual_seed(tr.seed);

  const fs::path run_dir(recipe.output_dir);
  const fs::path ckpt_root = run_dir / "checkpoints";
  fs::create_directories(ckpt_root);

  // Data: micro-batches of batch_size / accum_steps; an optimizer step takes accum_steps of them.
  data::LoaderOptions lo = train_loader_options(recipe);
  const std::int64_t accum = tr.accum_steps;
  const std::int64_t samples = data::count_samples(lo);
  const std::int64_t micro_per_epoch = samples / lo.batch_size;
  const std::int64_t steps_per_epoch = micro_per_epoch / accum;
  HOTPATH_CHECK(steps_per_epoch >= 1, recipe.source, ": data.train holds ", samples,
                " usable samples, fewer than one batch of train.batch_size=", tr.batch_size);
  const std::int64_t total_steps = tr.epochs * steps_per_epoch;
  const std::vector<std::string> class_names = class_names_for(recipe);
  HOTPATH_CHECK(class_names.empty() || static_cast<std::int64_t>(class_names.size()) == recipe.model.num_classes,
                recipe.source, ": model.num_classes is ", recipe.model.num_classes, " but the data has ",
                class_names.size(), " class names");

  // Model.
  const models::ModelOptions mo{.num_classes = recipe.model.num_classes,
                                .in_channels = recipe.data.channels,
                                .zero_init_residual = recipe.model.zero_init_residual};
  models::ModelHandle model = models::create_model(recipe.model.name, mo);
  if (!recipe.model.weights.empty()) {
    const auto report = models::load_safetensors(*model, recipe.model.weights, {.allow_partial = recipe.model.allow_partial});
    if (!options.quiet) out << "weights: " << report.summary() << "\n";
  }
  for (const std::string& prefix : recipe.model.freeze) {
    std::int64_t frozen = 0;
    for (auto& item : model->named_parameters()) {
      if (item.key().rfind(prefix, 0) == 0) {
        item.value().requires_grad_(false);
        ++frozen;
      }
    }
    HOTPATH_CHECK(frozen > 0, recipe.source, ": model.freeze: no parameter name starts with '", prefix, "'");
  }
  model->to(device);
  if (recipe.model.channels_last) to_channels_last(*model);
  NamedParameters trainable;
  std::int64_t n_params = 0, n_trainable = 0;
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const at::Tensor& p = item.value();
    n_params += p.numel();
    if (p.requires_grad()) {
      trainable.emplace_back(name, p);
      n_trainable += p.numel();
    }
  }
  HOTPATH_CHECK(!trainable.empty(), recipe.source, ": model.freeze leaves no parameter to train");
  std::vector<at::Tensor> trainable_tensors;
  for (const auto& np : trainable) trainable_tensors.push_back(np.second);

  const OptimizerConfig opt_config = optimizer_config_for(recipe);
  auto optimizer = make_optimizer(opt_config, trainable);
  const Schedule schedule(schedule_config_for(recipe, steps_per_epoch, total_steps));
  GradScaler scaler({.init_scale = tr.scaler_init_scale,
                     .growth_interval = tr.scaler_growth_interval,
                     .enabled = tr.precision == "fp16"});
  std::unique_ptr<ModelEma> ema;
  if (tr.ema_decay > 0) {
    models::ModelHandle shadow = models::create_model(recipe.model.name, mo);
    shadow->to(device);
    if (recipe.model.channels_last) to_channels_last(*shadow);
    ema = std::make_unique<ModelEma>(shadow, *model, tr.ema_decay);
  }

  // Resume.
  TrainerState state;
  if (options.resume) {
    const auto latest = latest_checkpoint(ckpt_root.string());
    HOTPATH_CHECK(latest.has_value(), ckpt_root.string(), ": no checkpoint to resume from");
    const CheckpointData data = load_checkpoint(*latest);
    models::load_safetensors(*model, (fs::path(*latest) / "model.safetensors").string());
    load_optimizer_state(*optimizer, trainable, data.optimizer);
    if (ema) {
      HOTPATH_CHECK(!data.ema.empty(), *latest, ": train.ema_decay is on but the checkpoint has no ema.safetensors");
      models::load_safetensors(ema->model(), (fs::path(*latest) / "ema.safetensors").string());
    }
    load_rng_state(data.rng, device);
    state = trainer_state_from_json(data.trainer_json, *latest + "/trainer.json", recipe);
    if (scaler.is_enabled()) scaler.load_state(state.scaler);
    if (!options.quiet) out << "resuming from " << *latest << " at step " << state.step << "\n";
  }

  // Run directory.
  write_file_atomic((run_dir / "config.yaml").string(), to_yaml(recipe));
  std::ofstream metrics =
      open_metrics(run_dir / "metrics.jsonl", options.resume ? std::optional<std::int64_t>(state.step) : std::nullopt);
  TensorBoardWriter tb((run_dir / "tensorboard").string());
  const auto log_line = [&](const json& j) { write_metrics_line(metrics, j); };
  infer::ModelPackage package{.dir = run_dir.string(),
                       .model = recipe.model.name,
                       .num_classes = recipe.model.num_classes,
                       .in_channels = recipe.data.channels,
                       .image_size = recipe.data.image_size,
                       .eval_crop = recipe.data.eval_crop,
                       .resize_shorter = recipe.data.resize_shorter,
                       .mean = recipe.data.mean,
                       .std = recipe.data.std,
                       .class_names = class_names,
                       .channels_last = recipe.model.channels_last};

  if (!options.quiet) {
    out << "train: " << recipe.model.name << " (" << n_trainable << " of " << n_params << " parameters trainable, "
        << std::fixed << std::setprecision(2) << 100.0 * static_cast<double>(n_trainable) / static_cast<double>(n_params)
        << "%) on " << device.str() << ", " << at::get_num_threads() << " threads, " << tr.precision
        << (tr.precision == "bf16" && device.is_cpu() ? std::string(" (") + ops::bf16_math_name() + ")" : "") << "; "
        << samples << " samples, " << steps_per_epoch << " steps/epoch × " << tr.epochs << " epochs, batch "
        << tr.batch_size << (accum > 1 ? " (" + std::to_string(accum) + " × " + std::to_string(lo.batch_size) + ")" : "")
        << "\n";
    out.unsetf(std::ios::floatfield);
  }

  data::Loader loader(lo);
  std::unique_ptr<data::Loader> eval_loader;
  const auto run_eval = [&](models::ImageClassifier& m) {
    if (!eval_loader) eval_loader = std::make_unique<data::Loader>(eval_loader_options(recipe, recipe.data.eval));
    EvalResult r = evaluate(m, *eval_loader, {.precision = tr.precision == "fp16" ? "fp16" : tr.precision});
    model->train();
    return r;
  };

  TraceRecorder trace(!options.trace_path.empty());
  trace.set_enabled(false);
  const std::int64_t trace_begin = state.step + std::min<std::int64_t>(3, total_steps / 4);
  const std::int64_t trace_end = trace_begin + options.trace_steps;

  const bool benchmark = options.benchmark_warmup_steps >= 0;
  const std::int64_t steady_from = state.step + std::max<std::int64_t>(options.benchmark_warmup_steps, 0);
  std::optional<Clock::time_point> steady_start;
  std::int64_t steady_samples_base = 0;
  if (benchmark && options.benchmark_warmup_steps == 0) steady_start = Clock::now();
  const auto save = [&](const char* why) {
    if (benchmark) return;
    if (scaler.is_enabled()) state.scaler = scaler.state();
    CheckpointData data;
    data.model = models::named_state(*model);
    data.optimizer = optimizer_state(*optimizer, trainable);
    if (ema) data.ema = models::named_state(ema->model());
    data.rng = rng_state(device);
    data.trainer_json = trainer_state_json(state, recipe);
    save_checkpoint_and_prune(ckpt_root, state.step, data, recipe.checkpoint.keep_last);
    (void)why;
  };

  TrainResult result;
  result.run_dir = run_dir.string();
  StepBreakdown& bd = result.breakdown;
  const auto precision = autocast_dtype(tr.precision);
  std::int64_t samples_done = 0;
  double train_seconds = 0;
  bool stop = false;
  model->train();

  for (std::int64_t epoch = state.epoch; epoch < tr.epochs && !stop; ++epoch) {
    const std::int64_t first_micro = epoch == state.epoch ? state.batch : 0;
    loader.seek({epoch, first_micro});
    std::int64_t step_in_epoch = first_micro / accum;
    ProgressOptions po;
    po.prefix = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(tr.epochs);
    po.initial_step = step_in_epoch;
    std::optional<Progress> progress;
    if (!options.quiet) progress.emplace(steps_per_epoch, out, options.is_tty, po);
    const auto epoch_start = Clock::now();
    std::int64_t epoch_samples = 0;

    while (step_in_epoch < steps_per_epoch) {
      const bool timed = !device.is_cuda() || state.step % 10 == 0;
      trace.set_enabled(!options.trace_path.empty() && state.step >= trace_begin && state.step < trace_end);
      TraceScope step_scope(&trace, "step", "train", {{"step", state.step}});
      double t_data = 0, t_fwd = 0, t_bwd = 0;
      at::Tensor loss_sum;
      std::int64_t step_samples = 0;
      bool ran_out = false;
      for (std::int64_t a = 0; a < accum; ++a) {
        auto t0 = Clock::now();
        std::optional<data::Batch> batch;
        at::Tensor images, labels;
        {
          TraceScope s(&trace, "data", "train");
          batch = loader.next();
          if (!batch) {
            ran_out = true;
            break;
          }
          images = batch->images.to(device, /*non_blocking=*/true);
          labels = batch->labels.to(device, /*non_blocking=*/true);
          if (timed) sync(device);
        }
        auto t1 = Clock::now();
        at::Tensor loss;
        {
          TraceScope s(&trace, "forward", "train");
          ops::AutocastGuard autocast(device.type(), precision);
          const at::Tensor logits = model->forward(images);
          loss = at::cross_entropy_loss(logits, labels, {}, at::Reduction::Mean, -100, tr.label_smoothing);
          if (timed) sync(device);
        }
        auto t2 = Clock::now();
        {
          TraceScope s(&trace, "backward", "train");
          at::Tensor scaled = scaler.scale(accum > 1 ? loss / static_cast<double>(accum) : loss);
          scaled.backward();
          if (timed) sync(device);
        }
        auto t3 = Clock::now();
        t_data += seconds(t0, t1);
        t_fwd += seconds(t1, t2);
        t_bwd += seconds(t2, t3);
        const at::Tensor l = loss.detach().to(at::kFloat);
        loss_sum = loss_sum.defined() ? loss_sum + l : l;
        step_samples += labels.size(0);
      }
      if (ran_out) {
        // Decode-time bad samples made the epoch shorter than planned: drop the partial step.
        optimizer->zero_grad();
        break;
      }

      const auto t3 = Clock::now();
      double grad_norm = -1;
      bool stepped = true;
      {
        TraceScope s(&trace, "optimizer", "train");
        if (tr.clip_grad_norm > 0) {
          scaler.unscale_(*optimizer);
          grad_norm = clip_grad_norm(trainable_tensors, tr.clip_grad_norm);
        }
        schedule.apply(*optimizer, state.step);
        stepped = scaler.step(*optimizer);
        scaler.update();
        optimizer->zero_grad();
        if (ema && stepped) ema->update();
        if (timed) sync(device);
      }
      const auto t4 = Clock::now();
      const double step_loss = loss_sum.item<double>() / static_cast<double>(accum);
      if (timed) {
        bd.data_s += t_data;
        bd.forward_s += t_fwd;
        bd.backward_s += t_bwd;
        bd.optimizer_s += seconds(t3, t4);
        ++bd.steps;
      }
      const double lr = schedule.lr_at(state.step);
      ++state.step;
      ++step_in_epoch;
      state.epoch = epoch;
      state.batch = step_in_epoch * accum;
      samples_done += step_samples;
      epoch_samples += step_samples;
      const double elapsed = seconds(epoch_start, Clock::now());
      const double rate = elapsed > 0 ? static_cast<double>(epoch_samples) / elapsed : 0;

      if (benchmark && state.step == steady_from) {
        steady_start = Clock::now();
        steady_samples_base = samples_done;
      }
      const bool non_finite = !std::isfinite(step_loss);
      if (non_finite && !(scaler.is_enabled() && !stepped)) {
        log_line({{"split", "train"}, {"step", state.step}, {"epoch", epoch}, {"loss", nullptr}, {"lr", lr}});
        if (progress) progress->finish();
        const auto last = latest_checkpoint(ckpt_root.string());
        HOTPATH_CHECK(false, "train: the loss became ", std::isnan(step_loss) ? "NaN" : "infinite", " at step ",
                      state.step, " (epoch ", epoch + 1, ", lr ", lr, "); stopping. Lower optimizer.lr, set "
                      "train.clip_grad_norm, or use fp32. Last checkpoint: ",
                      last ? *last : std::string("none"));
      }
      if (state.step % tr.log_every == 0 || step_in_epoch == steps_per_epoch || state.step == tr.max_steps) {
        json j{{"split", "train"}, {"step", state.step}, {"epoch", epoch}, {"loss", step_loss}, {"lr", lr},
               {"samples_per_s", rate}};
        if (scaler.is_enabled()) j["loss_scale"] = scaler.get_scale();
        if (grad_norm >= 0) j["grad_norm"] = grad_norm;
        if (!stepped) j["skipped"] = true;
        log_line(j);
        add_train_scalars(tb, step_loss, lr, rate, state.step);
      }
      if (progress) progress->update(step_in_epoch, train_fields(step_loss, lr, rate));
      if (step_in_epoch == steps_per_epoch) {
        state.epoch = epoch + 1;
        state.batch = 0;
      }
      const bool at_max = tr.max_steps > 0 && state.step >= tr.max_steps;
      const bool interrupted = options.stop != nullptr && options.stop->load();
      const bool periodic = recipe.checkpoint.every_steps > 0 && state.step % recipe.checkpoint.every_steps == 0;
      if ((periodic || interrupted || at_max) && step_in_epoch < steps_per_epoch) save("step");
      if (interrupted || at_max) {
        result.interrupted = interrupted;
        stop = true;
        break;
      }
    }
    train_seconds += seconds(epoch_start, Clock::now());
    if (progress) progress->finish();
    const bool epoch_done = step_in_epoch >= steps_per_epoch;
    if (!epoch_done) break;
    result.epochs_completed = epoch + 1;

    const bool last_epoch = epoch + 1 == tr.epochs;
    const bool eval_now = !benchmark && !recipe.data.eval.empty() &&
                          (last_epoch || (tr.eval_every > 0 && (epoch + 1) % tr.eval_every == 0));
    if (eval_now) {
      models::ImageClassifier& eval_model = ema ? ema->model() : *model;
      const EvalResult r = run_eval(eval_model);
      result.eval = r;
      log_line({{"split", "eval"}, {"step", state.step}, {"epoch", epoch + 1}, {"top1", r.top1}, {"top5", r.top5},
                {"loss", r.loss}, {"samples", r.samples}});
      add_eval_scalars(tb, r, state.step);
      if (!options.quiet) {
        out << "eval epoch " << epoch + 1 << ": top-1 " << percent(r.top1) << "  top-5 " << percent(r.top5)
            << "  loss " << format_number(r.loss) << (ema ? " (EMA weights)" : "") << "\n";
      }
      const double m = metric_value(r, recipe.checkpoint.metric);
      if (recipe.checkpoint.keep_best &&
          (!state.best_metric || metric_better(recipe.checkpoint.metric, m, *state.best_metric))) {
        state.best_metric = m;
        state.best_step = state.step;
        const fs::path best = run_dir / "best";
        fs::create_directories(best);
        models::save_safetensors(eval_model, (best / "model.safetensors").string());
        infer::ModelPackage bp = package;
        bp.dir = best.string();
        write_file_atomic((best / "model.json").string(), infer::package_to_json(bp));
        write_file_atomic((best / "metrics.json").string(),
                          json{{"step", state.step}, {"epoch", epoch + 1}, {"top1", r.top1}, {"top5", r.top5},
                               {"loss", r.loss}}.dump(2) + "\n");
      }
    }
    const bool ckpt_now = last_epoch || stop ||
                          (recipe.checkpoint.every_epochs > 0 && (epoch + 1) % recipe.checkpoint.every_epochs == 0);
    if (ckpt_now) save("epoch");
    tb.flush();
  }

  if (steady_start) {
    result.steady_steps = state.step - steady_from;
    const double s = seconds(*steady_start, Clock::now());
    result.steady_samples_per_s = s > 0 ? static_cast<double>(samples_done - steady_samples_base) / s : 0;
  }
  // The trained model package: EMA weights when EMA is on (that is what EMA is for).
  if (!benchmark) {
    models::save_safetensors(ema ? static_cast<torch::nn::Module&>(ema->model()) : *model,
                             (run_dir / "model.safetensors").string());
    write_file_atomic((run_dir / "model.json").string(), infer::package_to_json(package));
  }
  write_file_atomic((run_dir / "profile.json").string(), bd.to_json());
  if (!options.trace_path.empty()) trace.write(options.trace_path);
  tb.flush();

  result.steps = state.step;
  result.seconds = seconds(t_start, Clock::now());
  result.samples_per_s = train_seconds > 0 ? static_cast<double>(samples_done) / train_seconds : 0;
  return result;
}

}  // namespace hotpath::train
