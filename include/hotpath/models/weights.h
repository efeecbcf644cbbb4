// hotpath/models/weights.h — a module's parameters and buffers to and from safetensors (no pickle).
//
//   LoadReport r = load_safetensors(*model, "resnet18.safetensors", {.allow_partial = true});
//   for (const ShapeMismatch& m : r.mismatched) std::cerr << m.name << " kept its initial value\n";
//   save_safetensors(*model, "run/model.safetensors");  // torchvision's key names and dtypes
//
// Keys are the module's dotted names (named_parameters() + named_buffers()), which for hotpath's
// models are torchvision's state_dict keys. Loading converts between floating dtypes (F16, BF16, F32,
// F64, F8_E5M2, F8_E4M3) and between integer dtypes; a float into an integer tensor is an error.
// Nothing is written into the module unless the whole load is accepted, so a refused load loses nothing.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hotpath/formats/safetensors.h"

namespace hotpath::models {

struct LoadOptions {
  // Load what matches and keep the module's own values for missing and shape-mismatched keys
  // (fine-tuning with a new head); unexpected keys are ignored. Off: any of the three is an error.
  bool allow_partial = false;
};

struct ShapeMismatch {
  std::string name;
  std::vector<std::int64_t> model_shape;
  std::vector<std::int64_t> file_shape;
};

// All name lists are sorted.
struct LoadReport {
  std::string source;                     // the file (or SafetensorsFile::source())
  std::vector<std::string> loaded;        // copied into the module
  std::vector<std::string> missing;       // in the module, not in the file
  std::vector<std::string> unexpected;    // in the file, not in the module
  std::vector<ShapeMismatch> mismatched;  // in both, with different shapes (not loaded)

  [[nodiscard]] bool complete() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // One line: "FILE: loaded 120 of 122 tensors; 2 missing (fc.bias, fc.weight); ...".
  [[nodiscard]] std::string summary() const;
};

// Throws hotpath::Error (with summary()) when the report is not complete and !allow_partial, when
// nothing at all matches, or when a tensor's dtype cannot be converted; the module is then untouched.
LoadReport load_safetensors(torch::nn::Module& module, const std::string& path, const LoadOptions& options = {});
LoadReport load_safetensors(torch::nn::Module& module, const formats::SafetensorsFile& file, const LoadOptions& options = {});

// named_parameters() + named_buffers(), recursively, by dotted name; the tensors alias the module's.
std::map<std::string, at::Tensor> named_state(const torch::nn::Module& module);

// Writes named_state(module) (atomic, see write_safetensors), each tensor in its own dtype
// (num_batches_tracked stays I64 as torch saves it).
void save_safetensors(const torch::nn::Module& module, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

// Plain tensor files (test fixtures, reference outputs): every tensor copied to a CPU tensor.
std::map<std::string, at::Tensor> read_tensors(const std::string& path);
void write_tensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                   const std::map<std::string, std::string>& metadata = {});

// One tensor of a file as a CPU tensor of the file's dtype (a copy: the view's bytes die with the file).
at::Tensor to_tensor(const formats::TensorView& view);

}  // namespace hotpath::models
