// Sentence embeddings end to end: see include/hotpath/models/sentence_embed.h.
#include "hotpath/infer/sentence_embed.h"

#include <ATen/Parallel.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/empty.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/ops/attention.h"
#include "hotpath/text/bert_normalizer.h"
#include "hotpath/text/text_batch_tensor.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/json.h"

namespace hotpath::infer {
using namespace hotpath::formats;  // BertConfig
using namespace hotpath::models;   // the BERT encoder, pooling
using namespace hotpath::ops;  // fused_attention
namespace {

// sentence-transformers truncates to max_seq_length (256 for all-MiniLM-L6-v2), not to the 512 positions.
std::size_t default_max_length(const std::filesystem::path& dir, const BertConfig& config) {
  const std::filesystem::path path = dir / "sentence_bert_config.json";
  if (std::filesystem::exists(path)) {
    const nlohmann::json j = parse_json(read_file(path.string(), read_limit::kConfig, "config"), path.string());
    if (j.is_object() && j.contains("max_seq_length") && j.at("max_seq_length").is_number_integer()) {
      const auto n = j.at("max_seq_length").get<std::int64_t>();
      HOTPATH_CHECK(n > 0, path.string(), ": \"max_seq_length\" must be positive, found ", n);
      return static_cast<std::size_t>(std::min(n, config.max_position_embeddings));
    }
  }
  return static_cast<std::size_t>(config.max_position_embeddings);
}

// masked_mean_pool (and the L2 normalisation) of float32 hidden [b, l, h] with the int64 mask [b, l],
// row i written to result[rows[i]]. The same arithmetic as SentenceEmbedder::forward: sum of the kept
// tokens / max(count, 1e-9), then x / max(‖x‖, 1e-12).
void pool_into(const at::Tensor& hidden, const std::int64_t* mask, bool normalize, const std::int64_t* rows,
               at::Tensor& result) {
  const std::int64_t b = hidden.size(0), l = hidden.size(1), h = hidden.size(2);
  const float* in = hidden.const_data_ptr<float>();
  float* out = result.data_ptr<float>();
  for (std::int64_t i = 0; i < b; ++i) {
    float* dst = out + rows[i] * h;
    std::fill(dst, dst + h, 0.0f);
    float count = 0;
    for (std::int64_t t = 0; t < l; ++t) {
      if (mask[i * l + t] == 0) continue;
      const float* src = in + (i * l + t) * h;
      for (std::int64_t j = 0; j < h; ++j) dst[j] += src[j];
      count += 1;
    }
    const float inv = 1.0f / std::max(count, 1e-9f);
    double sq = 0;
    for (std::int64_t j = 0; j < h; ++j) {
      dst[j] *= inv;
      sq += static_cast<double>(dst[j]) * dst[j];
    }
    if (!normalize) continue;
    const float scale = 1.0f / std::max(static_cast<float>(std::sqrt(sq)), 1e-12f);
    for (std::int64_t j = 0; j < h; ++j) dst[j] *= scale;
  }
}

}  // namespace

SentenceEncoder SentenceEncoder::from_directory(const std::filesystem::path& dir,
                                                const SentenceEncoderLoadOptions& options) {
  text::Tokenizer tok = text::Tokenizer::from_directory(dir);
  BertLoadOptions load;
  load.model.attention = options.attention != nullptr ? options.attention : static_cast<models::AttentionFn>(&fused_attention);
  SentenceEmbedder embedder = load_sentence_embedder(dir, load);
  const BertConfig& config = embedder.model->config();
  HOTPATH_CHECK(tok.vocab_size() <= static_cast<std::size_t>(config.vocab_size), dir.string(), ": the tokenizer has ",
                tok.vocab_size(), " tokens but config.json's vocab_size is ", config.vocab_size);
  const std::size_t max_length = options.max_length != 0 ? options.max_length : default_max_length(dir, config);
  return SentenceEncoder(std::move(tok), std::move(embedder), max_length);
}

SentenceEncoder SentenceEncoder::from_dir(const std::filesystem::path& dir, const SentenceEncoderLoadOptions& options) {
  return is_package_dir(dir) ? from_package(read_package(dir), options) : from_directory(dir, options);
}

SentenceEncoder SentenceEncoder::from_package(const Package& package, const SentenceEncoderLoadOptions& options) {
  HOTPATH_CHECK(package.kind == PackageKind::kSentenceEmbedder, package.dir, ": a ", package_kind_name(package.kind),
                " package, expected a sentence_embedder (export a sentence-transformers directory)");
  HOTPATH_CHECK(package.text.tokenizer, package.dir, ": the package has no tokenizer files (tokenizer.json or "
                "vocab.txt) to read sentences with");
  HOTPATH_CHECK(options.max_length <= (std::size_t{1} << 16), "embed: max length ", options.max_length,
                " outside [2, 65536]");
  return SentenceEncoder(Predictor::load(package, {.max_length = static_cast<std::int64_t>(options.max_length)}));
}

SentenceEncoder::SentenceEncoder(Predictor predictor)
    : tokenizer_(*predictor.tokenizer()),
      predictor_(std::move(predictor)),
      dimension_(predictor_->output_width()),
      max_length_(static_cast<std::size_t>(predictor_->text().max_length)) {}

SentenceEncoder::SentenceEncoder(text::Tokenizer tokenizer, SentenceEmbedder embedder, std::size_t max_length)
    : tokenizer_(std::move(tokenizer)), embedder_(std::move(embedder)), max_length_(max_length) {
  dimension_ = embedder_->model->config().hidden_size;
  const std::int64_t positions = embedder_->model->config().max_position_embeddings;
  HOTPATH_CHECK(max_length_ > 0 && max_length_ <= static_cast<std::size_t>(positions), "embed: max length ",
                max_length_, " must be in [1, ", positions, "] (the model's max_position_embeddings)");
}

std::vector<std::size_t> longest_first_order(std::span<const text::Encoding> encodings) {
  std::vector<std::size_t> order(encodings.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return encodings[x].size() > encodings[y].size(); });
  return order;
}

