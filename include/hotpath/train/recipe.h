// hotpath/train/recipe.h — the YAML training recipe: every key typed, defaulted and validated.
//
//   Recipe r = load_recipe("configs/fashion_mnist.yaml", {"train.epochs=3", "optimizer.lr=0.05"});
//   std::cout << to_yaml(r);          // the resolved recipe, every key with its value
//
// A recipe has the sections model, data, train, optimizer, schedule, checkpoint plus the top-level
// `name` and `output_dir`. An unknown key, a value of the wrong type, outside its bounds or its allowed set,
// or set in a recipe of the other task kind is an error naming the file, line, dotted key and what was
// expected. `--set key=value` overrides are parsed as YAML scalars/flow lists and applied before
// validation, so they are checked alike.
//
// Every key is one row of recipe_table(): name, member, bounds or choices, a one-line doc, the task kinds
// it applies to and whether a resumed run must match it. Reading, writing, the bounds, the task-kind
// refusals, the resume key and `hotpath train --help-recipe` all come from that table; validate() in
// recipe.cpp keeps only the checks that relate two keys or need more than a range.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hotpath::train {

struct ModelSection {
  std::string name = "resnet18";        // see models::model_names()
  std::int64_t num_classes = 1000;
  std::string weights;                  // safetensors to start from ("" = random init)
  bool allow_partial = false;           // with weights: keep missing/mismatched keys (new head)
  std::vector<std::string> freeze;      // parameter-name prefixes that are not trained
  bool channels_last = true;            // NHWC activations (faster convolutions in oneDNN/cuDNN)
  bool zero_init_residual = false;      // ResNet: last BN of each block starts at 0
  bool sync_batchnorm = false;          // data parallel: BatchNorm statistics over every rank's batch
  // Text models (data.kind: text): model.name bert | distilbert (read from the directory's config.json).
  std::string pretrained;               // Hugging Face model directory (config.json + weights)
  std::string attention = "fused";      // fused | reference
  bool gradient_checkpointing = false;  // recompute each transformer layer in backward
  std::int64_t lora_r = 0;              // LoRA rank, 0 = full fine-tuning
  double lora_alpha = 16.0;
  double lora_dropout = 0.0;
  std::vector<std::string> lora_target_modules{"query", "value"};
  // Prefix tuning (models/text/prefix.h, PEFT's PREFIX_TUNING): trains the prefix and the head only.
  std::int64_t prefix_tokens = 0;       // virtual tokens per layer, 0 = off (exclusive with lora_r)
  bool prefix_projection = false;       // train through PEFT's reparameterisation MLP
  std::int64_t prefix_hidden = 0;       // the MLP's width, 0 = the model's hidden size
  // Bottleneck adapters (models/text/adapter.h, the adapters library's format): `model.adapter: {config: seq_bn}`.
  struct Adapter {
    std::string config;                 // "" = off | seq_bn (pfeiffer) | double_seq_bn (houlsby)
    double reduction_factor = 16.0;     // bottleneck width = hidden / this
    std::string non_linearity;          // "" = the preset's (relu | swish) | relu | swish | gelu | gelu_new | tanh
  } adapter;
};

