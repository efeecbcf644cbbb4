#include "hotpath/train/recipe.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <string_view>
#include <type_traits>
#include <variant>

#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"

namespace hotpath::train {
namespace {

using Allowed = std::vector<const char*>;

constexpr double kMaxCount = 1099511627776.0;  // 2^40: steps, samples, counts far above any real run
constexpr TaskKinds kImage = TaskKinds::kImage;
constexpr TaskKinds kText = TaskKinds::kText;

// The member of a key: a captureless accessor, converted to the function pointer RecipeKey::Field holds.
#define HOTPATH_FIELD(path) (+[](Recipe& r) -> decltype(auto) { return (r.path); })

// The one list of recipe keys. Bounds are the hard ones (far above any real run, far below an overflow or an
// allocation that cannot succeed); validate() adds the checks that relate keys or exclude an end point.
std::vector<RecipeKey> make_table() {
  return {
      {.name = "name", .field = HOTPATH_FIELD(name), .doc = "the run's name (metrics, logs)"},
      {.name = "output_dir", .field = HOTPATH_FIELD(output_dir), .doc = "the run directory"},

      {.name = "model.name", .field = HOTPATH_FIELD(model.name), .doc = "registry model (image) or bert, distilbert (text: read from config.json)"},
      {.name = "model.num_classes", .field = HOTPATH_FIELD(model.num_classes), .doc = "classes of the head", .lo = 1, .hi = 1e6},
      {.name = "model.weights", .field = HOTPATH_FIELD(model.weights), .doc = "safetensors to start from (\"\" = random init)", .kinds = kImage},
      {.name = "model.allow_partial", .field = HOTPATH_FIELD(model.allow_partial), .doc = "with weights: keep missing or mismatched keys (a new head)", .kinds = kImage},
      {.name = "model.freeze", .field = HOTPATH_FIELD(model.freeze), .doc = "parameter-name prefixes that are not trained"},
      {.name = "model.channels_last", .field = HOTPATH_FIELD(model.channels_last), .doc = "NHWC activations (faster convolutions)"},
      {.name = "model.zero_init_residual", .field = HOTPATH_FIELD(model.zero_init_residual), .doc = "ResNet: the last BN of each block starts at 0", .kinds = kImage},
      {.name = "model.sync_batchnorm", .field = HOTPATH_FIELD(model.sync_batchnorm), .doc = "data parallel: BatchNorm statistics over every rank's batch", .kinds = kImage},
      {.name = "model.pretrained", .field = HOTPATH_FIELD(model.pretrained), .doc = "Hugging Face model directory (config.json + weights)", .kinds = kText},
      {.name = "model.attention", .field = HOTPATH_FIELD(model.attention), .doc = "attention kernel", .allowed = {"fused", "reference"}, .kinds = kText},
      {.name = "model.gradient_checkpointing", .field = HOTPATH_FIELD(model.gradient_checkpointing), .doc = "recompute each transformer layer in backward", .kinds = kText},
      {.name = "model.lora_r", .field = HOTPATH_FIELD(model.lora_r), .doc = "LoRA rank, 0 = full fine-tuning", .lo = 0, .hi = 65536, .kinds = kText, .resume = true},
      {.name = "model.lora_alpha", .field = HOTPATH_FIELD(model.lora_alpha), .doc = "LoRA scale numerator (scale = alpha / r)", .kinds = kText},
      {.name = "model.lora_dropout", .field = HOTPATH_FIELD(model.lora_dropout), .doc = "dropout on the LoRA input, in [0, 1)", .lo = 0, .hi = 1, .kinds = kText},
      {.name = "model.lora_target_modules", .field = HOTPATH_FIELD(model.lora_target_modules), .doc = "module names LoRA wraps", .kinds = kText},
      {.name = "model.prefix_tokens", .field = HOTPATH_FIELD(model.prefix_tokens), .doc = "prefix tuning: virtual tokens per layer, 0 = off", .lo = 0, .hi = 4096, .kinds = kText, .resume = true},
      {.name = "model.prefix_projection", .field = HOTPATH_FIELD(model.prefix_projection), .doc = "prefix tuning through PEFT's reparameterisation MLP", .kinds = kText, .resume = true},
      {.name = "model.prefix_hidden", .field = HOTPATH_FIELD(model.prefix_hidden), .doc = "that MLP's width, 0 = the model's hidden size", .lo = 0, .hi = 65536, .kinds = kText},
      {.name = "model.adapter.config", .field = HOTPATH_FIELD(model.adapter.config), .doc = "bottleneck adapters: \"\" = off, seq_bn (pfeiffer) or double_seq_bn (houlsby)", .allowed = {"", "seq_bn", "double_seq_bn", "pfeiffer", "houlsby"}, .kinds = kText, .resume = true},
      {.name = "model.adapter.reduction_factor", .field = HOTPATH_FIELD(model.adapter.reduction_factor), .doc = "bottleneck width = hidden / this", .lo = 1, .hi = 65536, .kinds = kText},
      {.name = "model.adapter.non_linearity", .field = HOTPATH_FIELD(model.adapter.non_linearity), .doc = "\"\" = the preset's", .allowed = {"", "relu", "swish", "gelu", "gelu_new", "tanh"}, .kinds = kText},

      {.name = "data.kind", .field = HOTPATH_FIELD(data.kind), .doc = "the task kind: image or text shards", .allowed = {"image", "text"}},
      {.name = "data.train", .field = HOTPATH_FIELD(data.train), .doc = "training shard patterns (brace ranges, globs)"},
      {.name = "data.eval", .field = HOTPATH_FIELD(data.eval), .doc = "evaluation shard patterns"},
      {.name = "data.image_size", .field = HOTPATH_FIELD(data.image_size), .doc = "input side in pixels", .lo = 8, .hi = 4096, .kinds = kImage},
      {.name = "data.channels", .field = HOTPATH_FIELD(data.channels), .doc = "1 = gray, 3 = RGB", .lo = 1, .hi = 3, .kinds = kImage},
      {.name = "data.train_crop", .field = HOTPATH_FIELD(data.train_crop), .doc = "training crop", .allowed = {"random_resized_crop", "resize"}, .kinds = kImage},
      {.name = "data.scale_min", .field = HOTPATH_FIELD(data.scale_min), .doc = "RandomResizedCrop's smallest area fraction (> 0)", .lo = 0, .hi = 1, .kinds = kImage},
      {.name = "data.scale_max", .field = HOTPATH_FIELD(data.scale_max), .doc = "RandomResizedCrop's largest area fraction", .lo = 0, .hi = 1, .kinds = kImage},
      {.name = "data.eval_crop", .field = HOTPATH_FIELD(data.eval_crop), .doc = "evaluation crop", .allowed = {"resize_center_crop", "resize"}, .kinds = kImage},
      {.name = "data.resize_shorter", .field = HOTPATH_FIELD(data.resize_shorter), .doc = "evaluation Resize before CenterCrop (>= image_size)", .lo = 8, .hi = 8192, .kinds = kImage},
      {.name = "data.flip", .field = HOTPATH_FIELD(data.flip), .doc = "horizontal flip probability (training)", .lo = 0, .hi = 1, .kinds = kImage},
      {.name = "data.translate", .field = HOTPATH_FIELD(data.translate), .doc = "RandomCrop padding in pixels (training)", .lo = 0, .hi = 4096, .kinds = kImage},
      {.name = "data.random_erasing", .field = HOTPATH_FIELD(data.random_erasing), .doc = "RandomErasing probability (training; erased pixels = the mean)", .lo = 0, .hi = 1, .kinds = kImage},
      {.name = "data.mean", .field = HOTPATH_FIELD(data.mean), .doc = "normalisation mean, one per channel", .kinds = kImage},
      {.name = "data.std", .field = HOTPATH_FIELD(data.std), .doc = "normalisation std, one per channel (> 0)", .kinds = kImage},
      {.name = "data.workers", .field = HOTPATH_FIELD(data.workers), .doc = "decode threads", .lo = 1, .hi = 256, .per_rank = true},
      {.name = "data.prefetch", .field = HOTPATH_FIELD(data.prefetch), .doc = "batches decoded ahead", .lo = 1, .hi = 64, .per_rank = true},
      {.name = "data.shuffle_buffer", .field = HOTPATH_FIELD(data.shuffle_buffer), .doc = "samples in the shuffle buffer", .lo = 1, .hi = 16777216, .kinds = kImage},
      {.name = "data.max_bad_samples", .field = HOTPATH_FIELD(data.max_bad_samples), .doc = "corrupt samples skipped before the run fails", .lo = 0, .hi = kMaxCount},
      {.name = "data.decode", .field = HOTPATH_FIELD(data.decode), .doc = "JPEG decode: CPU threads or nvJPEG (train.device: cuda)", .allowed = {"cpu", "nvjpeg"}},
      {.name = "data.augment", .field = HOTPATH_FIELD(data.augment), .doc = "where augmentation runs (auto: the device with nvjpeg)", .allowed = {"auto", "cpu", "device"}},
      {.name = "data.class_names", .field = HOTPATH_FIELD(data.class_names), .doc = "label names (empty: the shards' pack report)"},
      {.name = "data.tokenizer", .field = HOTPATH_FIELD(data.tokenizer), .doc = "tokenizer directory (\"\" = model.pretrained)", .kinds = kText},
      {.name = "data.max_length", .field = HOTPATH_FIELD(data.max_length), .doc = "tokens per sample, special tokens included", .lo = 2, .hi = 65536, .kinds = kText, .resume = true},
      {.name = "data.pad_to_multiple_of", .field = HOTPATH_FIELD(data.pad_to_multiple_of), .doc = "pad each batch's length to a multiple (0 or 1 = off)", .lo = 0, .hi = 65536, .kinds = kText, .resume = true},
      {.name = "data.max_tokens", .field = HOTPATH_FIELD(data.max_tokens), .doc = "token-budget batches (batch x padded length <= this), 0 = fixed batches", .lo = 0, .hi = 1073741824, .kinds = kText, .resume = true},
      {.name = "data.bucket", .field = HOTPATH_FIELD(data.bucket), .doc = "length bucketing (sort within windows, shuffle the batches)", .kinds = kText, .resume = true},

      {.name = "train.epochs", .field = HOTPATH_FIELD(train.epochs), .doc = "passes over data.train", .lo = 1, .hi = 1e6},
      {.name = "train.batch_size", .field = HOTPATH_FIELD(train.batch_size), .doc = "samples per optimizer step, all micro-batches (the loader's batch is batch_size / accum_steps)", .lo = 1, .hi = 1048576, .resume = true},
      {.name = "train.accum_steps", .field = HOTPATH_FIELD(train.accum_steps), .doc = "micro-batches per optimizer step (dividing batch_size)", .lo = 1, .hi = 1048576, .resume = true},
      {.name = "train.precision", .field = HOTPATH_FIELD(train.precision), .doc = "fp32, bf16 autocast, fp16 autocast + loss scaler (CUDA), or auto: bf16 where the device has native bf16 math (AVX512_BF16/AMX, a bf16 GPU), else fp32", .allowed = {"fp32", "bf16", "fp16", "auto"}},
      {.name = "train.label_smoothing", .field = HOTPATH_FIELD(train.label_smoothing), .doc = "in [0, 1)", .lo = 0, .hi = 1},
      {.name = "train.clip_grad_norm", .field = HOTPATH_FIELD(train.clip_grad_norm), .doc = "max global gradient L2 norm, 0 = off", .lo = 0},
      {.name = "train.ema_decay", .field = HOTPATH_FIELD(train.ema_decay), .doc = "EMA of the weights, in [0, 1), 0 = off", .lo = 0, .hi = 1},
      {.name = "train.seed", .field = HOTPATH_FIELD(train.seed), .doc = "seeds the order, augmentation, dropout and init", .resume = true},
      {.name = "train.threads", .field = HOTPATH_FIELD(train.threads), .doc = "LibTorch intra-op threads, 0 = all cores", .lo = 0, .hi = kThreadsBound, .per_rank = true},
      {.name = "train.device", .field = HOTPATH_FIELD(train.device), .doc = "where the model trains", .allowed = {"auto", "cpu", "cuda"}},
      {.name = "train.log_every", .field = HOTPATH_FIELD(train.log_every), .doc = "optimizer steps between metrics lines", .lo = 1, .hi = kMaxCount},
      {.name = "train.eval_every", .field = HOTPATH_FIELD(train.eval_every), .doc = "epochs between evaluations, 0 = only at the end", .lo = 0, .hi = 1e6},
      {.name = "train.max_steps", .field = HOTPATH_FIELD(train.max_steps), .doc = "stop after this many optimizer steps, 0 = all epochs", .lo = 0, .hi = kMaxCount},
      {.name = "train.scaler_init_scale", .field = HOTPATH_FIELD(train.scaler_init_scale), .doc = "fp16 loss scaler's first scale", .lo = 1e-30, .hi = 1e30},
      {.name = "train.scaler_growth_interval", .field = HOTPATH_FIELD(train.scaler_growth_interval), .doc = "fp16: steps without overflow before the scale doubles", .lo = 1, .hi = kMaxCount},
      {.name = "train.dist_timeout_s", .field = HOTPATH_FIELD(train.dist_timeout_s), .doc = "data parallel: the store's and every collective's timeout, seconds", .lo = 0.001, .hi = 86400},
      {.name = "train.ddp_overlap", .field = HOTPATH_FIELD(train.ddp_overlap), .doc = "all-reduce gradient buckets during backward (false: after it)"},
      {.name = "train.ddp_bucket_mb", .field = HOTPATH_FIELD(train.ddp_bucket_mb), .doc = "gradient bucket size after the first (1 MiB) bucket, MiB", .lo = 1, .hi = 4096},
      {.name = "train.zero", .field = HOTPATH_FIELD(train.zero), .doc = "data parallel: 0 DDP, 1 ZeRO-1 (optimizer state sharded), 2 ZeRO-2 (+ gradients)", .lo = 0, .hi = 2},

      {.name = "optimizer.name", .field = HOTPATH_FIELD(optimizer.name), .doc = "the optimizer", .allowed = {"sgd", "adamw"}},
      {.name = "optimizer.lr", .field = HOTPATH_FIELD(optimizer.lr), .doc = "peak learning rate (> 0)", .lo = 1e-300, .hi = 1e30},
      {.name = "optimizer.weight_decay", .field = HOTPATH_FIELD(optimizer.weight_decay), .doc = "decoupled (adamw) or L2 (sgd) weight decay"},
      {.name = "optimizer.no_decay_norm_bias", .field = HOTPATH_FIELD(optimizer.no_decay_norm_bias), .doc = "no weight decay on norms and biases"},
      {.name = "optimizer.momentum", .field = HOTPATH_FIELD(optimizer.momentum), .doc = "sgd momentum"},
      {.name = "optimizer.dampening", .field = HOTPATH_FIELD(optimizer.dampening), .doc = "sgd dampening"},
      {.name = "optimizer.nesterov", .field = HOTPATH_FIELD(optimizer.nesterov), .doc = "sgd Nesterov momentum"},
      {.name = "optimizer.beta1", .field = HOTPATH_FIELD(optimizer.beta1), .doc = "adamw beta1"},
      {.name = "optimizer.beta2", .field = HOTPATH_FIELD(optimizer.beta2), .doc = "adamw beta2"},
      {.name = "optimizer.eps", .field = HOTPATH_FIELD(optimizer.eps), .doc = "adamw epsilon"},

      {.name = "schedule.name", .field = HOTPATH_FIELD(schedule.name), .doc = "learning-rate schedule", .allowed = {"constant", "warmup_cosine", "step", "one_cycle"}},
      {.name = "schedule.warmup_epochs", .field = HOTPATH_FIELD(schedule.warmup_epochs), .doc = "linear warmup length, epochs", .lo = 0, .hi = 1e6},
      {.name = "schedule.warmup_start_factor", .field = HOTPATH_FIELD(schedule.warmup_start_factor), .doc = "warmup starts at lr x this"},
      {.name = "schedule.min_lr", .field = HOTPATH_FIELD(schedule.min_lr), .doc = "warmup_cosine: the final learning rate"},
      {.name = "schedule.step_epochs", .field = HOTPATH_FIELD(schedule.step_epochs), .doc = "step: decay every this many epochs", .lo = 1e-9, .hi = 1e6},
      {.name = "schedule.gamma", .field = HOTPATH_FIELD(schedule.gamma), .doc = "step: decay factor"},
      {.name = "schedule.pct_start", .field = HOTPATH_FIELD(schedule.pct_start), .doc = "one_cycle: fraction of the run spent rising"},
      {.name = "schedule.div_factor", .field = HOTPATH_FIELD(schedule.div_factor), .doc = "one_cycle: initial lr = lr / this"},
      {.name = "schedule.final_div_factor", .field = HOTPATH_FIELD(schedule.final_div_factor), .doc = "one_cycle: final lr = initial lr / this"},
      {.name = "schedule.cycle_momentum", .field = HOTPATH_FIELD(schedule.cycle_momentum), .doc = "one_cycle: momentum cycles inversely to the lr"},
      {.name = "schedule.base_momentum", .field = HOTPATH_FIELD(schedule.base_momentum), .doc = "one_cycle: lowest momentum"},
      {.name = "schedule.max_momentum", .field = HOTPATH_FIELD(schedule.max_momentum), .doc = "one_cycle: highest momentum"},

      {.name = "checkpoint.every_epochs", .field = HOTPATH_FIELD(checkpoint.every_epochs), .doc = "epochs between checkpoints, 0 = only at the end", .lo = 0, .hi = 1e6},
      {.name = "checkpoint.every_steps", .field = HOTPATH_FIELD(checkpoint.every_steps), .doc = "also every N optimizer steps, 0 = off", .lo = 0, .hi = kMaxCount},
      {.name = "checkpoint.keep_last", .field = HOTPATH_FIELD(checkpoint.keep_last), .doc = "checkpoints kept", .lo = 1, .hi = 1e6},
      {.name = "checkpoint.keep_best", .field = HOTPATH_FIELD(checkpoint.keep_best), .doc = "best/ holds the weights with the best eval metric"},
      {.name = "checkpoint.metric", .field = HOTPATH_FIELD(checkpoint.metric), .doc = "the metric best/ follows", .allowed = {"top1", "top5", "loss"}},
  };
}
#undef HOTPATH_FIELD

std::vector<std::string> split_dots(std::string_view key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    parts.emplace_back(key.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

std::string format_double(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  // Keep it a float in YAML's eyes (1 → 1.0) so the type reads back the same.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Reads values from a YAML tree, checking each type; records where each key came from.
class Reader {
 public:
  Reader(YAML::Node root, std::string source, std::set<std::string> overridden)
      : root_(std::move(root)), source_(std::move(source)), overridden_(std::move(overridden)) {}

  void operator()(const char* key, std::string& value, const Allowed& allowed) {
    const YAML::Node n = find(key);
    if (!n) return;
    HOTPATH_CHECK(n.IsScalar(), where(n, key), ": expected a string, got a ", kind(n));
    value = n.Scalar();
    if (allowed.size() != 0) {
      const bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return value == a; });
      std::vector<std::string> names(allowed.begin(), allowed.end());
      HOTPATH_CHECK(ok, where(n, key), ": '", value, "' is not one of: ", join(names, ", "));
    }
  }
  void operator()(const char* key, bool& value, const Allowed& /*allowed*/) { scalar(key, value, "a boolean (true/false)"); }
  void operator()(const char* key, std::int64_t& value, const Allowed& /*allowed*/) { scalar(key, value, "an integer"); }
  void operator()(const char* key, std::uint64_t& value, const Allowed& /*allowed*/) {
    scalar(key, value, "a non-negative integer");
  }
  void operator()(const char* key, double& value, const Allowed& /*allowed*/) {
    scalar(key, value, "a number");
    if (const YAML::Node n = find(key)) {
      HOTPATH_CHECK(std::isfinite(value), where(n, key), ": expected a finite number, got '", n.Scalar(), "'");
    }
  }
  void operator()(const char* key, std::vector<std::string>& value, const Allowed& /*allowed*/) { list(key, value, "strings"); }
  void operator()(const char* key, std::vector<double>& value, const Allowed& /*allowed*/) {
    list(key, value, "numbers");
    if (const YAML::Node n = find(key)) {
      HOTPATH_CHECK(value.size() <= 64, where(n, key), ": expected at most 64 numbers, got ", value.size());
      for (std::size_t i = 0; i < value.size(); ++i) {
        HOTPATH_CHECK(std::isfinite(value[i]), where(n, key), "[", i, "]: expected a finite number");
      }
    }
  }

 private:
  // The node at a dotted key, or an invalid node when absent.
  YAML::Node find(const std::string& key) const {
    YAML::Node node = root_;
    for (const std::string& part : split_dots(key)) {
      if (!node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      const YAML::Node& cnode = node;  // const lookups: a missing key must not be created
      YAML::Node next = cnode[part];
      if (!next) return YAML::Node(YAML::NodeType::Undefined);
      node.reset(next);
    }
    if (node.IsNull()) return YAML::Node(YAML::NodeType::Undefined);  // `key:` with no value keeps the default
    return node;
  }

  std::string where(const YAML::Node& n, const std::string& key) const {
    const YAML::Mark mark = n.Mark();
    if (mark.is_null() || overridden_.count(key) != 0) return source_ + ": " + key + " (from --set)";
    return source_ + ":" + std::to_string(mark.line + 1) + ": " + key;
  }

  static const char* kind(const YAML::Node& n) {
    if (n.IsMap()) return "mapping";
    if (n.IsSequence()) return "list";
    return "scalar";
  }

  template <class T>
  void scalar(const std::string& key, T& value, const char* expected) {
    const YAML::Node n = find(key);
    if (!n) return;
    HOTPATH_CHECK(n.IsScalar(), where(n, key), ": expected ", expected, ", got a ", kind(n));
    try {
      value = n.as<T>();
    } catch (const YAML::Exception&) {
      HOTPATH_CHECK(false, where(n, key), ": expected ", expected, ", got '", n.Scalar(), "'");
    }
  }

  template <class T>
  void list(const std::string& key, std::vector<T>& value, const char* expected) {
    const YAML::Node n = find(key);
    if (!n) return;
    std::vector<T> out;
    if (std::is_same_v<T, std::string> && n.IsScalar()) {
      // One shard pattern or name needs no brackets: `train: a-{000..009}.tar`.
      if constexpr (std::is_same_v<T, std::string>) out.push_back(n.Scalar());
    } else {
      HOTPATH_CHECK(n.IsSequence(), where(n, key), ": expected a list of ", expected, ", got a ", kind(n));
      for (std::size_t i = 0; i < n.size(); ++i) {
        const YAML::Node item = n[i];
        HOTPATH_CHECK(item.IsScalar(), where(item, key), "[", i, "]: expected one of ", expected, ", got a ",
                      kind(item));
        try {
          out.push_back(item.as<T>());
        } catch (const YAML::Exception&) {
          HOTPATH_CHECK(false, where(item, key), "[", i, "]: expected one of ", expected, ", got '", item.Scalar(),
                        "'");
        }
      }
    }
    value = std::move(out);
  }

  YAML::Node root_;
  std::string source_;
  std::set<std::string> overridden_;  // keys set by --set: their marks point into the --set text
};

// Builds the YAML tree of a recipe, keys in visit order.
class Writer {
 public:
  template <class T>
  void operator()(const char* key, const T& value) {
    const auto parts = split_dots(key);
    YAML::Node node = root_;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node child = node[parts[i]];
      node.reset(child);
    }
    node[parts.back()] = encode(value);
  }
  [[nodiscard]] const YAML::Node& root() const { return root_; }

 private:
  static YAML::Node encode(const std::string& v) { return YAML::Node(v); }
  static YAML::Node encode(bool v) { return YAML::Node(v ? "true" : "false"); }
  static YAML::Node encode(std::int64_t v) { return YAML::Node(std::to_string(v)); }
  static YAML::Node encode(std::uint64_t v) { return YAML::Node(std::to_string(v)); }
  static YAML::Node encode(double v) { return YAML::Node(format_double(v)); }
  template <class T>
  static YAML::Node encode(const std::vector<T>& v) {
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const auto& x : v) seq.push_back(encode(x));
    seq.SetStyle(YAML::EmitterStyle::Flow);
    return seq;
  }
  YAML::Node root_{YAML::NodeType::Map};
};

// Every key in the tree that no visit names: "model.nmae" → error listing the section's keys.
void check_unknown_keys(const YAML::Node& root, const std::vector<std::string>& keys, const std::string& source,
                        const std::set<std::string>& overridden) {
  HOTPATH_CHECK(root.IsMap() || root.IsNull(), source, ": a recipe must be a mapping of sections, got ",
                root.IsSequence() ? "a list" : "a scalar");
  const std::set<std::string> known(keys.begin(), keys.end());
  // Sections at any depth: every proper dotted prefix of a key ("model", "model.adapter").
  std::set<std::string> sections;
  for (const auto& k : keys) {
    for (auto dot = k.find('.'); dot != std::string::npos; dot = k.find('.', dot + 1)) sections.insert(k.substr(0, dot));
  }
  // The names directly inside `prefix` ("" = the top level): its keys and its sub-sections.
  const auto allowed_in = [&](const std::string& prefix) {
    std::vector<std::string> names;
    const std::string head = prefix.empty() ? "" : prefix + ".";
    for (const auto& k : keys) {
      if (k.rfind(head, 0) == 0) names.push_back(k.substr(head.size()));
    }
    if (prefix.empty()) {
      names.erase(std::remove_if(names.begin(), names.end(), [](const std::string& n) { return n.find('.') != std::string::npos; }),
                  names.end());
      for (const auto& sec : sections) {
        if (sec.find('.') == std::string::npos) names.push_back(sec);
      }
    }
    return join(names, ", ");
  };
  const auto where = [&](const YAML::Node& n, const std::string& key) {
    const YAML::Mark mark = n.Mark();
    return mark.is_null() || overridden.count(key) != 0 ? source + " (from --set)"
                                                          : source + ":" + std::to_string(mark.line + 1);
  };
  if (root.IsNull()) return;
  // Walks a section's mapping: every key must be a known key or a known sub-section (itself a mapping).
  const auto walk = [&](const auto& self, const YAML::Node& node, const std::string& prefix) -> void {
    for (const auto& kv : node) {
      const std::string key = (prefix.empty() ? "" : prefix + ".") + kv.first.as<std::string>();
      if (known.count(key) != 0) continue;
      if (sections.count(key) != 0) {
        if (kv.second.IsNull()) continue;
        HOTPATH_CHECK(kv.second.IsMap(), where(kv.second, key), ": ", key, ": expected a mapping of keys (",
                      allowed_in(key), ")");
        self(self, kv.second, key);
        continue;
      }
      HOTPATH_CHECK(false, where(kv.first, key), ": unknown key '", key, "'; ",
                    prefix.empty() ? std::string("a recipe") : prefix, " accepts: ", allowed_in(prefix));
    }
  };
  walk(walk, root, "");
}

// Applies "a.b.c=value" to the tree (value parsed as YAML, so numbers, booleans and [lists] work);
// returns the dotted key.
std::string apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  HOTPATH_CHECK(eq != std::string::npos && eq > 0, "--set '", assignment, "': expected key=value, e.g. train.epochs=5");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    HOTPATH_CHECK(false, "--set ", key, ": cannot parse '", text, "' as a YAML value: ", e.msg);
  }
  if (!value.IsDefined() || value.IsNull()) value = YAML::Node(text);
  const auto parts = split_dots(key);
  YAML::Node node = root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node child = node[parts[i]];
    if (!child.IsMap()) child = YAML::Node(YAML::NodeType::Map);
    node[parts[i]] = child;
    node.reset(node[parts[i]]);
  }
  node[parts.back()] = YAML::Clone(value);
  return key;
}

