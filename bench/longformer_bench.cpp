// hotpath_longformer_bench: one Longformer training step (forward + backward of a classifier's cross-entropy,
// fp32, first token global) at one sequence length, in this process alone so that its peak memory is its own:
// prints one JSON line with the best step time and the step's peak resident memory above what the process held
// before it (ru_maxrss − RSS before the first step). bench/longformer.sh runs it per length and kernel beside
// transformers' LongformerForSequenceClassification (bench/peers/longformer_peer.py, measured the same way).
//   hotpath_longformer_bench --length 4096 --kernel fused --hidden 384 --layers 6 --heads 12 --window 512
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>

#include "hotpath/core/cpu.h"
#include "hotpath/formats/bert_config.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/ops/sliding_attention.h"

namespace {

double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t length = 4096, hidden = 384, layers = 6, heads = 12, intermediate = 1536, window = 512, batch = 1;
  int steps = 3, threads = 2;
  std::string kernel = "fused";
  CLI::App app{"one Longformer training step: time and peak memory"};
  app.add_option("--length", length);
  app.add_option("--hidden", hidden);
  app.add_option("--layers", layers);
  app.add_option("--heads", heads);
  app.add_option("--intermediate", intermediate);
  app.add_option("--window", window, "attention_window (two-sided, even)");
  app.add_option("--batch", batch);
  app.add_option("--steps", steps, "steps after one warm-up step; the best is reported");
  app.add_option("--threads", threads);
  app.add_option("--kernel", kernel, "fused (the sliding-window kernel) or dense (its O(L²) twin)")
      ->check(CLI::IsMember({"fused", "dense"}));
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(threads);

  const nlohmann::json config_json = {{"model_type", "longformer"},
                                      {"vocab_size", 30522},
                                      {"hidden_size", hidden},
                                      {"num_hidden_layers", layers},
                                      {"num_attention_heads", heads},
                                      {"intermediate_size", intermediate},
                                      {"max_position_embeddings", length + 2},
                                      {"attention_window", window},
                                      {"pad_token_id", 1},
                                      {"num_labels", 2}};
  const auto config = hotpath::formats::BertConfig::from_json(config_json.dump());
  hotpath::models::BertOptions options;
  options.sliding_kernel =
      kernel == "fused" ? hotpath::ops::AttentionKernel::kAuto : hotpath::ops::AttentionKernel::kReference;
  at::manual_seed(0);
  hotpath::models::BertForSequenceClassification model(config, options);
  model.train();
  const at::Tensor ids = at::randint(3, config.vocab_size, {batch, length}, at::kLong);
  const at::Tensor mask = at::ones({batch, length}, at::kLong);
  const at::Tensor labels = at::zeros({batch}, at::kLong);
  const double rss_before = rss_mib();
  double best = 1e30;
  for (int s = 0; s < steps + 1; ++s) {
    model.zero_grad();
    const auto t0 = std::chrono::steady_clock::now();
    const at::Tensor loss = at::cross_entropy_loss(model.forward(ids, mask), labels);
    loss.backward();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::min(best, sec);
  }
  const nlohmann::json out = {{"impl", "hotpath " + kernel},
                              {"kernel", hotpath::ops::sliding_attention_kernel_name()},
                              {"length", length},
                              {"batch", batch},
                              {"threads", threads},
                              {"step_s", best},
                              {"peak_step_mib", peak_rss_mib() - rss_before}};
  std::cout << out.dump() << std::endl;
  return 0;
}
