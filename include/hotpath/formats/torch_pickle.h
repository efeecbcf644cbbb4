// hotpath/formats/torch_pickle.h — a torch.save'd state_dict (pytorch_model.bin) read weights-only and
// without LibTorch: plain records that hf_weights.cpp turns into tensors.
//
//   hotpath::MappedFile file("pytorch_model.bin");
//   TorchCheckpoint ckpt = read_torch_checkpoint(file.bytes(), "pytorch_model.bin");
//   for (const TorchTensorRecord& t : ckpt.tensors) use(t.key, ckpt.storages.at(t.storage), t.sizes);
//
// data.pkl goes through a small unpickler that calls nothing: it understands the opcodes pickle
// protocol 2 (torch.save's default) emits for dicts, lists, tuples, strings, numbers and tensors, and
// accepts GLOBAL only for collections.OrderedDict, torch._utils._rebuild_tensor_v2 /
// _rebuild_parameter and the torch.*Storage dtype markers; any other global (os.system, ...) is
// refused by name. Values live in one arena owned by the parse (no reference cycles, no recursion
// when freed), so a hostile pickle costs memory linear in its size and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hotpath/formats/torch_zip.h"

namespace hotpath::formats {

// The dtypes of the torch.*Storage classes torch.save names.
enum class TorchDtype { kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool };
[[nodiscard]] std::size_t element_size(TorchDtype dtype);
[[nodiscard]] std::string_view dtype_name(TorchDtype dtype);  // "float32", "bfloat16", ...

// One tensor of the state_dict: a strided view into a storage (data/<storage> in the zip).
struct TorchTensorRecord {
  std::string key;      // the state_dict key; nested dicts are joined with '.' ("model.fc.weight")
  std::string storage;  // the storage's record name relative to data/ ("0", "1", ...)
  TorchDtype dtype = TorchDtype::kFloat32;
  std::int64_t storage_numel = 0;  // elements in the whole storage
  std::int64_t offset = 0;         // first element of the view, in elements
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;  // in elements; the view lies inside the storage (checked)
  [[nodiscard]] std::int64_t numel() const;
};

// data.pkl alone: the tensors of the top-level dict (and of dicts nested in it), in file order.
// Non-tensor values (numbers, strings, lists, _metadata) are skipped; a top level that is not a dict,
// a non-string key, a key seen twice, a view outside its storage, or one storage named with two
// dtypes or sizes is a hotpath::Error naming `source`, "data.pkl", the byte offset and what was wrong.
std::vector<TorchTensorRecord> parse_torch_pickle(std::span<const std::byte> pickle, std::string_view source);

struct TorchCheckpoint {
  std::vector<TorchTensorRecord> tensors;
  // Storage name → its bytes (views into the file), each exactly storage_numel × element_size.
  std::map<std::string, std::span<const std::byte>> storages;
};

// The whole pytorch_model.bin: zip container (torch_zip.h), byteorder "little", data.pkl, and every
// storage record present with the size the pickle declares. `file` must outlive the result.
TorchCheckpoint read_torch_checkpoint(std::span<const std::byte> file, std::string_view source,
                                      TorchZipOptions options = {});

}  // namespace hotpath::formats