void check_range(bool ok, const Recipe& r, const char* key, const std::string& expected) {
  HOTPATH_CHECK(ok, r.source, ": ", key, ": expected ", expected);
}

// Calls fn(row, member) for every row of the table, the member typed (std::int64_t&, std::string&, ...).
template <class Fn>
void for_each_key(const std::vector<RecipeKey>& table, Recipe& r, Fn&& fn) {
  for (const RecipeKey& k : table) std::visit([&](auto field) { fn(k, field(r)); }, k.field);
}

std::int64_t int_bound(double b) {
  if (b == kThreadsBound) return max_threads();
  if (b <= -9.2e18) return std::numeric_limits<std::int64_t>::min();
  if (b >= 9.2e18) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(b);
}

// Each row's bounds: every integer and double has them where it becomes a count of steps, samples or
// threads, a size or a probability.
void check_bounds(const std::vector<RecipeKey>& table, Recipe& r) {
  for_each_key(table, r, [&](const RecipeKey& k, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::int64_t>) {
      check_int_in(v, int_bound(k.lo), int_bound(k.hi), r.source + ": " + k.name);
    } else if constexpr (std::is_same_v<T, double>) {
      if (std::isfinite(k.lo) || std::isfinite(k.hi)) check_double_in(v, k.lo, k.hi, r.source + ": " + k.name);
    }
  });
}

