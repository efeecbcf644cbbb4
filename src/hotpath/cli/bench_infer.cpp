// `hotpath bench infer PKG --scenario singlestream|offline|server --compare torch,onnxruntime,openvino
// --batch N --threads T --json FILE`: the inference engine on a model package and, in the same invocation on
// the same inputs, PyTorch / ONNX Runtime / OpenVINO (the benchmark: hotpath/bench/infer_bench.h).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "hotpath/bench/infer_bench.h"

namespace hotpath::cli {

void add_bench_infer(CLI::App& bench) {
  auto args = std::make_shared<bench::InferBenchOptions>();
  auto json_path = std::make_shared<std::string>();
  CLI::App* cmd = bench.add_subcommand(
      "infer", "Inference of a model package (MLPerf-style single-stream latency, offline throughput, server QPS "
               "at a p99 bound) and, with --compare, PyTorch / ONNX Runtime / OpenVINO on the same inputs");
  cmd->add_option("package", args->package, "Model package directory (hotpath export)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--scenario", args->scenario, "What to measure")
      ->check(CLI::IsMember({"singlestream", "offline", "server"}));
  cmd->add_option("--compare", args->compare,
                  "Peers, comma-separated: torch (fp32, bf16 where native), onnxruntime (fp32, int8), "
                  "openvino (f32, default precision)");
  cmd->add_option("--engines", args->engines,
                  "Exact peer engines instead of --compare: torch_fp32,torch_bf16,ort_fp32,ort_int8,openvino_fp32,"
                  "openvino_default");
  cmd->add_option("--batch", args->batch, "Offline batch (the samples every scenario draws from)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--seq-len", args->seq_len, "Text packages: tokens per sample (default: the package's max_length)")
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 16));
  cmd->add_option("--threads", args->threads, "Intra-op threads for every engine")->check(CLI::Range(1, 1024));
  cmd->add_option("--device", args->device,
                  "cpu, or cuda: the engine in fp16 on the GPU vs PyTorch eager fp16 on the GPU (--compare torch) and "
                  "ONNX Runtime's CUDA provider (--compare onnxruntime; skipped with the reason where absent)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--repeats", args->repeats, "Runs of hotpath and the peers, alternating; the best counts")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--warmup", args->warmup, "Untimed calls first")->check(CLI::Range(0, 100000));
  cmd->add_option("--min-queries", args->min_queries, "Timed calls at least (batches for offline)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  cmd->add_option("--min-seconds", args->min_seconds, "Timed seconds at least")->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--max-seconds", args->max_seconds, "Timed seconds at most, per engine")
      ->check(CLI::Range(0.001, 3600.0));
  cmd->add_option("--p99-ms", args->server_p99_ms,
                  "Server: the p99 latency bound (0 = 4x hotpath's batch-1 latency, the same for every engine)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--server-queries", args->server_queries, "Server: queries per trial")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  cmd->add_option("--server-steps", args->server_steps, "Server: trials of the QPS search")->check(CLI::Range(1, 50));
  cmd->add_option("--seed", args->seed, "Seed of the inputs, the arrivals and the peers' random weights");
  cmd->add_option("--peer-model", args->peer_model, "The peers' model name (default: the package's architecture)");
  cmd->add_option("--peer-weights", args->peer_weights,
                  "Unfolded weights for the peers (torchvision / Hugging Face keys, safetensors)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--peer-config", args->peer_config, "bert: config.json for the peers (default: from the graph)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--peer-model-dir", args->peer_model_dir, "bert / minilm: a Hugging Face directory for the peers")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--python", args->python, "Python of the venv for --compare (default: the setup venv)");
  cmd->add_option("--json", *json_path, "Write the JSON report here ('-' = stdout)");
  cmd->add_flag("--keep", args->keep, "Keep the scratch directory (inputs, reference, exported .onnx)");
  cmd->callback([args, json_path] {
    std::vector<std::string> rows;
    const bench::Json report = bench::run_infer_bench(*args, &std::cerr, &rows);
    print_bench_report(report, *json_path, rows);
  });
}

}  // namespace hotpath::cli
