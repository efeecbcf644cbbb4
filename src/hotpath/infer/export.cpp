#include "hotpath/infer/export.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>
#include <cmath>
#include <functional>
#include <sstream>
#include <system_error>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/core/progress.h"
#include "hotpath/core/remove_tree.h"
#include "hotpath/data/loader.h"
#include "hotpath/data/shard_list.h"
#include "hotpath/formats/bert_config.h"
#include "hotpath/formats/prefix_config.h"
#include "hotpath/infer/int8_chain.h"
#include "hotpath/infer/lower.h"
#include "hotpath/infer/onnx_export.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/quantize.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/vision/pretrained.h"
#include "hotpath/text/text_batch_tensor.h"
#include "hotpath/text/tokenizer.h"

namespace fs = std::filesystem;

namespace hotpath::infer {
namespace {

// The model a package came from, kept to run the reference in the accuracy report.
using Reference = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

struct Source {
  LoweredModel lowered;
  Reference reference;
};

EvalPreprocess imagenet_preprocess(std::int64_t channels, std::int64_t image_size) {
  EvalPreprocess p;
  p.channels = channels;
  p.image_size = image_size;
  p.crop = EvalCrop::kResizeCenterCrop;
  p.resize_shorter = image_size * 256 / 224;
  p.mean = channels == 3 ? std::vector<double>{0.485, 0.456, 0.406} : std::vector<double>(channels, 0.5);
  p.std = channels == 3 ? std::vector<double>{0.229, 0.224, 0.225} : std::vector<double>(channels, 0.5);
  return p;
}

Reference image_reference(models::ModelHandle model) {
  model->eval();
  return [model](const std::vector<at::Tensor>& in) {
    const at::NoGradGuard no_grad;
    return model->forward(in.at(0)).to(at::kFloat);
  };
}

Source from_image_model(models::ModelHandle model, Package package) {
  Source s;
  s.lowered.graph = lower_image_model(*model, {.channels = package.image.channels,
                                               .image_size = package.image.image_size});
  s.lowered.package = std::move(package);
  s.reference = image_reference(std::move(model));
  return s;
}

// A text model's reference: its forward on (input_ids, attention_mask, token_type_ids), the engine's inputs.
template <typename TextModel>
Reference text_reference(std::shared_ptr<TextModel> model) {
  return [model](const std::vector<at::Tensor>& in) {
    const at::NoGradGuard no_grad;
    return model->forward(in.at(0), in.at(1), in.at(2));
  };
}

std::string text_architecture(const formats::BertConfig& config) {
  return std::string(formats::base_model_prefix(config));
}

// The package's kind, architecture and graph from the model, which is also kept as the reference.
Source from_text_classifier(std::shared_ptr<models::BertForSequenceClassification> model, Package package) {
  model->eval();
  Source s;
  s.lowered.graph = lower_text_classifier(*model);
  s.lowered.package = std::move(package);
  s.lowered.package.kind = PackageKind::kTextClassifier;
  s.lowered.package.architecture = text_architecture(model->config());
  s.reference = text_reference(std::move(model));
  return s;
}

Source from_sentence_embedder(std::shared_ptr<models::SentenceEmbedder> embedder, Package package) {
  embedder->model->eval();
  Source s;
  s.lowered.graph = lower_sentence_embedder(*embedder);
  s.lowered.package = std::move(package);
  s.lowered.package.kind = PackageKind::kSentenceEmbedder;
  s.lowered.package.architecture = text_architecture(embedder->model->config());
  s.reference = text_reference(std::move(embedder));
  return s;
}

std::vector<fs::path> tokenizer_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                           "sentence_bert_config.json"}) {
    if (fs::is_regular_file(dir / name)) files.push_back(dir / name);
  }
  return files;
}

bool has_classifier_head(const fs::path& config_path) {
  const nlohmann::json j = parse_json(read_file(config_path.string(), read_limit::kConfig, "config"),
                                      config_path.string());
  if (!j.is_object()) return false;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (a.is_string() && a.get<std::string>().find("ForSequenceClassification") != std::string::npos) return true;
    }
  }
  return false;
}

Source from_text_dir(const fs::path& dir, const ExportSource& src) {
  std::string task = src.task;
  if (task == "auto") {
    task = fs::exists(dir / "modules.json") || !has_classifier_head(dir / "config.json") ? "embed" : "classify";
  }
  std::vector<fs::path> tokenizer = tokenizer_files(dir);
  HOTPATH_CHECK(!tokenizer.empty(), dir.string(),
                ": no tokenizer files (tokenizer.json or vocab.txt) to put in the package");
  Source s;
  std::int64_t positions = 0;
  if (task == "classify") {
    auto model = models::load_bert_classifier(dir);
    const formats::BertConfig& c = model->config();
    positions = c.max_position_embeddings;
    Package p;
    for (std::int64_t i = 0; i < c.num_labels; ++i) {
      p.labels.push_back(i < static_cast<std::int64_t>(c.id2label.size()) ? c.id2label[static_cast<std::size_t>(i)]
                                                                         : "LABEL_" + std::to_string(i));
    }
    s = from_text_classifier(std::move(model), std::move(p));
  } else {
    HOTPATH_CHECK(task == "embed", "export: --task is '", task, "', expected classify, embed or auto");
    auto embedder = std::make_shared<models::SentenceEmbedder>(models::load_sentence_embedder(dir));
    positions = embedder->model->config().max_position_embeddings;
    s = from_sentence_embedder(std::move(embedder), Package{});
  }
  s.lowered.tokenizer_files = std::move(tokenizer);
  Package& p = s.lowered.package;
  p.text.pad_id = text::Tokenizer::from_directory(dir).pad_id();  // what the package's rows are padded with
  // Default: sentence-transformers' max_seq_length when the directory says it (what `embed --model DIR`
  // truncates to), else min(128, positions).
  std::int64_t fallback = std::min<std::int64_t>(128, positions);
  if (const fs::path st = dir / "sentence_bert_config.json"; fs::is_regular_file(st)) {
    const nlohmann::json j = parse_json(read_file(st.string(), read_limit::kConfig, "config"), st.string());
    if (j.is_object() && j.contains("max_seq_length") && j["max_seq_length"].is_number_integer()) {
      fallback = std::clamp<std::int64_t>(j["max_seq_length"].get<std::int64_t>(), 2, positions);
    }
  }
  p.text.max_length = src.max_length > 0 ? src.max_length : fallback;
  HOTPATH_CHECK(p.text.max_length >= 2 && p.text.max_length <= positions, "export: --max-length ", p.text.max_length,
                " outside [2, ", positions, "] (the model's position embeddings)");
  p.source = {{"model_dir", dir.string()}, {"task", task}};
  return s;
}