// The checks a row cannot say: relations between keys, open end points, one value inside a range.
void validate(const Recipe& r) {
  const auto& d = r.data;
  const auto& t = r.train;
  const auto& m = r.model;
  check_range(!m.name.empty(), r, "model.name", "a model name");
  check_range(d.channels == 1 || d.channels == 3, r, "data.channels", "1 or 3, got " + std::to_string(d.channels));
  check_range(d.scale_min > 0 && d.scale_min <= d.scale_max, r, "data.scale_min/scale_max",
              "0 < scale_min <= scale_max <= 1");
  check_range(d.translate < d.image_size, r, "data.translate", "in [0, image_size)");
  check_range(d.resize_shorter >= d.image_size, r, "data.resize_shorter", ">= data.image_size");
  check_range(d.mean.size() == static_cast<std::size_t>(d.channels), r, "data.mean",
              std::to_string(d.channels) + " values (one per channel)");
  check_range(d.std.size() == static_cast<std::size_t>(d.channels), r, "data.std",
              std::to_string(d.channels) + " values (one per channel)");
  check_range(std::all_of(d.std.begin(), d.std.end(), [](double s) { return s > 0; }), r, "data.std",
              "positive values");
  check_range(m.lora_r == 0 || m.lora_alpha > 0, r, "model.lora_alpha", "> 0");
  check_range(m.lora_dropout < 1, r, "model.lora_dropout", "in [0, 1)");
  check_range(m.lora_r == 0 || !m.lora_target_modules.empty(), r, "model.lora_target_modules",
              "at least one module name (e.g. [query, value])");
  const bool adapter = !m.adapter.config.empty();
  check_range(!adapter || (m.lora_r == 0 && m.prefix_tokens == 0), r, "model.adapter.config",
              "left out with model.lora_r or model.prefix_tokens (one of LoRA, prefix tuning, adapters)");
  check_range(adapter || (m.adapter.reduction_factor == 16.0 && m.adapter.non_linearity.empty()), r,
              "model.adapter.config", "a preset (seq_bn or double_seq_bn) with the other model.adapter keys");
  check_range(m.prefix_tokens == 0 || m.lora_r == 0, r, "model.prefix_tokens",
              "0 with model.lora_r > 0 (LoRA or prefix tuning, not both)");
  check_range(m.prefix_tokens > 0 || (!m.prefix_projection && m.prefix_hidden == 0), r,
              m.prefix_projection ? "model.prefix_projection" : "model.prefix_hidden",
              "left out without model.prefix_tokens (prefix tuning is off)");
  check_range(m.prefix_projection || m.prefix_hidden == 0, r, "model.prefix_hidden",
              "left out without model.prefix_projection: true (it is the reparameterisation MLP's width)");
  check_range(d.kind != "text" || !m.pretrained.empty(), r, "model.pretrained",
              "a Hugging Face model directory (config.json + weights) for data.kind: text");
  check_range(d.max_tokens == 0 || d.max_tokens >= d.max_length, r, "data.max_tokens",
              "0 (off) or >= data.max_length");
  check_range(d.decode == "cpu" || d.augment != "cpu", r, "data.augment",
              "auto or device with data.decode: nvjpeg (the images are decoded on the GPU)");
  check_range(d.kind == "image" || (d.decode == "cpu" && d.augment == "auto"), r,
              d.decode != "cpu" ? "data.decode" : "data.augment", "left out for data.kind: text (images only)");
  check_range(t.batch_size % t.accum_steps == 0, r, "train.accum_steps",
              ">= 1 and dividing train.batch_size (" + std::to_string(t.batch_size) + "), got " +
                  std::to_string(t.accum_steps));
  check_range(t.label_smoothing < 1, r, "train.label_smoothing", "in [0, 1)");
  check_range(t.ema_decay < 1, r, "train.ema_decay", "in [0, 1) (0 = off)");
  check_range(!r.output_dir.empty(), r, "output_dir", "a directory");
}

