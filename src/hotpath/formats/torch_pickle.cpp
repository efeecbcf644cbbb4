// The weights-only unpickler for torch.save's data.pkl (see torch_pickle.h). LibTorch's own unpickler
// (torch::jit) turns collections.OrderedDict into None — it expects one only as a tensor's empty
// backward-hooks argument — so a state_dict, which *is* an OrderedDict, cannot pass through it.
#include "hotpath/formats/torch_pickle.h"

#include <bit>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::formats {
namespace {

constexpr std::size_t kMaxDims = 64;        // torch has no hard limit; real checkpoints stay below 10
constexpr std::size_t kMaxKeyBytes = 4096;  // a full (nested, '.'-joined) state_dict key
constexpr std::size_t kMaxNesting = 32;     // dicts inside dicts

constexpr std::pair<std::string_view, TorchDtype> kStorageTypes[] = {
    {"FloatStorage", TorchDtype::kFloat32},   {"DoubleStorage", TorchDtype::kFloat64},
    {"HalfStorage", TorchDtype::kFloat16},    {"BFloat16Storage", TorchDtype::kBFloat16},
    {"LongStorage", TorchDtype::kInt64},      {"IntStorage", TorchDtype::kInt32},
    {"ShortStorage", TorchDtype::kInt16},     {"CharStorage", TorchDtype::kInt8},
    {"ByteStorage", TorchDtype::kUInt8},      {"BoolStorage", TorchDtype::kBool},
};

std::optional<TorchDtype> storage_dtype(std::string_view global) {
  if (!global.starts_with("torch.")) return std::nullopt;
  global.remove_prefix(6);
  for (const auto& [name, type] : kStorageTypes) {
    if (global == name) return type;
  }
  return std::nullopt;
}

bool allowed_global(std::string_view name) {
  return name == "collections.OrderedDict" || name == "torch._utils._rebuild_tensor_v2" ||
         name == "torch._utils._rebuild_parameter" || storage_dtype(name).has_value();
}


class Unpickler {
 public:
  Unpickler(std::span<const std::byte> pickle, std::string_view source) : data_(pickle), source_(source) {}

  std::vector<TorchTensorRecord> run() {
    while (true) {
      const std::size_t at = pos_;
      const auto op = static_cast<unsigned char>(u8());
      if (op == '.') break;  // STOP
      step(op, at);
    }
    if (stack_.size() != 1) fail(pos_, "the pickle ends with " + std::to_string(stack_.size()) + " values on the stack");
    const Id root = stack_.back();
    if (values_[root].kind != Kind::kDict) fail(pos_, std::string("expected a dict of tensors (a state_dict), found ") +
                                                          kind_name(values_[root].kind));
    std::vector<TorchTensorRecord> out;
    std::set<Id> seen_dicts;
    std::set<std::string> seen_keys;
    collect(root, "", 0, seen_dicts, seen_keys, out);
    return out;
  }

 private:
  using Id = std::uint32_t;
  enum class Kind : std::uint8_t { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor, kMark };
  struct Value {
    Kind kind = Kind::kNone;
    std::int64_t integer = 0;  // kInt, kBool; kStorage and kTensor: index into storages_ / tensors_
    std::string text;          // kString, kGlobal ("module.name")
    std::vector<Id> items;     // kTuple, kList; kDict: key0, value0, key1, value1, ...
  };
  struct Storage {
    std::string name;
    TorchDtype dtype;
    std::int64_t numel;
  };

  static const char* kind_name(Kind kind) {
    switch (kind) {
      case Kind::kNone: return "None";
      case Kind::kBool: return "a bool";
      case Kind::kInt: return "an integer";
      case Kind::kFloat: return "a float";
      case Kind::kString: return "a string";
      case Kind::kTuple: return "a tuple";
      case Kind::kList: return "a list";
      case Kind::kDict: return "a dict";
      case Kind::kGlobal: return "a global";
      case Kind::kStorage: return "a storage";
      case Kind::kTensor: return "a tensor";
      case Kind::kMark: return "a MARK";
    }
    return "?";
  }

  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    HOTPATH_CHECK(false, source_, ": data.pkl offset ", at, ": ", what);
    std::abort();  // unreachable: HOTPATH_CHECK(false) throws
  }