Source load_source(const ExportSource& src) {
  const int given = static_cast<int>(!src.model_dir.empty()) + static_cast<int>(!src.model.empty()) +
                    static_cast<int>(!src.bert_config.empty());
  HOTPATH_CHECK(given == 1, "export: give exactly one of --model-dir DIR, --model NAME (with --pretrained or "
                            "--random-init) or --config BERT_CONFIG.json --random-init");
  if (!src.model_dir.empty()) {
    const fs::path dir = src.model_dir;
    HOTPATH_CHECK(fs::is_directory(dir), "export: --model-dir ", dir.string(), " is not a directory");
    if (fs::exists(dir / "model.json")) {  // an image run
      const Package run = read_package(dir);
      HOTPATH_CHECK(run.layout == PackageLayout::kRunDirectory, "export: ", dir.string(),
                    " is already a model package (config.json with \"hotpath_package\"); export its run directory");
      Package p;
      p.kind = PackageKind::kImageClassifier;
      p.architecture = run.architecture;
      p.image = run.image;
      p.image.channels_last = false;  // the engine chooses its own layout
      for (std::int64_t i = 0; i < run.num_classes; ++i) {
        p.labels.push_back(i < static_cast<std::int64_t>(run.labels.size()) ? run.labels[static_cast<std::size_t>(i)]
                                                                            : std::to_string(i));
      }
      p.num_classes = run.num_classes;
      p.source = {{"model_dir", dir.string()}, {"model", run.architecture}};
      return from_image_model(load_package_model(run), std::move(p));
    }
    if (fs::exists(dir / "model" / "config.json")) return from_text_dir(dir / "model", src);  // a text run
    // A prefix-tuning run (or its best/) leaves only adapter/: the prefix cannot be merged into the weights.
    if (const fs::path adapter = dir / "adapter" / "adapter_config.json"; fs::exists(adapter)) {
      const std::string type =
          formats::peft_type_of(read_file(adapter.string(), read_limit::kConfig, "config"), adapter.string());
      HOTPATH_CHECK(type != "PREFIX_TUNING", "export: ", dir.string(),
                    " is a prefix-tuning run (adapter/ holds PEFT's PREFIX_TUNING files), which the engine does not "
                    "run: load adapter/ with peft.PeftModel.from_pretrained over model.pretrained, or fine-tune with "
                    "LoRA (model.lora_r) to export");
      HOTPATH_CHECK(!type.empty(), "export: ", dir.string(),
                    " is a bottleneck-adapter run (adapter/ holds the adapters library's files), which the engine "
                    "does not run: load adapter/ with model.load_adapter(..., use_safetensors=True) over "
                    "model.pretrained, or fine-tune with LoRA (model.lora_r) to export");
    }
    HOTPATH_CHECK(fs::exists(dir / "config.json"), "export: ", dir.string(),
                  " holds neither model.json (an image run), model/config.json (a text run) nor config.json "
                  "(a Hugging Face or sentence-transformers directory)");
    return from_text_dir(dir, src);
  }
  if (!src.model.empty()) {
    HOTPATH_CHECK(src.pretrained != src.random_init, "export: --model ", src.model,
                  " needs exactly one of --pretrained or --random-init");
    Package p;
    p.kind = PackageKind::kImageClassifier;
    p.architecture = src.model;
    if (src.pretrained) {
      const models::Preprocessing& pre = models::pretrained_preprocessing(src.model);
      p.image = {.image_size = pre.crop, .channels = 3, .crop = EvalCrop::kResizeCenterCrop,
                 .resize_shorter = pre.resize_shorter, .mean = {pre.mean.begin(), pre.mean.end()},
                 .std = {pre.std.begin(), pre.std.end()}};
      p.labels = models::pretrained_class_names(src.model);
      p.source = {{"model", src.model}, {"weights", "pretrained"}};
      return from_image_model(models::load_pretrained_model(src.model), std::move(p));
    }
    HOTPATH_CHECK(src.num_classes >= 1 && src.num_classes <= (1 << 20), "export: --num-classes ", src.num_classes,
                  " outside [1, 1048576]");
    HOTPATH_CHECK(src.channels >= 1 && src.channels <= 4, "export: --channels ", src.channels, " outside [1, 4]");
    HOTPATH_CHECK(src.image_size >= 8 && src.image_size <= 4096, "export: --image-size ", src.image_size,
                  " outside [8, 4096]");
    p.image = imagenet_preprocess(src.channels, src.image_size);
    for (std::int64_t i = 0; i < src.num_classes; ++i) p.labels.push_back(std::to_string(i));
    p.source = {{"model", src.model}, {"weights", "random-init"}, {"seed", 0}};
    at::manual_seed(0);
    return from_image_model(models::create_model(src.model, {.num_classes = src.num_classes,
                                                             .in_channels = src.channels}),
                            std::move(p));
  }
  HOTPATH_CHECK(src.random_init, "export: --config ", src.bert_config,
                " builds a randomly initialised BERT-shape model: add --random-init");
  const formats::BertConfig config = formats::BertConfig::from_file(src.bert_config);
  at::manual_seed(0);
  Package p;
  p.text.max_length = src.max_length > 0 ? src.max_length : std::min<std::int64_t>(128, config.max_position_embeddings);
  HOTPATH_CHECK(p.text.max_length >= 2 && p.text.max_length <= config.max_position_embeddings, "export: --max-length ",
                p.text.max_length, " outside [2, ", config.max_position_embeddings, "]");
  p.source = {{"config", src.bert_config}, {"weights", "random-init"}, {"seed", 0}};
  p.text.pad_id = config.pad_token_id;  // no tokenizer: token ids only, padded with the config's id
  if (src.task == "embed") {
    return from_sentence_embedder(
        std::make_shared<models::SentenceEmbedder>(
            std::make_shared<models::BertModel>(config, models::BertOptions{.add_pooling_layer = false})),
        std::move(p));
  }
  for (std::int64_t i = 0; i < config.num_labels; ++i) p.labels.push_back("LABEL_" + std::to_string(i));
  return from_text_classifier(std::make_shared<models::BertForSequenceClassification>(config), std::move(p));
}

