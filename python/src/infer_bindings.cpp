// python/src/infer_bindings.cpp — hotpath._C.Classifier: infer::Classifier, what `hotpath predict` runs (a run
// directory, a model package run by the engine, or a registry model with its pretrained weights): the package's
// own preprocessing, softmax and top-k; hotpath._C.TextClassifier; hotpath._C.Predictor: infer::Predictor, any
// package's inputs, raw outputs and top-k. Inference runs with the GIL released.
#include <ATen/core/Tensor.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/classifier.h"
#include "hotpath/infer/predictor.h"
#include "hotpath/infer/text_classifier.h"

namespace py = pybind11;

namespace hotpath::python {
namespace {

using Prediction = std::tuple<std::int64_t, std::string, double>;  // index, label, probability

std::vector<std::vector<Prediction>> predictions(std::vector<std::vector<infer::TopK>> top) {
  std::vector<std::vector<Prediction>> out(top.size());
  for (std::size_t i = 0; i < top.size(); ++i) {
    for (infer::TopK& t : top[i]) out[i].emplace_back(t.index, std::move(t.label), t.prob);
  }
  return out;
}

// Texts (and optional second texts) as UTF-8 views into the str objects, which outlive the call.
struct TextArgs {
  std::vector<std::string_view> texts, pairs;
  TextArgs(const py::list& t, const py::object& p) : texts(utf8_views(t, "texts")) {
    if (!p.is_none()) pairs = utf8_views(p.cast<py::list>(), "text_pair");
  }
};

std::vector<std::vector<Prediction>> classify(const infer::Classifier& c, py::handle batch, std::int64_t k) {
  const at::Tensor x = tensor_from_python(batch, "batch");
  HOTPATH_CHECK(k >= 1, "k: expected at least 1, got ", k);
  std::vector<std::vector<infer::TopK>> top;
  {
    py::gil_scoped_release release;
    top = c.classify(x, k);
  }
  return predictions(std::move(top));
}

py::dict evaluate(const std::string& dir, const std::vector<std::string>& shards, const py::dict& settings) {
  infer::DirEvalOptions o;
  Settings(settings, "evaluate")
      .take("batch_size", o.batch_size)
      .take("workers", o.workers)
      .take("threads", o.threads)
      .take("precision", o.precision)
      .refuse_the_rest();
  infer::DirEvalResult r;
  {
    py::gil_scoped_release release;
    r = infer::evaluate_dir(dir, shards, o);
  }
  py::dict d;
  d["model"] = r.model;
  d["top1"] = r.eval.top1;
  d["top5"] = r.eval.top5;
  d["loss"] = r.eval.loss;
  d["majority_top1"] = r.eval.majority_top1;
  d["samples"] = r.eval.samples;
  return d;
}

std::vector<std::string> names(const std::vector<infer::ValueSpec>& specs) {
  std::vector<std::string> out;
  for (const infer::ValueSpec& s : specs) out.push_back(s.name);
  return out;
}

void bind_predictor(py::module_& m) {
  py::class_<infer::Predictor>(m, "Predictor", "Any model package or run directory (hotpath/infer/predictor.h)")
      .def_static(
          "open",
          [](const std::string& dir, int threads, std::int64_t max_length) {
            py::gil_scoped_release release;
            return infer::Predictor::open(dir, {.threads = threads, .max_length = max_length});
          },
          py::arg("dir"), py::arg("threads") = 0, py::arg("max_length") = 0)
      .def_property_readonly("kind", [](const infer::Predictor& p) { return infer::package_kind_name(p.kind()); })
      .def_property_readonly("labels", &infer::Predictor::labels)
      .def_property_readonly("in_engine", [](const infer::Predictor& p) { return p.engine() != nullptr; })
      .def_property_readonly("precision",
                             [](const infer::Predictor& p) { return infer::precision_name(p.package().precision); })
      .def_property_readonly("input_names", [](const infer::Predictor& p) { return names(p.input_specs()); })
      .def_property_readonly("output_names", &infer::Predictor::output_names)
      .def_property_readonly("output_width", &infer::Predictor::output_width)
      .def_property_readonly("max_length", [](const infer::Predictor& p) { return p.text().max_length; })
      .def_property_readonly("default_top_k", [](const infer::Predictor& p) { return p.postprocess().top_k; })
      .def(
          "image_input",
          [](const infer::Predictor& p, const py::bytes& encoded) {
            const std::string_view view = encoded;  // the bytes object outlives the call
            const std::span<const std::byte> data(reinterpret_cast<const std::byte*>(view.data()), view.size());
            at::Tensor x;
            {
              py::gil_scoped_release release;
              x = p.image_input(data);
            }
            return tensor_to_python(x);
          },
          py::arg("encoded"))
      .def(
          "text_inputs",
          [](const infer::Predictor& p, const py::list& texts, const py::object& pairs) {
            const TextArgs a(texts, pairs);
            text::TextBatchTensors t;
            {
              py::gil_scoped_release release;
              t = p.text_inputs(a.texts, a.pairs);
            }
            return std::make_tuple(tensor_to_python(t.input_ids), tensor_to_python(t.attention_mask),
                                   tensor_to_python(t.token_type_ids));
          },
          py::arg("texts"), py::arg("pairs"))
      .def(
          "run",
          [](const infer::Predictor& p, const py::list& inputs) {
            std::vector<at::Tensor> in;
            for (std::size_t i = 0; i < inputs.size(); ++i) in.push_back(tensor_from_python(inputs[i], "inputs"));
            std::vector<at::Tensor> out;
            {
              py::gil_scoped_release release;
              out = p.run(in);
            }
            py::list result;
            for (const at::Tensor& t : out) result.append(tensor_to_python(t));
            return result;
          },
          py::arg("inputs"))
      .def(
          "top_k",
          [](const infer::Predictor& p, py::handle logits, std::int64_t k) {
            const at::Tensor x = tensor_from_python(logits, "logits");
            std::vector<std::vector<infer::TopK>> top;
            {
              py::gil_scoped_release release;
              top = k == 0 ? p.top_k(x) : p.top_k(x, k);
            }
            return predictions(std::move(top));
          },
          py::arg("logits"), py::arg("k") = 0);
}

}  // namespace

void bind_infer(py::module_& m) {
  bind_predictor(m);
  m.def("evaluate", &evaluate, py::arg("dir"), py::arg("shards"), py::arg("settings"),
        "hotpath eval: top-1/top-5/loss over image shards; use hotpath.infer.evaluate");
  py::class_<infer::Classifier>(m, "Classifier", "An image classifier ready to answer (hotpath/infer/classifier.h)")
      .def_static(
          "from_dir",
          [](const std::string& dir, int threads) {
            py::gil_scoped_release release;
            return infer::Classifier::from_dir(dir, threads);
          },
          py::arg("dir"), py::arg("threads") = 0)
      .def_static(
          "from_pretrained",
          [](const std::string& model) {
            py::gil_scoped_release release;
            return infer::Classifier::from_pretrained(model);
          },
          py::arg("model"))
      .def(
          "preprocess_file",
          [](const infer::Classifier& c, const std::string& path) {
            at::Tensor x;
            {
              py::gil_scoped_release release;
              x = c.preprocess().load_image(path);
            }
            return tensor_to_python(x);
          },
          py::arg("path"))
      .def(
          "preprocess_bytes",
          [](const infer::Classifier& c, const py::bytes& encoded) {
            const std::string_view view = encoded;  // the bytes object outlives the call
            const std::span<const std::byte> data(reinterpret_cast<const std::byte*>(view.data()), view.size());
            at::Tensor x;
            {
              py::gil_scoped_release release;
              x = c.preprocess().apply(data);
            }
            return tensor_to_python(x);
          },
          py::arg("encoded"))
      .def(
          "logits",
          [](const infer::Classifier& c, py::handle batch) {
            const at::Tensor x = tensor_from_python(batch, "batch");
            at::Tensor y;
            {
              py::gil_scoped_release release;
              y = c.logits(x);
            }
            return tensor_to_python(y);
          },
          py::arg("batch"))
      .def("classify", &classify, py::arg("batch"), py::arg("k") = 5)
      .def_property_readonly("image_size", [](const infer::Classifier& c) { return c.preprocess().image_size; })
      .def_property_readonly("channels", [](const infer::Classifier& c) { return c.preprocess().channels; });

  py::class_<infer::TextClassifier>(m, "TextClassifier", "A text_classifier package (hotpath/infer/text_classifier.h)")
      .def_static(
          "from_dir",
          [](const std::string& dir, int threads) {
            py::gil_scoped_release release;
            return infer::TextClassifier::from_dir(dir, threads);
          },
          py::arg("dir"), py::arg("threads") = 0)
      .def(
          "logits",
          [](const infer::TextClassifier& c, const py::list& texts, const py::object& pairs, std::int64_t batch_size) {
            const TextArgs a(texts, pairs);
            at::Tensor y;
            {
              py::gil_scoped_release release;
              y = c.logits(a.texts, a.pairs, batch_size);
            }
            return tensor_to_python(y);
          },
          py::arg("texts"), py::arg("pairs"), py::arg("batch_size"))
      .def(
          "classify",
          [](const infer::TextClassifier& c, const py::list& texts, const py::object& pairs, std::int64_t k,
             std::int64_t batch_size) {
            const TextArgs a(texts, pairs);
            std::vector<std::vector<infer::TopK>> top;
            {
              py::gil_scoped_release release;
              top = c.classify(a.texts, a.pairs, k, batch_size);
            }
            return predictions(std::move(top));
          },
          py::arg("texts"), py::arg("pairs"), py::arg("k"), py::arg("batch_size"))
      .def_property_readonly("labels", &infer::TextClassifier::labels)
      .def_property_readonly("max_length", &infer::TextClassifier::max_length);
}

}  // namespace hotpath::python
