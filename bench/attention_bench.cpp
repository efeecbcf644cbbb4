// hotpath_attention_bench: hotpath's fused attention vs its ATen reference (matmul, mask, softmax,
// matmul) vs at::scaled_dot_product_attention (LibTorch's own CPU flash kernel) on BERT-shaped
// inputs with a padding mask, forward and forward+backward, fp32 and bf16, per thread count. The
// three run interleaved on the shared machine and the best of each is kept. --dropout p puts dropout
// on the probabilities of all three (sdpa: dropout_p) and adds the fused kernel without dropout,
// interleaved too, so the cost of the mask is measured on the same machine state.
//   hotpath_attention_bench --batch 32 --heads 12 --lengths 128,512 --dim 64 --threads 1,2 --json out.json
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/autograd.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/ops/attention.h"

namespace {

struct Args {
  std::int64_t batch = 32;
  std::int64_t heads = 12;
  std::vector<std::int64_t> lengths = {128, 512};
  std::int64_t dim = 64;
  std::vector<int> threads = {1, 2};
  std::vector<std::string> dtypes = {"f32", "bf16"};
  std::vector<std::string> modes = {"fwd", "fwd+bwd"};
  int repeats = 5;
  std::vector<std::string> impls = {"fused", "reference", "sdpa"};
  bool no_mask = false;
  double dropout = 0.0;
  bool cpu_time = false;
  std::string json_path;
};

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Wall time, or with cpu_time the calling thread's CPU time: on one intra-op thread every kernel runs
// on the caller, and CPU time ignores the time other jobs on a shared machine hold the core.
double seconds_of(const std::function<void()>& f, bool cpu_time) {
  if (cpu_time) {
    const double t0 = thread_cpu_seconds();
    f();
    return thread_cpu_seconds() - t0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  using hotpath::ops::AttentionKernel;
  Args a;
  CLI::App app{"fused attention vs ATen reference vs at::scaled_dot_product_attention"};
  app.add_option("--batch", a.batch);
  app.add_option("--heads", a.heads);
  app.add_option("--lengths", a.lengths)->delimiter(',');
  app.add_option("--dim", a.dim);
  app.add_option("--threads", a.threads)->delimiter(',');
  app.add_option("--dtypes", a.dtypes, "f32,bf16")->delimiter(',');
  app.add_option("--modes", a.modes, "fwd,fwd+bwd")->delimiter(',');
  app.add_option("--repeats", a.repeats);
  app.add_option("--json", a.json_path);
  app.add_flag("--no-mask", a.no_mask, "no padding mask (every key attends)");
  app.add_flag("--cpu-time", a.cpu_time,
               "time the calling thread's CPU time, not wall time (--threads 1 only; shared machines)");
  app.add_option("--dropout", a.dropout, "dropout probability on the attention probabilities (0: none)")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--impls", a.impls, "fused,reference,sdpa (fused alone: profiling)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (a.cpu_time && (a.threads.size() != 1 || a.threads[0] != 1)) {
    std::cerr << "--cpu-time needs --threads 1 (other threads' CPU time is not counted)\n";
    return 2;
  }

  nlohmann::json report = {{"kernel", hotpath::ops::attention_kernel_name()},
                           {"dispatch", nlohmann::json::parse(hotpath::cpu::dispatch_report_json())},
                           {"mask", a.no_mask ? "none" : "padding: sequence b keeps L - (b mod 8) * L/16 keys"},
                           {"batch", a.batch},
                           {"heads", a.heads},
                           {"dim", a.dim},
                           {"repeats", a.repeats},
                           {"dropout", a.dropout},
                           {"clock", a.cpu_time ? "thread CPU time" : "wall"},
                           {"results", nlohmann::json::array()}};
  const bool dropout = a.dropout > 0.0;
  std::cout << "fused attention loops: " << hotpath::ops::attention_kernel_name() << "; mask: "
            << (a.no_mask ? "none" : "padding (sequence b keeps L - (b mod 8)·L/16 keys)")
            << "; dropout: " << a.dropout << "; " << (a.cpu_time ? "thread CPU time" : "wall time") << "\n";
  std::cout << "| L | dtype | mode | threads | fused ms | reference ms | sdpa ms | vs reference | vs sdpa |"
            << (dropout ? " fused p=0 ms | dropout cost |\n" : "\n")
            << "|---|---|---|---|---|---|---|---|---|" << (dropout ? "---|---|\n" : "\n");
  for (const std::int64_t len : a.lengths) {
    at::manual_seed(0);
    const at::Tensor q0 = at::randn({a.batch, a.heads, len, a.dim});
    const at::Tensor k0 = at::randn({a.batch, a.heads, len, a.dim});
    const at::Tensor v0 = at::randn({a.batch, a.heads, len, a.dim});
    const at::Tensor dout0 = at::randn({a.batch, a.heads, len, a.dim});
    // A BERT batch: sequence b keeps its first len − (b mod 8)·len/16 tokens.
    at::Tensor mask = at::ones({a.batch, len}, at::kBool);
    // Fused skips whole blocks of padding keys; --no-mask shows the kernels without that advantage.
    if (!a.no_mask)
      for (std::int64_t b = 0; b < a.batch; ++b) mask[b].slice(0, len - (b % 8) * len / 16).fill_(false);
    const at::Tensor sdpa_mask = mask.view({a.batch, 1, 1, len});  // bool: true = attend
    for (const std::string& dtype : a.dtypes) {
      const at::ScalarType type = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
      for (const std::string& mode : a.modes) {
        const bool backward = mode != "fwd";
        at::Tensor q = q0.to(type).detach().requires_grad_(backward);
        at::Tensor k = k0.to(type).detach().requires_grad_(backward);
        at::Tensor v = v0.to(type).detach().requires_grad_(backward);
        const at::Tensor dout = dout0.to(type);
        const auto step = [&](const std::function<at::Tensor()>& forward) {
          if (!backward) {
            at::NoGradGuard no_grad;
            (void)forward();
            return;
          }
          const at::Tensor out = forward();
          (void)torch::autograd::grad({out}, {q, k, v}, {dout});
        };
        // A fresh seed per call, as in training (from_generator draws one).
        const auto drop = [&] { return hotpath::ops::AttentionDropout::from_generator(a.dropout); };
        const std::vector<std::pair<std::string, std::function<at::Tensor()>>> impls = {
            {"fused", [&] { return hotpath::ops::attention(q, k, v, mask, AttentionKernel::kFused, drop()); }},
            {"reference", [&] { return hotpath::ops::reference_attention(q, k, v, mask, drop()); }},
            {"sdpa", [&] { return at::scaled_dot_product_attention(q, k, v, sdpa_mask, a.dropout); }},
            {"fused_p0", [&] { return hotpath::ops::attention(q, k, v, mask, AttentionKernel::kFused); }},
        };
        for (const int threads : a.threads) {
          at::set_num_threads(threads);
          std::vector<double> best(impls.size(), 1e30);
          for (int r = 0; r < a.repeats + 1; ++r) {  // the first round warms up
            for (std::size_t i = 0; i < impls.size(); ++i) {
              // fused_p0 (fused without dropout) runs with fused, when there is dropout to compare.
              const bool wanted =
                  impls[i].first == "fused_p0" ? dropout && contains(a.impls, "fused") : contains(a.impls, impls[i].first);
              if (!wanted) continue;
              const double s = seconds_of([&] { step(impls[i].second); }, a.cpu_time);
              if (r > 0) best[i] = std::min(best[i], s);
            }
          }
          const auto measured = [&](std::size_t i) { return best[i] < 1e29; };
          const auto ms = [&](std::size_t i) { return measured(i) ? fixed(best[i] * 1e3, 1) : std::string("-"); };
          const auto ratio = [&](std::size_t i) {
            return measured(i) && measured(0) ? fixed(best[i] / best[0], 2) + "x" : std::string("-");
          };
          // Dropout's cost: fused with it over fused without, as a percentage.
          const auto cost = [&] {
            return measured(0) && measured(3) ? fixed(100.0 * (best[0] / best[3] - 1.0), 1) + " %" : std::string("-");
          };
          std::cout << "| " << len << " | " << dtype << " | " << mode << " | " << threads << " | " << ms(0) << " | "
                    << ms(1) << " | " << ms(2) << " | " << ratio(1) << " | " << ratio(2) << " |";
          if (dropout) std::cout << " " << ms(3) << " | " << cost() << " |";
          std::cout << std::endl;
          nlohmann::json row = {{"length", len}, {"dtype", dtype}, {"mode", mode}, {"threads", threads}};
          const char* names[] = {"fused_ms", "reference_ms", "sdpa_ms", "fused_no_dropout_ms"};
          for (std::size_t i = 0; i < 4; ++i)
            if (measured(i)) row[names[i]] = best[i] * 1e3;
          if (measured(0) && measured(1)) row["speedup_vs_reference"] = best[1] / best[0];
          if (measured(0) && measured(2)) row["speedup_vs_sdpa"] = best[2] / best[0];
          if (measured(0) && measured(3)) row["dropout_cost"] = best[0] / best[3] - 1.0;
          report["results"].push_back(row);
        }
      }
    }
  }
  if (!a.json_path.empty()) std::ofstream(a.json_path) << report.dump(2) << "\n";
  return 0;
}
