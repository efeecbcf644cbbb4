// predictor.h: engine or eager, decided once; the package's text facts resolved once; softmax + top-k once.
#include "hotpath/infer/predictor.h"

#include <ATen/ops/softmax.h>
#include <ATen/ops/topk.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/ops/autocast_ops.h"

namespace hotpath::infer {
namespace {

constexpr std::int64_t kMaxLength = 1 << 16;

// The text facts the engine and the server rely on, from the weights (the truth) and the tokenizer: recorded
// values must agree with them; a package written before they were recorded gets them here.
// Returns the hidden width (a sentence embedding's dimension).
std::int64_t resolve_text(Package& p, const Graph& graph, const text::Tokenizer* tokenizer, bool max_length_given) {
  const std::string pre = (std::filesystem::path(p.dir) / "preprocess.json").string();
  const std::optional<TextEmbedding> e = text_embedding(graph);
  HOTPATH_CHECK(e.has_value(), p.dir,
                "/config.json: the text graph has no bert_embed node with word and position tables");
  HOTPATH_CHECK(p.text.vocab_size == 0 || p.text.vocab_size == e->vocab, pre, ": vocab_size ", p.text.vocab_size,
                ", but the word embeddings hold ", e->vocab, " rows");
  HOTPATH_CHECK(p.text.type_vocab_size == 0 || p.text.type_vocab_size == e->type_vocab, pre, ": type_vocab_size ",
                p.text.type_vocab_size, ", but the token-type embeddings hold ", e->type_vocab, " rows");
  p.text.vocab_size = e->vocab;
  p.text.type_vocab_size = e->type_vocab;
  HOTPATH_CHECK(p.text.max_length <= e->positions, max_length_given ? p.dir + ": max length" : pre + ": max_length",
                " ", p.text.max_length, " exceeds the model's ", e->positions, " position embeddings");
  if (tokenizer != nullptr) {
    HOTPATH_CHECK(tokenizer->vocab_size() <= static_cast<std::size_t>(e->vocab), p.dir, ": the tokenizer has ",
                  tokenizer->vocab_size(), " tokens but the model's word embeddings hold ", e->vocab);
    HOTPATH_CHECK(!p.text.pad_id || *p.text.pad_id == tokenizer->pad_id(), pre, ": pad_id ", p.text.pad_id.value_or(0),
                  ", but the tokenizer pads with ", tokenizer->pad_id());
    p.text.pad_id = tokenizer->pad_id();
  }
  if (!p.text.pad_id) p.text.pad_id = 0;  // token ids only, nothing recorded: BERT's [PAD]
  HOTPATH_CHECK(*p.text.pad_id < e->vocab, pre, ": pad_id ", *p.text.pad_id, " is not below the vocabulary's ",
                e->vocab);
  return e->hidden;
}

}  // namespace

Predictor Predictor::load(const Package& package, const PredictorOptions& options) {
  HOTPATH_CHECK(options.max_length == 0 || (options.max_length >= 2 && options.max_length <= kMaxLength), package.dir,
                ": max length ", options.max_length, " outside [2, ", kMaxLength, "]");
  HOTPATH_CHECK(options.threads >= 0 && options.threads <= 1024, package.dir, ": threads ", options.threads,
                " outside [0, 1024]");
  Predictor p;
  auto pkg = std::make_shared<Package>(package);
  if (pkg->layout == PackageLayout::kRunDirectory) {
    HOTPATH_CHECK(pkg->kind == PackageKind::kImageClassifier, pkg->dir, ": a run directory holds an image classifier");
    p.model_ = load_package_model(*pkg);
    p.autocast_ = options.autocast;
    p.output_width_ = pkg->num_classes;
    p.package_ = std::move(pkg);
    return p;
  }
  HOTPATH_CHECK(!options.autocast, pkg->dir, ": a model package runs at its exported precision (",
                precision_name(pkg->precision), "), not under autocast");
  Graph graph = load_package_graph(*pkg);
  if (pkg->kind != PackageKind::kImageClassifier) {
    if (pkg->text.tokenizer) {
      p.tokenizer_ = std::make_shared<const text::Tokenizer>(text::Tokenizer::from_directory(pkg->dir));
    }
    if (options.max_length != 0) pkg->text.max_length = options.max_length;
    p.output_width_ = resolve_text(*pkg, graph, p.tokenizer_.get(), options.max_length != 0);
  }
  if (pkg->kind != PackageKind::kSentenceEmbedder) p.output_width_ = static_cast<std::int64_t>(pkg->labels.size());
  p.engine_ = std::make_shared<const Engine>(
      Engine::from_graph(std::move(graph),
                         {.threads = options.threads, .precision = pkg->precision, .device = options.device}));
  p.package_ = std::move(pkg);
  return p;
}

Predictor Predictor::open(const std::filesystem::path& dir, const PredictorOptions& options) {
  return load(read_package(dir), options);
}

Predictor Predictor::from_model(models::ModelHandle model, EvalPreprocess image, std::vector<std::string> labels) {
  HOTPATH_ASSERT(model != nullptr);
  auto pkg = std::make_shared<Package>();
  pkg->layout = PackageLayout::kRunDirectory;
  pkg->image = std::move(image);
  pkg->num_classes = static_cast<std::int64_t>(labels.size());
  pkg->labels = std::move(labels);
  model->eval();
  Predictor p;
  p.model_ = std::move(model);
  p.output_width_ = pkg->num_classes;
  p.package_ = std::move(pkg);
  return p;
}

std::vector<ValueSpec> Predictor::input_specs() const {
  if (engine_) return engine_->graph().inputs;
  const EvalPreprocess& im = package_->image;
  // The name and shape the lowered image graphs take (lower_vision.cpp), so a run directory and its package agree.
  return {{.name = "images",
           .dtype = at::kFloat,
           .shape = {-1, im.channels, im.image_size, im.image_size},
           .dim_names = {}}};
}

std::vector<std::string> Predictor::output_names() const {
  if (engine_) return engine_->graph().outputs;
  return {"logits"};
}

at::Tensor Predictor::image_input(std::span<const std::byte> encoded) const {
  HOTPATH_CHECK(kind() == PackageKind::kImageClassifier, package_->dir, ": a ", package_kind_name(kind()),
                " takes text, not an image");
  return package_->image.apply(encoded);
}

std::vector<text::Encoding> Predictor::encode(std::span<const std::string_view> texts,
                                              std::span<const std::string_view> pairs, unsigned threads) const {
  HOTPATH_CHECK(kind() != PackageKind::kImageClassifier, package_->dir, ": an image_classifier takes images, not text");
  HOTPATH_CHECK(tokenizer_ != nullptr, package_->dir, ": the package has no tokenizer files (tokenizer.json or "
                "vocab.txt); it takes input_ids, attention_mask and token_type_ids tensors");
  HOTPATH_CHECK(pairs.empty() || pairs.size() == texts.size(), package_->dir, ": ", pairs.size(),
                " second texts for ", texts.size(), " texts (give one per text, or none)");
  const text::EncodeOptions o{.max_length = static_cast<std::size_t>(package_->text.max_length),
                              .truncation = package_->text.truncation,
                              .threads = threads};
  return pairs.empty() ? tokenizer_->encode_batch(texts, o) : tokenizer_->encode_pair_batch(texts, pairs, o);
}

text::TextBatchTensors Predictor::text_inputs(std::span<const std::string_view> texts,
                                              std::span<const std::string_view> pairs) const {
  return text::to_padded_tensors(encode(texts, pairs), *package_->text.pad_id);
}

std::vector<at::Tensor> Predictor::run(const std::vector<at::Tensor>& inputs) const {
  if (engine_) return engine_->run(inputs);
  HOTPATH_CHECK(inputs.size() == 1, package_->dir, ": an image model takes one input, got ", inputs.size());
  torch::NoGradGuard no_grad;
  const ops::AutocastGuard autocast(inputs.front().device().type(), autocast_);
  return {model_->forward(inputs.front()).to(at::kFloat)};
}

std::vector<std::vector<TopK>> Predictor::top_k(const at::Tensor& logits, std::optional<std::int64_t> k) const {
  HOTPATH_CHECK(package_->postprocess.output == OutputKind::kClassScores, package_->dir, ": a ",
                package_kind_name(kind()), " answers embeddings, not classes");
  return infer::top_k(logits, k.value_or(package_->postprocess.top_k), package_->labels);
}

std::vector<std::vector<TopK>> top_k(const at::Tensor& logits, std::int64_t k, const std::vector<std::string>& labels) {
  HOTPATH_CHECK(k >= 1, "classify: k is ", k, ", expected at least 1");
  const at::Tensor probs = at::softmax(logits, 1);
  k = std::min(k, probs.size(1));
  const auto [values, indices] = probs.topk(k, 1);
  const at::Tensor values_cpu = values.to(at::kDouble).cpu().contiguous();
  const at::Tensor indices_cpu = indices.cpu().contiguous();
  const double* v = values_cpu.const_data_ptr<double>();
  const std::int64_t* ix = indices_cpu.const_data_ptr<std::int64_t>();
  std::vector<std::vector<TopK>> out(static_cast<std::size_t>(probs.size(0)));
  for (std::size_t n = 0; n < out.size(); ++n) {
    for (std::int64_t i = 0; i < k; ++i) {
      const std::size_t at = n * static_cast<std::size_t>(k) + static_cast<std::size_t>(i);
      const std::int64_t index = ix[at];
      std::string label = index < static_cast<std::int64_t>(labels.size()) ? labels[static_cast<std::size_t>(index)]
                                                                           : std::to_string(index);
      out[n].push_back({.index = index, .label = std::move(label), .prob = v[at]});
    }
  }
  return out;
}

}  // namespace hotpath::infer
