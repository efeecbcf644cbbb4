// python/src/errors.cpp — C++ exceptions become Python exceptions, with the message the CLI prints after
// "hotpath: error: ": hotpath::Error (bad input) → ValueError, or OSError when it is about a file that cannot be
// opened or read; c10::Error (LibTorch) → RuntimeError, its first line; std::bad_alloc → MemoryError; any other
// std::exception → RuntimeError. Nothing is left to abort the process.
#include <c10/util/Exception.h>

#include <array>
#include <new>
#include <string>
#include <string_view>

#include "bindings.h"
#include "hotpath/core/error.h"

namespace hotpath::python {
namespace {

// hotpath::Error has no subclass for files yet, so the messages of the checks that refuse a file (core/input_file,
// mapped_file, shard_list, the tokenizer's directory) are recognised by their wording. A typed error in core would
// replace this table.
constexpr std::array<std::string_view, 10> kFileErrorWords = {
    ": cannot open", ": cannot stat", ": read error", ": cannot mmap", ": no such file", "' does not exist",
    ": not a directory", " is not a directory", ", not a regular file", ": not found"};

bool is_file_error(std::string_view message) {
  for (std::string_view words : kFileErrorWords) {
    if (message.find(words) != std::string_view::npos) return true;
  }
  return false;
}

std::string first_line(std::string_view text) { return std::string(text.substr(0, text.find('\n'))); }

// Raises `type` with `message`; bytes that are not UTF-8 (a tar member's name, a file path) become \xNN escapes
// instead of failing the conversion to str.
void set_error(PyObject* type, const std::string& message) {
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace");
  if (text == nullptr) return;  // the decode's own error (out of memory) stands
  PyErr_SetObject(type, text);
  Py_DECREF(text);
}

}  // namespace

void register_errors(pybind11::module_& m) {
  (void)m;
  pybind11::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const hotpath::Error& e) {
      const std::string message = hotpath::printable(e.what(), 4000);
      set_error(is_file_error(message) ? PyExc_OSError : PyExc_ValueError, message);
    } catch (const c10::Error& e) {
      set_error(PyExc_RuntimeError, first_line(e.what_without_backtrace()));
    } catch (const std::bad_alloc&) {
      set_error(PyExc_MemoryError, "out of memory: an input asked for more memory than this machine has");
    }
    // Anything else: pybind11's own translators (std::exception → RuntimeError with what()).
  });
}

}  // namespace hotpath::python
