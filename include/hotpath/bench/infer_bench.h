// hotpath/bench/infer_bench.h — `hotpath bench infer PKG`: the inference engine on a model package, side by
// side with PyTorch, ONNX Runtime and OpenVINO in one invocation, on the same inputs and scenario rules.
//
//   InferBenchOptions o{.package = "pkg/resnet50", .scenario = "offline", .batch = 32, .compare = "torch,onnxruntime"};
//   std::vector<std::string> table;
//   Json report = run_infer_bench(o, &std::cerr, &table);   // report["engines"]["hotpath"]["per_s"], ratio_vs_ort_fp32
//
// What runs: Engine::load(PKG, {.threads}) (the package's precision) through bench/infer_scenario.h, and
// bench/peers/infer_peers.py for the peer engines (torch_fp32, torch_bf16, ort_fp32, ort_int8, openvino_fp32,
// openvino_default; --compare picks groups torch / onnxruntime / openvino). Inputs are made here, seeded, and
// written as .npy for the peers: images N(0, 1) [batch, C, S, S]; text [CLS] w… [SEP] with ids uniform over
// the vocabulary above 1000, all seq_len tokens attended, token types 0. `batch` samples: one offline batch;
// single-stream and server queries are sample i % batch alone.
//
// Weights: the package holds folded graph weights, which the peers cannot load. The peers get the unfolded
// weights (torchvision / Hugging Face key names) from --peer-weights, else from the package's provenance
// (config.json "source": "unfolded_weights" or "model_dir"/model.safetensors) when it names an existing
// file, else they build the architecture with seeded random weights: then their rates are comparable but
// hotpath's outputs are not (the report says "accuracy_comparable": false and hotpath gets no accuracy).
// Accuracy of every engine is measured against torch fp32's output on the same inputs (top-1 agreement +
// max abs logit diff; embeddings: min cosine + max abs diff).
//
// --repeats R alternates hotpath and the peers' process R times; each engine's best run (per_s) is reported,
// every run kept. ratio_vs_<engine> = hotpath per_s / that engine's per_s (> 1: hotpath is faster);
// ratio_vs_best_peer against the fastest peer row.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "hotpath/bench/harness.h"
#include "hotpath/bench/infer_scenario.h"

namespace hotpath::bench {

struct InferBenchOptions {
  std::string package;
  std::string scenario = "offline";  // singlestream | offline | server
  std::string compare;               // "" or a subset of torch,onnxruntime,openvino
  std::string engines;               // or exact peer engine names (overrides compare): "ort_int8,openvino_fp32"
  std::int64_t batch = 32;           // offline batch = samples written for the peers
  std::int64_t seq_len = 0;          // text packages: tokens per sample (0 = the package's max_length)
  int threads = 2;
  std::string device = "cpu";        // cuda: Engine on cuda:0 in fp16; peers torch_fp16_cuda, ort_cuda (docs/gpu.md)
  int repeats = 1;
  int warmup = 2;
  std::int64_t min_queries = 20;
  double min_seconds = 1.0;
  double max_seconds = 20.0;
  double server_p99_ms = 0;          // 0: 4 × hotpath's batch-1 latency (median of 5), the same bound for all
  std::int64_t server_queries = 100;
  int server_steps = 5;
  std::uint64_t seed = 0;
  std::string peer_model;            // the peers' --model (default: the package's architecture / kind)
  std::string peer_weights;          // unfolded weights for the peers (see above)
  std::string peer_config;           // bert: config.json for the peers (default: derived from the graph)
  std::string peer_model_dir;        // bert / minilm: a Hugging Face directory for the peers
  std::string python;
  bool keep = false;                 // keep the scratch directory (inputs, peer JSON, exported .onnx)
};

// {"benchmark": "infer", package facts, "engines": {name: {per_s, p50_ms, p90_ms, p99_ms, accuracy, runs,
//  all_runs}}, "skipped": {peer: why}, "ratio_vs_<peer>"..., "best_peer", "ratio_vs_best_peer",
//  "engine_describe", "dispatch", "host", load, "command"}. `table_rows` gets a markdown table (header first).
Json run_infer_bench(const InferBenchOptions& options, std::ostream* log, std::vector<std::string>* table_rows);

// The markdown table of a report's "engines" (header, separator, one row per engine, hotpath first).
std::vector<std::string> infer_table(const Json& report);

}  // namespace hotpath::bench