// ---- the data the report (and int8 calibration) runs on -------------------------------------------

struct ReportData {
  std::vector<std::vector<at::Tensor>> batches;  // each: the graph's inputs
  std::string source;                            // "shards", "text lines", "random inputs"
  std::int64_t samples = 0;
  std::int64_t bad_samples = 0;
  std::vector<std::string> bad_examples;
};

ReportData image_data(const Package& p, const ExportOptions& o) {
  ReportData d;
  if (o.calibration.empty()) {
    at::manual_seed(1);
    for (std::int64_t n = 0; n < std::min<std::int64_t>(o.calibration_samples, 64); n += 8) {
      d.batches.push_back({at::randn({8, p.image.channels, p.image.image_size, p.image.image_size})});
      d.samples += 8;
    }
    d.source = "random inputs (pass --calibration SHARDS for real data)";
    return d;
  }
  data::LoaderOptions lo = p.image.loader_options(data::resolve_shards(o.calibration));
  HOTPATH_CHECK(!lo.shards.empty(), "export: no calibration shard matches ", o.calibration.front());
  lo.batch_size = 32;
  lo.workers = 2;
  lo.max_bad_samples = o.max_bad_samples;
  data::Loader loader(lo);
  while (d.samples < o.calibration_samples) {
    auto batch = loader.next();
    if (!batch) break;
    at::Tensor images = batch->images;
    const std::int64_t take = std::min<std::int64_t>(images.size(0), o.calibration_samples - d.samples);
    d.batches.push_back({images.narrow(0, 0, take).contiguous()});
    d.samples += take;
  }
  d.bad_samples = loader.stats().bad_samples;
  d.bad_examples = loader.bad_samples();
  if (d.bad_examples.size() > 5) d.bad_examples.resize(5);
  HOTPATH_CHECK(d.samples > 0, "export: the calibration shards yielded no samples (", d.bad_samples,
                " bad samples skipped)");
  d.source = "shards";
  return d;
}

ReportData text_data(const LoweredModel& m, const ExportOptions& o) {
  ReportData d;
  const std::int64_t len = m.package.text.max_length;
  if (o.calibration.empty()) {
    at::manual_seed(1);
    const std::optional<TextEmbedding> embedding = text_embedding(m.graph);
    const std::int64_t words = embedding ? embedding->vocab : 2;
    for (std::int64_t n = 0; n < std::min<std::int64_t>(o.calibration_samples, 64); n += 8) {
      const at::Tensor ids = at::randint(1, words, {8, len}, at::kLong);
      at::Tensor mask = at::ones({8, len}, at::kLong);
      for (std::int64_t r = 0; r < 8; ++r) mask[r].narrow(0, len / 2 + r * (len / 16), len - len / 2 - r * (len / 16)).zero_();
      d.batches.push_back({ids, mask, at::zeros({8, len}, at::kLong)});
      d.samples += 8;
    }
    d.source = "random token ids (pass --calibration FILE, one text per line, for real data)";
    return d;
  }
  HOTPATH_CHECK(o.calibration.size() == 1, "export: a text model takes one --calibration file of lines, got ",
                o.calibration.size());
  HOTPATH_CHECK(!m.tokenizer_files.empty(), "export: this text model has no tokenizer to read --calibration with");
  const text::Tokenizer tok = text::Tokenizer::from_directory(m.tokenizer_files.front().parent_path());
  std::istringstream in(read_file(o.calibration.front(), read_limit::kDefault, "calibration text"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line) && static_cast<std::int64_t>(lines.size()) < o.calibration_samples;) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    lines.push_back(line);
  }
  HOTPATH_CHECK(!lines.empty(), "export: ", o.calibration.front(), " holds no text lines");
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  for (std::size_t i = 0; i < views.size(); i += 16) {
    const std::size_t n = std::min<std::size_t>(16, views.size() - i);
    const std::vector<text::Encoding> enc =
        tok.encode_batch(std::span(views).subspan(i, n), {.max_length = static_cast<std::size_t>(len)});
    text::TextBatchTensors t = text::to_padded_tensors(enc, tok.pad_id());
    d.batches.push_back({std::move(t.input_ids), std::move(t.attention_mask), std::move(t.token_type_ids)});
    d.samples += static_cast<std::int64_t>(n);
  }
  d.source = "text lines";
  return d;
}