struct DataSection {
  std::string kind = "image";           // image | text (KEY.txt/KEY.ids + KEY.cls shards)
  std::vector<std::string> train;       // shard patterns (brace ranges, globs)
  std::vector<std::string> eval;
  std::int64_t image_size = 224;
  std::int64_t channels = 3;            // 1 = gray, 3 = RGB
  std::string train_crop = "random_resized_crop";  // random_resized_crop | resize
  double scale_min = 0.08;              // RandomResizedCrop area range
  double scale_max = 1.0;
  std::string eval_crop = "resize_center_crop";    // resize_center_crop | resize
  std::int64_t resize_shorter = 256;    // eval Resize before CenterCrop
  double flip = 0.5;                    // horizontal flip probability (train)
  std::int64_t translate = 0;           // RandomCrop(size, padding=translate) (train)
  double random_erasing = 0.0;          // RandomErasing probability after flip (train; torchvision's scale/ratio)
  std::vector<double> mean{0.485, 0.456, 0.406};
  std::vector<double> std{0.229, 0.224, 0.225};
  std::int64_t workers = 2;             // decode threads
  std::int64_t prefetch = 4;
  std::int64_t shuffle_buffer = 2000;
  std::int64_t max_bad_samples = 100;
  // The loader's CUDA ("mixed") mode, train.device: cuda only (docs/gpu.md).
  std::string decode = "cpu";           // cpu (libjpeg-turbo threads) | nvjpeg (whole JPEGs decoded on the GPU)
  std::string augment = "auto";         // auto (device with nvjpeg, else cpu) | cpu | device (normalise on the GPU)
  std::vector<std::string> class_names; // "" = taken from the shards' pack report (train.json) if any
  // Text (data.kind: text):
  std::string tokenizer;                // tokenizer directory ("" = model.pretrained)
  std::int64_t max_length = 128;        // tokens per sample, special tokens included
  std::int64_t pad_to_multiple_of = 8;
  std::int64_t max_tokens = 0;          // token-budget batches (batch × padded length ≤ this), 0 = fixed batch_size
  bool bucket = true;                   // length bucketing (sort within windows, shuffle the batches)
};

struct TrainSection {
  std::int64_t epochs = 10;
  std::int64_t batch_size = 256;        // samples per optimizer step (all micro-batches): the step's batch
  std::int64_t accum_steps = 1;         // micro-batches per optimizer step; batch_size must divide
  // The loader's batch: samples per forward/backward pass (batch_size / accum_steps).
  [[nodiscard]] std::int64_t micro_batch_size() const { return batch_size / accum_steps; }
  std::string precision = "fp32";       // fp32 | bf16 (autocast) | fp16 (autocast + loss scaler, CUDA)
  double label_smoothing = 0.0;
  double clip_grad_norm = 0.0;          // max global L2 norm, 0 = off
  double ema_decay = 0.0;               // EMA of weights, 0 = off (e.g. 0.999)
  std::uint64_t seed = 0;
  std::int64_t threads = 0;             // LibTorch intra-op threads, 0 = all cores
  std::string device = "auto";          // auto | cpu | cuda
  std::int64_t log_every = 50;          // optimizer steps between metrics lines
  std::int64_t eval_every = 1;          // epochs between evaluations (0 = only at the end)
  std::int64_t max_steps = 0;           // stop after this many optimizer steps (0 = all epochs)
  double scaler_init_scale = 65536.0;
  std::int64_t scaler_growth_interval = 2000;
  // Data parallel (docs/distributed.md); $HOTPATH_DIST_TIMEOUT_S, $HOTPATH_DDP_OVERLAP, $HOTPATH_DDP_BUCKET_MB override.
  double dist_timeout_s = 300.0;        // the store's and every collective's timeout
  bool ddp_overlap = true;              // all-reduce gradient buckets during backward (false: after it)
  std::int64_t ddp_bucket_mb = 25;      // gradient bucket size after the first (1 MiB) bucket
  std::int64_t zero = 0;                // data parallel: 0 DDP, 1 ZeRO-1 (optimizer state sharded), 2 ZeRO-2 (+ gradients)
};

