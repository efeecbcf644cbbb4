#include "hotpath/models/hf_weights.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"

namespace hotpath::models {
namespace {

std::string first_line(const char* what) {
  std::string s(what);
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool any_key_starts_with(const std::map<std::string, at::Tensor>& state, const std::string& prefix) {
  return std::any_of(state.begin(), state.end(), [&](const auto& kv) { return starts_with(kv.first, prefix); });
}

// Old TF-converted checkpoints name LayerNorm's parameters gamma/beta (HF renames them on load).
std::string legacy_rename(std::string key) {
  const auto ends_with = [&](std::string_view tail) {
    return key.size() >= tail.size() && key.compare(key.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with(".gamma")) return key.substr(0, key.size() - 6) + ".weight";
  if (ends_with(".beta")) return key.substr(0, key.size() - 5) + ".bias";
  return key;
}

}  // namespace

std::filesystem::path hf_weights_file(const std::filesystem::path& dir_or_file) {
  if (!std::filesystem::is_directory(dir_or_file)) {
    HOTPATH_CHECK(std::filesystem::exists(dir_or_file), dir_or_file.string(), ": no such file or directory");
    return dir_or_file;
  }
  for (const char* name : {"model.safetensors", "pytorch_model.bin"}) {
    if (std::filesystem::exists(dir_or_file / name)) return dir_or_file / name;
  }
  HOTPATH_CHECK(!std::filesystem::exists(dir_or_file / "model.safetensors.index.json") &&
                    !std::filesystem::exists(dir_or_file / "pytorch_model.bin.index.json"),
                dir_or_file.string(), ": sharded checkpoints (*.index.json) are not supported; merge the shards");
  HOTPATH_CHECK(false, dir_or_file.string(), ": no model.safetensors or pytorch_model.bin");
  return {};
}

namespace {

// ---- a weights-only unpickler for torch.save's data.pkl -------------------------------------------
// LibTorch's own unpickler (torch::jit) turns collections.OrderedDict into None — it only expects one
// as a tensor's empty backward-hooks argument — so a state_dict, which *is* an OrderedDict, cannot be
// read through it. This one understands the opcodes pickle protocol 2 (torch.save's) and 4 emit for
// dicts, lists, tuples, strings, numbers and tensors, and calls nothing: GLOBAL is accepted only for
// OrderedDict, the tensor-rebuild functions and torch.*Storage dtype markers, and REDUCE only applies
// those, so a pickle that names os.system (or anything else) is refused at the GLOBAL.

struct PickleValue;
using PicklePtr = std::shared_ptr<PickleValue>;

struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor, kMark };
  Kind kind = Kind::kNone;
  std::int64_t integer = 0;
  double real = 0.0;
  std::string text;  // kString, kGlobal ("module.name")
  std::vector<PicklePtr> items;  // kTuple, kList
  std::vector<std::pair<PicklePtr, PicklePtr>> dict;
  at::Tensor tensor;  // kStorage (flat), kTensor
};

PicklePtr make_value(PickleValue::Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

constexpr std::pair<std::string_view, at::ScalarType> kStorageTypes[] = {
    {"FloatStorage", at::kFloat},   {"DoubleStorage", at::kDouble}, {"HalfStorage", at::kHalf},
    {"BFloat16Storage", at::kBFloat16}, {"LongStorage", at::kLong}, {"IntStorage", at::kInt},
    {"ShortStorage", at::kShort},   {"CharStorage", at::kChar},     {"ByteStorage", at::kByte},
    {"BoolStorage", at::kBool},
};

std::optional<at::ScalarType> storage_dtype(std::string_view global) {
  if (!global.starts_with("torch.")) return std::nullopt;
  global.remove_prefix(6);
  for (const auto& [name, type] : kStorageTypes) {
    if (global == name) return type;
  }
  return std::nullopt;
}

bool allowed_global(const std::string& name) {
  return name == "collections.OrderedDict" || name == "torch._utils._rebuild_tensor_v2" ||
         name == "torch._utils._rebuild_parameter" || storage_dtype(name).has_value();
}

class WeightsUnpickler {
 public:
  WeightsUnpickler(std::string_view source, std::span<const std::byte> pickle, caffe2::serialize::PyTorchStreamReader& zip)
      : source_(source), data_(pickle), zip_(zip) {}

  PicklePtr run() {
    while (true) {
      const std::size_t at = pos_;
      const auto op = static_cast<unsigned char>(u8());
      if (op == '.') break;  // STOP
      step(op, at);
    }
    HOTPATH_CHECK(stack_.size() == 1, source_, ": data.pkl ends with ", stack_.size(), " values on the stack");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    HOTPATH_CHECK(false, source_, ": data.pkl offset ", at, ": ", what);
    std::abort();
  }
  std::span<const std::byte> take(std::size_t n) {
    if (n > data_.size() - pos_) fail(pos_, "truncated pickle");
    const auto out = data_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::uint64_t unsigned_le(std::size_t n) {
    const auto bytes = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
    return v;
  }
  std::byte u8() { return take(1)[0]; }
  std::string text(std::size_t n) {
    const auto bytes = take(n);
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
  std::string line() {
    std::string out;
    while (true) {
      const char c = static_cast<char>(u8());
      if (c == '\n') return out;
      out += c;
    }
  }
  PicklePtr pop(std::size_t at) {
    if (stack_.empty() || stack_.back()->kind == PickleValue::Kind::kMark) fail(at, "pop from an empty stack");
    PicklePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  // The values above the topmost MARK, which is removed.
  std::vector<PicklePtr> pop_mark(std::size_t at) {
    std::size_t i = stack_.size();
    while (i > 0 && stack_[i - 1]->kind != PickleValue::Kind::kMark) --i;
    if (i == 0) fail(at, "no MARK on the stack");
    std::vector<PicklePtr> out(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(i)),
                               std::make_move_iterator(stack_.end()));
    stack_.resize(i - 1);
    return out;
  }
  PicklePtr& top(std::size_t at) {
    if (stack_.empty()) fail(at, "empty stack");
    return stack_.back();
  }
  PicklePtr integer(std::int64_t v) {
    auto p = make_value(PickleValue::Kind::kInt);
    p->integer = v;
    return p;
  }
  PicklePtr tuple(std::vector<PicklePtr> items) {
    auto p = make_value(PickleValue::Kind::kTuple);
    p->items = std::move(items);
    return p;
  }
  void memo_put(std::uint64_t key, std::size_t at) { memo_[key] = top(at); }
  void memo_get(std::uint64_t key, std::size_t at) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail(at, "memo key " + std::to_string(key) + " was never stored");
    stack_.push_back(it->second);
  }
  std::int64_t as_int(const PicklePtr& v, std::size_t at, const char* what) const {
    if (v->kind != PickleValue::Kind::kInt) fail(at, std::string(what) + " is not an integer");
    return v->integer;
  }
  std::vector<std::int64_t> as_ints(const PicklePtr& v, std::size_t at, const char* what) const {
    if (v->kind != PickleValue::Kind::kTuple) fail(at, std::string(what) + " is not a tuple");
    std::vector<std::int64_t> out;
    for (const auto& x : v->items) out.push_back(as_int(x, at, what));
    return out;
  }

  // ('storage', torch.XStorage, key, location, numel) → the flat tensor of record data/<key>.
  PicklePtr persistent_load(const PicklePtr& pid, std::size_t at) {
    if (pid->kind != PickleValue::Kind::kTuple || pid->items.size() != 5 ||
        pid->items[0]->kind != PickleValue::Kind::kString || pid->items[0]->text != "storage" ||
        pid->items[1]->kind != PickleValue::Kind::kGlobal || pid->items[2]->kind != PickleValue::Kind::kString) {
      fail(at, "persistent id is not ('storage', type, key, location, numel)");
    }
    const std::string& key = pid->items[2]->text;
    if (const auto it = storages_.find(key); it != storages_.end()) return it->second;
    const std::optional<at::ScalarType> dtype = storage_dtype(pid->items[1]->text);
    if (!dtype) fail(at, "storage type " + pid->items[1]->text + " is not supported");
    const std::int64_t numel = as_int(pid->items[4], at, "storage size");
    const std::string record = "data/" + key;
    if (!zip_.hasRecord(record)) fail(at, "storage record " + record + " is missing from the archive");
    const std::size_t bytes = zip_.getRecordSize(record);
    const std::size_t element = c10::elementSize(*dtype);
    if (numel < 0 || bytes != static_cast<std::size_t>(numel) * element) {
      fail(at, "storage " + record + " has " + std::to_string(bytes) + " bytes, expected " + std::to_string(numel) +
                   " × " + std::to_string(element));
    }
    auto storage = make_value(PickleValue::Kind::kStorage);
    storage->tensor = at::empty({numel}, at::TensorOptions().dtype(*dtype));
    if (bytes != 0) zip_.getRecord(record, storage->tensor.data_ptr(), bytes);
    storages_.emplace(key, storage);
    return storage;
  }

  PicklePtr reduce(const PicklePtr& callable, const PicklePtr& args, std::size_t at) {
    if (callable->kind != PickleValue::Kind::kGlobal || args->kind != PickleValue::Kind::kTuple) {
      fail(at, "REDUCE of something other than an allowed global");
    }
    const std::string& name = callable->text;
    const auto& a = args->items;
    if (name == "collections.OrderedDict") {
      if (!a.empty()) fail(at, "OrderedDict with arguments");
      return make_value(PickleValue::Kind::kDict);
    }
    if (name == "torch._utils._rebuild_tensor_v2") {
      // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      if (a.size() < 4 || a[0]->kind != PickleValue::Kind::kStorage) fail(at, "malformed _rebuild_tensor_v2 arguments");
      const std::int64_t offset = as_int(a[1], at, "storage offset");
      const std::vector<std::int64_t> size = as_ints(a[2], at, "tensor size");
      const std::vector<std::int64_t> stride = as_ints(a[3], at, "tensor stride");
      if (size.size() != stride.size() || offset < 0) fail(at, "tensor size and stride disagree");
      // The furthest element the view touches must lie inside the storage.
      std::int64_t last = offset;
      bool empty = false;
      for (std::size_t i = 0; i < size.size(); ++i) {
        if (size[i] < 0 || stride[i] < 0) fail(at, "negative tensor size or stride");
        std::int64_t reach = 0;
        if (size[i] == 0) empty = true;
        else if (__builtin_mul_overflow(size[i] - 1, stride[i], &reach) || __builtin_add_overflow(last, reach, &last))
          fail(at, "tensor size × stride overflows");
      }
      const at::Tensor& storage = a[0]->tensor;
      if (!empty && last >= storage.numel()) fail(at, "tensor view runs past the end of its storage");
      auto out = make_value(PickleValue::Kind::kTensor);
      out->tensor = empty ? at::empty(size, storage.options()) : storage.as_strided(size, stride, offset);
      return out;
    }
    if (name == "torch._utils._rebuild_parameter") {  // (data, requires_grad, backward_hooks)
      if (a.empty() || a[0]->kind != PickleValue::Kind::kTensor) fail(at, "malformed _rebuild_parameter arguments");
      return a[0];
    }
    fail(at, "REDUCE of " + name + " is not allowed");
  }

  void step(unsigned char op, std::size_t at) {
    using K = PickleValue::Kind;
    switch (op) {
      case 0x80: (void)u8(); return;                  // PROTO
      case 0x95: (void)unsigned_le(8); return;        // FRAME
      case '(': stack_.push_back(make_value(K::kMark)); return;
      case 'N': stack_.push_back(make_value(K::kNone)); return;
      case 0x88: case 0x89: {                         // NEWTRUE, NEWFALSE
        auto v = make_value(K::kBool);
        v->integer = op == 0x88;
        stack_.push_back(v);
        return;
      }
      case 'K': stack_.push_back(integer(static_cast<std::int64_t>(unsigned_le(1)))); return;  // BININT1
      case 'M': stack_.push_back(integer(static_cast<std::int64_t>(unsigned_le(2)))); return;  // BININT2
      case 'J': stack_.push_back(integer(static_cast<std::int32_t>(unsigned_le(4)))); return;  // BININT
      case 0x8a: {                                    // LONG1: n-byte little-endian two's complement
        const auto n = static_cast<std::size_t>(u8());
        if (n > 8) fail(at, "integer wider than 64 bits");
        std::uint64_t v = unsigned_le(n);
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
        stack_.push_back(integer(static_cast<std::int64_t>(v)));
        return;
      }
      case 'G': {                                     // BINFLOAT: big-endian double
        const auto b = take(8);
        std::uint64_t bits = 0;
        for (std::size_t i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<std::uint64_t>(b[i]);
        auto v = make_value(K::kFloat);
        v->real = std::bit_cast<double>(bits);
        stack_.push_back(v);
        return;
      }
      case 'X': case 0x8c: case 'T': case 'U': case 'B': case 'C': {  // (SHORT_)BINUNICODE/BINSTRING/BINBYTES
        const std::size_t n = (op == 0x8c || op == 'U' || op == 'C') ? unsigned_le(1) : unsigned_le(4);
        auto v = make_value(K::kString);
        v->text = text(n);
        stack_.push_back(v);
        return;
      }
      case 'c': {                                     // GLOBAL "module\nname\n"
        std::string name = line();
        name += "." + line();
        if (!allowed_global(name)) {
          fail(at, "refusing global " + name + " (a weights-only load accepts tensors, dicts and OrderedDicts only)");
        }
        auto v = make_value(K::kGlobal);
        v->text = std::move(name);
        stack_.push_back(v);
        return;
      }
      case 0x93: fail(at, "STACK_GLOBAL is not supported (save with pickle protocol 2, torch.save's default)");
      case ')': stack_.push_back(tuple({})); return;
      case 't': stack_.push_back(tuple(pop_mark(at))); return;
      case 0x85: case 0x86: case 0x87: {              // TUPLE1..3
        std::vector<PicklePtr> items(op - 0x84);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop(at);
        stack_.push_back(tuple(std::move(items)));
        return;
      }
      case ']': stack_.push_back(make_value(K::kList)); return;
      case 'l': {
        auto v = make_value(K::kList);
        v->items = pop_mark(at);
        stack_.push_back(v);
        return;
      }
      case '}': stack_.push_back(make_value(K::kDict)); return;
      case 'd': case 's': case 'u': {                 // DICT, SETITEM, SETITEMS
        std::vector<PicklePtr> kv;
        if (op == 's') {
          kv.resize(2);
          kv[1] = pop(at);
          kv[0] = pop(at);
        } else {
          kv = pop_mark(at);
        }
        if (kv.size() % 2 != 0) fail(at, "odd number of dict items");
        if (op == 'd') stack_.push_back(make_value(K::kDict));
        PicklePtr& dict = top(at);
        if (dict->kind != K::kDict) fail(at, "SETITEM on something other than a dict");
        for (std::size_t i = 0; i < kv.size(); i += 2) dict->dict.emplace_back(kv[i], kv[i + 1]);
        return;
      }
      case 'a': case 'e': {                           // APPEND, APPENDS
        std::vector<PicklePtr> items;
        if (op == 'a') items.push_back(pop(at));
        else items = pop_mark(at);
        PicklePtr& list = top(at);
        if (list->kind != K::kList) fail(at, "APPEND to something other than a list");
        for (auto& x : items) list->items.push_back(std::move(x));
        return;
      }
      case 'q': memo_put(unsigned_le(1), at); return;   // BINPUT
      case 'r': memo_put(unsigned_le(4), at); return;   // LONG_BINPUT
      case 0x94: memo_put(memo_.size(), at); return;    // MEMOIZE
      case 'h': memo_get(unsigned_le(1), at); return;   // BINGET
      case 'j': memo_get(unsigned_le(4), at); return;   // LONG_BINGET
      case 'Q': {                                       // BINPERSID
        const PicklePtr pid = pop(at);
        stack_.push_back(persistent_load(pid, at));
        return;
      }
      case 'R': {                                       // REDUCE
        const PicklePtr args = pop(at);
        const PicklePtr callable = pop(at);
        stack_.push_back(reduce(callable, args, at));
        return;
      }
      case 'b': {                                       // BUILD: a state_dict's _metadata attribute
        const PicklePtr state = pop(at);
        if (top(at)->kind != K::kDict) fail(at, "BUILD on something other than an OrderedDict");
        (void)state;  // per-module version numbers, not needed to load the tensors
        return;
      }
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        fail(at, std::string("unsupported pickle opcode 0x") + kHex[op >> 4] + kHex[op & 15]);
      }
    }
  }

  std::string_view source_;
  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
  caffe2::serialize::PyTorchStreamReader& zip_;
  std::vector<PicklePtr> stack_;
  std::unordered_map<std::uint64_t, PicklePtr> memo_;
  std::unordered_map<std::string, PicklePtr> storages_;
};

}  // namespace

std::map<std::string, at::Tensor> read_torch_state_dict(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  at::DataPtr pickle;
  std::size_t pickle_size = 0;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(source);
    std::tie(pickle, pickle_size) = zip->getRecord("data.pkl");
  } catch (const std::exception& e) {
    HOTPATH_CHECK(false, source, ": cannot read as a weights-only torch.save zip checkpoint: ", first_line(e.what()));
  }
  if (zip->hasRecord("byteorder")) {
    auto [order, n] = zip->getRecord("byteorder");
    const std::string text(static_cast<const char*>(order.get()), n);
    HOTPATH_CHECK(text == "little", source, ": tensors saved in ", text, "-endian byte order are not supported");
  }
  PicklePtr root;
  try {
    WeightsUnpickler unpickler(source, std::span(static_cast<const std::byte*>(pickle.get()), pickle_size), *zip);
    root = unpickler.run();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    HOTPATH_CHECK(false, source, ": cannot read as a weights-only torch.save zip checkpoint: ", first_line(e.what()));
  }
  HOTPATH_CHECK(root->kind == PickleValue::Kind::kDict, source, ": expected a dict of tensors (a state_dict)");
  std::map<std::string, at::Tensor> out;
  for (const auto& [key, value] : root->dict) {
    HOTPATH_CHECK(key->kind == PickleValue::Kind::kString, source, ": a state_dict key is not a string");
    if (value->kind != PickleValue::Kind::kTensor) continue;  // a state_dict holds tensors; skip the rest
    out.emplace(key->text, value->tensor.contiguous());
  }
  HOTPATH_CHECK(!out.empty(), source, ": the dict holds no tensors");
  return out;
}

std::map<std::string, at::Tensor> read_hf_state_dict(const std::filesystem::path& dir_or_file) {
  const std::filesystem::path file = hf_weights_file(dir_or_file);
  if (file.extension() == ".safetensors") return read_tensors(file.string());
  return read_torch_state_dict(file);
}

std::map<std::string, at::Tensor> remap_hf_keys(std::map<std::string, at::Tensor> state,
                                                const torch::nn::Module& module, const HfKeyOptions& keys) {
  std::map<std::string, at::Tensor> renamed;
  for (auto& [key, tensor] : state) {
    // A buffer transformers stopped saving (non-persistent since 4.31); never a parameter of ours.
    if (key == "position_ids" || (key.size() > 13 && key.ends_with(".position_ids"))) continue;
    renamed.emplace(legacy_rename(key), std::move(tensor));
  }
  if (keys.base_prefix.empty()) return renamed;

  const std::string prefix = keys.base_prefix + ".";
  const std::map<std::string, at::Tensor> own = named_state(module);
  const bool module_prefixed = any_key_starts_with(own, prefix);
  const bool file_prefixed = any_key_starts_with(renamed, prefix);
  std::map<std::string, at::Tensor> out;
  if (module_prefixed && !file_prefixed) {
    for (auto& [key, tensor] : renamed) out.emplace(prefix + key, std::move(tensor));
  } else if (!module_prefixed && file_prefixed) {
    for (auto& [key, tensor] : renamed) {
      if (starts_with(key, prefix)) out.emplace(key.substr(prefix.size()), std::move(tensor));
    }
  } else {
    out = std::move(renamed);
  }
  return out;
}

LoadReport load_state_dict(torch::nn::Module& module, std::map<std::string, at::Tensor> state,
                           const std::string& source, const LoadOptions& options, const HfKeyOptions& keys) {
  state = remap_hf_keys(std::move(state), module, keys);
  std::map<std::string, at::Tensor> own = named_state(module);
  LoadReport report;
  report.source = source;

  // Decide everything first: a refused load must leave the module as it was.
  std::vector<std::pair<at::Tensor*, const at::Tensor*>> plan;
  for (const auto& [name, tensor] : state) {
    const auto it = own.find(name);
    if (it == own.end()) {
      report.unexpected.push_back(name);
      continue;
    }
    if (it->second.sizes() != tensor.sizes()) {
      report.mismatched.push_back({name, it->second.sizes().vec(), tensor.sizes().vec()});
      continue;
    }
    HOTPATH_CHECK(at::isFloatingType(tensor.scalar_type()) == at::isFloatingType(it->second.scalar_type()), source,
                  ": tensor '", name, "' is ", c10::toString(tensor.scalar_type()), " in the file but ",
                  c10::toString(it->second.scalar_type()), " in the module; only float<->float and int<->int convert");
    plan.emplace_back(&it->second, &tensor);
    report.loaded.push_back(name);
  }
  for (const auto& [name, tensor] : own) {
    if (state.find(name) == state.end()) report.missing.push_back(name);
  }
  // std::map iteration is sorted already; the report's lists stay sorted.
  const std::string hint = report.mismatched.empty() ? "" : "; does config.json match the weights?";
  HOTPATH_CHECK(report.complete() || options.allow_partial, report.summary(), hint,
                "; refusing to load (allow partial loading to keep the module's values for these)");
  HOTPATH_CHECK(!report.loaded.empty() || own.empty(), report.summary(),
                "; no tensor of the file matches the module, is it the right file?");
  const at::NoGradGuard no_grad;
  for (const auto& [target, tensor] : plan) target->copy_(*tensor);
  return report;
}

}  // namespace hotpath::models
