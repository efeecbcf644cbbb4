// python/src/bindings.h — the pieces of the extension module hotpath._C, one translation unit each, so that a
// change to one rebuilds only it (LibTorch and pybind11 headers are heavy).
//
//   PYBIND11_MODULE(_C, m) { register_errors(m); bind_text(m); bind_data(m); bind_infer(m); }   // module.cpp
//
// Only tensors.cpp sees torch/csrc (the python side of torch); the others see ATen and pybind11.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/core/error.h"

namespace at {
class Tensor;
}

namespace hotpath::python {

// C++ exceptions → Python exceptions with the CLI's one-line messages (errors.cpp).
void register_errors(pybind11::module_& m);
// A torch.Tensor sharing `tensor`'s storage (no copy: the storage's deleter keeps the C++ memory alive).
pybind11::object tensor_to_python(const at::Tensor& tensor);
// The at::Tensor of a torch.Tensor (shared, no copy); anything else is a ValueError naming `what`.
at::Tensor tensor_from_python(pybind11::handle object, const char* what);

// A view of each str's UTF-8 (cached in the str object: valid while `list` lives, GIL or not); an item that is
// not a str is a ValueError naming `what`[i] (text_bindings.cpp).
std::vector<std::string_view> utf8_views(const pybind11::list& list, const char* what);

// Copies the entries of a settings dict into struct fields; any entry no field took is refused by name.
class Settings {
 public:
  Settings(const pybind11::dict& d, const char* what) : d_(d), what_(what) {}
  template <class T>
  Settings& take(const char* key, T& field) {
    if (d_.contains(key)) {
      field = d_[key].cast<T>();
      taken_.emplace_back(key);
    }
    return *this;
  }
  void refuse_the_rest() const {
    for (const auto& item : d_) {
      const std::string key = pybind11::str(item.first);
      HOTPATH_CHECK(std::find(taken_.begin(), taken_.end(), key) != taken_.end(), what_, ": unknown setting '", key,
                    "'");
    }
  }

 private:
  const pybind11::dict& d_;
  const char* what_;
  std::vector<std::string> taken_;
};

void bind_text(pybind11::module_& m);  // hotpath._C.Tokenizer
void bind_data(pybind11::module_& m);  // hotpath._C.Loader
void bind_text_loader(pybind11::module_& m);  // hotpath._C.TextLoader
void bind_infer(pybind11::module_& m); // hotpath._C.Classifier
void bind_embed(pybind11::module_& m); // hotpath._C.SentenceEncoder
void bind_export(pybind11::module_& m);  // hotpath._C.export_package, export_onnx
void bind_train(pybind11::module_& m);   // hotpath._C.train

}  // namespace hotpath::python
