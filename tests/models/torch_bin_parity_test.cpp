// pytorch_model.bin parity: files written by the venv's torch.save (tests/oracles/torch_save_fixture.py) read
// by hotpath's torch-free zip reader + unpickler equal, tensor for tensor, what torch itself saved
// (the script writes the expected tensors beside each file as safetensors).
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/models/text/hf_weights.h"
#include "hotpath/models/weights.h"
#include "hotpath/core/remove_tree.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

// One python run writes every fixture; ctest runs each TEST in its own process, so the fixtures are
// cached in $TMPDIR under a hash of the script and the venv that ran it (as bert_parity_test does).
class TorchBinParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string script = test::source_path("tests/oracles/torch_save_fixture.py");
    std::error_code ec;
    const std::filesystem::path venv = std::filesystem::canonical(std::filesystem::path(test::python()).parent_path(), ec);
    const std::size_t key = std::hash<std::string>{}(read_file(script) + "\n" + (ec ? test::python() : venv.string()));
    dir_ = std::filesystem::temp_directory_path() / ("hotpath-torch-bin-" + std::to_string(key));
    if (std::filesystem::exists(dir_ / "done")) return;
    const std::filesystem::path partial = dir_.string() + "." + std::to_string(::getpid()) + ".partial";
    test::run_python(script, {partial.string()});
    test::write_file((partial / "done").string(), "");
    std::filesystem::rename(partial, dir_, ec);  // atomic; a parallel process may have won the race
    if (ec) hotpath::remove_tree(partial);
  }
  static std::string file(const std::string& name) { return (dir_ / name).string(); }

  static void expect_same(const std::string& name) {
    const std::map<std::string, at::Tensor> got = read_torch_state_dict(file(name + ".bin"));
    const std::map<std::string, at::Tensor> want = read_tensors(file(name + ".safetensors"));
    std::vector<std::string> got_keys, want_keys;
    for (const auto& [k, v] : got) got_keys.push_back(k);
    for (const auto& [k, v] : want) want_keys.push_back(k);
    ASSERT_EQ(got_keys, want_keys) << name;
    for (const auto& [key, expected] : want) {
      const at::Tensor& t = got.at(key);
      EXPECT_EQ(t.scalar_type(), expected.scalar_type()) << name << ": " << key;
      EXPECT_EQ(t.sizes(), expected.sizes()) << name << ": " << key;
      EXPECT_TRUE(t.is_contiguous()) << name << ": " << key;
      EXPECT_TRUE(at::equal(t, expected)) << name << ": " << key;
    }
  }

  static inline std::filesystem::path dir_;
};

TEST_F(TorchBinParity, DtypesViewsSharedStoragesAndNestedDictsEqualTorch) { expect_same("mixed"); }

TEST_F(TorchBinParity, ModuleStateDictWithMetadataAndTiedWeightsEqualsTorch) {
  expect_same("module");
  expect_same("params");  // state_dict(keep_vars=True): nn.Parameter through _rebuild_parameter
}

TEST_F(TorchBinParity, PickleProtocol4EqualsTorch) { expect_same("protocol4"); }

TEST_F(TorchBinParity, LegacyFormatAndDamageAreOneLineErrors) {
  const auto error_of = [](const std::string& path) {
    try {
      (void)read_torch_state_dict(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  std::string what = error_of(file("legacy.bin"));
  EXPECT_NE(what.find("legacy non-zip torch.save files are not supported"), std::string::npos) << what;
  // Truncated anywhere, or one byte flipped inside a storage: an error naming the file, on one line.
  const test::TempDir tmp;
  const std::vector<std::byte> good = test::read_bytes(file("module.bin"));
  for (std::size_t n = 0; n < good.size(); n += 97) {
    test::write_file(tmp.file("cut.bin"), std::span(good).first(n));
    what = error_of(tmp.file("cut.bin"));
    EXPECT_NE(what.find("cut.bin"), std::string::npos) << n << ": " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  // One bit of the embedding's storage flipped (found by its first 4 floats).
  std::vector<std::byte> flipped = good;
  const at::Tensor emb = read_tensors(file("module.safetensors")).at("emb.weight");
  const auto* first = reinterpret_cast<const std::byte*>(emb.data_ptr());
  const auto it = std::search(flipped.begin(), flipped.end(), first, first + 16);
  ASSERT_NE(it, flipped.end());
  *it ^= std::byte{0x01};
  test::write_file(tmp.file("flipped.bin"), flipped);
  what = error_of(tmp.file("flipped.bin"));
  EXPECT_NE(what.find("fails its CRC-32 check"), std::string::npos) << what;
}

}  // namespace
}  // namespace hotpath::models
