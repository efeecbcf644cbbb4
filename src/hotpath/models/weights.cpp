#include "hotpath/models/weights.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <sstream>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::models {
using namespace hotpath::formats;  // Dtype, SafetensorsFile, TensorToWrite, TensorView
namespace {

// safetensors data is little-endian; we hand the bytes to ATen as they are.
static_assert(std::endian::native == std::endian::little, "hotpath's safetensors I/O assumes a little-endian host");

struct DtypePair {
  Dtype file;
  at::ScalarType torch;
};

// The dtypes ATen can convert between; the rest (F4, F6_*, unsigned > 8 bits, ...) are refused by name.
constexpr DtypePair kDtypePairs[] = {
    {Dtype::BOOL, at::kBool},   {Dtype::U8, at::kByte},           {Dtype::I8, at::kChar},
    {Dtype::I16, at::kShort},   {Dtype::I32, at::kInt},           {Dtype::I64, at::kLong},
    {Dtype::F16, at::kHalf},    {Dtype::BF16, at::kBFloat16},     {Dtype::F32, at::kFloat},
    {Dtype::F64, at::kDouble},  {Dtype::F8_E5M2, at::kFloat8_e5m2}, {Dtype::F8_E4M3, at::kFloat8_e4m3fn},
};

std::optional<at::ScalarType> scalar_type(Dtype dtype) {
  for (const auto& p : kDtypePairs) {
    if (p.file == dtype) return p.torch;
  }
  return std::nullopt;
}

std::optional<Dtype> file_dtype(at::ScalarType type) {
  for (const auto& p : kDtypePairs) {
    if (p.torch == type) return p.file;
  }
  return std::nullopt;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out.append(i == 0 ? "" : ", ").append(std::to_string(shape[i]));
  return out + "]";
}

// "3 missing (a, b, c)" with at most kShown names, so a wrong-architecture file stays one readable line.
template <typename Range, typename Name>
void append_names(std::ostringstream& out, std::string_view what, const Range& items, Name name) {
  constexpr std::size_t kShown = 8;
  out << "; " << items.size() << ' ' << what << " (";
  for (std::size_t i = 0; i < std::min(items.size(), kShown); ++i) out << (i == 0 ? "" : ", ") << name(items[i]);
  if (items.size() > kShown) out << ", ... " << items.size() - kShown << " more";
  out << ')';
}

// A CPU tensor over the view's bytes when they are aligned for the dtype (the usual case: the
// writers pad the header to 8 bytes and sort by alignment); otherwise an aligned copy.
at::Tensor borrow(const TensorView& view, at::ScalarType type) {
  const auto options = at::TensorOptions().dtype(type);
  const auto address = reinterpret_cast<std::uintptr_t>(view.data.data());
  if (address % c10::elementSize(type) == 0) {
    // ATen only reads from it (copy_ source), so dropping const is safe.
    return at::from_blob(const_cast<std::byte*>(view.data.data()), view.shape, options);
  }
  at::Tensor copy = at::empty(view.shape, options);
  if (!view.data.empty()) std::memcpy(copy.data_ptr(), view.data.data(), view.data.size());
  return copy;
}

}  // namespace

std::string LoadReport::summary() const {
  std::ostringstream out;
  out << source << ": loaded " << loaded.size() << " of " << loaded.size() + missing.size() + mismatched.size()
      << " module tensors";
  const auto same = [](const std::string& s) { return s; };
  if (!missing.empty()) append_names(out, "missing from the file", missing, same);
  if (!unexpected.empty()) append_names(out, "unexpected in the file", unexpected, same);
  if (!mismatched.empty()) {
    append_names(out, "with another shape", mismatched, [](const ShapeMismatch& m) {
      return m.name + ": model " + shape_text(m.model_shape) + ", file " + shape_text(m.file_shape);
    });
  }
  return out.str();
}

std::map<std::string, at::Tensor> named_state(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) state.emplace(item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true)) state.emplace(item.key(), item.value());
  return state;
}

LoadReport load_safetensors(torch::nn::Module& module, const std::string& path, const LoadOptions& options) {
  const SafetensorsFile file(path);
  return load_safetensors(module, file, options);
}

