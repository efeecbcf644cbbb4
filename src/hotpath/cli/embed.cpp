// `hotpath embed`: sentence embeddings (mean pooling + L2 normalisation, as sentence-transformers'
// all-MiniLM-L6-v2) of text lines, one JSON array per line or a float32 .npy [N, H].
//   hotpath embed --model all-MiniLM-L6-v2 < sentences.txt > embeddings.jsonl
//   hotpath embed --model DIR --batch-size 64 --max-length 128 --output embeddings.npy < sentences.txt
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/bert.h"
#include "hotpath/text/tokenize_bench.h"
#include "hotpath/text/tokenizer.h"

namespace hotpath::cli {
namespace {

struct EmbedArgs {
  std::string model;
  std::string input = "-";
  std::string output;  // "" = JSON lines on stdout
  std::size_t batch_size = 32;
  std::size_t max_length = 0;  // 0: sentence_bert_config.json's max_seq_length, else the model's positions
  int threads = 0;             // 0: LibTorch's default
};

std::string read_input(const std::string& path) {
  if (path != "-") return read_file(path);
  std::string text(std::istreambuf_iterator<char>(std::cin), {});
  HOTPATH_CHECK(!std::cin.bad(), "embed: cannot read stdin");
  return text;
}

// sentence-transformers truncates to max_seq_length (256 for all-MiniLM-L6-v2), not to the 512 positions.
std::size_t default_max_length(const std::filesystem::path& dir, const models::BertConfig& config) {
  const std::filesystem::path path = dir / "sentence_bert_config.json";
  if (std::filesystem::exists(path)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(path.string()));
    } catch (const nlohmann::json::exception& e) {
      HOTPATH_CHECK(false, path.string(), ": invalid JSON: ", e.what());
    }
    if (j.is_object() && j.contains("max_seq_length") && j.at("max_seq_length").is_number_integer()) {
      const auto n = j.at("max_seq_length").get<std::int64_t>();
      HOTPATH_CHECK(n > 0, path.string(), ": \"max_seq_length\" must be positive, found ", n);
      return static_cast<std::size_t>(std::min(n, config.max_position_embeddings));
    }
  }
  return static_cast<std::size_t>(config.max_position_embeddings);
}

// numpy's .npy v1.0: magic, version, u16 header length, a Python dict literal padded with spaces
// to a 64-byte boundary and ended by '\n', then the C-order little-endian data.
std::string npy_header(std::int64_t rows, std::int64_t cols) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "), }";
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

void append_row(std::string& out, const float* row, std::int64_t n) {
  char buf[32];
  out += '[';
  for (std::int64_t j = 0; j < n; ++j) {
    if (j != 0) out += ',';
    // Shortest text that reads back as the same float.
    const auto r = std::to_chars(buf, buf + sizeof buf, row[j]);
    out.append(buf, r.ptr);
  }
  out += "]\n";
}

