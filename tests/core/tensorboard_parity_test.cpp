// TensorBoardWriter's files read back by tensorboard's EventAccumulator (tests/oracles/tb_read.py, in the venv).
#include "hotpath/core/tensorboard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace hotpath {
namespace {

using test::TempDir;

nlohmann::json read_with_tensorboard(const std::string& dir) {
  return nlohmann::json::parse(test::run_python(test::source_path("tests/oracles/tb_read.py"), {dir}));
}

TEST(TensorBoardParity, EventAccumulatorReadsEveryScalarExactly) {
  const TempDir tmp;
  const std::string dir = tmp.file("tb");
  // Values that stress the float32 conversion, negative and large steps, and two interleaved tags.
  const std::vector<double> losses = {2.302585092994046, 0.1, 1e-8, -3.5, 65504.0, 1.0 / 3.0, 123456.789};
  std::map<std::string, std::vector<std::pair<std::int64_t, double>>> expected;
  {
    TensorBoardWriter tb(dir);
    for (std::size_t i = 0; i < losses.size(); ++i) {
      const auto step = static_cast<std::int64_t>(i) * 1000;
      tb.add_scalar("train/loss", losses[i], step, 1.7e9 + static_cast<double>(i) + 0.25);
      tb.add_scalar("train/lr", 0.05 * std::cos(static_cast<double>(i)), step, 1.7e9 + static_cast<double>(i) + 0.25);
      expected["train/loss"].emplace_back(step, losses[i]);
      expected["train/lr"].emplace_back(step, 0.05 * std::cos(static_cast<double>(i)));
    }
    tb.add_scalar("eval/top1", 0.9213, -1, 1.7e9);
    tb.add_scalar("eval/top1", 0.93, std::int64_t{1} << 40, 1.7e9);
    expected["eval/top1"] = {{-1, 0.9213}, {std::int64_t{1} << 40, 0.93}};
  }
  const nlohmann::json got = read_with_tensorboard(dir);
  ASSERT_EQ(got["scalars"].size(), expected.size()) << got.dump();
  for (const auto& [tag, points] : expected) {
    SCOPED_TRACE(tag);
    const auto& events = got["scalars"].at(tag);
    ASSERT_EQ(events.size(), points.size());
    for (std::size_t i = 0; i < points.size(); ++i) {
      EXPECT_EQ(events[i][0].get<std::int64_t>(), points[i].first);
      // simple_value is a float: TensorBoard must see exactly the float32 nearest to what was logged.
      EXPECT_EQ(events[i][1].get<double>(), static_cast<double>(static_cast<float>(points[i].second))) << i;
    }
  }
  // Wall times are doubles end to end, so they come back bit for bit.
  EXPECT_EQ(got["scalars"]["train/loss"][3][2].get<double>(), 1.7e9 + 3.25);
}

TEST(TensorBoardParity, EventAccumulatorReadsText) {
  const TempDir tmp;
  {
    TensorBoardWriter tb(tmp.file("tb"));
    tb.add_text("config", "model: resnet18\nlr: 0.1 — cosine", 0);
    tb.add_scalar("train/loss", 1.5, 1);
    tb.add_text("config", "resumed", 7);
  }
  const nlohmann::json got = read_with_tensorboard(tmp.file("tb"));
  const auto& text = got["text"].at("config");
  ASSERT_EQ(text.size(), 2U) << got.dump();
  EXPECT_EQ(text[0][0].get<std::int64_t>(), 0);
  EXPECT_EQ(text[0][1].get<std::string>(), "model: resnet18\nlr: 0.1 — cosine");
  EXPECT_EQ(text[1][0].get<std::int64_t>(), 7);
  EXPECT_EQ(text[1][1].get<std::string>(), "resumed");
  EXPECT_EQ(got["scalars"].at("train/loss")[0][1].get<double>(), 1.5);
}

TEST(TensorBoardParity, FlushedRecordsAreVisibleWhileTheWriterIsOpen) {
  const TempDir tmp;
  TensorBoardWriter tb(tmp.file("tb"));
  tb.add_scalar("train/loss", 0.75, 10);
  tb.flush();
  const nlohmann::json got = read_with_tensorboard(tmp.file("tb"));
  ASSERT_EQ(got["scalars"].at("train/loss").size(), 1U) << got.dump();
  EXPECT_EQ(got["scalars"]["train/loss"][0][0].get<std::int64_t>(), 10);
}

}  // namespace
}  // namespace hotpath