at::Tensor SentenceEncoder::encode(std::span<const std::string_view> lines, const SentenceEncodeOptions& options) const {
  HOTPATH_CHECK(options.batch_size > 0, "embed: batch size must be positive");
  text::EncodeOptions o;
  o.max_length = max_length_;
  o.threads = options.threads != 0 ? options.threads : static_cast<unsigned>(std::max(1, at::get_num_threads()));
  // Unpadded: each batch then pads only to its own longest line.
  const std::vector<text::Encoding> enc =
      predictor_ ? predictor_->encode(lines, {}, o.threads) : tokenizer_.encode_batch(lines, o);
  const std::vector<std::size_t> order = longest_first_order(enc);

  // No autograd state at all (no version counters, no graph): cheaper than NoGradGuard.
  const c10::InferenceMode inference;
  const auto n = static_cast<std::int64_t>(enc.size());
  at::Tensor result = at::empty({n, dimension()}, at::kFloat);
  if (n == 0) return result;
  // One buffer per input for the largest batch (the first: longest lines), viewed per batch as [b, l].
  const auto max_b = std::min(static_cast<std::int64_t>(options.batch_size), n);
  const auto max_l = static_cast<std::int64_t>(enc[order.front()].size());
  const at::Tensor ids_buf = at::empty({max_b * max_l}, at::kLong);
  const at::Tensor mask_buf = at::empty({max_b * max_l}, at::kLong);
  const at::Tensor types_buf = at::empty({max_b * max_l}, at::kLong);
  const at::Tensor rows_buf = at::empty({max_b}, at::kLong);
  const std::int64_t pad = predictor_ ? *predictor_->text().pad_id : tokenizer_.pad_id();
  for (std::size_t begin = 0; begin < order.size(); begin += options.batch_size) {
    const std::size_t end = std::min(order.size(), begin + options.batch_size);
    const auto b = static_cast<std::int64_t>(end - begin);
    const auto l = static_cast<std::int64_t>(enc[order[begin]].size());  // longest first
    const std::vector<std::size_t> rows(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                        order.begin() + static_cast<std::ptrdiff_t>(end));
    std::int64_t* prow = rows_buf.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < b; ++i) prow[i] = static_cast<std::int64_t>(rows[static_cast<std::size_t>(i)]);
    const std::int64_t* pmask = mask_buf.const_data_ptr<std::int64_t>();
    text::write_padded_rows(enc, rows, l, pad, ids_buf.data_ptr<std::int64_t>(), mask_buf.data_ptr<std::int64_t>(),
                            types_buf.data_ptr<std::int64_t>());
    const at::Tensor ids = ids_buf.narrow(0, 0, b * l).view({b, l});
    const at::Tensor mask = mask_buf.narrow(0, 0, b * l).view({b, l});
    const at::Tensor types = types_buf.narrow(0, 0, b * l).view({b, l});
    if (predictor_) {  // the package's graph pools and normalises itself
      result.index_copy_(0, rows_buf.narrow(0, 0, b), predictor_->run({ids, mask, types}).front());
      continue;
    }
    const at::Tensor hidden = embedder_->model->forward(ids, mask, types);
    if (hidden.scalar_type() == at::kFloat && hidden.is_contiguous()) {
      // Pooling + normalisation straight into the row's place in input order: one pass instead of
      // SentenceEmbedder::forward's ten small ATen ops (each a parallel region) and an index_copy_.
      pool_into(hidden, pmask, embedder_->options().normalize, prow, result);
    } else {
      at::Tensor pooled = masked_mean_pool(hidden, mask);  // as SentenceEmbedder::forward
      if (embedder_->options().normalize) pooled = pooled / at::clamp_min(pooled.norm(2, {1}, true), 1e-12);
      result.index_copy_(0, rows_buf.narrow(0, 0, b), pooled.to(at::kFloat));
    }
  }
  return result;
}

void check_utf8_lines(std::span<const std::string_view> lines, std::string_view source) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::size_t bad = text::find_invalid_utf8(lines[i]);
    HOTPATH_CHECK(bad == std::string_view::npos, "embed: ", source, ":", i + 1, ": invalid UTF-8 at byte ", bad,
                  " of the line");
  }
}

}  // namespace hotpath::infer