  // ---- reading ---------------------------------------------------------------------------------
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
    const std::size_t start = pos_;
    while (static_cast<char>(u8()) != '\n') {
    }
    return {reinterpret_cast<const char*>(data_.data() + start), pos_ - start - 1};
  }

  // ---- the value arena and the stack -------------------------------------------------------------
  Id make(Kind kind) {
    if (values_.size() >= std::numeric_limits<Id>::max()) fail(pos_, "too many values");
    values_.emplace_back().kind = kind;
    return static_cast<Id>(values_.size() - 1);
  }
  void push(Kind kind) { stack_.push_back(make(kind)); }
  void push_int(std::int64_t v) {
    const Id id = make(Kind::kInt);
    values_[id].integer = v;
    stack_.push_back(id);
  }
  Id pop(std::size_t at) {
    if (stack_.empty() || values_[stack_.back()].kind == Kind::kMark) fail(at, "pop from an empty stack");
    const Id v = stack_.back();
    stack_.pop_back();
    return v;
  }
  // The values above the topmost MARK, which is removed.
  std::vector<Id> pop_mark(std::size_t at) {
    std::size_t i = stack_.size();
    while (i > 0 && values_[stack_[i - 1]].kind != Kind::kMark) --i;
    if (i == 0) fail(at, "no MARK on the stack");
    std::vector<Id> out(stack_.begin() + static_cast<std::ptrdiff_t>(i), stack_.end());
    stack_.resize(i - 1);
    return out;
  }
  Id top(std::size_t at) const {
    if (stack_.empty()) fail(at, "empty stack");
    return stack_.back();
  }
  void push_tuple(std::vector<Id> items) {
    const Id id = make(Kind::kTuple);
    values_[id].items = std::move(items);
    stack_.push_back(id);
  }
  void memo_put(std::uint64_t key, std::size_t at) { memo_[key] = top(at); }
  void memo_get(std::uint64_t key, std::size_t at) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail(at, "memo key " + std::to_string(key) + " was never stored");
    stack_.push_back(it->second);
  }
  std::int64_t as_int(Id v, std::size_t at, const char* what) const {
    if (values_[v].kind != Kind::kInt) fail(at, std::string(what) + " is not an integer");
    return values_[v].integer;
  }
  std::vector<std::int64_t> as_ints(Id v, std::size_t at, const char* what) const {
    if (values_[v].kind != Kind::kTuple) fail(at, std::string(what) + " is not a tuple");
    if (values_[v].items.size() > kMaxDims) fail(at, std::string(what) + " has more than 64 dimensions");
    std::vector<std::int64_t> out;
    for (const Id x : values_[v].items) out.push_back(as_int(x, at, what));
    return out;
  }
  Id global(std::string name, std::size_t at) {
    if (!allowed_global(name)) {
      fail(at, "refusing global " + printable(name) +
                   " (a weights-only load accepts tensors, dicts and OrderedDicts only)");
    }
    const Id id = make(Kind::kGlobal);
    values_[id].text = std::move(name);
    return id;
  }

  // ---- torch ------------------------------------------------------------------------------------
  // ('storage', torch.XStorage, key, location, numel) → a storage record.
  Id persistent_load(Id pid, std::size_t at) {
    const Value& p = values_[pid];
    if (p.kind != Kind::kTuple || p.items.size() != 5 || values_[p.items[0]].kind != Kind::kString ||
        values_[p.items[0]].text != "storage" || values_[p.items[1]].kind != Kind::kGlobal ||
        values_[p.items[2]].kind != Kind::kString) {
      fail(at, "persistent id is not ('storage', type, key, location, numel)");
    }
    const std::string& type = values_[p.items[1]].text;
    const std::optional<TorchDtype> dtype = storage_dtype(type);
    if (!dtype) fail(at, "storage type " + printable(type) + " is not supported");
    const std::string& name = values_[p.items[2]].text;
    const std::int64_t numel = as_int(p.items[4], at, "storage size");
    if (numel < 0) fail(at, "storage data/" + printable(name) + " has a negative size");
    std::size_t index = storages_.size();
    if (const auto it = storage_index_.find(name); it != storage_index_.end()) {
      index = it->second;
      if (storages_[index].dtype != *dtype || storages_[index].numel != numel) {
        fail(at, "storage data/" + printable(name) + " is named twice with different types or sizes");
      }
    } else {
      storages_.push_back({name, *dtype, numel});
      storage_index_.emplace(name, index);
    }
    const Id id = make(Kind::kStorage);
    values_[id].integer = static_cast<std::int64_t>(index);
    return id;
  }

  Id rebuild_tensor(const std::vector<Id>& a, std::size_t at) {
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (a.size() < 4 || values_[a[0]].kind != Kind::kStorage) fail(at, "malformed _rebuild_tensor_v2 arguments");
    const Storage& storage = storages_[static_cast<std::size_t>(values_[a[0]].integer)];
    TorchTensorRecord t;
    t.storage = storage.name;
    t.dtype = storage.dtype;
    t.storage_numel = storage.numel;
    t.offset = as_int(a[1], at, "storage offset");
    t.sizes = as_ints(a[2], at, "tensor size");
    t.strides = as_ints(a[3], at, "tensor stride");
    if (t.sizes.size() != t.strides.size()) fail(at, "tensor size and stride have different lengths");
    if (t.offset < 0) fail(at, "negative storage offset");
    std::int64_t numel = 1;
    std::int64_t last = t.offset;  // the furthest element the view touches
    for (std::size_t i = 0; i < t.sizes.size(); ++i) {
      if (t.sizes[i] < 0 || t.strides[i] < 0) fail(at, "negative tensor size or stride");
      std::int64_t reach = 0;
      if (__builtin_mul_overflow(numel, t.sizes[i], &numel) ||
          (t.sizes[i] > 0 && (__builtin_mul_overflow(t.sizes[i] - 1, t.strides[i], &reach) ||
                              __builtin_add_overflow(last, reach, &last)))) {
        fail(at, "tensor size × stride overflows");
      }
    }
    if (numel > 0 && last >= storage.numel) {
      fail(at, "tensor view (offset " + std::to_string(t.offset) + ", last element " + std::to_string(last) +
                   ") runs past the end of its storage (data/" + printable(storage.name) + ", " +
                   std::to_string(storage.numel) + " elements)");
    }
    // Overlapping or broadcast (stride 0) views would expand to more memory than the file holds;
    // state_dicts never contain them.
    if (numel > storage.numel) {
      fail(at, "tensor view has " + std::to_string(numel) + " elements, more than its storage's " +
                   std::to_string(storage.numel) + " (overlapping or broadcast views are not supported)");
    }
    tensors_.push_back(std::move(t));
    const Id id = make(Kind::kTensor);
    values_[id].integer = static_cast<std::int64_t>(tensors_.size() - 1);
    return id;
  }

  Id reduce(Id callable, Id args, std::size_t at) {
    if (values_[callable].kind != Kind::kGlobal || values_[args].kind != Kind::kTuple) {
      fail(at, "REDUCE of something other than an allowed global");
    }
    const std::string name = values_[callable].text;
    const std::vector<Id> a = values_[args].items;
    if (name == "collections.OrderedDict") {
      if (!a.empty()) fail(at, "OrderedDict with arguments");
      return make(Kind::kDict);
    }
    if (name == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(a, at);
    if (name == "torch._utils._rebuild_parameter") {  // (data, requires_grad, backward_hooks)
      if (a.empty() || values_[a[0]].kind != Kind::kTensor) fail(at, "malformed _rebuild_parameter arguments");
      return a[0];
    }
    fail(at, "REDUCE of " + printable(name) + " is not allowed");
  }

  // ---- opcodes ----------------------------------------------------------------------------------
  void step(unsigned char op, std::size_t at) {
    using K = Kind;
    switch (op) {
      case 0x80: (void)u8(); return;            // PROTO
      case 0x95: (void)unsigned_le(8); return;  // FRAME
      case '(': push(K::kMark); return;
      case 'N': push(K::kNone); return;
      case '0': (void)pop(at); return;          // POP
      case '1': (void)pop_mark(at); return;     // POP_MARK
      case '2': stack_.push_back(top(at)); return;  // DUP
      case 0x88: case 0x89: {                   // NEWTRUE, NEWFALSE
        const Id v = make(K::kBool);
        values_[v].integer = op == 0x88;
        stack_.push_back(v);
        return;
      }
      case 'K': push_int(static_cast<std::int64_t>(unsigned_le(1))); return;  // BININT1
      case 'M': push_int(static_cast<std::int64_t>(unsigned_le(2))); return;  // BININT2
      case 'J': push_int(static_cast<std::int32_t>(unsigned_le(4))); return;  // BININT
      case 0x8a: {                              // LONG1: n-byte little-endian two's complement
        const auto n = static_cast<std::size_t>(u8());
        if (n > 8) fail(at, "integer wider than 64 bits");
        std::uint64_t v = unsigned_le(n);
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
        push_int(static_cast<std::int64_t>(v));
        return;
      }
      case 'G': {                               // BINFLOAT: big-endian double (value unused)
        (void)take(8);
        push(K::kFloat);
        return;
      }
      case 'X': case 0x8c: case 'T': case 'U': case 'B': case 'C': {  // (SHORT_)BINUNICODE/BINSTRING/BINBYTES
        const std::size_t n = (op == 0x8c || op == 'U' || op == 'C') ? unsigned_le(1) : unsigned_le(4);
        std::string s = text(n);
        const Id v = make(K::kString);
        values_[v].text = std::move(s);
        stack_.push_back(v);
        return;
      }
      case 'c': {                               // GLOBAL "module\nname\n"
        std::string name = line();
        name += "." + line();
        stack_.push_back(global(std::move(name), at));
        return;
      }
      case 0x93: {                              // STACK_GLOBAL (protocol 4): module and name strings
        const Id name = pop(at);
        const Id mod = pop(at);
        if (values_[mod].kind != K::kString || values_[name].kind != K::kString) {
          fail(at, "STACK_GLOBAL of something other than two strings");
        }
        stack_.push_back(global(values_[mod].text + "." + values_[name].text, at));
        return;
      }
      case ')': push_tuple({}); return;
      case 't': push_tuple(pop_mark(at)); return;
      case 0x85: case 0x86: case 0x87: {        // TUPLE1..3
        std::vector<Id> items(op - 0x84);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop(at);
        push_tuple(std::move(items));
        return;
      }
      case ']': push(K::kList); return;
      case 'l': {
        std::vector<Id> items = pop_mark(at);
        const Id v = make(K::kList);
        values_[v].items = std::move(items);
        stack_.push_back(v);
        return;
      }
      case '}': push(K::kDict); return;
      case 'd': case 's': case 'u': {           // DICT, SETITEM, SETITEMS
        std::vector<Id> kv;
        if (op == 's') {
          const Id value = pop(at);
          const Id key = pop(at);
          kv = {key, value};
        } else {
          kv = pop_mark(at);
        }
        if (kv.size() % 2 != 0) fail(at, "odd number of dict items");
        if (op == 'd') push(K::kDict);
        Value& dict = values_[top(at)];
        if (dict.kind != K::kDict) fail(at, "SETITEM on something other than a dict");
        dict.items.insert(dict.items.end(), kv.begin(), kv.end());
        return;
      }
      case 'a': case 'e': {                     // APPEND, APPENDS
        std::vector<Id> items;
        if (op == 'a') items.push_back(pop(at));
        else items = pop_mark(at);
        Value& list = values_[top(at)];
        if (list.kind != K::kList) fail(at, "APPEND to something other than a list");
        list.items.insert(list.items.end(), items.begin(), items.end());
        return;
      }
      case 'q': memo_put(unsigned_le(1), at); return;   // BINPUT
      case 'r': memo_put(unsigned_le(4), at); return;   // LONG_BINPUT
      case 0x94: memo_put(memo_.size(), at); return;    // MEMOIZE
      case 'h': memo_get(unsigned_le(1), at); return;   // BINGET
      case 'j': memo_get(unsigned_le(4), at); return;   // LONG_BINGET
      case 'Q': {                                       // BINPERSID
        const Id pid = pop(at);
        stack_.push_back(persistent_load(pid, at));
        return;
      }
      case 'R': {                                       // REDUCE
        const Id args = pop(at);
        const Id callable = pop(at);
        stack_.push_back(reduce(callable, args, at));
        return;
      }
      case 'b': {                                       // BUILD: a state_dict's _metadata attribute
        (void)pop(at);  // per-module version numbers, not needed to load the tensors
        if (values_[top(at)].kind != K::kDict) fail(at, "BUILD on something other than an OrderedDict");
        return;
      }
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        fail(at, std::string("unsupported pickle opcode 0x") + kHex[op >> 4] + kHex[op & 15]);
      }
    }
  }

  // ---- the result -------------------------------------------------------------------------------
  // Tensors of `dict` (and of dicts inside it, keys joined with '.'), in file order.
  void collect(Id dict, const std::string& prefix, std::size_t depth, std::set<Id>& seen_dicts,
               std::set<std::string>& seen_keys, std::vector<TorchTensorRecord>& out) const {
    if (depth > kMaxNesting) fail(pos_, "dicts nested deeper than " + std::to_string(kMaxNesting));
    // Each dict once: a dict reached twice (through the memo) would repeat its keys, or loop.
    if (!seen_dicts.insert(dict).second) fail(pos_, "a dict appears twice (at \"" + printable(prefix) + "\")");
    const std::vector<Id>& items = values_[dict].items;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
      const Value& k = values_[items[i]];
      const Value& v = values_[items[i + 1]];
      if (k.kind != Kind::kString) {
        if (v.kind == Kind::kTensor || v.kind == Kind::kDict) {
          fail(pos_, std::string("a state_dict key is ") + kind_name(k.kind) + ", not a string");
        }
        continue;  // e.g. an int-keyed dict of optimizer state: holds no state_dict tensors
      }
      if (v.kind != Kind::kTensor && v.kind != Kind::kDict) continue;
      if (prefix.size() + k.text.size() > kMaxKeyBytes) {
        fail(pos_, "state_dict key \"" + printable(prefix + k.text) + "\" is longer than " +
                       std::to_string(kMaxKeyBytes) + " bytes");
      }
      for (const char c : k.text) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          fail(pos_, "state_dict key \"" + printable(prefix + k.text) + "\" holds control characters");
        }
      }
      std::string key = prefix + k.text;
      if (v.kind == Kind::kDict) {
        collect(items[i + 1], key + ".", depth + 1, seen_dicts, seen_keys, out);
        continue;
      }
      if (!seen_keys.insert(key).second) fail(pos_, "state_dict key \"" + printable(key) + "\" appears twice");
      TorchTensorRecord t = tensors_[static_cast<std::size_t>(v.integer)];
      t.key = std::move(key);
      out.push_back(std::move(t));
    }
  }

  std::span<const std::byte> data_;
  std::string_view source_;
  std::size_t pos_ = 0;
  std::vector<Value> values_;
  std::vector<Id> stack_;
  std::unordered_map<std::uint64_t, Id> memo_;
  std::vector<Storage> storages_;
  std::unordered_map<std::string, std::size_t> storage_index_;
  std::vector<TorchTensorRecord> tensors_;
};

}  // namespace

