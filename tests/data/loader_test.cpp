#include "hotpath/data/loader.h"

#include <ATen/Functions.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar_writer.h"
#include "support/test_support.h"

namespace hotpath::data {
namespace {

using test::as_bytes;
using test::TempDir;

// Sample i is a solid-colour PNG whose colour encodes i, so any crop/resize/flip of it still
// says which sample it was: pixel (R, G) = (i % 256, i / 256).
std::vector<std::byte> solid_png(int id, int w = 40, int h = 30) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t p = 0; p < px.size(); p += 3) {
    px[p] = static_cast<std::uint8_t>(id % 256);
    px[p + 1] = static_cast<std::uint8_t>(id / 256);
    px[p + 2] = 7;
  }
  return encode_png(px.data(), w, h, 3);
}

int sample_id(const at::Tensor& images_u8_nchw, std::int64_t row) {
  const auto px = images_u8_nchw[row];
  return px[0][0][0].item<int>() + 256 * px[1][0][0].item<int>();
}

// Writes `shards` shards of `per_shard` samples; labels are id % 10.
std::vector<std::string> make_shards(const TempDir& dir, int shards, int per_shard) {
  formats::ShardWriter writer(dir.file("s-%06d.tar"), {.max_samples = static_cast<std::uint64_t>(per_shard)});
  for (int i = 0; i < shards * per_shard; ++i) {
    const auto png = solid_png(i);
    const std::string label = std::to_string(i % 10);
    writer.write({std::to_string(100000 + i), {{"png", png}, {"cls", as_bytes(label)}}});
  }
  writer.close();
  return writer.shards();
}

LoaderOptions u8_options(std::vector<std::string> shards) {
  LoaderOptions o;
  o.shards = std::move(shards);
  o.batch_size = 8;
  o.workers = 2;
  o.size = 16;
  o.format = {.type = PixelType::kUInt8, .layout = PixelLayout::kCHW, .normalize = false};
  o.shuffle_buffer = 16;
  return o;
}

std::vector<Batch> one_epoch(Loader& loader, std::int64_t epoch) {
  std::vector<Batch> out;
  for (const Batch& b : loader.epoch(epoch)) {
    out.push_back({b.images.clone(), b.labels.clone(), b.epoch, b.index, b.positions.clone()});
  }
  return out;
}

TEST(Loader, ProducesBatchesOfRequestedShapeDtypeAndLayout) {
  TempDir dir;
  auto shards = make_shards(dir, 2, 10);
  {
    LoaderOptions o = u8_options(shards);
    o.format = {.type = PixelType::kFloat32, .layout = PixelLayout::kCHW, .normalize = true};
    Loader loader(o);
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->images.sizes(), (std::vector<std::int64_t>{8, 3, 16, 16}));
    EXPECT_EQ(b->images.scalar_type(), at::kFloat);
    EXPECT_TRUE(b->images.is_contiguous());
    EXPECT_EQ(b->labels.scalar_type(), at::kLong);
  }
  {
    LoaderOptions o = u8_options(shards);
    o.format = {.type = PixelType::kBFloat16, .layout = PixelLayout::kHWC, .normalize = true};
    Loader loader(o);
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->images.sizes(), (std::vector<std::int64_t>{8, 3, 16, 16}));
    EXPECT_EQ(b->images.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(b->images.is_contiguous(at::MemoryFormat::ChannelsLast));
  }
}

TEST(Loader, NormalizesLikeTorchvision) {
  TempDir dir;
  auto shards = make_shards(dir, 1, 8);
  LoaderOptions o = u8_options(shards);
  o.shuffle = false;
  o.format = {.type = PixelType::kFloat32, .layout = PixelLayout::kCHW, .normalize = true};
  Loader loader(o);
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  // Sample 3 is colour (3, 0, 7): channel c holds (v/255 - mean[c]) / std[c].
  const Normalization n;
  const auto row = b->images[3];
  EXPECT_NEAR(row[0][5][5].item<float>(), (3 / 255.0 - n.mean[0]) / n.std[0], 1e-5);
  EXPECT_NEAR(row[2][5][5].item<float>(), (7 / 255.0 - n.mean[2]) / n.std[2], 1e-5);
}