LoadReport load_safetensors(torch::nn::Module& module, const SafetensorsFile& file, const LoadOptions& options) {
  std::map<std::string, at::Tensor> state = named_state(module);
  LoadReport report;
  report.source = file.source();

  // Decide everything first: a refused load must leave the module as it was.
  std::vector<std::pair<at::Tensor*, const TensorView*>> plan;
  for (const TensorView& view : file.tensors()) {
    const auto it = state.find(view.name);
    if (it == state.end()) {
      report.unexpected.push_back(view.name);
      continue;
    }
    at::Tensor& target = it->second;
    if (target.sizes() != at::IntArrayRef(view.shape)) {
      report.mismatched.push_back({view.name, target.sizes().vec(), view.shape});
      continue;
    }
    const std::optional<at::ScalarType> type = scalar_type(view.dtype);
    HOTPATH_CHECK(type.has_value(), file.source(), ": tensor '", view.name, "' has dtype ", dtype_name(view.dtype),
                  ", which hotpath cannot load (supported: BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64, "
                  "F8_E5M2, F8_E4M3)");
    HOTPATH_CHECK(at::isFloatingType(*type) == at::isFloatingType(target.scalar_type()), file.source(),
                  ": tensor '", view.name, "' is ", dtype_name(view.dtype), " in the file but ",
                  c10::toString(target.scalar_type()), " in the module; only float<->float and int<->int convert");
    plan.emplace_back(&target, &view);
    report.loaded.push_back(view.name);
  }
  for (const auto& [name, tensor] : state) {
    if (file.find(name) == nullptr) report.missing.push_back(name);
  }
  std::sort(report.loaded.begin(), report.loaded.end());
  std::sort(report.unexpected.begin(), report.unexpected.end());
  std::sort(report.mismatched.begin(), report.mismatched.end(),
            [](const ShapeMismatch& a, const ShapeMismatch& b) { return a.name < b.name; });

  HOTPATH_CHECK(report.complete() || options.allow_partial, report.summary(),
                "; refusing to load (allow partial loading to keep the module's values for these)");
  HOTPATH_CHECK(!report.loaded.empty() || state.empty(), report.summary(),
                "; no tensor of the file matches the module, is it the right file?");

  const at::NoGradGuard no_grad;
  for (const auto& [target, view] : plan) target->copy_(borrow(*view, *scalar_type(view->dtype)));
  return report;
}

void save_safetensors(const torch::nn::Module& module, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  write_tensors(path, named_state(module), metadata);
}

void write_tensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> keep;  // CPU contiguous copies that the byte spans point into
  std::vector<TensorToWrite> out;
  keep.reserve(tensors.size());
  out.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    HOTPATH_CHECK(tensor.defined(), path, ": tensor '", name, "' is undefined");
    const std::optional<Dtype> dtype = file_dtype(tensor.scalar_type());
    HOTPATH_CHECK(dtype.has_value(), path, ": tensor '", name, "' has dtype ", c10::toString(tensor.scalar_type()),
                  ", which has no safetensors counterpart hotpath writes");
    const at::Tensor& cpu = keep.emplace_back(tensor.detach().to(at::kCPU).contiguous());
    out.push_back({name, *dtype, cpu.sizes().vec(),
                   std::span(static_cast<const std::byte*>(cpu.const_data_ptr()), cpu.nbytes())});
  }
  write_safetensors(path, out, metadata);
}

at::Tensor to_tensor(const TensorView& view) {
  const std::optional<at::ScalarType> type = scalar_type(view.dtype);
  HOTPATH_CHECK(type.has_value(), "tensor '", view.name, "' has dtype ", dtype_name(view.dtype),
                ", which hotpath cannot convert to a torch tensor");
  at::Tensor out = at::empty(view.shape, at::TensorOptions().dtype(*type));
  if (!view.data.empty()) std::memcpy(out.data_ptr(), view.data.data(), view.data.size());
  return out;
}

std::map<std::string, at::Tensor> read_tensors(const std::string& path) {
  const SafetensorsFile file(path);
  std::map<std::string, at::Tensor> out;
  for (const TensorView& view : file.tensors()) {
    try {
      out.emplace(view.name, to_tensor(view));
    } catch (const Error& e) {
      throw e.with_context(path);
    }
  }
  return out;
}

}  // namespace hotpath::models
