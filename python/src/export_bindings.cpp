// python/src/export_bindings.cpp — hotpath._C.export_package / export_onnx: what `hotpath export` runs
// (infer/export.h), a model → a model package with its accuracy report, or an ONNX file. The settings arrive as
// dicts of the ExportSource / ExportOptions field names; a field left out keeps the library's default (the one
// the CLI shows), so hotpath.infer.export and the CLI cannot drift. Runs with the GIL released.
#include <pybind11/stl.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "bindings.h"
#include "hotpath/core/error.h"
#include "hotpath/formats/onnx_model.h"
#include "hotpath/infer/export.h"

namespace py = pybind11;

namespace hotpath::python {
namespace {

infer::ExportSource source_from(const py::dict& d) {
  infer::ExportSource s;
  Settings(d, "export")
      .take("model_dir", s.model_dir)
      .take("model", s.model)
      .take("pretrained", s.pretrained)
      .take("random_init", s.random_init)
      .take("num_classes", s.num_classes)
      .take("channels", s.channels)
      .take("image_size", s.image_size)
      .take("bert_config", s.bert_config)
      .take("task", s.task)
      .take("max_length", s.max_length)
      .refuse_the_rest();
  return s;
}

py::dict export_package(const py::dict& source_settings, const std::string& out, const py::dict& option_settings,
                        bool progress) {
  const infer::ExportSource source = source_from(source_settings);
  infer::ExportOptions o;
  o.out = out;
  std::string precision = "fp32", weight_rounding = o.gptq ? "gptq" : "nearest";
  infer::ExportQat qat;
  bool qat_biases_only = !qat.options.train_weights;
  infer::ExportPrune prune;
  std::string prune_importance = infer::importance_name(prune.options.importance);
  Settings(option_settings, "export")
      .take("precision", precision)
      .take("calibration", o.calibration)
      .take("calibration_samples", o.calibration_samples)
      .take("max_bad_samples", o.max_bad_samples)
      .take("max_output_error", o.max_output_error)
      .take("min_output_cosine", o.min_output_cosine)
      .take("weight_rounding", weight_rounding)
      .take("clip_candidates", o.clip_candidates)
      .take("keep_float", o.keep_float)
      .take("min_agreement", o.min_agreement)
      .take("allow_accuracy_loss", o.allow_accuracy_loss)
      .take("overwrite", o.overwrite)
      .take("threads", o.threads)
      .take("qat_data", qat.data)
      .take("qat_steps", qat.options.steps)
      .take("qat_lr", qat.options.lr)
      .take("qat_batch_size", qat.batch_size)
      .take("qat_observer_steps", qat.options.observer_steps)
      .take("qat_temperature", qat.options.temperature)
      .take("qat_label_weight", qat.options.label_weight)
      .take("qat_crop_scale", qat.crop_scale_min)
      .take("qat_seed", qat.seed)
      .take("qat_biases_only", qat_biases_only)
      .take("prune_macs", prune.options.target_macs)
      .take("prune_ratio", prune.options.ratio)
      .take("prune_importance", prune_importance)
      .take("prune_round_to", prune.options.round_to)
      .take("prune_iterations", prune.options.iterations)
      .take("prune_ignore", prune.options.ignore)
      .take("prune_data", prune.data)
      .take("prune_finetune_steps", prune.options.finetune_steps)
      .take("prune_lr", prune.options.finetune.lr)
      .take("prune_batch_size", prune.batch_size)
      .take("prune_temperature", prune.options.finetune.temperature)
      .take("prune_label_weight", prune.options.finetune.label_weight)
      .take("prune_crop_scale", prune.crop_scale_min)
      .take("prune_seed", prune.seed)
      .take("sparsity", o.sparsity)
      .refuse_the_rest();
  o.precision = infer::parse_precision(precision, "export: precision");
  qat.options.train_weights = !qat_biases_only;
  if (!qat.data.empty()) o.qat = qat;
  prune.options.importance = infer::importance_from_name(prune_importance);
  if (prune.options.ratio != 0.0 || prune.options.target_macs != 0.0) {  // a negative one is refused by name
    o.prune = prune;
  } else {
    HOTPATH_CHECK(prune.data.empty() && prune.options.ignore.empty(),
                  "export: prune_data/prune_ignore prune a model: add prune_macs=FRACTION or prune_ratio=R");
  }
  HOTPATH_CHECK(weight_rounding == "gptq" || weight_rounding == "nearest",
                "export: weight_rounding: expected 'gptq' or 'nearest', got '", weight_rounding, "'");
  o.gptq = weight_rounding == "gptq";
  o.progress = progress ? &std::cerr : nullptr;
  infer::ExportReport r;
  {
    py::gil_scoped_release release;
    r = infer::export_package(source, o);
  }
  py::dict d;
  d["report"] = py::module_::import("json").attr("loads")(r.json.dump());
  d["summary"] = r.summary;
  d["warning"] = r.warning;
  return d;
}

py::dict export_onnx(const py::dict& source_settings, const std::string& out, bool overwrite,
                     const std::string& producer_version) {
  const infer::ExportSource source = source_from(source_settings);
  std::size_t nodes = 0;
  std::vector<std::string> inputs;
  {
    py::gil_scoped_release release;
    const infer::LoweredModel m = infer::export_onnx_file(source, out, overwrite, producer_version);
    nodes = m.graph.nodes.size();
    for (const auto& input : m.graph.inputs) inputs.push_back(input.name);
  }
  py::dict d;
  d["path"] = out;
  d["opset"] = formats::kOnnxOpset;
  d["nodes"] = nodes;
  d["inputs"] = inputs;
  return d;
}

}  // namespace

void bind_export(py::module_& m) {
  m.def("export_package", &export_package, py::arg("source"), py::arg("out"), py::arg("options"),
        py::arg("progress"), "hotpath export: a model package and its accuracy report; use hotpath.infer.export");
  m.def("export_onnx", &export_onnx, py::arg("source"), py::arg("out"), py::arg("overwrite"),
        py::arg("producer_version"), "hotpath export --format onnx; use hotpath.infer.export(format='onnx')");
}

}  // namespace hotpath::python
