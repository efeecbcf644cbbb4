// libFuzzer target: pytorch_model.bin read torch-free (torch_zip.h + torch_pickle.h). The first byte
// picks what the rest is:
//   0: data.pkl alone (the unpickler)   1: a whole torch.save zip, CRC-32 not checked (so mutations
//   reach the pickle and the storages)   2, 3: a whole zip as hotpath reads it (CRC checked)
// Bad input must end in hotpath::Error on one line (never a crash, leak, hang or other exception); a
// checkpoint that parses must describe views that lie inside storages of the declared sizes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

#include "hotpath/core/error.h"
#include "hotpath/formats/torch_pickle.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_torch_bin: %s\n", what);
  std::abort();
}

void check(const hotpath::formats::TorchTensorRecord& t) {
  if (t.sizes.size() != t.strides.size() || t.offset < 0) fail("bad view");
  if (t.numel() == 0) return;
  std::int64_t last = t.offset;
  for (std::size_t i = 0; i < t.sizes.size(); ++i) last += (t.sizes[i] - 1) * t.strides[i];
  if (last >= t.storage_numel || t.numel() > t.storage_numel) fail("view outside its storage");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  try {
    if (data[0] % 4 == 0) {
      for (const auto& t : hotpath::formats::parse_torch_pickle(rest, "fuzz.bin")) check(t);
    } else {
      const auto ckpt = hotpath::formats::read_torch_checkpoint(rest, "fuzz.bin", {.check_crc = data[0] % 4 != 1});
      for (const auto& t : ckpt.tensors) {
        check(t);
        const auto it = ckpt.storages.find(t.storage);
        if (it == ckpt.storages.end()) fail("a tensor's storage is missing");
        if (it->second.size() != static_cast<std::size_t>(t.storage_numel) * hotpath::formats::element_size(t.dtype)) {
          fail("storage size differs from the pickle's");
        }
        // Touch the first and last byte so ASan sees a view that lies outside the input.
        if (!it->second.empty()) {
          volatile std::byte first = it->second.front();
          volatile std::byte last = it->second.back();
          (void)first;
          (void)last;
        }
      }
    }
  } catch (const hotpath::Error& e) {
    if (std::string_view(e.what()).find('\n') != std::string_view::npos) fail("error message is not one line");
  }
  return 0;
}
