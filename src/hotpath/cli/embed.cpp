// `hotpath embed`: sentence embeddings (mean pooling + L2 normalisation, as sentence-transformers'
// all-MiniLM-L6-v2) of text lines, one JSON array per line or a float32 .npy [N, H].
//   hotpath embed --model all-MiniLM-L6-v2 < sentences.txt > embeddings.jsonl
//   hotpath embed --model DIR --batch-size 64 --max-length 128 --output embeddings.npy < sentences.txt
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/atomic_file.h"
#include "hotpath/core/bounded.h"
#include "hotpath/core/error.h"
#include "hotpath/core/input_file.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/formats/npy.h"
#include "hotpath/infer/sentence_embed.h"
#include "hotpath/text/lines.h"

namespace hotpath::cli {
namespace {

struct EmbedArgs {
  std::string model;
  std::string input = "-";
  std::string output;  // "" = JSON lines on stdout
  std::size_t batch_size = infer::SentenceEncodeOptions{}.batch_size;
  std::size_t max_length = infer::SentenceEncoderLoadOptions{}.max_length;  // 0: sentence_bert_config.json's, else the model's positions
  int threads = 0;             // 0: LibTorch's default
};

std::string read_input(const std::string& path) {
  if (path != "-") return read_file(path, read_limit::kList, "input");
  return read_stream(std::cin, read_limit::kList, "embed: stdin");
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
  const infer::SentenceEncoder encoder = infer::SentenceEncoder::from_dir(a.model, {.max_length = a.max_length});

  const std::string source = a.input == "-" ? std::string("stdin") : a.input;
  const std::string input = read_input(a.input);
  const std::vector<std::string_view> lines = text::split_lines(input);
  infer::check_utf8_lines(lines, source);
  const at::Tensor result = encoder.encode(lines, {.batch_size = a.batch_size});
  const std::int64_t n = result.size(0);
  const std::int64_t h = result.size(1);

  const float* data = result.const_data_ptr<float>();
  if (a.output.size() >= 4 && a.output.ends_with(".npy")) {
    formats::write_npy(a.output, formats::NpyDtype::kFloat32, {n, h},
                       std::as_bytes(std::span(data, static_cast<std::size_t>(n * h))));
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
  cmd->add_option("--model", args->model, "sentence-transformers / Hugging Face model directory, or a model package (hotpath export)")->required();
  cmd->add_option("--input", args->input, "Text file, one sentence per line ('-' = stdin)");
  cmd->add_option("--output", args->output, "FILE.npy (float32 [N, H]) or FILE.jsonl; default: JSON lines on stdout");
  cmd->add_option("--batch-size", args->batch_size, "Sentences per forward pass (padded to the batch's longest)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  cmd->add_option("--max-length", args->max_length,
                  "Truncate to this many tokens (0: sentence_bert_config.json's max_seq_length, else the model's)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20));
  cmd->add_option("--threads", args->threads, "LibTorch intra-op threads (0: its default)")->check(CLI::Range(std::int64_t{0}, hotpath::max_threads()));
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