// How far `got` is from `want` over the data: top-1 agreement (classifiers) or the lowest cosine
// similarity (embedders), and logit/embedding errors.
nlohmann::ordered_json compare(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, bool embedder) {
  std::int64_t n = 0, agree = 0;
  double max_abs = 0, sum_abs = 0, min_cos = 1.0;
  std::int64_t elems = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const at::Tensor a = got[i].to(at::kFloat), b = want[i].to(at::kFloat);
    const at::Tensor diff = (a - b).abs();
    max_abs = std::max(max_abs, diff.max().item<double>());
    sum_abs += diff.sum().item<double>();
    elems += diff.numel();
    n += a.size(0);
    if (embedder) {
      min_cos = std::min(min_cos, at::cosine_similarity(a, b, 1).min().item<double>());
    } else {
      agree += a.argmax(1).eq(b.argmax(1)).sum().item<std::int64_t>();
    }
  }
  nlohmann::ordered_json j;
  j["samples"] = n;
  if (embedder) {
    j["min_cosine"] = min_cos;
  } else {
    j["top1_agreement"] = n > 0 ? static_cast<double>(agree) / static_cast<double>(n) : 0.0;
  }
  j["max_abs_error"] = max_abs;
  j["mean_abs_error"] = elems > 0 ? sum_abs / static_cast<double>(elems) : 0.0;
  return j;
}

// The export's progress: a hotpath::Progress line (core/progress.h) for each stage still running quiet_s into
// the export (a quick export prints nothing), and every stage's seconds for the report ("timings_s").
class StageProgress {
 public:
  using Clock = std::chrono::steady_clock;
  StageProgress(std::ostream* out, double quiet_s) : out_(out), quiet_s_(quiet_s), start_(Clock::now()), stage_start_(start_) {}
  StageProgress(const StageProgress&) = delete;
  StageProgress& operator=(const StageProgress&) = delete;

  // `done` of `total` units of `stage` are done (a new name ends the stage before it).
  void operator()(std::string_view stage, std::size_t done, std::size_t total) {
    const Clock::time_point now = Clock::now();
    if (stage != stage_) begin(stage, now);
    if (out_ != nullptr && !bar_ && seconds(start_, now) >= quiet_s_) {
      const bool tty = out_ == &std::cerr && stream_is_tty(stderr);
      bar_.emplace(static_cast<std::int64_t>(total), *out_, tty,
                   ProgressOptions{.prefix = "export: " + stage_,
                                   .initial_step = static_cast<std::int64_t>(done) - 1});
    }
    if (bar_) bar_->update(static_cast<std::int64_t>(done));
  }
  // A stage without units (timed, and a bar-less line past quiet_s: "export: writing the package").
  void stage(std::string_view name) { (*this)(name, 1, 0); }

  // Ends the last stage; each stage's seconds in the order they ran (a repeated name adds up).
  nlohmann::ordered_json timings() {
    begin("", Clock::now());
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [name, s] : seconds_) j[name] = std::round(s * 100.0) / 100.0;
    return j;
  }

 private:
  static double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
  void begin(std::string_view stage, Clock::time_point now) {
    if (bar_) bar_->finish();
    bar_.reset();
    if (!stage_.empty()) {
      auto it = std::find_if(seconds_.begin(), seconds_.end(), [&](const auto& e) { return e.first == stage_; });
      if (it == seconds_.end()) it = seconds_.insert(seconds_.end(), {stage_, 0.0});
      it->second += seconds(stage_start_, now);
    }
    stage_ = std::string(stage);
    stage_start_ = now;
  }

  std::ostream* out_;
  double quiet_s_;
  Clock::time_point start_, stage_start_;
  std::string stage_;
  std::optional<Progress> bar_;
  std::vector<std::pair<std::string, double>> seconds_;
};

std::vector<at::Tensor> run_all(const Engine& e, const ReportData& d, StageProgress& progress, std::string_view stage) {
  std::vector<at::Tensor> out;
  for (const auto& b : d.batches) {
    out.push_back(e.run(b).front());
    progress(stage, out.size(), d.batches.size());
  }
  return out;
}

// ---- the package directory: checked before any work, then written whole or not at all ------------

// What `hotpath train` leaves in its output_dir (train/run_dir.cpp run_outputs, plus the recipe copy and the
// lock) and what export reads as a run (model.json, model/). infer cannot see train, hence the list here.
constexpr const char* kRunMarkers[] = {"metrics.jsonl", "checkpoints", "best",        "model.json",
                                       "model",         "adapter",     "config.yaml", ".lock"};

// The first run marker in `dir`, or empty.
fs::path run_marker_in(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : kRunMarkers) {
    if (fs::exists(fs::symlink_status(dir / name, ec))) return dir / name;
  }
  return {};
}

// The first run marker under `dir` (symlinks not followed), or empty. Walks the whole tree: only for a
// package about to be replaced, which is small.
fs::path run_marker_under(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      if (fs::path m = run_marker_in(it->path()); !m.empty()) return m;
    }
  }
  return {};
}

// An absolute path with symlinks resolved and no trailing separator, so that "RUN", "RUN/" and "./RUN" compare equal.
fs::path resolved(const fs::path& p) {
  fs::path r = fs::weakly_canonical(fs::absolute(p));
  if (!r.has_filename() && r.has_relative_path()) r = r.parent_path();
  return r;
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  const auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end();
}