// RandomErasing: each row's rectangle is the one draw_sample_augment gives its position, filled with the mean
// pixel (normalised float: 0; uint8: the level nearest mean·255); every other pixel is the sample's own, and the
// crop/flip/translate draws before it are what they are without erasing.
TEST(Loader, RandomErasingFillsTheDrawnRectangleWithTheMean) {
  TempDir dir;
  auto shards = make_shards(dir, 1, 16);
  for (PixelType type : {PixelType::kUInt8, PixelType::kFloat32}) {
    LoaderOptions o = u8_options(shards);
    o.translate = 3;
    o.erasing.probability = 1.0;
    o.format = {.type = type, .layout = PixelLayout::kCHW, .normalize = type != PixelType::kUInt8};
    LoaderOptions plain_options = o;
    plain_options.erasing.probability = 0.0;
    Loader loader(o), plain(plain_options);
    const auto erased = one_epoch(loader, 0);
    const auto reference = one_epoch(plain, 0);
    ASSERT_EQ(erased.size(), reference.size());
    int rows_erased = 0;
    for (std::size_t b = 0; b < erased.size(); ++b) {
      for (std::int64_t r = 0; r < erased[b].labels.size(0); ++r) {
        const auto position = erased[b].positions[r].item<std::int64_t>();
        const SampleAugment a = draw_sample_augment(o, 40, 30, 0, position);
        const SampleAugment without = draw_sample_augment(plain_options, 40, 30, 0, position);
        EXPECT_EQ(a.shift_x, without.shift_x);
        EXPECT_EQ(a.flip, without.flip);
        const at::Tensor got = erased[b].images[r];
        at::Tensor want = reference[b].images[r].clone();
        if (a.erase.width() > 0 && a.erase.height() > 0) {
          ++rows_erased;
          for (int c = 0; c < 3; ++c) {
            const double fill = type == PixelType::kUInt8 ? std::nearbyint(o.normalization.mean[c] * 255.0) : 0.0;
            want[c].slice(0, a.erase.y0, a.erase.y1).slice(1, a.erase.x0, a.erase.x1).fill_(fill);
          }
        }
        EXPECT_TRUE(at::equal(got, want)) << "batch " << b << " row " << r;
      }
    }
    EXPECT_EQ(rows_erased, 16);  // probability 1 and a 16x16 image: every draw fits
  }
}

TEST(Loader, EverySampleExactlyOncePerEpochWithoutDropLast) {
  TempDir dir;
  auto shards = make_shards(dir, 3, 7);  // 21 samples: batches of 8, 8, 5
  LoaderOptions o = u8_options(shards);
  o.drop_last = false;
  Loader loader(o);
  std::multiset<int> seen;
  std::vector<std::int64_t> sizes;
  for (const Batch& b : loader.epoch(0)) {
    sizes.push_back(b.images.size(0));
    for (std::int64_t r = 0; r < b.images.size(0); ++r) {
      const int id = sample_id(b.images, r);
      seen.insert(id);
      EXPECT_EQ(b.labels[r].item<std::int64_t>(), id % 10) << "label travels with its image";
    }
  }
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{8, 8, 5}));
  std::multiset<int> expected;
  for (int i = 0; i < 21; ++i) expected.insert(i);
  EXPECT_EQ(seen, expected);
}

TEST(Loader, DropLastDropsThePartialBatch) {
  TempDir dir;
  auto shards = make_shards(dir, 3, 7);
  Loader loader(u8_options(shards));
  EXPECT_EQ(one_epoch(loader, 0).size(), 2U);
}