std::size_t element_size(TorchDtype dtype) {
  switch (dtype) {
    case TorchDtype::kFloat64: case TorchDtype::kInt64: return 8;
    case TorchDtype::kFloat32: case TorchDtype::kInt32: return 4;
    case TorchDtype::kFloat16: case TorchDtype::kBFloat16: case TorchDtype::kInt16: return 2;
    case TorchDtype::kInt8: case TorchDtype::kUInt8: case TorchDtype::kBool: return 1;
  }
  return 1;
}

std::string_view dtype_name(TorchDtype dtype) {
  switch (dtype) {
    case TorchDtype::kFloat32: return "float32";
    case TorchDtype::kFloat64: return "float64";
    case TorchDtype::kFloat16: return "float16";
    case TorchDtype::kBFloat16: return "bfloat16";
    case TorchDtype::kInt64: return "int64";
    case TorchDtype::kInt32: return "int32";
    case TorchDtype::kInt16: return "int16";
    case TorchDtype::kInt8: return "int8";
    case TorchDtype::kUInt8: return "uint8";
    case TorchDtype::kBool: return "bool";
  }
  return "?";
}

std::int64_t TorchTensorRecord::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t s : sizes) n *= s;  // checked against overflow when parsed
  return n;
}

std::vector<TorchTensorRecord> parse_torch_pickle(std::span<const std::byte> pickle, std::string_view source) {
  return Unpickler(pickle, source).run();
}

