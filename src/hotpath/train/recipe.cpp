#include "hotpath/train/recipe.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <set>
#include <string_view>
#include <type_traits>

#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"

namespace hotpath::train {
namespace {

using Allowed = std::initializer_list<const char*>;

// The one list of recipe keys. V is called as v("section.key", member) or with the allowed values
// of a string choice; Reader, Writer and KeyLister give it meaning.
template <class R, class V>
void visit_recipe(R& r, V& v) {
  v("name", r.name);
  v("output_dir", r.output_dir);

  auto& m = r.model;
  v("model.name", m.name);
  v("model.num_classes", m.num_classes);
  v("model.weights", m.weights);
  v("model.allow_partial", m.allow_partial);
  v("model.freeze", m.freeze);
  v("model.channels_last", m.channels_last);
  v("model.zero_init_residual", m.zero_init_residual);
  v("model.sync_batchnorm", m.sync_batchnorm);
  v("model.pretrained", m.pretrained);
  v("model.attention", m.attention, Allowed{"fused", "reference"});
  v("model.gradient_checkpointing", m.gradient_checkpointing);
  v("model.lora_r", m.lora_r);
  v("model.lora_alpha", m.lora_alpha);
  v("model.lora_dropout", m.lora_dropout);
  v("model.lora_target_modules", m.lora_target_modules);
  v("model.prefix_tokens", m.prefix_tokens);
  v("model.prefix_projection", m.prefix_projection);
  v("model.prefix_hidden", m.prefix_hidden);
  v("model.adapter.config", m.adapter.config, Allowed{"", "seq_bn", "double_seq_bn", "pfeiffer", "houlsby"});
  v("model.adapter.reduction_factor", m.adapter.reduction_factor);
  v("model.adapter.non_linearity", m.adapter.non_linearity, Allowed{"", "relu", "swish", "gelu", "gelu_new", "tanh"});

  auto& d = r.data;
  v("data.kind", d.kind, Allowed{"image", "text"});
  v("data.train", d.train);
  v("data.eval", d.eval);
  v("data.image_size", d.image_size);
  v("data.channels", d.channels);
  v("data.train_crop", d.train_crop, Allowed{"random_resized_crop", "resize"});
  v("data.scale_min", d.scale_min);
  v("data.scale_max", d.scale_max);
  v("data.eval_crop", d.eval_crop, Allowed{"resize_center_crop", "resize"});
  v("data.resize_shorter", d.resize_shorter);
  v("data.flip", d.flip);
  v("data.translate", d.translate);
  v("data.mean", d.mean);
  v("data.std", d.std);
  v("data.workers", d.workers);
  v("data.prefetch", d.prefetch);
  v("data.shuffle_buffer", d.shuffle_buffer);
  v("data.max_bad_samples", d.max_bad_samples);
  v("data.decode", d.decode, Allowed{"cpu", "nvjpeg"});
  v("data.augment", d.augment, Allowed{"auto", "cpu", "device"});
  v("data.class_names", d.class_names);
  v("data.tokenizer", d.tokenizer);
  v("data.max_length", d.max_length);
  v("data.pad_to_multiple_of", d.pad_to_multiple_of);
  v("data.max_tokens", d.max_tokens);
  v("data.bucket", d.bucket);

  auto& t = r.train;
  v("train.epochs", t.epochs);
  v("train.batch_size", t.batch_size);
  v("train.accum_steps", t.accum_steps);
  v("train.precision", t.precision, Allowed{"fp32", "bf16", "fp16"});
  v("train.label_smoothing", t.label_smoothing);
  v("train.clip_grad_norm", t.clip_grad_norm);
  v("train.ema_decay", t.ema_decay);
  v("train.seed", t.seed);
  v("train.threads", t.threads);
  v("train.device", t.device, Allowed{"auto", "cpu", "cuda"});
  v("train.log_every", t.log_every);
  v("train.eval_every", t.eval_every);
  v("train.max_steps", t.max_steps);
  v("train.scaler_init_scale", t.scaler_init_scale);
  v("train.scaler_growth_interval", t.scaler_growth_interval);
  v("train.dist_timeout_s", t.dist_timeout_s);
  v("train.ddp_overlap", t.ddp_overlap);
  v("train.ddp_bucket_mb", t.ddp_bucket_mb);
  v("train.zero", t.zero);

  auto& o = r.optimizer;
  v("optimizer.name", o.name, Allowed{"sgd", "adamw"});
  v("optimizer.lr", o.lr);
  v("optimizer.weight_decay", o.weight_decay);
  v("optimizer.no_decay_norm_bias", o.no_decay_norm_bias);
  v("optimizer.momentum", o.momentum);
  v("optimizer.dampening", o.dampening);
  v("optimizer.nesterov", o.nesterov);
  v("optimizer.beta1", o.beta1);
  v("optimizer.beta2", o.beta2);
  v("optimizer.eps", o.eps);

  auto& s = r.schedule;
  v("schedule.name", s.name, Allowed{"constant", "warmup_cosine", "step", "one_cycle"});
  v("schedule.warmup_epochs", s.warmup_epochs);
  v("schedule.warmup_start_factor", s.warmup_start_factor);
  v("schedule.min_lr", s.min_lr);
  v("schedule.step_epochs", s.step_epochs);
  v("schedule.gamma", s.gamma);
  v("schedule.pct_start", s.pct_start);
  v("schedule.div_factor", s.div_factor);
  v("schedule.final_div_factor", s.final_div_factor);
  v("schedule.cycle_momentum", s.cycle_momentum);
  v("schedule.base_momentum", s.base_momentum);
  v("schedule.max_momentum", s.max_momentum);

  auto& c = r.checkpoint;
  v("checkpoint.every_epochs", c.every_epochs);
  v("checkpoint.every_steps", c.every_steps);
  v("checkpoint.keep_last", c.keep_last);
  v("checkpoint.keep_best", c.keep_best);
  v("checkpoint.metric", c.metric, Allowed{"top1", "top5", "loss"});
}

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

struct KeyLister {
  std::vector<std::string> keys;
  template <class T>
  void operator()(const char* key, T&, Allowed = {}) {
    keys.emplace_back(key);
  }
};

// Reads values from a YAML tree, checking each type; records where each key came from.
class Reader {
 public:
  Reader(YAML::Node root, std::string source, std::set<std::string> overridden)
      : root_(std::move(root)), source_(std::move(source)), overridden_(std::move(overridden)) {}

