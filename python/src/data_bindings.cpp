// python/src/data_bindings.cpp — hotpath._C.Loader: data::Loader configured like the recipe's data: section.
//
// The settings arrive as recipe overrides ("data.image_size=64", "train.seed=3"), so they are parsed, defaulted and
// checked by the recipe (train/recipe.h, one table of keys) and mapped to LoaderOptions by the trainer's own
// train_loader_options / eval_preprocess_for: a Python loader and `hotpath train` with the same recipe get the
// same batches. Batches come out as the loader's own tensors (no copy): the ring slot's storage stays alive for
// as long as Python holds the tensor, and the loader allocates a fresh slot meanwhile (loader.cpp
// allocate_if_held). The GIL is released while a batch is waited for.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "hotpath/core/error.h"
#include "hotpath/data/loader.h"
#include "hotpath/infer/preprocess.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"

namespace py = pybind11;

namespace hotpath::python {
namespace {

at::Device parse_device(const std::string& name) {
  try {
    return at::Device(name);
  } catch (const c10::Error&) {
    HOTPATH_CHECK(false, "device: expected 'cpu', 'cuda' or 'cuda:N', got '", name, "'");
  }
  return at::kCPU;
}

data::LoaderOptions loader_options(const std::vector<std::string>& shards, const std::vector<std::string>& settings,
                                   bool train, int rank, int world_size, bool check_labels, const std::string& device) {
  HOTPATH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank, " of world_size ", world_size,
                ": expected 0 <= rank < world_size");
  train::Recipe recipe = train::parse_recipe("{}", settings, "hotpath.data.Loader");
  recipe.data.train = shards;
  data::LoaderOptions o = train::train_loader_options(recipe, rank, world_size);
  if (!train) {  // as the trainer's eval loader (train/image_task.cpp), split over ranks by shard
    data::LoaderOptions e = train::eval_preprocess_for(recipe).loader_options(o.shards);
    e.batch_size = o.batch_size;
    e.workers = o.workers;
    e.prefetch = o.prefetch;
    e.max_bad_samples = o.max_bad_samples;
    e.rank = rank;
    e.world_size = world_size;
    o = std::move(e);
  }
  o.num_classes = check_labels ? recipe.model.num_classes : 0;
  const at::Device target = parse_device(device);
  HOTPATH_CHECK(!target.is_cuda() || at::hasCUDA(), "device: ", device,
                " was asked for but this torch sees no CUDA device");
  train::configure_loader_device(o, recipe, target);
  return o;
}

class PyLoader {
 public:
  explicit PyLoader(data::LoaderOptions options) : loader_(std::make_unique<data::Loader>(std::move(options))) {}

  // (images, labels) of the current epoch, or None at its end (the loader then stands at the next epoch).
  py::object next() {
    std::optional<data::Batch> batch;
    {
      py::gil_scoped_release release;
      const std::lock_guard lock(mu_);  // one consumer at a time; taken without the GIL (no lock-order cycle)
      batch = loader_->next();
    }
    if (!batch) return py::none();
    last_images_address_ = reinterpret_cast<std::uintptr_t>(batch->images.data_ptr());
    return py::make_tuple(tensor_to_python(batch->images), tensor_to_python(batch->labels));
  }

  void seek(std::int64_t epoch, std::int64_t batch) {
    HOTPATH_CHECK(epoch >= 0 && batch >= 0, "load_state_dict: epoch ", epoch, " and batch ", batch,
                  " must not be negative");
    py::gil_scoped_release release;
    const std::lock_guard lock(mu_);
    loader_->seek({epoch, batch});
  }

  [[nodiscard]] BatchPosition position() const { return loader_->position(); }

  // Batches of one epoch on this rank; the shard headers are read once.
  std::int64_t batches_per_epoch() {
    if (!batches_per_epoch_) {
      py::gil_scoped_release release;
      const data::LoaderOptions& o = loader_->options();
      const std::int64_t samples = data::count_samples(o);
      const std::int64_t per_batch = static_cast<std::int64_t>(o.batch_size) * (o.split_batches ? o.world_size : 1);
      batches_per_epoch_ = o.drop_last ? samples / per_batch : (samples + per_batch - 1) / per_batch;
    }
    return *batches_per_epoch_;
  }

  [[nodiscard]] py::dict stats() const {
    const data::LoaderStats s = loader_->stats();
    py::dict d;
    d["samples"] = s.samples;
    d["bad_samples"] = s.bad_samples;
    d["batches"] = s.batches;
    d["plan_seconds"] = s.plan_seconds;
    d["decode_seconds"] = s.decode_seconds;
    d["store_seconds"] = s.store_seconds;
    d["wait_seconds"] = s.wait_seconds;
    return d;
  }

  [[nodiscard]] const data::Loader& loader() const { return *loader_; }
  [[nodiscard]] std::uintptr_t last_images_address() const { return last_images_address_; }

 private:
  std::unique_ptr<data::Loader> loader_;
  std::mutex mu_;
  std::optional<std::int64_t> batches_per_epoch_;
  std::uintptr_t last_images_address_ = 0;
};

}  // namespace

void bind_data(py::module_& m) {
  py::class_<PyLoader>(m, "Loader", "WebDataset image shards → (images, labels) batches (hotpath/data/loader.h)")
      .def(py::init([](const std::vector<std::string>& shards, const std::vector<std::string>& settings, bool train,
                       int rank, int world_size, bool check_labels, const std::string& device) {
             data::LoaderOptions o = loader_options(shards, settings, train, rank, world_size, check_labels, device);
             py::gil_scoped_release release;  // the planner starts indexing shards
             return std::make_unique<PyLoader>(std::move(o));
           }),
           py::arg("shards"), py::arg("settings"), py::kw_only(), py::arg("train") = true, py::arg("rank") = 0,
           py::arg("world_size") = 1, py::arg("check_labels") = false, py::arg("device") = "cpu")
      .def("next", &PyLoader::next)
      .def("seek", &PyLoader::seek, py::arg("epoch"), py::arg("batch"))
      .def_property_readonly("epoch", [](const PyLoader& l) { return l.position().epoch; })
      .def_property_readonly("batch", [](const PyLoader& l) { return l.position().batch; })
      .def("batches_per_epoch", &PyLoader::batches_per_epoch)
      .def("stats", &PyLoader::stats)
      .def("bad_samples",
           [](const PyLoader& l) {
             py::list out;
             for (const std::string& reason : l.loader().bad_samples()) {  // member names need not be UTF-8
               out.append(py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(
                   reason.data(), static_cast<Py_ssize_t>(reason.size()), "backslashreplace")));
             }
             return out;
           })
      .def("describe", [](const PyLoader& l) { return l.loader().describe(); })
      .def_property_readonly("_last_images_address", &PyLoader::last_images_address);
}

}  // namespace hotpath::python