// Refuses an --out whose replacement would lose anything: a training run or a directory holding one (the
// trained weights), the model being exported or a directory around it, anything but a package. Returns `out`
// resolved.
fs::path check_out_dir(const ExportSource& source, const ExportOptions& options) {
  const fs::path out = resolved(options.out);
  HOTPATH_CHECK(out.has_filename(), "export: --out ", options.out.string(), " names no directory to write");
  if (!source.model_dir.empty()) {
    const fs::path model = resolved(source.model_dir);
    HOTPATH_CHECK(!is_within(out, model) && !is_within(model, out), "export: --out ", options.out.string(),
                  is_within(out, model) ? (out == model ? " is" : " is inside") : " holds", " --model-dir ",
                  source.model_dir, "; write the package to a directory of its own");
  }
  std::error_code ec;
  if (!fs::exists(out, ec)) return out;
  HOTPATH_CHECK(fs::is_directory(out, ec), "export: ", options.out.string(),
                " exists and is not a directory (pass another --out)");
  if (fs::is_empty(out, ec)) return out;
  const auto refuse_run = [&options](const fs::path& marker, const char* relation) {
    HOTPATH_CHECK(marker.empty(), "export: --out ", options.out.string(), relation, " a training run (",
                  marker.string(), "); a package never replaces one: choose another --out");
  };
  refuse_run(run_marker_in(out), " is");
  HOTPATH_CHECK(options.overwrite, "export: ", options.out.string(),
                " exists and is not empty (pass --overwrite to replace it)");
  HOTPATH_CHECK(is_package_dir(out), "export: ", options.out.string(),
                " is not a hotpath package (no config.json with hotpath_package); --overwrite replaces only a "
                "package: choose another --out");
  refuse_run(run_marker_under(out), " holds");
  return out;
}

