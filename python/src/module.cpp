// python/src/module.cpp — the extension module hotpath._C (python/hotpath/__init__.py imports it after checking
// that the installed torch is the one it was built against).
#include <pybind11/pybind11.h>

#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "hotpath's C++ core (tokenizer, loaders, classifier, sentence encoder, export, training loop); use the `hotpath` package, not this module";
  m.attr("TORCH_VERSION") = HOTPATH_TORCH_VERSION;  // what it was compiled and linked against
  hotpath::python::register_errors(m);
  hotpath::python::bind_text(m);
  hotpath::python::bind_data(m);
  hotpath::python::bind_text_loader(m);
  hotpath::python::bind_infer(m);
  hotpath::python::bind_embed(m);
  hotpath::python::bind_export(m);
  hotpath::python::bind_train(m);
}