const char* kind_name(TaskKinds k) {
  return k == TaskKinds::kImage ? "image" : k == TaskKinds::kText ? "text" : "all";
}

TaskKinds kind_of(const Recipe& r) { return r.data.kind == "text" ? TaskKinds::kText : TaskKinds::kImage; }

}  // namespace

const std::vector<RecipeKey>& recipe_table() {
  static const std::vector<RecipeKey> table = make_table();
  return table;
}

std::vector<std::string> recipe_keys() {
  std::vector<std::string> keys;
  for (const RecipeKey& k : recipe_table()) keys.emplace_back(k.name);
  return keys;
}

void check_task_keys(const Recipe& recipe, const std::vector<RecipeKey>& table) {
  const TaskKinds mine = kind_of(recipe);
  const TaskKinds other = mine == TaskKinds::kText ? TaskKinds::kImage : TaskKinds::kText;
  Recipe r = recipe;
  Recipe defaults;
  for (const RecipeKey& k : table) {
    if (k.kinds != other) continue;
    // Set to anything but its default: the task would ignore it, so it is refused.
    const bool set = std::visit([&](auto field) { return field(r) != field(defaults); }, k.field);
    HOTPATH_CHECK(!set, recipe.source, ": ", k.name, " applies to ", kind_name(other),
                  " recipes; this one has data.kind ", recipe.data.kind, " (remove the key)");
  }
}

