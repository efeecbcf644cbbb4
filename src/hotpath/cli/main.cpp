// The `hotpath` command-line program: parses argv (only here), dispatches to subcommands and
// turns every error into one line on stderr and a non-zero exit code.
#include <CLI/CLI.hpp>
#include <torch/version.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "cli/commands.h"
#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/core/malloc_policy.h"

namespace {

// First line of an exception message: LibTorch's c10::Error appends a C++ backtrace.
std::string first_line(const char* what) {
  std::string s(what);
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// LibTorch's OpenMP runtime (libgomp) lets a waiting thread spin 300,000 pauses (~50 ms here) before it sleeps.
// Sessions 9-10 measured both ways (docs/benchmarks.md): on cores shared with other work (load 8 on 2 cores)
// GOMP_SPINCOUNT=1000 took ResNet-50 batch 1 from ~580 to ~170 ms; on a machine to itself the default is
// faster (ResNet-50 batch 1 p50 35 vs 41 ms; cnn_small training took 1.09x the wall time with 1000; BERT-base
// int8 batch 1 level), so hotpath leaves libgomp's default and --version says what runs; set
// GOMP_SPINCOUNT=1000 (or OMP_WAIT_POLICY=passive) where the cores are shared.
std::string openmp_wait_text() {
  std::string text = "OpenMP wait:";
  if (const char* policy = std::getenv("OMP_WAIT_POLICY"); policy != nullptr) text += std::string(" OMP_WAIT_POLICY=") + policy;
  if (const char* spin = std::getenv("GOMP_SPINCOUNT"); spin != nullptr) text += std::string(" GOMP_SPINCOUNT=") + spin;
  return text + (text.back() == ':' ? " libgomp's default" : " (from the environment)") + "\n";
}

// `hotpath --version`: versions, then which kernel every op runs on this CPU and why.
std::string version_text() {
  std::string text = "hotpath 0.1.0\nLibTorch " TORCH_VERSION "\n";
  text += hotpath::cpu::dispatch_report_text();
  text += openmp_wait_text();
  if (const char* cap = std::getenv("ATEN_CPU_CAPABILITY"); cap != nullptr) {
    text += std::string("LibTorch kernels: ATEN_CPU_CAPABILITY=") + cap;
    if (const char* onednn = std::getenv("ONEDNN_MAX_CPU_ISA"); onednn != nullptr) {
      text += std::string(" ONEDNN_MAX_CPU_ISA=") + onednn;
    }
    text += "\n";
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();  // CLI11 adds the last newline
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    hotpath::apply_malloc_policy();  // before any thread: see core/malloc_policy.h
    hotpath::cpu::cap_libraries_isa();
  } catch (const hotpath::Error& e) {
    std::cerr << "hotpath: error: " + std::string(e.what()) + "\n";
    return 1;
  }
  CLI::App app{"hotpath: fast data loading, training and inference for image and text models (C++/LibTorch)"};
  app.set_version_flag("--version", version_text);
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);

  CLI::App* data = app.add_subcommand("data", "WebDataset shards: pack datasets, inspect shards, benchmark the loader");
  data->require_subcommand(1);
  hotpath::cli::add_data_pack(*data);
  hotpath::cli::add_data_inspect(*data);
  hotpath::cli::add_data_bench(*data);
  hotpath::cli::add_data_text(*data);
  hotpath::cli::add_train(app);
  hotpath::cli::add_eval(app);
  hotpath::cli::add_predict(app);
  hotpath::cli::add_export(app);
  hotpath::cli::add_bench(app);
  hotpath::cli::add_bench_infer(*app.get_subcommand("bench"));
  hotpath::cli::add_bench_serve(*app.get_subcommand("bench"));
  hotpath::cli::add_tokenize(app);
  hotpath::cli::add_embed(app);
  hotpath::cli::add_serve(app);

  // Each error line goes out in one write (std::cerr is unbuffered: every << is a write), so the lines of
  // ranks sharing one stderr under torchrun never interleave mid-line.
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version: CLI11 prints them, exit 0
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, exit 1, like every other bad input (CLI11's own exit() prints two lines, exit 105).
    std::cerr << "hotpath: error: " + hotpath::printable(first_line(e.what()), 400) + " (run with --help for usage)\n";
    return 1;
  } catch (const hotpath::Error& e) {  // escaped, never cut to its first line: all of it is context
    std::cerr << "hotpath: error: " + hotpath::printable(e.what(), 4000) + "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    // The command line names the inputs; no stage got to say which one asked for the memory.
    std::string command;
    for (int i = 1; i < argc; ++i) command += std::string(i > 1 ? " " : "") + argv[i];
    std::cerr << "hotpath: error: out of memory running `hotpath " + hotpath::printable(command, 300) +
                     "`: an input asked for more memory than this machine has (see docs/bad-input.md)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "hotpath: error: " + hotpath::printable(first_line(e.what()), 2000) + "\n";
    return 1;
  } catch (...) {
    std::cerr << "hotpath: error: unexpected non-standard exception\n";
    return 1;
  }
  return 0;
}
