// The training loop's evaluations and best/ (evaluation.h).
#include "evaluation.h"

#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/progress.h"
#include "ema.h"

namespace hotpath::train {

infer::EvalResult RunEvaluator::run(std::int64_t step, std::int64_t epoch, bool best_candidate, TrainerState& state) {
  using json = nlohmann::ordered_json;
  const EmaSwap ema_in(s_.ema);
  const infer::EvalResult r = s_.task.evaluate(s_.precision);
  s_.task.module().train();
  s_.log.line({{"split", "eval"}, {"step", step}, {"epoch", epoch}, {"top1", r.top1}, {"top5", r.top5},
               {"loss", r.loss}, {"majority_top1", r.majority_top1}, {"samples", r.samples}});
  s_.log.eval_scalars(r, step);
  if (s_.out != nullptr) {
    std::ostringstream line;
    line << std::fixed << std::setprecision(2) << "eval epoch " << epoch << ": top-1 " << r.top1 << "% (majority class "
         << r.majority_top1 << "%)  top-5 " << r.top5 << "%  loss " << format_number(r.loss) << " on " << r.samples
         << " samples" << (s_.ema ? " (EMA weights)" : "") << "\n";
    *s_.out << line.str();
  }
  const auto& ck = s_.recipe.checkpoint;
  if (!best_candidate || !ck.keep_best) return r;
  const double metric = metric_value(r, ck.metric);
  if (state.best_metric && !metric_better(ck.metric, metric, *state.best_metric)) return r;
  state.best_metric = metric;
  state.best_step = step;
  swap_in_best(s_.run_dir, [&](const std::filesystem::path& dir) {
    s_.task.export_model(dir, ExportPlace::kBest);
    write_file_atomic((dir / "metrics.json").string(),
                      json{{"step", step}, {"epoch", epoch}, {"top1", r.top1}, {"top5", r.top5}, {"loss", r.loss},
                           {"majority_top1", r.majority_top1}}
                              .dump(2) + "\n");
  });
  return r;
}

}  // namespace hotpath::train