nlohmann::ordered_json resume_values(const Recipe& recipe, const std::vector<RecipeKey>& table) {
  const TaskKinds mine = kind_of(recipe);
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  Recipe r = recipe;
  for (const RecipeKey& k : table) {
    if (!k.resume || (k.kinds != TaskKinds::kAll && k.kinds != mine)) continue;
    std::visit(
        [&](auto field) {
          const auto& v = field(r);
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
            out[k.name] = v ? 1 : 0;  // as checkpoints have always recorded them
          } else if constexpr (std::is_same_v<T, std::string> || std::is_arithmetic_v<T>) {
            out[k.name] = v;
          } else {
            HOTPATH_CHECK(false, "recipe table: ", k.name, ": a list cannot be a resume key");
          }
        },
        k.field);
  }
  return out;
}

namespace {

std::string type_name(const RecipeKey::Field& f) {
  static const char* const kNames[] = {"string", "boolean", "integer", "integer >= 0", "number", "list of strings",
                                       "list of numbers"};
  return kNames[f.index()];
}

std::string value_text(const std::string& v) { return "\"" + v + "\""; }
std::string value_text(bool v) { return v ? "true" : "false"; }
std::string value_text(std::int64_t v) { return std::to_string(v); }
std::string value_text(std::uint64_t v) { return std::to_string(v); }
std::string value_text(double v) { return format_double(v); }
template <class T>
std::string value_text(const std::vector<T>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + value_text(x);
  return "[" + out + "]";
}

std::string bound_text(double b, bool integer) {
  if (b == kThreadsBound) return "max_threads (8 x cores, >= 64)";
  if (integer) return std::to_string(int_bound(b));
  return format_double(b);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> shared_recipe_values(const Recipe& recipe) {
  std::vector<std::pair<std::string, std::string>> out;
  Recipe r = recipe;
  for_each_key(recipe_table(), r, [&](const RecipeKey& k, const auto& v) {
    if (!k.per_rank) out.emplace_back(k.name, value_text(v));
  });
  return out;
}

std::string recipe_help(const std::vector<RecipeKey>& table) {
  for (const RecipeKey& k : table) {  // a '|' would end a Markdown cell
    HOTPATH_CHECK(std::string_view(k.doc).find('|') == std::string_view::npos, "recipe table: ", k.name,
                  ": its doc holds a '|'");
  }
  std::string out = "| key | type | default | range or choices | task | resume | what |\n|---|---|---|---|---|---|---|\n";
  Recipe defaults;
  for (const RecipeKey& k : table) {
    std::string range;
    std::visit(
        [&](auto field) {
          const auto& v = field(defaults);
          using T = std::decay_t<decltype(v)>;
          out += std::string("| `") + k.name + "` | " + type_name(k.field) + " | `" + value_text(v) + "` | ";
          if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>) {
            const bool integer = std::is_same_v<T, std::int64_t>;
            if (std::isfinite(k.lo) || std::isfinite(k.hi)) {
              range = "[" + (std::isfinite(k.lo) ? bound_text(k.lo, integer) : std::string("-inf")) + ", " +
                      (std::isfinite(k.hi) ? bound_text(k.hi, integer) : std::string("inf")) + "]";
            }
          }
        },
        k.field);
    for (const char* a : k.allowed) range += (range.empty() ? "" : ", ") + value_text(std::string(a));
    out += range + " | " + kind_name(k.kinds) + " | " + (k.resume ? "yes" : "") + " | " + k.doc + " |\n";
  }
  return out;
}

namespace {

// yaml-cpp accepts a double-quoted scalar that runs to the end of the file ("abc<EOF> reads as
// "abc "); find the closing quote ourselves from the scalar's mark.
bool quoted_scalar_closed(const std::string& text, std::size_t pos) {
  const char quote = text[pos];
  for (std::size_t i = pos + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is an escaped quote inside a single-quoted scalar
        continue;
      }
      return true;
    }
  }
  return false;
}