  void operator()(const char* key, std::string& value, Allowed allowed = {}) {
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
  void operator()(const char* key, bool& value, Allowed = {}) { scalar(key, value, "a boolean (true/false)"); }
  void operator()(const char* key, std::int64_t& value, Allowed = {}) { scalar(key, value, "an integer"); }
  void operator()(const char* key, std::uint64_t& value, Allowed = {}) {
    scalar(key, value, "a non-negative integer");
  }
  void operator()(const char* key, double& value, Allowed = {}) {
    scalar(key, value, "a number");
    if (const YAML::Node n = find(key)) {
      HOTPATH_CHECK(std::isfinite(value), where(n, key), ": expected a finite number, got '", n.Scalar(), "'");
    }
  }
  void operator()(const char* key, std::vector<std::string>& value, Allowed = {}) { list(key, value, "strings"); }
  void operator()(const char* key, std::vector<double>& value, Allowed = {}) {
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
  void operator()(const char* key, const T& value, Allowed = {}) {
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
void check_unknown_keys(const YAML::Node& root, const std::string& source, const std::set<std::string>& overridden) {
  HOTPATH_CHECK(root.IsMap() || root.IsNull(), source, ": a recipe must be a mapping of sections, got ",
                root.IsSequence() ? "a list" : "a scalar");
  const std::vector<std::string> keys = recipe_keys();
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

// Upper bounds (and the lower ones validate() leaves open) on every integer and every double that
// becomes a count of steps, samples or threads: far above any real run, far below an overflow or an
// allocation that cannot succeed.
void check_bounds(const Recipe& r) {
  constexpr std::int64_t kMaxCount = std::int64_t{1} << 40;  // steps, samples
  const auto in = [&](std::int64_t v, std::int64_t lo, std::int64_t hi, const char* key) {
    check_int_in(v, lo, hi, r.source + ": " + key);
  };
  const auto real = [&](double v, double lo, double hi, const char* key) {
    check_double_in(v, lo, hi, r.source + ": " + key);
  };
  const auto& m = r.model;
  const auto& d = r.data;
  const auto& t = r.train;
  in(m.num_classes, 1, 1'000'000, "model.num_classes");
  in(m.lora_r, 0, 65536, "model.lora_r");
  in(m.prefix_tokens, 0, 4096, "model.prefix_tokens");
  in(m.prefix_hidden, 0, 65536, "model.prefix_hidden");
  in(d.image_size, 8, 4096, "data.image_size");
  in(d.resize_shorter, 8, 8192, "data.resize_shorter");
  in(d.translate, 0, 4096, "data.translate");
  in(d.shuffle_buffer, 1, std::int64_t{1} << 24, "data.shuffle_buffer");
  in(d.max_bad_samples, 0, kMaxCount, "data.max_bad_samples");
  in(d.pad_to_multiple_of, 0, 65536, "data.pad_to_multiple_of");
  in(d.max_tokens, 0, std::int64_t{1} << 30, "data.max_tokens");
  in(t.epochs, 1, 1'000'000, "train.epochs");
  in(t.batch_size, 1, std::int64_t{1} << 20, "train.batch_size");
  in(t.threads, 0, max_threads(), "train.threads");
  in(t.log_every, 1, kMaxCount, "train.log_every");
  in(t.eval_every, 0, 1'000'000, "train.eval_every");
  in(t.max_steps, 0, kMaxCount, "train.max_steps");
  in(t.scaler_growth_interval, 1, kMaxCount, "train.scaler_growth_interval");
  in(r.checkpoint.every_epochs, 0, 1'000'000, "checkpoint.every_epochs");
  in(r.checkpoint.every_steps, 0, kMaxCount, "checkpoint.every_steps");
  in(r.checkpoint.keep_last, 1, 1'000'000, "checkpoint.keep_last");
  // Epoch counts that the schedule multiplies by steps per epoch: bounded like train.epochs.
  real(r.schedule.warmup_epochs, 0, 1e6, "schedule.warmup_epochs");
  real(r.schedule.step_epochs, 1e-9, 1e6, "schedule.step_epochs");
  real(r.optimizer.lr, 1e-300, 1e30, "optimizer.lr");
  real(t.scaler_init_scale, 1e-30, 1e30, "train.scaler_init_scale");
}

void validate(const Recipe& r) {
  const auto& d = r.data;
  const auto& t = r.train;
  check_range(!r.model.name.empty(), r, "model.name", "a model name");
  check_range(r.model.num_classes >= 1, r, "model.num_classes", ">= 1, got " + std::to_string(r.model.num_classes));
  check_range(d.image_size >= 8 && d.image_size <= 4096, r, "data.image_size",
              "in [8, 4096], got " + std::to_string(d.image_size));
  check_range(d.channels == 1 || d.channels == 3, r, "data.channels", "1 or 3, got " + std::to_string(d.channels));
  check_range(d.scale_min > 0 && d.scale_min <= d.scale_max && d.scale_max <= 1, r, "data.scale_min/scale_max",
              "0 < scale_min <= scale_max <= 1");
  check_range(d.flip >= 0 && d.flip <= 1, r, "data.flip", "a probability in [0, 1], got " + format_double(d.flip));
  check_range(d.translate >= 0 && d.translate < d.image_size, r, "data.translate", "in [0, image_size)");
  check_range(d.resize_shorter >= d.image_size, r, "data.resize_shorter", ">= data.image_size");
  check_range(d.mean.size() == static_cast<std::size_t>(d.channels), r, "data.mean",
              std::to_string(d.channels) + " values (one per channel)");
  check_range(d.std.size() == static_cast<std::size_t>(d.channels), r, "data.std",
              std::to_string(d.channels) + " values (one per channel)");
  check_range(std::all_of(d.std.begin(), d.std.end(), [](double s) { return s > 0; }), r, "data.std",
              "positive values");
  check_range(r.model.lora_r >= 0, r, "model.lora_r", ">= 0 (0 = full fine-tuning)");
  check_range(r.model.lora_r == 0 || r.model.lora_alpha > 0, r, "model.lora_alpha", "> 0");
  check_range(r.model.lora_dropout >= 0 && r.model.lora_dropout < 1, r, "model.lora_dropout", "in [0, 1)");
  check_range(r.model.lora_r == 0 || !r.model.lora_target_modules.empty(), r, "model.lora_target_modules",
              "at least one module name (e.g. [query, value])");
  const bool adapter = !r.model.adapter.config.empty();
  check_range(!adapter || (r.model.lora_r == 0 && r.model.prefix_tokens == 0), r, "model.adapter.config",
              "left out with model.lora_r or model.prefix_tokens (one of LoRA, prefix tuning, adapters)");
  check_range(adapter || (r.model.adapter.reduction_factor == 16.0 && r.model.adapter.non_linearity.empty()), r,
              "model.adapter.config", "a preset (seq_bn or double_seq_bn) with the other model.adapter keys");
  check_range(r.model.adapter.reduction_factor >= 1.0 && r.model.adapter.reduction_factor <= 65536.0, r,
              "model.adapter.reduction_factor", "in [1, 65536]");
  check_range(r.model.prefix_tokens == 0 || r.model.lora_r == 0, r, "model.prefix_tokens",
              "0 with model.lora_r > 0 (LoRA or prefix tuning, not both)");
  check_range(r.model.prefix_tokens > 0 || (!r.model.prefix_projection && r.model.prefix_hidden == 0), r,
              r.model.prefix_projection ? "model.prefix_projection" : "model.prefix_hidden",
              "left out without model.prefix_tokens (prefix tuning is off)");
  check_range(r.model.prefix_projection || r.model.prefix_hidden == 0, r, "model.prefix_hidden",
              "left out without model.prefix_projection: true (it is the reparameterisation MLP's width)");
  check_range(d.kind != "text" || !r.model.pretrained.empty(), r, "model.pretrained",
              "a Hugging Face model directory (config.json + weights) for data.kind: text");
  check_range(d.max_length >= 2 && d.max_length <= 65536, r, "data.max_length", "in [2, 65536]");
  check_range(d.pad_to_multiple_of >= 0, r, "data.pad_to_multiple_of", ">= 0 (0 or 1 = off)");
  check_range(d.max_tokens == 0 || d.max_tokens >= d.max_length, r, "data.max_tokens",
              "0 (off) or >= data.max_length");
  check_range(d.workers >= 1 && d.workers <= 256, r, "data.workers", "in [1, 256]");
  check_range(d.prefetch >= 1 && d.prefetch <= 64, r, "data.prefetch", "in [1, 64]");
  check_range(d.shuffle_buffer >= 1, r, "data.shuffle_buffer", ">= 1");
  check_range(d.decode == "cpu" || d.augment != "cpu", r, "data.augment",
              "auto or device with data.decode: nvjpeg (the images are decoded on the GPU)");
  check_range(d.kind == "image" || (d.decode == "cpu" && d.augment == "auto"), r,
              d.decode != "cpu" ? "data.decode" : "data.augment", "left out for data.kind: text (images only)");
  check_range(t.epochs >= 1, r, "train.epochs", ">= 1, got " + std::to_string(t.epochs));
  check_range(t.batch_size >= 1, r, "train.batch_size", ">= 1, got " + std::to_string(t.batch_size));
  check_range(t.accum_steps >= 1 && t.batch_size % t.accum_steps == 0, r, "train.accum_steps",
              ">= 1 and dividing train.batch_size (" + std::to_string(t.batch_size) + "), got " +
                  std::to_string(t.accum_steps));
  check_range(t.label_smoothing >= 0 && t.label_smoothing < 1, r, "train.label_smoothing", "in [0, 1)");
  check_range(t.clip_grad_norm >= 0, r, "train.clip_grad_norm", ">= 0 (0 = off)");
  check_range(t.ema_decay >= 0 && t.ema_decay < 1, r, "train.ema_decay", "in [0, 1) (0 = off)");
  check_range(t.threads >= 0, r, "train.threads", ">= 0 (0 = automatic)");
  check_range(t.log_every >= 1, r, "train.log_every", ">= 1");
  check_range(t.eval_every >= 0, r, "train.eval_every", ">= 0");
  check_range(t.max_steps >= 0, r, "train.max_steps", ">= 0 (0 = all epochs)");
  check_range(t.scaler_init_scale > 0, r, "train.scaler_init_scale", "> 0");
  check_range(t.scaler_growth_interval >= 1, r, "train.scaler_growth_interval", ">= 1");
  check_range(t.dist_timeout_s >= 0.001 && t.dist_timeout_s <= 86400, r, "train.dist_timeout_s",
              "seconds in [0.001, 86400] (a timeout under 1 ms would round to 0)");
  check_range(t.ddp_bucket_mb >= 1 && t.ddp_bucket_mb <= 4096, r, "train.ddp_bucket_mb", "MiB in [1, 4096]");
  check_range(t.zero >= 0 && t.zero <= 2, r, "train.zero", "0 (DDP), 1 (ZeRO-1) or 2 (ZeRO-2), got " + std::to_string(t.zero));
  check_range(r.optimizer.lr > 0, r, "optimizer.lr", "> 0");
  check_range(r.schedule.warmup_epochs >= 0, r, "schedule.warmup_epochs", ">= 0");
  check_range(r.schedule.step_epochs > 0, r, "schedule.step_epochs", "> 0");
  check_range(r.checkpoint.every_epochs >= 0, r, "checkpoint.every_epochs", ">= 0");
  check_range(r.checkpoint.every_steps >= 0, r, "checkpoint.every_steps", ">= 0");
  check_range(r.checkpoint.keep_last >= 1, r, "checkpoint.keep_last", ">= 1");
  check_range(!r.output_dir.empty(), r, "output_dir", "a directory");
  check_bounds(r);
}

}  // namespace

std::vector<std::string> recipe_keys() {
  KeyLister lister;
  Recipe r;
  visit_recipe(r, lister);
  return lister.keys;
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

Recipe parse_recipe_unguarded(const std::string& yaml_text, const std::vector<std::string>& overrides,
                              const std::string& source) {
  YAML::Node root = load_strict_yaml(yaml_text, source);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  std::set<std::string> overridden;
  for (const auto& o : overrides) overridden.insert(apply_override(root, o));
  check_unknown_keys(root, source, overridden);
  Recipe recipe;
  recipe.source = source;
  Reader reader(root, source, overridden);
  visit_recipe(recipe, reader);
  validate(recipe);
  return recipe;
}

}  // namespace

Recipe parse_recipe(const std::string& yaml_text, const std::vector<std::string>& overrides,
                    const std::string& source) {
  try {
    return parse_recipe_unguarded(yaml_text, overrides, source);
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
  visit_recipe(recipe, writer);
  YAML::Emitter out;
  out << writer.root();
  return std::string(out.c_str()) + "\n";
}

}  // namespace hotpath::train