TorchCheckpoint read_torch_checkpoint(std::span<const std::byte> file, std::string_view source,
                                      TorchZipOptions options) {
  const TorchZip zip(file, std::string(source), options);
  if (zip.has("byteorder")) {
    const auto order = zip.record("byteorder");
    const std::string_view text(reinterpret_cast<const char*>(order.data()), order.size());
    HOTPATH_CHECK(text == "little", source, ": tensors saved in ", printable(text),
                  "-endian byte order are not supported");
  }
  TorchCheckpoint out;
  out.tensors = parse_torch_pickle(zip.record("data.pkl"), source);
  for (const TorchTensorRecord& t : out.tensors) {
    if (out.storages.count(t.storage) != 0) continue;
    const std::string record = "data/" + t.storage;
    HOTPATH_CHECK(zip.has(record), source, ": tensor \"", printable(t.key), "\": storage record ", zip.archive_name(),
                  "/", printable(record), " is missing from the archive");
    const std::span<const std::byte> bytes = zip.record(record);
    const std::size_t element = element_size(t.dtype);
    HOTPATH_CHECK(static_cast<std::uint64_t>(t.storage_numel) <= bytes.size() / element &&
                      bytes.size() == static_cast<std::size_t>(t.storage_numel) * element,
                  source, ": storage ", printable(record), " has ", bytes.size(), " bytes, expected ", t.storage_numel,
                  " × ", element, " (", dtype_name(t.dtype), ")");
    out.storages.emplace(t.storage, bytes);
  }
  return out;
}

}  // namespace hotpath::formats
