// python/src/tensors.cpp — at::Tensor ⇄ torch.Tensor, without a copy either way. The one translation unit that
// includes torch's python headers (torch/csrc), which are the heaviest LibTorch has.
#include <torch/csrc/autograd/python_variable.h>

#include <string>

#include "bindings.h"
#include "hotpath/core/error.h"

namespace hotpath::python {

pybind11::object tensor_to_python(const at::Tensor& tensor) {
  PyObject* object = THPVariable_Wrap(tensor);  // a new reference to a Python object over the same TensorImpl
  if (object == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::object>(object);
}

at::Tensor tensor_from_python(pybind11::handle object, const char* what) {
  HOTPATH_CHECK(THPVariable_Check(object.ptr()), what, ": expected a torch.Tensor, got ", Py_TYPE(object.ptr())->tp_name);
  return THPVariable_Unpack(object.ptr());
}

}  // namespace hotpath::python
