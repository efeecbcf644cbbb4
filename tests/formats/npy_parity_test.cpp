// .npy files written by hotpath read by numpy.load, and files numpy.save wrote read by hotpath.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hotpath/formats/npy.h"
#include "support/test_support.h"

namespace hotpath::formats {
namespace {

using test::TempDir;

constexpr const char* kNumpyLoad = R"(
import json, sys
import numpy as np
out = {}
for path in sys.argv[1:]:
    a = np.load(path, allow_pickle=False)
    out[path] = {"dtype": a.dtype.str, "shape": list(a.shape), "c": bool(a.flags.c_contiguous),
                 "values": [float(v) if a.dtype.kind == "f" else int(v) for v in a.reshape(-1)]}
print(json.dumps(out))
)";

constexpr const char* kNumpySave = R"(
import sys
import numpy as np
d = sys.argv[1]
np.save(f"{d}/f.npy", (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 3)
np.save(f"{d}/i.npy", np.array([1, -2, 2**62, -(2**63)], dtype=np.int64))
np.save(f"{d}/s.npy", np.float32(0.25))
np.save(f"{d}/e.npy", np.zeros((0, 3), np.int64))
np.save(f"{d}/t.npy", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
)";

TEST(NpyParity, NumpyLoadsWhatHotpathWrites) {
  TempDir dir;
  const std::vector<float> f{0.5f, -1.25f, 3.0e-8f, 1.0e30f, -0.0f, 7.0f};
  const std::vector<std::int64_t> i{1, -2, INT64_MAX, INT64_MIN, 0};
  struct Case {
    std::string name;
    NpyDtype dtype;
    std::vector<std::int64_t> shape;
    std::span<const std::byte> data;
  };
  const std::vector<Case> cases{
      {"f2.npy", NpyDtype::kFloat32, {2, 3}, std::as_bytes(std::span(f))},
      {"f3.npy", NpyDtype::kFloat32, {3, 1, 2}, std::as_bytes(std::span(f))},
      {"f0.npy", NpyDtype::kFloat32, {}, std::as_bytes(std::span(f).first(1))},
      {"i1.npy", NpyDtype::kInt64, {5}, std::as_bytes(std::span(i))},
      {"e.npy", NpyDtype::kInt64, {0, 4}, {}},
  };
  std::vector<std::string> paths;
  for (const Case& c : cases) {
    paths.push_back(dir.file(c.name));
    write_npy(paths.back(), c.dtype, c.shape, c.data);
  }
  std::vector<std::string> args{kNumpyLoad};
  args.insert(args.end(), paths.begin(), paths.end());
  const auto loaded = nlohmann::json::parse(test::run_python("-c", args));
  for (std::size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].name);
    const auto& a = loaded.at(paths[k]);
    EXPECT_EQ(a["dtype"], npy_descr(cases[k].dtype));
    EXPECT_EQ(a["shape"].get<std::vector<std::int64_t>>(), cases[k].shape);
    EXPECT_TRUE(a["c"].get<bool>());
    const std::size_t n = cases[k].data.size() / npy_itemsize(cases[k].dtype);
    ASSERT_EQ(a["values"].size(), n);
    for (std::size_t j = 0; j < n; ++j) {
      if (cases[k].dtype == NpyDtype::kFloat32) {
        EXPECT_EQ(a["values"][j].get<float>(), f[j]);
      } else {
        EXPECT_EQ(a["values"][j].get<std::int64_t>(), i[j]);
      }
    }
  }
}

TEST(NpyParity, HotpathReadsWhatNumpySaves) {
  TempDir dir;
  test::run_python("-c", {kNumpySave, dir.path().string()});
  const auto load = [&](const char* name) {
    struct Loaded {
      std::vector<std::byte> file;
      NpyArray array;
    } r{test::read_bytes(dir.file(name)), {}};
    r.array = parse_npy(r.file, name);
    return r;
  };
  {
    const auto r = load("f.npy");
    ASSERT_EQ(r.array.shape, (std::vector<std::int64_t>{3, 4}));
    ASSERT_EQ(r.array.dtype, NpyDtype::kFloat32);
    std::vector<float> v(12);
    std::memcpy(v.data(), r.array.data.data(), 48);
    for (int j = 0; j < 12; ++j) EXPECT_EQ(v[static_cast<std::size_t>(j)], (static_cast<float>(j) - 5.5f) / 3.0f);
  }
  {
    const auto r = load("i.npy");
    ASSERT_EQ(r.array.dtype, NpyDtype::kInt64);
    std::vector<std::int64_t> v(4);
    ASSERT_EQ(r.array.data.size(), 32U);
    std::memcpy(v.data(), r.array.data.data(), 32);
    EXPECT_EQ(v, (std::vector<std::int64_t>{1, -2, std::int64_t{1} << 62, INT64_MIN}));
  }
  EXPECT_TRUE(load("s.npy").array.shape.empty());
  EXPECT_EQ(load("e.npy").array.shape, (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(load("t.npy").array.shape, (std::vector<std::int64_t>{2, 3, 4}));
}

}  // namespace
}  // namespace hotpath::formats