// What yaml-cpp lets through and a recipe must not: a key given twice in one mapping (yaml-cpp keeps
// both, lookups see the first), an unterminated quoted scalar. Iterative: depth is yaml-cpp's bound.
void check_strict_yaml(const YAML::Node& root, const std::string& text, const std::string& source) {
  std::vector<YAML::Node> stack{root};
  // An alias repeats its anchor's node (same mark); `&a [*a]` even makes a cycle: visit each once.
  std::set<int> visited;
  while (!stack.empty()) {
    const YAML::Node node = stack.back();
    stack.pop_back();
    if ((node.IsMap() || node.IsSequence()) && !node.Mark().is_null() && !visited.insert(node.Mark().pos).second) {
      continue;
    }
    if (node.IsScalar()) {
      const YAML::Mark mark = node.Mark();
      if (node.Tag() == "!" && !mark.is_null() && static_cast<std::size_t>(mark.pos) < text.size() &&
          (text[mark.pos] == '"' || text[mark.pos] == '\'')) {
        HOTPATH_CHECK(quoted_scalar_closed(text, static_cast<std::size_t>(mark.pos)), source, ":", mark.line + 1, ":",
                      mark.column + 1, ": invalid YAML: quoted scalar not closed before the end of the file");
      }
    } else if (node.IsMap()) {
      std::set<std::string> keys;
      for (const auto& kv : node) {
        if (kv.first.IsScalar()) {
          const YAML::Mark mark = kv.first.Mark();
          HOTPATH_CHECK(keys.insert(kv.first.Scalar()).second, source, ":", mark.line + 1, ": invalid YAML: key '",
                        printable(kv.first.Scalar()), "' given twice in one mapping");
        }
        stack.push_back(kv.first);
        stack.push_back(kv.second);
      }
    } else if (node.IsSequence()) {
      for (const auto& item : node) stack.push_back(item);
    }
  }
}

