// StepBreakdown (trainer.h): where the step time went, as a console line and as profile.json.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <string>

#include "hotpath/train/trainer.h"

namespace hotpath::train {

using json = nlohmann::ordered_json;

std::string StepBreakdown::summary() const {
  const double total = total_s();
  if (steps == 0 || total <= 0) return "no steps timed";
  struct Part {
    const char* name;
    double s;
  };
  const Part parts[] = {{"data", data_s},
                        {"forward", forward_s},
                        {"backward", backward_s},
                        {"optimizer", optimizer_s},
                        {"all-reduce wait", allreduce_s}};
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << "step " << 1000.0 * total / static_cast<double>(steps) << " ms: ";
  const Part* top = &parts[0];
  for (const Part& p : parts) {
    if (&p == &parts[4] && allreduce_s == 0) break;  // one process: no all-reduce phase
    out << (&p == &parts[0] ? "" : " · ") << p.name << " " << 100.0 * p.s / total << "%";
    if (p.s > top->s) top = &p;
  }
  out << " — bottleneck: " << top->name;
  const std::string& hint = top == &parts[0] || data_s / total > 0.2 ? remedies.input
                            : top == &parts[3]                       ? remedies.optimizer
                            : top == &parts[4]                       ? remedies.allreduce
                                                                     : remedies.compute;
  if (!hint.empty()) out << " (" << hint << ")";
  return out.str();
}

std::string StepBreakdown::to_json() const {
  const double total = std::max(total_s(), 1e-12);
  json j;
  j["steps"] = steps;
  j["step_ms"] = steps ? 1000.0 * total_s() / static_cast<double>(steps) : 0.0;
  j["seconds"] = {{"data", data_s}, {"forward", forward_s}, {"backward", backward_s}, {"optimizer", optimizer_s},
                  {"allreduce_wait", allreduce_s}};
  j["fractions"] = {{"data", data_s / total},
                    {"forward", forward_s / total},
                    {"backward", backward_s / total},
                    {"optimizer", optimizer_s / total},
                    {"allreduce_wait", allreduce_s / total}};
  j["summary"] = summary();
  return j.dump(2) + "\n";
}

}  // namespace hotpath::train
