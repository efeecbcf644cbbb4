// The `hotpath` command-line program: parses argv (only here), dispatches to subcommands and
// turns every error into one line on stderr and a non-zero exit code.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "hotpath/core/error.h"
#include "hotpath/core/malloc_policy.h"

namespace {

// First line of an exception message: LibTorch's c10::Error appends a C++ backtrace.
std::string first_line(const char* what) {
  std::string s(what);
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    hotpath::apply_malloc_policy();  // before any thread: see core/malloc_policy.h
  } catch (const hotpath::Error& e) {
    std::cerr << "hotpath: error: " << e.what() << "\n";
    return 1;
  }
  CLI::App app{"hotpath: fast data loading, training and inference for image and text models (C++/LibTorch)"};
  app.set_version_flag("--version", "hotpath 0.1.0");
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
  hotpath::cli::add_bench(app);
  hotpath::cli::add_tokenize(app);
  hotpath::cli::add_embed(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const hotpath::Error& e) {
    std::cerr << "hotpath: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "hotpath: error: " << first_line(e.what()) << "\n";
    return 1;
  }
  return 0;
}