TEST(Loader, SameBatchesForAnyNumberOfWorkers) {
  TempDir dir;
  auto shards = make_shards(dir, 3, 12);
  LoaderOptions a = u8_options(shards);
  a.workers = 1;
  a.seed = 11;
  LoaderOptions b = a;
  b.workers = 3;
  Loader la(a);
  Loader lb(b);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto ea = one_epoch(la, epoch);
    auto eb = one_epoch(lb, epoch);
    ASSERT_EQ(ea.size(), eb.size());
    for (std::size_t i = 0; i < ea.size(); ++i) {
      EXPECT_TRUE(at::equal(ea[i].images, eb[i].images)) << "epoch " << epoch << " batch " << i;
      EXPECT_TRUE(at::equal(ea[i].labels, eb[i].labels));
    }
  }
}

TEST(Loader, ShuffleOrderDiffersBetweenEpochsAndSeeds) {
  TempDir dir;
  auto shards = make_shards(dir, 4, 16);
  LoaderOptions o = u8_options(shards);
  Loader l0(o);
  o.seed = 99;
  Loader l1(o);
  auto e0 = one_epoch(l0, 0);
  auto e1 = one_epoch(l0, 1);
  auto s1 = one_epoch(l1, 0);
  EXPECT_FALSE(at::equal(e0[0].labels, e1[0].labels) && at::equal(e0[1].labels, e1[1].labels));
  EXPECT_FALSE(at::equal(e0[0].images, s1[0].images));
}

TEST(Loader, ResumeFromPositionReplaysExactlyTheRemainingBatches) {
  TempDir dir;
  auto shards = make_shards(dir, 3, 16);
  LoaderOptions o = u8_options(shards);
  o.seed = 5;
  Loader reference(o);
  auto full0 = one_epoch(reference, 0);
  auto full1 = one_epoch(reference, 1);

  Loader first(o);
  auto b0 = first.next();
  auto b1 = first.next();
  ASSERT_TRUE(b0 && b1);
  const BatchPosition saved = first.position();
  EXPECT_EQ(saved.epoch, 0);
  EXPECT_EQ(saved.batch, 2);

  Loader resumed(o);  // a new process would construct, then seek to the checkpointed position
  resumed.seek(saved);
  auto rest0 = one_epoch(resumed, 0);
  auto rest1 = one_epoch(resumed, 1);
  ASSERT_EQ(rest0.size() + 2, full0.size());
  for (std::size_t i = 0; i < rest0.size(); ++i) {
    EXPECT_TRUE(at::equal(rest0[i].images, full0[i + 2].images)) << "batch " << i + 2;
    EXPECT_TRUE(at::equal(rest0[i].labels, full0[i + 2].labels));
    EXPECT_EQ(rest0[i].index, static_cast<std::int64_t>(i + 2));
  }
  ASSERT_EQ(rest1.size(), full1.size());
  for (std::size_t i = 0; i < rest1.size(); ++i) EXPECT_TRUE(at::equal(rest1[i].images, full1[i].images));
}

TEST(Loader, BatchesKeptByTheCallerAreNeverOverwritten) {
  TempDir dir;
  auto shards = make_shards(dir, 2, 32);
  LoaderOptions o = u8_options(shards);
  o.prefetch = 1;
  Loader loader(o);
  std::vector<Batch> kept;  // no clone: the loader must not reuse this memory
  std::vector<std::vector<int>> ids;
  for (const Batch& b : loader.epoch(0)) {
    kept.push_back(b);
    ids.emplace_back();
    for (std::int64_t r = 0; r < b.images.size(0); ++r) ids.back().push_back(sample_id(b.images, r));
  }
  for (int e = 1; e < 3; ++e) one_epoch(loader, e);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    for (std::int64_t r = 0; r < kept[i].images.size(0); ++r) {
      EXPECT_EQ(sample_id(kept[i].images, r), ids[i][static_cast<std::size_t>(r)]);
    }
  }
}

