// Shared by the train tests: tensors as JSON/doubles for the python references, readable numbers.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

namespace hotpath::train::train_test {

// "1.2e-08": std::to_string would print 0.000000 for the differences these tests record.
inline std::string scientific(double v) {
  std::ostringstream out;
  out << std::scientific << std::setprecision(2) << v;
  return out.str();
}

inline std::vector<double> values(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

inline nlohmann::json tensor_json(const at::Tensor& t) { return {{"shape", t.sizes().vec()}, {"data", values(t)}}; }

}  // namespace hotpath::train::train_test