void run(const EmbedArgs& a) {
  if (a.threads > 0) at::set_num_threads(a.threads);
  const std::filesystem::path dir(a.model);
  const text::Tokenizer tok = text::Tokenizer::from_directory(dir);
  const models::SentenceEmbedder embedder = models::load_sentence_embedder(dir);
  const models::BertConfig& config = embedder.model->config();
  HOTPATH_CHECK(tok.vocab_size() <= static_cast<std::size_t>(config.vocab_size), a.model, ": the tokenizer has ",
                tok.vocab_size(), " tokens but config.json's vocab_size is ", config.vocab_size);
  const std::size_t max_length = a.max_length != 0 ? a.max_length : default_max_length(dir, config);
  HOTPATH_CHECK(max_length <= static_cast<std::size_t>(config.max_position_embeddings), "embed: --max-length ",
                max_length, " exceeds the model's max_position_embeddings ", config.max_position_embeddings);

  const std::string source = a.input == "-" ? std::string("stdin") : a.input;
  const std::string input = read_input(a.input);
  const std::vector<std::string_view> lines = text::split_lines(input);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::size_t bad = text::find_invalid_utf8(lines[i]);
    HOTPATH_CHECK(bad == std::string_view::npos, "embed: ", source, ":", i + 1, ": invalid UTF-8 at byte ", bad,
                  " of the line");
  }

  // Encode everything unpadded, then batch neighbours in length order (as sentence-transformers does):
  // each batch pads only to its own longest sentence.
  text::EncodeOptions o;
  o.max_length = max_length;
  o.threads = static_cast<unsigned>(std::max(1, at::get_num_threads()));
  const std::vector<text::Encoding> enc = tok.encode_batch(lines, o);
  std::vector<std::size_t> order(enc.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return enc[x].size() > enc[y].size(); });

  const std::int64_t n = static_cast<std::int64_t>(enc.size());
  const std::int64_t h = config.hidden_size;
  at::Tensor result = at::empty({n, h}, at::kFloat);
  const at::NoGradGuard no_grad;
  for (std::size_t begin = 0; begin < order.size(); begin += a.batch_size) {
    const std::size_t end = std::min(order.size(), begin + a.batch_size);
    const auto b = static_cast<std::int64_t>(end - begin);
    const auto l = static_cast<std::int64_t>(enc[order[begin]].size());  // longest first
    at::Tensor ids = at::full({b, l}, tok.pad_id(), at::kLong);
    at::Tensor mask = at::zeros({b, l}, at::kLong);
    at::Tensor types = at::zeros({b, l}, at::kLong);
    auto* pid = ids.data_ptr<std::int64_t>();
    auto* pmask = mask.data_ptr<std::int64_t>();
    auto* ptype = types.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < b; ++i) {
      const text::Encoding& e = enc[order[begin + static_cast<std::size_t>(i)]];
      for (std::size_t j = 0; j < e.size(); ++j) {
        pid[i * l + static_cast<std::int64_t>(j)] = e.ids[j];
        pmask[i * l + static_cast<std::int64_t>(j)] = e.attention_mask[j];
        ptype[i * l + static_cast<std::int64_t>(j)] = e.type_ids[j];
      }
    }
    const at::Tensor emb = embedder.forward(ids, mask, types).to(at::kFloat).contiguous();
    for (std::int64_t i = 0; i < b; ++i) {
      result[static_cast<std::int64_t>(order[begin + static_cast<std::size_t>(i)])].copy_(emb[i]);
    }
  }

  const float* data = result.const_data_ptr<float>();
  if (a.output.size() >= 4 && a.output.ends_with(".npy")) {
    const std::string header = npy_header(n, h);
    write_file_atomic(a.output, {std::as_bytes(std::span(header)),
                                 std::as_bytes(std::span(data, static_cast<std::size_t>(n * h)))});
    return;
  }
  std::string out;
  out.reserve(static_cast<std::size_t>(n * h) * 12);
  for (std::int64_t i = 0; i < n; ++i) append_row(out, data + i * h, h);
  if (!a.output.empty()) {
    HOTPATH_CHECK(a.output.ends_with(".jsonl") || a.output.ends_with(".json"), "embed: --output ", a.output,
                  " must end in .npy or .jsonl");
    write_file_atomic(a.output, out);
    return;
  }
  HOTPATH_CHECK(std::fwrite(out.data(), 1, out.size(), stdout) == out.size() && std::fflush(stdout) == 0,
                "embed: cannot write stdout");
}

}  // namespace

void add_embed(CLI::App& app) {
  auto args = std::make_shared<EmbedArgs>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "Sentence embeddings (mean pooling + L2 norm, as sentence-transformers) of text lines");
  cmd->add_option("--model", args->model, "Hugging Face / sentence-transformers model directory")->required();
  cmd->add_option("--input", args->input, "Text file, one sentence per line ('-' = stdin)");
  cmd->add_option("--output", args->output, "FILE.npy (float32 [N, H]) or FILE.jsonl; default: JSON lines on stdout");
  cmd->add_option("--batch-size", args->batch_size, "Sentences per forward pass (padded to the batch's longest)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  cmd->add_option("--max-length", args->max_length,
                  "Truncate to this many tokens (0: sentence_bert_config.json's max_seq_length, else the model's)");
  cmd->add_option("--threads", args->threads, "LibTorch intra-op threads (0: its default)")->check(CLI::Range(0, 1024));
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
