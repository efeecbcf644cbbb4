// python/src/embed_bindings.cpp — hotpath._C.SentenceEncoder: infer::SentenceEncoder, what `hotpath embed` runs
// (a sentence-transformers model directory, or a sentence_embedder package run by the engine). Encoding runs with
// the GIL released.
#include <ATen/core/Tensor.h>
#include <ATen/ops/clone.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "bindings.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/sentence_embed.h"

namespace py = pybind11;

namespace hotpath::python {

void bind_embed(py::module_& m) {
  py::class_<infer::SentenceEncoder>(m, "SentenceEncoder",
                                     "Sentences → L2-normalised embeddings (hotpath/infer/sentence_embed.h)")
      .def_static(
          "from_dir",
          [](const std::string& dir, std::size_t max_length) {
            py::gil_scoped_release release;
            return infer::SentenceEncoder::from_dir(dir, {.max_length = max_length});  // as `hotpath embed --model`
          },
          py::arg("dir"), py::arg("max_length") = 0)
      .def(
          "encode",
          [](const infer::SentenceEncoder& encoder, const py::list& sentences, std::size_t batch_size) {
            HOTPATH_CHECK(batch_size >= 1, "batch_size: expected at least 1, got ", batch_size);
            const std::vector<std::string_view> lines = utf8_views(sentences, "sentences");
            at::Tensor embeddings;
            {
              py::gil_scoped_release release;
              // encode() returns an inference tensor; a copy made outside inference mode is an ordinary one.
              embeddings = at::clone(encoder.encode(lines, {.batch_size = batch_size}));
            }
            return tensor_to_python(embeddings);
          },
          py::arg("sentences"), py::arg("batch_size") = 32)
      .def_property_readonly("dimension", &infer::SentenceEncoder::dimension)
      .def_property_readonly("max_length", &infer::SentenceEncoder::max_length);
}

}  // namespace hotpath::python
