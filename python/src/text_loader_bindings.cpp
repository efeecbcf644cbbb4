// python/src/text_loader_bindings.cpp — hotpath._C.TextLoader: text::TextLoader configured like a text recipe's
// data: section.
//
// The settings arrive as recipe overrides ("data.max_tokens=4096", "train.seed=3"), parsed and checked by the
// recipe (train/recipe.h) and mapped to TextLoaderOptions by the trainer's own text_loader_options
// (train/text_loader_options.h): a Python loader and `hotpath train` with the same recipe get the same batches.
// With dtype int32 the batch tensors are the C++ batch's own vectors (no copy; the tensors keep the batch alive);
// with int64 (HF's and the trainer's dtype) they are the trainer's to_tensors conversion. The GIL is released
// while a batch is waited for.
#include <ATen/ops/from_blob.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "hotpath/core/error.h"
#include "hotpath/text/text_batch_tensor.h"
#include "hotpath/text/text_loader.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/text_loader_options.h"

namespace py = pybind11;

namespace hotpath::python {
namespace {

text::TextLoaderOptions text_options(const std::vector<std::string>& shards, const std::vector<std::string>& settings,
                                     bool train, int rank, int world_size) {
  HOTPATH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank, " of world_size ", world_size,
                ": expected 0 <= rank < world_size");
  train::Recipe recipe = train::parse_recipe("{}", settings, "hotpath.text.Loader");
  (train ? recipe.data.train : recipe.data.eval) = shards;
  return train::text_loader_options(recipe, train, rank, world_size);
}

// [rows, cols] int32/int64 tensor over `data`, owned by `batch`.
at::Tensor view_of(const std::shared_ptr<text::TextBatch>& batch, const void* data, std::vector<std::int64_t> shape,
                   at::ScalarType dtype) {
  // from_blob never writes; the const_cast only satisfies its void* parameter.
  return at::from_blob(const_cast<void*>(data), shape, [batch](void*) {}, at::TensorOptions().dtype(dtype));
}

class PyTextLoader {
 public:
  PyTextLoader(text::TextLoaderOptions options, bool int64)
      : loader_(std::make_unique<text::TextLoader>(std::move(options))), int64_(int64) {}

  // {input_ids, attention_mask, token_type_ids, labels} of the current epoch, or None at its end.
  py::object next() {
    std::optional<text::TextBatch> batch;
    {
      py::gil_scoped_release release;
      const std::lock_guard lock(mu_);  // one consumer at a time; taken without the GIL
      batch = loader_->next();
    }
    if (!batch) return py::none();
    py::dict out;
    if (int64_) {
      const text::TextBatchTensors t = text::to_tensors(*batch, at::kLong);
      out["input_ids"] = tensor_to_python(t.input_ids);
      out["attention_mask"] = tensor_to_python(t.attention_mask);
      out["token_type_ids"] = tensor_to_python(t.token_type_ids);
      out["labels"] = tensor_to_python(t.labels);
      return out;
    }
    const auto b = std::make_shared<text::TextBatch>(std::move(*batch));
    last_input_ids_address_ = reinterpret_cast<std::uintptr_t>(b->input_ids.data());
    const std::vector<std::int64_t> shape{b->batch_size, b->length};
    out["input_ids"] = tensor_to_python(view_of(b, b->input_ids.data(), shape, at::kInt));
    out["attention_mask"] = tensor_to_python(view_of(b, b->attention_mask.data(), shape, at::kInt));
    out["token_type_ids"] = tensor_to_python(view_of(b, b->token_type_ids.data(), shape, at::kInt));
    out["labels"] = tensor_to_python(view_of(b, b->labels.data(), {b->batch_size}, at::kLong));
    return out;
  }

  void seek(std::int64_t epoch, std::int64_t batch) {
    HOTPATH_CHECK(epoch >= 0 && batch >= 0, "load_state_dict: epoch ", epoch, " and batch ", batch,
                  " must not be negative");
    py::gil_scoped_release release;
    const std::lock_guard lock(mu_);
    loader_->seek({epoch, batch});
  }

  [[nodiscard]] BatchPosition position() const { return loader_->position(); }
  [[nodiscard]] std::int64_t batches_in_epoch() const { return loader_->batches_in_epoch(position().epoch); }

  [[nodiscard]] py::dict stats() const {
    const text::PaddingStats s = loader_->stats();
    py::dict d;
    d["batches"] = s.batches;
    d["samples"] = s.samples;
    d["real_tokens"] = s.real_tokens;
    d["padded_tokens"] = s.padded_tokens;
    d["padding_fraction"] = s.padding_fraction();
    return d;
  }

  [[nodiscard]] const text::TextLoader& loader() const { return *loader_; }
  // Where the last int32 batch's input_ids live in the C++ batch (for the zero-copy test).
  [[nodiscard]] std::uintptr_t last_input_ids_address() const { return last_input_ids_address_; }

 private:
  std::unique_ptr<text::TextLoader> loader_;
  bool int64_;
  std::mutex mu_;
  std::uintptr_t last_input_ids_address_ = 0;
};

}  // namespace

void bind_text_loader(py::module_& m) {
  py::class_<PyTextLoader>(m, "TextLoader", "text shards → padded token batches (hotpath/text/text_loader.h)")
      .def(py::init([](const std::vector<std::string>& shards, const std::vector<std::string>& settings, bool train,
                       int rank, int world_size, bool int64) {
             text::TextLoaderOptions o = text_options(shards, settings, train, rank, world_size);
             py::gil_scoped_release release;  // reads and tokenizes the shards
             return std::make_unique<PyTextLoader>(std::move(o), int64);
           }),
           py::arg("shards"), py::arg("settings"), py::kw_only(), py::arg("train") = true, py::arg("rank") = 0,
           py::arg("world_size") = 1, py::arg("int64") = true)
      .def("next", &PyTextLoader::next)
      .def("seek", &PyTextLoader::seek, py::arg("epoch"), py::arg("batch"))
      .def_property_readonly("epoch", [](const PyTextLoader& l) { return l.position().epoch; })
      .def_property_readonly("batch", [](const PyTextLoader& l) { return l.position().batch; })
      .def("batches_in_epoch", &PyTextLoader::batches_in_epoch)
      .def("stats", &PyTextLoader::stats)
      .def_property_readonly("num_samples",
                             [](const PyTextLoader& l) { return l.loader().corpus().labels.size(); })
      .def_property_readonly("pad_id", [](const PyTextLoader& l) { return l.loader().pad_id(); })
      .def_property_readonly("last_input_ids_address", &PyTextLoader::last_input_ids_address);
}

}  // namespace hotpath::python
