// python/src/tensor_to_python.cpp — at::Tensor → torch.Tensor. The one translation unit that includes torch's
// python headers (torch/csrc), which are the heaviest LibTorch has.
#include <torch/csrc/autograd/python_variable.h>

#include "bindings.h"

namespace hotpath::python {

pybind11::object tensor_to_python(const at::Tensor& tensor) {
  PyObject* object = THPVariable_Wrap(tensor);  // a new reference to a Python object over the same TensorImpl
  if (object == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::object>(object);
}

}  // namespace hotpath::python