// Removes a directory when it goes out of scope, unless release()d: a failed export leaves no temp dir.
class TreeGuard {
 public:
  explicit TreeGuard(fs::path path) : path_(std::move(path)) {}
  ~TreeGuard() {
    std::error_code ec;
    if (!path_.empty()) hotpath::remove_tree(path_, ec);
  }
  TreeGuard(const TreeGuard&) = delete;
  TreeGuard& operator=(const TreeGuard&) = delete;
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

// `write` fills a fresh OUT.tmp-PID beside `out`, which then replaces `out` as a whole: the old directory is
// renamed aside, the new one in, the old one removed. No file of the old package survives in the new one,
// and until the rename a failure leaves `out` as it was (the temp dir is removed).
void write_dir_then_rename(const fs::path& out, const std::function<void(const fs::path&)>& write) {
  const fs::path parent = out.parent_path();
  const std::string pid = std::to_string(::getpid());
  const fs::path tmp = parent / (out.filename().string() + ".tmp-" + pid);
  const fs::path old = parent / (out.filename().string() + ".old-" + pid);
  std::error_code ec;
  fs::create_directories(parent, ec);
  HOTPATH_CHECK(!ec, parent.string(), ": cannot create the package's parent directory: ", ec.message());
  hotpath::remove_tree(tmp);  // a leftover of a crashed export whose pid this process reuses
  TreeGuard tmp_guard(tmp);
  write(tmp);  // every file fsynced by its writer
  sync_directory(tmp.string());
  const bool replacing = fs::exists(fs::symlink_status(out, ec));
  if (replacing) {
    hotpath::remove_tree(old);
    fs::rename(out, old, ec);
    HOTPATH_CHECK(!ec, out.string(), ": cannot move the old package aside to ", old.string(), ": ", ec.message());
  }
  fs::rename(tmp, out, ec);
  if (ec) {
    std::error_code back;
    if (replacing) fs::rename(old, out, back);
    HOTPATH_CHECK(false, out.string(), ": cannot rename ", tmp.string(), " to it: ", ec.message());
  }
  tmp_guard.release();
  sync_directory(parent.string());
  if (replacing) hotpath::remove_tree(old, ec);  // the new package is in place: a leftover old copy loses nothing
}

// ---- training batches (QAT, pruning's fine-tuning) -------------------------------------------------

// Batches of image shards for training an export's graph: the package's preprocessing with a random resized crop
// (none at crop_scale_min 1: the eval transform) and a flip, shuffled, epochs repeated. `prefix` names the options in
// messages ("--qat": --qat-data, --qat-batch-size, --qat-crop-scale).
struct TrainingBatches {
  std::shared_ptr<data::Loader> loader;
  QatData next;
};

TrainingBatches training_batches(const Package& p, const std::vector<std::string>& shards, std::int64_t batch_size,
                                 double crop_scale_min, std::uint64_t seed, bool labels, const std::string& prefix) {
  HOTPATH_CHECK(!shards.empty(), "export: ", prefix, "-data SHARDS (training images) is required here");
  HOTPATH_CHECK(batch_size >= 1 && batch_size <= 4096, "export: ", prefix, "-batch-size ", batch_size,
                " outside [1, 4096]");
  HOTPATH_CHECK(crop_scale_min > 0.0 && crop_scale_min <= 1.0, "export: ", prefix, "-crop-scale ", crop_scale_min,
                " outside (0, 1]");
  data::LoaderOptions lo = p.image.loader_options(data::resolve_shards(shards));
  HOTPATH_CHECK(!lo.shards.empty(), "export: no ", prefix, "-data shard matches ", shards.front());
  if (crop_scale_min < 1.0) {  // else the eval transform, flipped at random
    lo.crop = data::CropMode::kRandomResizedCrop;
    lo.rrc.scale_min = crop_scale_min;
  }
  lo.flip_probability = 0.5;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.seed = seed;
  lo.batch_size = static_cast<int>(batch_size);
  lo.workers = 2;
  if (labels) lo.num_classes = p.num_classes;
  auto loader = std::make_shared<data::Loader>(lo);
  auto epoch = std::make_shared<std::int64_t>(0);
  QatData next = [loader, epoch, labels, batch_size, prefix]() -> QatBatch {
    std::optional<data::Batch> b = loader->next();
    if (!b) {
      loader->seek({++*epoch, 0});
      b = loader->next();
      HOTPATH_CHECK(b.has_value(), "export: ", prefix, "-data yields no full batch of ", batch_size, " samples (lower ",
                    prefix, "-batch-size)");
    }
    return {b->images.to(at::kFloat), labels ? b->labels : at::Tensor()};
  };
  return {std::move(loader), std::move(next)};
}

// QAT on the shards of `qat`, epochs repeated.
QatResult run_qat(const Graph& graph, const Graph& start, const Package& p, const ExportQat& qat,
                  StageProgress& progress) {
  const TrainingBatches batches = training_batches(p, qat.data, qat.batch_size, qat.crop_scale_min, qat.seed,
                                                   qat.options.label_weight > 0.0, "--qat");
  QatOptions o = qat.options;
  o.progress = [&](std::int64_t step, std::int64_t steps, double) {
    progress("quantization-aware training", static_cast<std::size_t>(step), static_cast<std::size_t>(steps));
  };
  QatResult r = qat_train(graph, batches.next, o, &start);
  r.report["data"] = qat.data;
  r.report["batch_size"] = qat.batch_size;
  r.report["crop_scale_min"] = qat.crop_scale_min;
  r.report["bad_samples"] = batches.loader->stats().bad_samples;
  return r;
}

// Structured pruning of the export's fp32 graph, fine-tuned on the shards of `prune` when it has any.
PruneResult run_prune(const Graph& graph, const Package& p, const ExportPrune& prune, StageProgress& progress) {
  std::optional<TrainingBatches> batches;
  if (!prune.data.empty()) {
    batches = training_batches(p, prune.data, prune.batch_size, prune.crop_scale_min, prune.seed,
                               prune.options.finetune.label_weight > 0.0, "--prune");
  }
  PruneOptions o = prune.options;
  const bool untuned = !batches && o.finetune_steps > 0;  // fine-tuning asked for, no data to do it on: said so
  if (!batches) o.finetune_steps = 0;
  std::int64_t cut = 0;
  o.progress = [&](std::int64_t iteration, std::int64_t) { cut = iteration; };
  o.finetune.progress = [&](std::int64_t step, std::int64_t steps, double) {
    progress("pruning: fine-tuning after cut " + std::to_string(cut) + " of " + std::to_string(o.iterations),
             static_cast<std::size_t>(step), static_cast<std::size_t>(steps));
  };
  PruneResult r = prune_graph(graph, batches ? batches->next : QatData{}, o);
  r.report["data"] = prune.data;
  if (untuned) r.report["not_fine_tuned"] = "no --prune-data: the cut is not fine-tuned";
  if (batches) {
    r.report["batch_size"] = prune.batch_size;
    r.report["crop_scale_min"] = prune.crop_scale_min;
    r.report["bad_samples"] = batches->loader->stats().bad_samples;
  }
  return r;
}

// Structured and magnitude pruning of the export's fp32 graph (options.prune, options.sparsity); the pruned graph's
// outputs on the report data, what the precision conversion is then judged against. report["prune"] gains the
// pruning's report and its agreement with the unpruned outputs `fp32_out`.
std::vector<at::Tensor> prune_for_export(Graph& graph, const Package& package, const ReportData& data,
                                         const ExportOptions& options, const std::vector<at::Tensor>& fp32_out,
                                         StageProgress& progress, nlohmann::ordered_json& report) {
  HOTPATH_CHECK(package.kind == PackageKind::kImageClassifier, "export: pruning (--prune-*, --sparsity) works on "
                "image classifiers' convolutions; this is a ", package.architecture, " text model");
  nlohmann::ordered_json pruned_report;
  if (options.prune) {
    PruneResult pruned = run_prune(graph, package, *options.prune, progress);
    graph = std::move(pruned.graph);
    pruned_report = std::move(pruned.report);
  }
  if (options.sparsity > 0.0) pruned_report["magnitude"] = magnitude_prune(graph, options.sparsity);
  const Engine pruned_engine = Engine::from_graph(graph, {.threads = options.threads});
  std::vector<at::Tensor> out = run_all(pruned_engine, data, progress, "running the pruned graph");
  pruned_report["vs_unpruned"] = compare(out, fp32_out, /*embedder=*/false);
  report["prune"] = std::move(pruned_report);
  return out;
}

// The int8 conversion of `graph` (post-training, or QAT first with options.qat) on the report data; the report
// gains "qat", "quantization" and "chained_int8_convs".
void quantize_for_export(Graph& graph, const Package& package, const ReportData& data, const ExportOptions& options,
                         bool synthetic, StageProgress& progress, nlohmann::ordered_json& report) {
  QuantizeOptions qo;
  if (options.qat) {
    HOTPATH_CHECK(package.kind == PackageKind::kImageClassifier,
                  "export: quantization-aware training (--qat-data) trains image classifiers; this is a ",
                  package.architecture,
                  " text model (its int8 linears quantize dynamically: export without --qat-data)");
    // QAT starts where post-training quantization of every node ends: each conv's input range as the quantizer
    // calibrates it on the calibration data (min/max or the percentile clip, whichever gives the conv less
    // error), the weights as it rounds them (GPTQ unless --weight-rounding nearest), the biases as it corrects
    // them.
    QuantizeOptions start = qat_quantize_options({});
    start.gptq = options.gptq;
    start.bias_correction = true;
    start.keep_float = options.keep_float;
    start.progress = [&](std::string_view stage, std::size_t done, std::size_t total) {
      progress("post-training start of QAT: " + std::string(stage), done, total);
    };
    ExportQat qat = *options.qat;
    qat.options.keep_float.insert(qat.options.keep_float.end(), options.keep_float.begin(),
                                  options.keep_float.end());
    const QuantizeResult post_training = quantize_graph(graph, data.batches, start);
    for (const NodeQuantization& n : post_training.nodes) {
      if (n.op == OpKind::kConv2d && n.quantized) qat.options.initial_ranges[n.name] = {n.range_min, n.range_max};
    }
    QatResult trained = run_qat(graph, qat_start_graph(graph, post_training), package, qat, progress);
    graph = std::move(trained.graph);
    qo = qat_quantize_options(trained);
    report["qat"] = std::move(trained.report);
  } else {
    // The whole-graph target keeps the layers float whose error compounds most (quantize.h); judged on real
    // data only: on random inputs (benchmark shapes) agreement means nothing, and nothing is kept float by it.
    qo.max_output_error = synthetic ? 0.0 : options.max_output_error;
    qo.min_output_cosine = synthetic ? -1.0 : options.min_output_cosine;
    qo.keep_float = options.keep_float;
    qo.gptq = options.gptq;
    qo.clip_candidates = options.clip_candidates;
  }
  qo.progress = [&](std::string_view stage, std::size_t done, std::size_t total) {
    progress("quantize: " + std::string(stage), done, total);
  };
  QuantizeResult q = quantize_graph(graph, data.batches, qo);
  graph = std::move(q.graph);
  report["quantization"] = std::move(q.report);
  report["chained_int8_convs"] = chain_int8_convs(graph);
}

// The one-line summary of an export and whether its accuracy check refuses it; sets report["warning"] for an int8
// package calibrated on random inputs (`warning`).
struct ExportVerdict {
  std::string summary;
  std::string warning;
  bool refused = false;
};

ExportVerdict export_verdict(const Package& package, const ReportData& data, const ExportOptions& options,
                             bool synthetic, nlohmann::ordered_json& report) {
  const bool embedder = package.kind == PackageKind::kSentenceEmbedder;
  const nlohmann::ordered_json& vs = report["vs_fp32"];
  std::ostringstream summary;
  summary << precision_name(options.precision) << " package of " << package.architecture;
  if (report.contains("prune")) {
    const nlohmann::ordered_json& pr = report["prune"];
    if (pr.contains("macs")) summary << " pruned to " << 100.0 * pr["macs"]["kept"].get<double>() << " % of the MACs";
    if (pr.contains("not_fine_tuned")) summary << " (not fine-tuned: no --prune-data)";
    if (pr.contains("magnitude")) {
      summary << (pr.contains("macs") ? " and " : " ") << 100.0 * pr["magnitude"]["sparsity"].get<double>()
              << " % zero weights (no speed-up: the tensors stay dense)";
    }
    if (!synthetic) {
      summary << " (top-1 agreement " << 100.0 * pr["vs_unpruned"]["top1_agreement"].get<double>()
              << " % with the unpruned model)";
    }
  }
  summary << ": ";
  bool refused = false;
  std::string warning;
  if (synthetic) {
    // Agreement on random inputs says nothing about real data (an EfficientNet-Lite0 int8 package that agreed on
    // 100 % of them agreed with fp32 on 54 of 100 photos): only the numeric error is reported.
    summary << "max abs error " << vs["max_abs_error"].get<double>() << " vs fp32 on " << data.samples
            << " random inputs; accuracy on real data not measured";
    if (options.precision == Precision::kInt8) {
      warning = "the int8 package was calibrated on random inputs: its accuracy on real data is unknown (pass "
                "--calibration " +
                std::string(package.kind == PackageKind::kImageClassifier ? "SHARDS (held-out images)"
                                                                          : "FILE (one text per line)") +
                " to calibrate on real data and measure the loss)";
      report["warning"] = warning;
    }
  } else if (embedder) {
    const double c = vs["min_cosine"].get<double>();
    summary << "min cosine " << c << " with fp32";
    refused = !synthetic && c < kMinEmbeddingCosine;
  } else {
    const double a = vs["top1_agreement"].get<double>();
    summary << "top-1 agreement " << 100.0 * a << " % with " << (report.contains("prune") ? "the pruned fp32" : "fp32");
    refused = !synthetic && a < options.min_agreement;
  }
  if (!synthetic) {
    summary << " on " << data.samples << " samples of " << data.source << ", max abs error "
            << vs["max_abs_error"].get<double>();
  }
  if (data.bad_samples > 0) summary << " (" << data.bad_samples << " bad samples skipped)";
  report["status"] = refused ? (options.allow_accuracy_loss ? "accepted-with-loss" : "refused")
                             : (warning.empty() ? "ok" : "accuracy-unknown");
  std::ostringstream threshold;
  if (embedder) {
    threshold << "min cosine " << kMinEmbeddingCosine;
  } else {
    threshold << "--min-agreement " << std::to_string(options.min_agreement);
  }
  HOTPATH_CHECK(!refused || options.allow_accuracy_loss, "export: ", summary.str(), " — below the threshold (",
                threshold.str(), "); no package written. Pass --allow-accuracy-loss to write it anyway");
  return {summary.str(), warning, refused};
}

}  // namespace