TEST(Loader, SplitsShardsByRankWithoutOverlap) {
  TempDir dir;
  auto shards = make_shards(dir, 4, 8);
  std::set<int> all;
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions o = u8_options(shards);
    o.rank = rank;
    o.world_size = 2;
    Loader loader(o);
    for (const Batch& b : loader.epoch(0)) {
      for (std::int64_t r = 0; r < b.images.size(0); ++r) {
        EXPECT_TRUE(all.insert(sample_id(b.images, r)).second) << "sample seen by two ranks";
      }
    }
  }
  EXPECT_EQ(all.size(), 32U);
  EXPECT_EQ(shards_for_rank({"a", "b", "c", "d", "e"}, 1, 2), (std::vector<std::string>{"b", "d"}));
  EXPECT_THROW(shards_for_rank({"a"}, 2, 2), Error);
}

// A shard with one corrupt image, one sample without .cls and one with a non-numeric label.
std::vector<std::string> make_shard_with_bad_samples(const TempDir& dir) {
  formats::ShardWriter writer(dir.file("bad-%06d.tar"), {});
  std::vector<std::vector<std::byte>> keep;
  for (int i = 0; i < 16; ++i) {
    keep.push_back(solid_png(i));
    const std::string label = std::to_string(i % 10);
    if (i == 3) {
      keep.back().resize(keep.back().size() / 2);  // truncated PNG: fails at decode time
      writer.write({"k03", {{"png", keep.back()}, {"cls", as_bytes(label)}}});
    } else if (i == 5) {
      writer.write({"k05", {{"png", keep.back()}}});  // missing .cls
    } else if (i == 7) {
      writer.write({"k07", {{"png", keep.back()}, {"cls", as_bytes("seven")}}});
    } else {
      std::string key = std::to_string(10 + i);
      key.insert(0, 1, 'k');  // not "k" + ...: GCC 12 warns falsely (-Wstringop-overflow) on that inlined insert
      writer.write({key, {{"png", keep.back()}, {"cls", as_bytes(label)}}});
    }
  }
  writer.close();
  return writer.shards();
}

