// python/src/train_bindings.cpp — hotpath._C.train: the training loop `hotpath train` runs (train/trainer.h), for a
// recipe file or recipe text, with a Python callback per metrics.jsonl line.
//
// The loop runs with the GIL released; the callback takes it for each line. SIGINT and SIGTERM are caught for the
// duration of the run (when called from the main thread, the only one Python delivers signals to): the loop
// finishes its step, writes a checkpoint and returns, and the Python side then raises KeyboardInterrupt (SIGINT) or
// SystemExit (SIGTERM; torchrun's agent sends it to every rank). An exception raised by the callback stops the loop
// the same way, with a checkpoint, and is re-raised. Either way the run resumes with resume=True.
#include <pybind11/stl.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "hotpath/train/distributed.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/trainer.h"

namespace py = pybind11;

namespace hotpath::python {
namespace {

// A signal handler can only store to lock-free atomics: these are the hand-off to the run on the main thread.
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int signal) {
  g_signal.store(signal);
  g_stop.store(true);
}

// The loop's stop flag, set by SIGINT/SIGTERM or by a callback's exception. With handle_signals (the main thread)
// it is the handlers' flag, installed for this object's lifetime, Python's handlers restored after; otherwise a
// flag of its own.
class StopFlag {
 public:
  explicit StopFlag(bool handle_signals) : handle_signals_(handle_signals) {
    if (!handle_signals_) return;
    g_stop.store(false);
    g_signal.store(0);
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~StopFlag() {
    if (!handle_signals_) return;
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopFlag(const StopFlag&) = delete;
  StopFlag& operator=(const StopFlag&) = delete;

  [[nodiscard]] std::atomic<bool>& flag() { return handle_signals_ ? g_stop : own_; }
  // The signal that stopped the run (0: none).
  [[nodiscard]] int signal() const { return handle_signals_ ? g_signal.load() : 0; }

 private:
  bool handle_signals_;
  std::atomic<bool> own_{false};
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

// How a stopped run ends on the Python side: the callback's exception, or the signal that stopped it.
py::dict result_dict(const train::TrainResult& r, int signal) {
  py::dict d;
  d["run_dir"] = r.run_dir;
  d["steps"] = r.steps;
  d["epochs_completed"] = r.epochs_completed;
  d["interrupted"] = r.interrupted;
  d["signal"] = signal;
  d["seconds"] = r.seconds;
  d["samples_per_s"] = r.samples_per_s;
  d["summary"] = r.breakdown.summary();
  if (r.eval) {
    py::dict e;
    e["top1"] = r.eval->top1;
    e["top5"] = r.eval->top5;
    e["loss"] = r.eval->loss;
    e["majority_top1"] = r.eval->majority_top1;
    e["samples"] = r.eval->samples;
    d["eval"] = e;
  } else {
    d["eval"] = py::none();
  }
  return d;
}

py::dict run_training(const std::string& path, const std::string& text, const std::vector<std::string>& overrides,
                      bool resume, bool overwrite, bool quiet, const std::string& trace, std::int64_t trace_steps,
                      const py::object& callback, bool handle_signals) {
  StopFlag stop(handle_signals);
  std::optional<py::error_already_set> callback_error;  // touched with the GIL held only
  train::TrainOptions options;
  options.resume = resume;
  options.overwrite = overwrite;
  options.quiet = quiet;
  options.trace_path = trace;
  options.trace_steps = trace_steps;
  options.stop = &stop.flag();
  options.out = &std::cerr;
  if (!callback.is_none()) {
    options.on_metrics = [&](const std::string& line) {
      py::gil_scoped_acquire gil;
      if (callback_error) return;
      try {
        callback(line);
      } catch (py::error_already_set& e) {
        callback_error.emplace(std::move(e));
        stop.flag().store(true);  // the loop checkpoints after this step and returns
      }
    };
  }
  train::TrainResult result;
  {
    py::gil_scoped_release release;
    try {
      const train::Recipe recipe = path.empty() ? train::parse_recipe(text, overrides, "<recipe dict>")
                                                : train::load_recipe(path, overrides);
      result = train::train(recipe, options);
    } catch (const std::exception& e) {
      train::report_this_rank_error(e);  // data parallel: the other ranks stop at once naming this one
      throw;
    }
  }
  if (callback_error) throw std::move(*callback_error);
  return result_dict(result, stop.signal());
}

}  // namespace

void bind_train(py::module_& m) {
  m.def("train", &run_training, py::arg("path"), py::arg("text"), py::arg("overrides"), py::arg("resume"),
        py::arg("overwrite"), py::arg("quiet"), py::arg("trace"), py::arg("trace_steps"), py::arg("callback"),
        py::arg("handle_signals"),
        "Runs a recipe (a file, or YAML/JSON text when path is empty) through the training loop; use hotpath.train.");
}

}  // namespace hotpath::python