LoweredModel lower_export_source(const ExportSource& source) { return load_source(source).lowered; }

ExportReport export_package(const ExportSource& source, const ExportOptions& options) {
  HOTPATH_CHECK(!options.out.empty(), "export: --out PKG is required");
  HOTPATH_CHECK(options.calibration_samples >= 1 && options.calibration_samples <= 1000000,
                "export: --calibration-samples ", options.calibration_samples, " outside [1, 1000000]");
  HOTPATH_CHECK(options.min_agreement >= 0.0 && options.min_agreement <= 1.0, "export: --min-agreement ",
                options.min_agreement, " outside [0, 1]");
  const fs::path out = check_out_dir(source, options);
  HOTPATH_CHECK(options.sparsity >= 0.0 && options.sparsity < 1.0, "export: --sparsity ", options.sparsity,
                " outside [0, 1)");
  if (options.prune) {  // before the model loads, as QAT's: a typo here costs no minutes
    check_prune_options(options.prune->options);
    HOTPATH_CHECK(options.prune->options.importance != Importance::kTaylor || !options.prune->data.empty(),
                  "export: --prune-importance taylor weighs the weights by their gradients on --prune-data SHARDS; "
                  "give them, or use l1 or l2");
    if (!options.prune->data.empty()) (void)data::resolve_shards(options.prune->data);
  }
  if (options.qat) {  // before the model loads and the calibration runs: a typo here costs no minutes
    HOTPATH_CHECK(options.precision == Precision::kInt8,
                  "export: --qat-data trains for an int8 export; add --precision int8");
    HOTPATH_CHECK(!options.qat->data.empty(), "export: quantization-aware training needs --qat-data SHARDS");
    (void)data::resolve_shards(options.qat->data);
  }
  StageProgress progress(options.progress, options.progress_after_s);
  progress.stage("loading the model");
  Source src = load_source(source);
  Package& package = src.lowered.package;
  package.precision = options.precision;
  const bool embedder = package.kind == PackageKind::kSentenceEmbedder;
  progress.stage("reading the calibration data");
  const ReportData data = package.kind == PackageKind::kImageClassifier ? image_data(package, options)
                                                                       : text_data(src.lowered, options);
  // Random inputs (no calibration data: benchmark shapes): agreement and output targets mean nothing on them.
  const bool synthetic = data.source.rfind("random", 0) == 0;
  const c10::InferenceMode inference;
  const Engine fp32 = Engine::from_graph(src.lowered.graph, {.threads = options.threads});
  const std::vector<at::Tensor> fp32_out = run_all(fp32, data, progress, "running the fp32 graph");
  // The lowering against the source model (eager PyTorch-style modules, the export's slowest pass per sample):
  // on the first kLoweringBatches batches only: a lowering error shows on any input, and the int8 and bf16
  // checks below run on all of them.
  constexpr std::size_t kLoweringBatches = 2;
  const std::size_t lowering_batches = std::min(kLoweringBatches, data.batches.size());
  std::vector<at::Tensor> model_out;
  for (std::size_t b = 0; b < lowering_batches; ++b) {
    model_out.push_back(src.reference(data.batches[b]));
    progress("running the source model", model_out.size(), lowering_batches);
  }

  nlohmann::ordered_json report;
  report["precision"] = precision_name(options.precision);
  report["data"] = {{"source", data.source}, {"samples", data.samples}, {"bad_samples", data.bad_samples},
                    {"bad_examples", data.bad_examples}};
  report["lowering_vs_model"] =
      compare(std::vector<at::Tensor>(fp32_out.begin(), fp32_out.begin() + static_cast<std::ptrdiff_t>(lowering_batches)),
              model_out, embedder);

  Graph graph = src.lowered.graph;
  // What the precision conversion is judged against: the fp32 graph, or the pruned one.
  std::vector<at::Tensor> reference_out = fp32_out;
  if (options.prune || options.sparsity > 0.0) {
    reference_out = prune_for_export(graph, package, data, options, fp32_out, progress, report);
  }
  if (options.precision == Precision::kInt8) quantize_for_export(graph, package, data, options, synthetic, progress, report);
  // bf16 packages store their float weights as bf16 (half the size); int8 ones keep float scales/biases.
  if (options.precision == Precision::kBf16) {
    for (auto& [key, t] : graph.params) {
      if (t.scalar_type() == at::kFloat) t = t.to(at::kBFloat16);
    }
  }
  Graph exported = graph;
  for (auto& [key, t] : exported.params) {
    if (t.scalar_type() == at::kBFloat16) t = t.to(at::kFloat);
  }
  const Engine engine = Engine::from_graph(exported, {.threads = options.threads, .precision = options.precision});
  report["engine"] = engine.describe();
  nlohmann::ordered_json vs =
      compare(run_all(engine, data, progress, "running the exported graph"), reference_out, embedder);
  report["vs_fp32"] = vs;

  const ExportVerdict verdict = export_verdict(package, data, options, synthetic, report);  // throws when refused
  package.source["exported_with"] = {{"precision", precision_name(options.precision)},
                                     {"calibration", options.calibration},
                                     {"calibration_samples", data.samples}};
  if (report.contains("prune") && report["prune"].contains("macs")) {
    package.source["exported_with"]["pruned_macs"] = report["prune"]["macs"]["kept"];
  }
  if (options.sparsity > 0.0) package.source["exported_with"]["sparsity"] = options.sparsity;
  // Again: calibration can take minutes, and a run may have been started at --out meanwhile.
  (void)check_out_dir(source, options);
  progress.stage("writing the package");
  report["timings_s"] = progress.timings();  // every stage but the writing itself
  write_dir_then_rename(out, [&](const fs::path& tmp) {
    write_package_dir(tmp, package, graph, report, src.lowered.tokenizer_files, /*overwrite=*/false);
  });
  return {std::move(report), verdict.summary, verdict.warning};
}