// The 1-based line of a second YAML document in `text`, or 0: a `---` line after content, or content after
// a `...` line. A text scan, because yaml-cpp's LoadAll loops forever on some malformed inputs (found by
// fuzz_recipe: a comment line, then a line starting with ',') while Load stops at the first document.
std::size_t second_document_line(const std::string& text) {
  bool content = false, ended = false;
  std::size_t line_no = 0, second_marker = 0;
  for (std::size_t pos = 0; pos <= text.size();) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line(text.data() + pos, end - pos);
    ++line_no;
    const auto marker = [&](std::string_view m) {
      return line.substr(0, 3) == m && (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    };
    const std::size_t first = line.find_first_not_of(" \t\r");
    const bool blank = first == std::string_view::npos || line[first] == '#';
    const std::size_t after = marker("---") ? line.find_first_not_of(" \t\r", 3) : std::string_view::npos;
    const bool inline_content = after != std::string_view::npos && line[after] != '#';
    if (marker("---")) {
      if (content || ended) {
        if (inline_content) return line_no;
        second_marker = second_marker == 0 ? line_no : second_marker;
        ended = true;  // the next content line is the second document's
      }
      content = content || inline_content;
    } else if (marker("...")) {
      ended = true;
    } else if (!blank && line[0] != '%') {
      if (ended) return line_no;
      content = true;
    }
    pos = end + 1;
  }
  return second_marker;  // a marker with nothing after it: an empty second document
}