TEST(Loader, SkipsAndReportsBadSamples) {
  TempDir dir;
  LoaderOptions o = u8_options(make_shard_with_bad_samples(dir));
  o.drop_last = false;
  o.shuffle = false;
  Loader loader(o);
  std::set<int> seen;
  for (const Batch& b : loader.epoch(0)) {
    for (std::int64_t r = 0; r < b.images.size(0); ++r) seen.insert(sample_id(b.images, r));
  }
  EXPECT_EQ(seen.size(), 13U);
  EXPECT_FALSE(seen.count(3) || seen.count(5) || seen.count(7));
  EXPECT_EQ(loader.stats().bad_samples, 3);
  const auto bad = loader.bad_samples();
  ASSERT_EQ(bad.size(), 3U);
  auto mentions = [&](const std::string& what) {
    return std::any_of(bad.begin(), bad.end(), [&](const std::string& m) { return m.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(mentions("bad-000000.tar:"));
  EXPECT_TRUE(mentions("k03.png"));
  EXPECT_TRUE(mentions("missing .cls"));
  EXPECT_TRUE(mentions("k07.cls: label is not a decimal integer"));
}

// Batch::positions (the key of a row's random draws, and of its dropout in training): with split_batches each
// rank's rows carry their place in the global batch, and the sample at a position is the one a single rank
// with the whole global batch has there.
TEST(Loader, SplitBatchRowsCarryTheirGlobalPositions) {
  TempDir dir;
  auto shards = make_shards(dir, 4, 8);
  std::map<std::int64_t, int> one_rank;  // position → sample id with one rank × 8
  {
    LoaderOptions o = u8_options(shards);
    Loader loader(o);
    for (const Batch& b : loader.epoch(1)) {
      ASSERT_EQ(b.positions.numel(), b.images.size(0));
      for (std::int64_t r = 0; r < b.images.size(0); ++r) {
        EXPECT_EQ(b.positions[r].item<std::int64_t>(), b.index * 8 + r);
        one_rank[b.positions[r].item<std::int64_t>()] = sample_id(b.images, r);
      }
    }
  }
  ASSERT_EQ(one_rank.size(), 32U);
  std::set<std::int64_t> covered;
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions o = u8_options(shards);
    o.batch_size = 4;
    o.rank = rank;
    o.world_size = 2;
    o.split_batches = true;
    Loader loader(o);
    for (const Batch& b : loader.epoch(1)) {
      for (std::int64_t r = 0; r < b.images.size(0); ++r) {
        const std::int64_t position = b.positions[r].item<std::int64_t>();
        EXPECT_EQ(position, b.index * 8 + rank * 4 + r);
        EXPECT_EQ(sample_id(b.images, r), one_rank.at(position)) << "position " << position;
        covered.insert(position);
      }
    }
  }
  EXPECT_EQ(covered.size(), 32U);
}

// A row that fails to decode leaves the batch; the rows after it keep their own positions.
TEST(Loader, PositionsSkipTheRowsOfBadSamples) {
  TempDir dir;
  LoaderOptions o = u8_options(make_shard_with_bad_samples(dir));
  o.drop_last = false;
  o.shuffle = false;
  Loader loader(o);
  // The planner skips k05 (no .cls) and k07 (bad label); k03 (truncated) is planned at position 3, then fails.
  const std::vector<int> planned = {0, 1, 2, 3, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15};
  std::set<std::int64_t> positions;
  for (const Batch& b : loader.epoch(0)) {
    for (std::int64_t r = 0; r < b.images.size(0); ++r) {
      const std::int64_t position = b.positions[r].item<std::int64_t>();
      ASSERT_LT(position, static_cast<std::int64_t>(planned.size()));
      EXPECT_EQ(sample_id(b.images, r), planned[static_cast<std::size_t>(position)]) << "position " << position;
      positions.insert(position);
    }
  }
  EXPECT_EQ(positions.size(), 13U);
  EXPECT_FALSE(positions.count(3));
}

TEST(Loader, StopsWithClearErrorPastTheBadSampleBudget) {
  TempDir dir;
  LoaderOptions o = u8_options(make_shard_with_bad_samples(dir));
  o.drop_last = false;
  o.max_bad_samples = 1;
  Loader loader(o);
  try {
    for (const Batch& b : loader.epoch(0)) (void)b;
    FAIL() << "no error past the budget";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the budget of 1"), std::string::npos) << e.what();
  }
}

TEST(Loader, MissingShardIsAClearError) {
  LoaderOptions o = u8_options({"/nonexistent/shard-000000.tar"});
  Loader loader(o);
  try {
    loader.next();
    FAIL() << "no error for a missing shard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/shard-000000.tar"), std::string::npos) << e.what();
  }
}

TEST(Loader, EpochWithoutAFullBatchIsAClearError) {
  TempDir dir;
  auto shards = make_shards(dir, 1, 5);
  LoaderOptions o = u8_options(shards);  // batch 8 > 5 samples, drop_last
  Loader loader(o);
  EXPECT_THROW(loader.next(), Error);
}

TEST(Loader, RejectsInvalidOptions) {
  LoaderOptions o = u8_options({"x.tar"});
  o.batch_size = 0;
  EXPECT_THROW(Loader{o}, Error);
  o = u8_options({"x.tar"});
  o.channels = 2;
  EXPECT_THROW(Loader{o}, Error);
  o = u8_options({});
  EXPECT_THROW(Loader{o}, Error);
  o = u8_options({"x.tar"});
  o.erasing.probability = -0.5;
  EXPECT_THROW(Loader{o}, Error);
}

}  // namespace
}  // namespace hotpath::data