LoweredModel export_onnx_file(const ExportSource& source, const std::filesystem::path& out, bool overwrite,
                              const std::string& producer_version) {
  if (std::error_code ec; std::filesystem::exists(out, ec)) {
    HOTPATH_CHECK(overwrite, "export: ", out.string(), " exists (pass --overwrite to replace it)");
    // Only an ONNX file: `--out RUN/model.safetensors` would lose the trained weights (issue 28).
    HOTPATH_CHECK(std::filesystem::is_regular_file(out, ec) && out.extension() == ".onnx", "export: ", out.string(),
                  " is not an .onnx file; --format onnx --overwrite replaces only an ONNX file: choose another --out");
  }
  LoweredModel m;
  if (!source.model_dir.empty() && is_package_dir(source.model_dir)) {  // a package: its graph as it is (pruned, say)
    m.package = read_package(source.model_dir);
    HOTPATH_CHECK(m.package.precision == Precision::kFp32, "export: --format onnx writes fp32 graphs; the package ",
                  source.model_dir, " is ", precision_name(m.package.precision),
                  " (export its source with --format onnx, or an fp32 package)");
    m.graph = load_package_graph(m.package);
  } else {
    m = lower_export_source(source);
  }
  export_onnx(m.graph, out.string(), {.producer_version = producer_version});
  return m;
}

}  // namespace hotpath::infer