YAML::Node load_strict_yaml(const std::string& text, const std::string& source) {
  const std::size_t second = second_document_line(text);
  HOTPATH_CHECK(second == 0, source, ":", second,
                ": invalid YAML: a second document (after '---' or '...'); a recipe is one document");
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    HOTPATH_CHECK(false, source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": invalid YAML: ", e.msg);
  }
  if (!doc.IsDefined()) return YAML::Node();
  check_strict_yaml(doc, text, source);
  return doc;
}

Recipe parse_recipe_unguarded(const std::vector<RecipeKey>& table, const std::string& yaml_text,
                              const std::vector<std::string>& overrides, const std::string& source) {
  YAML::Node root = load_strict_yaml(yaml_text, source);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  std::set<std::string> overridden;
  for (const auto& o : overrides) overridden.insert(apply_override(root, o));
  std::vector<std::string> keys;
  for (const RecipeKey& k : table) keys.emplace_back(k.name);
  check_unknown_keys(root, keys, source, overridden);
  Recipe recipe;
  recipe.source = source;
  Reader reader(root, source, overridden);
  for_each_key(table, recipe, [&](const RecipeKey& k, auto& value) { reader(k.name, value, k.allowed); });
  check_bounds(table, recipe);
  validate(recipe);
  return recipe;
}

}  // namespace

Recipe parse_recipe(const std::string& yaml_text, const std::vector<std::string>& overrides,
                    const std::string& source) {
  return parse_recipe_with(recipe_table(), yaml_text, overrides, source);
}

Recipe parse_recipe_with(const std::vector<RecipeKey>& table, const std::string& yaml_text,
                         const std::vector<std::string>& overrides, const std::string& source) {
  try {
    return parse_recipe_unguarded(table, yaml_text, overrides, source);
  } catch (const YAML::Exception& e) {
    // Whatever yaml-cpp still objects to (odd keys such as `? [a]: 1`, nesting too deep) is one line too.
    HOTPATH_CHECK(false, source, ": invalid recipe: ", e.what());
  }
  return {};
}

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_recipe(read_file(path, read_limit::kRecipe, "recipe"), overrides, path);
}

std::string to_yaml(const Recipe& recipe) {
  Writer writer;
  Recipe r = recipe;
  for_each_key(recipe_table(), r, [&](const RecipeKey& k, const auto& value) { writer(k.name, value); });
  YAML::Emitter out;
  out << writer.root();
  return std::string(out.c_str()) + "\n";
}

}  // namespace hotpath::train