struct OptimizerSection {
  std::string name = "sgd";             // sgd | adamw
  double lr = 0.1;
  double weight_decay = 0.0;
  bool no_decay_norm_bias = true;
  double momentum = 0.9;
  double dampening = 0.0;
  bool nesterov = false;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

struct ScheduleSection {
  std::string name = "warmup_cosine";   // constant | warmup_cosine | step | one_cycle
  double warmup_epochs = 0.0;
  double warmup_start_factor = 0.1;
  double min_lr = 0.0;
  double step_epochs = 30.0;            // step: decay every this many epochs
  double gamma = 0.1;
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

struct CheckpointSection {
  std::int64_t every_epochs = 1;        // 0 = only at the end
  std::int64_t every_steps = 0;         // additionally every N optimizer steps (0 = off)
  std::int64_t keep_last = 2;
  bool keep_best = true;                // best/ holds the weights with the best eval metric
  std::string metric = "top1";          // top1 | top5 | loss
};

struct Recipe {
  std::string name = "run";
  std::string output_dir = "runs/run";
  ModelSection model;
  DataSection data;
  TrainSection train;
  OptimizerSection optimizer;
  ScheduleSection schedule;
  CheckpointSection checkpoint;
  std::string source = "<defaults>";    // the YAML file it came from (for messages)
};

// The task kinds a key applies to: set to anything but its default in a recipe of the other kind, it is refused
// (it would be ignored).
enum class TaskKinds { kAll, kImage, kText };

// One row of the recipe's key table.
struct RecipeKey {
  // The member the key reads and writes (a captureless accessor: +[](Recipe& r) -> T& { ... }).
  using Field = std::variant<std::string& (*)(Recipe&), bool& (*)(Recipe&), std::int64_t& (*)(Recipe&),
                             std::uint64_t& (*)(Recipe&), double& (*)(Recipe&), std::vector<std::string>& (*)(Recipe&),
                             std::vector<double>& (*)(Recipe&)>;
  static constexpr double kNone = std::numeric_limits<double>::infinity();
  const char* name = "";               // dotted: "train.epochs"
  Field field{};
  const char* doc = "";                // one line
  double lo = -kNone;                  // numbers: closed bounds (integers too); lists of numbers: each item
  double hi = kNone;                   // (train.threads: the bound is max_threads(), kThreadsBound)
  std::vector<const char*> allowed{};  // strings: the allowed values (empty: any)
  TaskKinds kinds = TaskKinds::kAll;
  bool resume = false;                 // a resumed run must have the same value (its checkpoint's plan)
  bool per_rank = false;               // may differ between data-parallel ranks without changing the training
};
inline constexpr double kThreadsBound = -1;  // RecipeKey::hi for train.threads: hotpath::max_threads()

// The table: every key of a recipe, in the order of the sections above.
const std::vector<RecipeKey>& recipe_table();

// Reads a recipe file, applies `overrides` ("dotted.key=value"), validates every key.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from YAML text; `source` names it in messages.
Recipe parse_recipe(const std::string& yaml_text, const std::vector<std::string>& overrides = {},
                    const std::string& source = "<string>");
// Every key with its value, in the order of the sections above; parse_recipe(to_yaml(r)) == r.
std::string to_yaml(const Recipe& recipe);
// The dotted names of every key a recipe accepts (for help and messages).
std::vector<std::string> recipe_keys();

// The same as parse_recipe over another table (tests: a table with one more row).
Recipe parse_recipe_with(const std::vector<RecipeKey>& table, const std::string& yaml_text,
                         const std::vector<std::string>& overrides, const std::string& source);
// Keys of the other task kind set to anything but their default are refused, naming the key: train() checks
// this (parse_recipe does not: the Python loaders read their settings through a recipe of either kind).
void check_task_keys(const Recipe& recipe, const std::vector<RecipeKey>& table = recipe_table());
// The keys a resumed run must match, for this recipe's task kind: {"train.seed": 0, ...} (booleans as 0/1).
nlohmann::ordered_json resume_values(const Recipe& recipe, const std::vector<RecipeKey>& table = recipe_table());
// The keys every data-parallel rank must share (all but the per_rank rows), each with its value as text
// ("optimizer.lr" → "0.1", strings quoted, lists in brackets).
std::vector<std::pair<std::string, std::string>> shared_recipe_values(const Recipe& recipe);
// `hotpath train --help-recipe`: the table as Markdown (key, type, default, range or choices, tasks, resume, doc);
// docs/training.md holds the same text.
std::string recipe_help(const std::vector<RecipeKey>& table = recipe_table());

}  // namespace hotpath::train
