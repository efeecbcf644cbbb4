// pack_dataset and the IDX reader: every source kind packed and read back with formats::ShardReader,
// shard rolling, determinism, re-encoding, metadata and the errors for bad inputs.
#include "hotpath/data/pack.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/idx.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar.h"
#include "support/test_support.h"

namespace hotpath::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::write_file;

std::vector<std::uint8_t> gradient(int w, int h, int channels, int seed) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        px[(static_cast<std::size_t>(y) * w + x) * channels + c] =
            static_cast<std::uint8_t>((x * 7 + y * 3 + c * 50 + seed * 31) & 0xFF);
      }
    }
  }
  return px;
}

std::vector<std::byte> make_png(int w, int h, int seed = 0, int channels = 3) {
  const auto px = gradient(w, h, channels, seed);
  return encode_png(px.data(), w, h, channels);
}

std::vector<std::byte> make_jpeg(int w, int h, int seed = 0) {
  const auto px = gradient(w, h, 3, seed);
  return encode_jpeg(px.data(), w, h, 3, 90);
}

std::string text_of(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// All samples of all shards: key -> (ext -> bytes).
using Members = std::map<std::string, std::vector<std::byte>>;
std::vector<std::pair<std::string, Members>> read_all(const std::vector<std::string>& shards) {
  std::vector<std::pair<std::string, Members>> out;
  for (const auto& path : shards) {
    const formats::ShardReader reader(path);
    EXPECT_TRUE(reader.bad().empty()) << path;
    for (const auto& s : reader.samples()) {
      Members m;
      for (const auto& member : s.members) {
        const auto b = reader.bytes(member);
        m[member.ext] = std::vector<std::byte>(b.begin(), b.end());
      }
      out.emplace_back(s.key, std::move(m));
    }
  }
  return out;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- IDX fixtures ------------------------------------------------------------------------------

void put_be32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

std::vector<std::uint8_t> idx_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols,
                                     std::uint32_t magic = kIdxImagesMagic) {
  std::vector<std::uint8_t> out;
  put_be32(out, magic);
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  for (std::uint32_t i = 0; i < count * rows * cols; ++i) out.push_back(static_cast<std::uint8_t>(i * 13 + 5));
  return out;
}

std::vector<std::uint8_t> idx_labels(const std::vector<std::uint8_t>& labels) {
  std::vector<std::uint8_t> out;
  put_be32(out, kIdxLabelsMagic);
  put_be32(out, static_cast<std::uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void write_raw(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  write_file(path, std::as_bytes(std::span(bytes)));
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

// ---- Idx ---------------------------------------------------------------------------------------

TEST(Idx, ReadsPlainAndGzipFiles) {
  TempDir dir;
  const auto images = idx_images(3, 4, 5);
  write_raw(dir.file("plain-images-idx3-ubyte"), images);
  write_gz(dir.file("gz-images-idx3-ubyte.gz"), images);
  write_gz(dir.file("gz-labels-idx1-ubyte.gz"), idx_labels({7, 8, 9}));
  for (const char* name : {"plain-images-idx3-ubyte", "gz-images-idx3-ubyte.gz"}) {
    const IdxImages read = read_idx_images(dir.file(name));
    EXPECT_EQ(read.count, 3u);
    EXPECT_EQ(read.rows, 4u);
    EXPECT_EQ(read.cols, 5u);
    EXPECT_EQ(read.pixels, std::vector<std::uint8_t>(images.begin() + 16, images.end()));
    EXPECT_EQ(read.image(2)[0], images[16 + 40]);
  }
  EXPECT_EQ(read_idx_labels(dir.file("gz-labels-idx1-ubyte.gz")), (std::vector<std::uint8_t>{7, 8, 9}));
  EXPECT_EQ(read_idx_magic(dir.file("gz-images-idx3-ubyte.gz")), kIdxImagesMagic);
}

TEST(Idx, DerivesTheLabelsPath) {
  EXPECT_EQ(idx_labels_path_for("/d/train-images-idx3-ubyte.gz"), "/d/train-labels-idx1-ubyte.gz");
  EXPECT_EQ(idx_labels_path_for("t10k-images-idx3-ubyte"), "t10k-labels-idx1-ubyte");
  EXPECT_EQ(idx_labels_path_for("/images-idx3/data.bin"), "");
}

TEST(Idx, RejectsBadMagic) {
  TempDir dir;
  write_raw(dir.file("x"), idx_images(1, 2, 2, 0x00000804));
  const std::string msg = message_of([&] { read_idx_images(dir.file("x")); });
  EXPECT_NE(msg.find(dir.file("x")), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad magic 0x00000804"), std::string::npos) << msg;
  write_raw(dir.file("l"), idx_images(1, 2, 2));
  EXPECT_NE(message_of([&] { read_idx_labels(dir.file("l")); }).find("expected 0x00000801"), std::string::npos);
}

TEST(Idx, RejectsTruncatedFiles) {
  TempDir dir;
  auto images = idx_images(4, 3, 3);
  images.resize(images.size() - 5);
  write_gz(dir.file("t.gz"), images);
  const std::string msg = message_of([&] { read_idx_images(dir.file("t.gz")); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 images of 3x3"), std::string::npos) << msg;

  write_raw(dir.file("h"), std::vector<std::uint8_t>{0, 0, 8, 3, 0, 0});
  const std::string header = message_of([&] { read_idx_images(dir.file("h")); });
  EXPECT_NE(header.find("missing field 'count'"), std::string::npos) << header;
}

TEST(Idx, RejectsCountMismatchAndCorruptGzip) {
  TempDir dir;
  auto images = idx_images(2, 2, 2);
  images.push_back(1);  // one byte more than the header's count declares
  write_raw(dir.file("m"), images);
  EXPECT_NE(message_of([&] { read_idx_images(dir.file("m")); }).find("count field does not match"), std::string::npos);

  write_gz(dir.file("c.gz"), idx_images(50, 8, 8));
  auto gz = test::read_bytes(dir.file("c.gz"));
  gz[gz.size() - 6] ^= std::byte{0xFF};  // CRC32 in the gzip trailer
  write_file(dir.file("c.gz"), gz);
  const std::string msg = message_of([&] { read_idx_images(dir.file("c.gz")); });
  EXPECT_NE(msg.find(dir.file("c.gz")), std::string::npos) << msg;
  EXPECT_NE(msg.find("read error"), std::string::npos) << msg;
}

// ---- Pack: sources -----------------------------------------------------------------------------

TEST(Pack, ImageFolderRoundTripKeepsSourceBytes) {
  TempDir dir;
  const fs::path root = dir.path() / "images";
  fs::create_directories(root / "dog");
  fs::create_directories(root / "cat" / "sub");
  const auto cat_b = make_jpeg(20, 10, 1);
  const auto cat_a = make_png(8, 8, 2);
  const auto cat_sub = make_jpeg(9, 9, 3);
  const auto dog = make_png(12, 7, 4);
  write_file((root / "cat" / "b.JPG").string(), cat_b);
  write_file((root / "cat" / "a.png").string(), cat_a);
  write_file((root / "cat" / "sub" / "c.jpeg").string(), cat_sub);
  write_file((root / "cat" / "notes.txt").string(), std::string_view("not an image"));
  write_file((root / "dog" / "z.png").string(), dog);

  const PackReport report = pack_dataset(root.string(), {.output_prefix = dir.file("out/train")});
  EXPECT_EQ(report.classes, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(report.samples, 4u);
  EXPECT_TRUE(report.skipped.empty());
  ASSERT_EQ(report.shards, std::vector<std::string>{dir.file("out/train-000000.tar")});
  EXPECT_EQ(report.bytes, fs::file_size(report.shards[0]));

  const auto samples = read_all(report.shards);
  ASSERT_EQ(samples.size(), 4u);
  // torchvision order: (folder, name) sorted, case-sensitive: cat/a.png, cat/b.JPG, cat/sub/c.jpeg, dog/z.png
  EXPECT_EQ(samples[0].first, "00000000");
  EXPECT_EQ(samples[0].second.at("png"), cat_a);
  EXPECT_EQ(samples[1].second.at("jpg"), cat_b);
  EXPECT_EQ(samples[2].second.at("jpg"), cat_sub);
  EXPECT_EQ(samples[3].first, "00000003");
  EXPECT_EQ(samples[3].second.at("png"), dog);
  EXPECT_EQ(text_of(samples[0].second.at("cls")), "0");
  EXPECT_EQ(text_of(samples[2].second.at("cls")), "0");
  EXPECT_EQ(text_of(samples[3].second.at("cls")), "1");
  EXPECT_EQ(samples[0].second.size(), 2u);  // image + cls, no json
}

TEST(Pack, SniffsTheFormatAndSkipsNonImages) {
  TempDir dir;
  const fs::path root = dir.path() / "images";
  fs::create_directories(root / "a");
  const auto png = make_png(6, 6);
  write_file((root / "a" / "1.jpg").string(), png);  // a PNG named .jpg: stored as .png
  write_file((root / "a" / "2.jpg").string(), std::string_view("<html>not a jpeg</html>"));
  write_file((root / "a" / "3.png").string(), std::string_view(""));
  const PackReport report = pack_dataset(root.string(), {.output_prefix = dir.file("out/p")});
  EXPECT_EQ(report.samples, 1u);
  ASSERT_EQ(report.skipped.size(), 2u);
  EXPECT_EQ(report.skipped[0], (root / "a" / "2.jpg").string() + ": not a JPEG or PNG file");
  EXPECT_EQ(report.skipped[1], (root / "a" / "3.png").string() + ": not a JPEG or PNG file");
  const auto samples = read_all(report.shards);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].second.at("png"), png);
}

TEST(Pack, ReencodeSkipsUndecodableImagesWithTheReason) {
  TempDir dir;
  const fs::path root = dir.path() / "images";
  fs::create_directories(root / "a");
  auto jpeg = make_jpeg(40, 30);
  write_file((root / "a" / "good.jpg").string(), jpeg);
  jpeg.resize(jpeg.size() / 3);
  write_file((root / "a" / "half.jpg").string(), jpeg);
  std::vector<std::byte> header_only(jpeg.begin(), jpeg.begin() + 4);
  write_file((root / "a" / "stub.jpg").string(), header_only);
  const PackReport report = pack_dataset(root.string(), {.output_prefix = dir.file("out/p"), .jpeg_quality = 80});
  EXPECT_EQ(report.samples, 1u);
  ASSERT_EQ(report.skipped.size(), 2u);
  EXPECT_TRUE(report.skipped[0].starts_with((root / "a" / "half.jpg").string() + ": ")) << report.skipped[0];
  EXPECT_TRUE(report.skipped[1].starts_with((root / "a" / "stub.jpg").string() + ": ")) << report.skipped[1];
}

TEST(Pack, CsvSourceResolvesRelativePathsAndClassNames) {
  TempDir dir;
  fs::create_directories(dir.path() / "list" / "img");
  const auto a = make_png(5, 5, 1);
  const auto b = make_jpeg(16, 16, 2);
  write_file(dir.file("list/img/a.png"), a);
  write_file(dir.file("abs.jpg"), b);
  write_file(dir.file("list/data.csv"), "label,path,note\nbird,img/a.png,x\n\"cat\"," + dir.file("abs.jpg") + ",\"y, z\"\n\n");
  const PackReport named = pack_dataset(dir.file("list/data.csv"), {.output_prefix = dir.file("out/named")});
  EXPECT_EQ(named.classes, (std::vector<std::string>{"bird", "cat"}));  // inferred: sorted names
  auto samples = read_all(named.shards);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].second.at("png"), a);
  EXPECT_EQ(samples[1].second.at("jpg"), b);
  EXPECT_EQ(text_of(samples[1].second.at("cls")), "1");

  // With a class list, names map into it and integers index it.
  write_file(dir.file("list/mixed.csv"), "path,label\nimg/a.png,cat\nimg/a.png,0\n");
  const PackReport given = pack_dataset(dir.file("list/mixed.csv"),
                                        {.output_prefix = dir.file("out/given"), .class_names = {"dog", "cat"}});
  samples = read_all(given.shards);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(text_of(samples[0].second.at("cls")), "1");
  EXPECT_EQ(text_of(samples[1].second.at("cls")), "0");
  EXPECT_EQ(given.classes, (std::vector<std::string>{"dog", "cat"}));

  write_file(dir.file("list/ints.csv"), "path,label\nimg/a.png,3\n");
  EXPECT_EQ(pack_dataset(dir.file("list/ints.csv"), {.output_prefix = dir.file("out/ints")}).classes,
            (std::vector<std::string>{"0", "1", "2", "3"}));
}

TEST(Pack, CsvErrorsNameTheLine) {
  TempDir dir;
  write_file(dir.file("a.png"), make_png(4, 4));
  const auto err = [&](const std::string& csv, std::vector<std::string> names = {}) {
    write_file(dir.file("l.csv"), csv);
    return message_of([&] {
      pack_dataset(dir.file("l.csv"), {.output_prefix = dir.file("out/x"), .class_names = std::move(names)});
    });
  };
  EXPECT_NE(err("path,cls\na.png,1\n").find("l.csv:1: header lacks the column 'label'"), std::string::npos);
  EXPECT_NE(err("file,label\na.png,1\n").find("l.csv:1: header lacks the column 'path'"), std::string::npos);
  EXPECT_NE(err("path,label\na.png,1\na.png,cat\n").find("l.csv:3: bad label 'cat'"), std::string::npos);
  EXPECT_NE(err("path,label\na.png,-2\n").find("l.csv:2: bad label '-2'"), std::string::npos);
  EXPECT_NE(err("path,label\na.png,\n").find("l.csv:2: empty label"), std::string::npos);
  EXPECT_NE(err("path,label\na.png,1,extra\n").find("l.csv:2: expected 2 fields"), std::string::npos);
  EXPECT_NE(err("path,label\na.png,cat\n\na.png,emu\n", {"cat", "dog"}).find("l.csv:4: unknown class name 'emu'"),
            std::string::npos);
  EXPECT_NE(err("path,label\na.png,5\n", {"cat", "dog"}).find("l.csv:2: label 5 is out of range"), std::string::npos);
  EXPECT_NE(err("path,label\n").find("no rows"), std::string::npos);
}

TEST(Pack, JsonlSourceStoresExtraFieldsAsJson) {
  TempDir dir;
  const auto a = make_png(5, 5, 1);
  write_file(dir.file("a.png"), a);
  write_file(dir.file("l.jsonl"),
             "{\"path\": \"a.png\", \"label\": 2, \"caption\": \"a gradient\", \"id\": 7}\n"
             "\n"
             "{\"label\": 0, \"path\": \"a.png\"}\n");
  const PackReport report = pack_dataset(dir.file("l.jsonl"), {.output_prefix = dir.file("out/j")});
  const auto samples = read_all(report.shards);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(text_of(samples[0].second.at("cls")), "2");
  ASSERT_TRUE(samples[0].second.contains("json"));
  EXPECT_EQ(nlohmann::json::parse(text_of(samples[0].second.at("json"))),
            nlohmann::json({{"caption", "a gradient"}, {"id", 7}}));
  EXPECT_FALSE(samples[1].second.contains("json"));
  EXPECT_EQ(samples[1].second.at("png"), a);

  write_file(dir.file("bad.jsonl"), "{\"path\": \"a.png\", \"label\": 1}\n{\"path\": \"a.png\", \"label\": 1.5}\n");
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("bad.jsonl"), {.output_prefix = dir.file("out/b")}); })
                .find("bad.jsonl:2: bad label 1.5"),
            std::string::npos);
  write_file(dir.file("bad.jsonl"), "{\"path\": \"a.png\", \"label\": 1}\n{\"path\": \"a.png\", \n");
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("bad.jsonl"), {.output_prefix = dir.file("out/b")}); })
                .find("bad.jsonl:2: invalid JSON"),
            std::string::npos);
  write_file(dir.file("bad.jsonl"), "{\"label\": 1}\n");
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("bad.jsonl"), {.output_prefix = dir.file("out/b")}); })
                .find("bad.jsonl:1: field 'path' missing"),
            std::string::npos);
}

TEST(Pack, IdxBecomesGrayPngWithLabels) {
  TempDir dir;
  const auto images = idx_images(5, 6, 4);
  write_gz(dir.file("train-images-idx3-ubyte.gz"), images);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_labels({3, 0, 1, 2, 3}));
  write_raw(dir.file("plain-images-idx3-ubyte"), images);
  write_raw(dir.file("my-labels"), idx_labels({3, 0, 1, 2, 3}));

  const PackReport gz = pack_dataset(dir.file("train-images-idx3-ubyte.gz"), {.output_prefix = dir.file("out/gz")});
  const PackReport plain = pack_dataset(dir.file("plain-images-idx3-ubyte"),
                                        {.output_prefix = dir.file("out/plain"), .labels_path = dir.file("my-labels")});
  EXPECT_EQ(gz.classes, (std::vector<std::string>{"0", "1", "2", "3"}));
  const auto a = read_all(gz.shards);
  const auto b = read_all(plain.shards);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second, b[i].second);
    const Image img = decode_image(a[i].second.at("png"), 1);
    EXPECT_EQ(img.width, 4);
    EXPECT_EQ(img.height, 6);
    EXPECT_EQ(probe_image(a[i].second.at("png")).channels, 1);
    EXPECT_EQ(img.pixels, std::vector<std::uint8_t>(images.begin() + 16 + i * 24, images.begin() + 16 + (i + 1) * 24));
  }
  EXPECT_EQ(text_of(a[0].second.at("cls")), "3");
  EXPECT_EQ(text_of(a[1].second.at("cls")), "0");

  const PackReport jpeg = pack_dataset(dir.file("train-images-idx3-ubyte.gz"),
                                       {.output_prefix = dir.file("out/jpeg"), .jpeg_quality = 95, .limit = 2});
  const auto j = read_all(jpeg.shards);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(sniff_format(j[0].second.at("jpg")), ImageFormat::kJpeg);
}

TEST(Pack, IdxClassNamesFashionMnistAndGiven) {
  TempDir dir;
  fs::create_directories(dir.path() / "fashion-mnist");
  write_raw(dir.file("fashion-mnist/t-images-idx3-ubyte"), idx_images(2, 2, 2));
  write_raw(dir.file("fashion-mnist/t-labels-idx1-ubyte"), idx_labels({9, 0}));
  const PackReport fashion = pack_dataset(dir.file("fashion-mnist/t-images-idx3-ubyte"), {.output_prefix = dir.file("out/f")});
  ASSERT_EQ(fashion.classes.size(), 10u);
  EXPECT_EQ(fashion.classes[0], "T-shirt/top");
  EXPECT_EQ(fashion.classes[9], "Ankle boot");
  const auto given = pack_dataset(dir.file("fashion-mnist/t-images-idx3-ubyte"),
                                  {.output_prefix = dir.file("out/g"),
                                   .class_names = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}});
  EXPECT_EQ(given.classes[9], "j");
  EXPECT_NE(message_of([&] {
              pack_dataset(dir.file("fashion-mnist/t-images-idx3-ubyte"),
                           {.output_prefix = dir.file("out/h"), .class_names = {"a", "b"}});
            }).find("label 9 is out of range"),
            std::string::npos);
}

TEST(Pack, IdxErrorsNameTheFileAndField) {
  TempDir dir;
  write_raw(dir.file("x-images-idx3-ubyte"), idx_images(3, 2, 2));
  write_raw(dir.file("x-labels-idx1-ubyte"), idx_labels({1, 2}));
  const std::string mismatch = message_of([&] { pack_dataset(dir.file("x-images-idx3-ubyte"), {.output_prefix = dir.file("o/x")}); });
  EXPECT_NE(mismatch.find(dir.file("x-labels-idx1-ubyte") + ": field 'count' is 2 labels"), std::string::npos) << mismatch;

  write_raw(dir.file("y-images-idx3-ubyte"), idx_images(3, 2, 2));
  const std::string missing = message_of([&] { pack_dataset(dir.file("y-images-idx3-ubyte"), {.output_prefix = dir.file("o/y")}); });
  EXPECT_NE(missing.find(dir.file("y-labels-idx1-ubyte") + ": no such file"), std::string::npos) << missing;

  const std::string labels_as_source =
      message_of([&] { pack_dataset(dir.file("x-labels-idx1-ubyte"), {.output_prefix = dir.file("o/z")}); });
  EXPECT_NE(labels_as_source.find("is an IDX labels file"), std::string::npos) << labels_as_source;

  write_raw(dir.file("noname"), idx_images(1, 2, 2));
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("noname"), {.output_prefix = dir.file("o/n")}); })
                .find("cannot derive the IDX labels file"),
            std::string::npos);

  auto truncated = idx_images(3, 2, 2);
  truncated.pop_back();
  write_raw(dir.file("z-images-idx3-ubyte"), truncated);
  write_raw(dir.file("z-labels-idx1-ubyte"), idx_labels({1, 2, 3}));
  const std::string trunc = message_of([&] { pack_dataset(dir.file("z-images-idx3-ubyte"), {.output_prefix = dir.file("o/t")}); });
  EXPECT_NE(trunc.find(dir.file("z-images-idx3-ubyte") + ": truncated"), std::string::npos) << trunc;
}

TEST(Pack, SourceErrors) {
  TempDir dir;
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("nope"), {.output_prefix = dir.file("o/x")}); })
                .find(dir.file("nope") + ": no such file or directory"),
            std::string::npos);
  fs::create_directories(dir.path() / "empty");
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("empty"), {.output_prefix = dir.file("o/x")}); })
                .find("no class subfolders"),
            std::string::npos);
  fs::create_directories(dir.path() / "noimg" / "a");
  write_file(dir.file("noimg/a/readme.txt"), std::string_view("x"));
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("noimg"), {.output_prefix = dir.file("o/x")}); })
                .find("no .jpg/.jpeg/.png files in its 1 class folders"),
            std::string::npos);
  fs::create_directories(dir.path() / "allbad" / "a");
  write_file(dir.file("allbad/a/x.jpg"), std::string_view("garbage"));
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("allbad"), {.output_prefix = dir.file("o/x")}); })
                .find("nothing to pack: all 1 inputs were skipped"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.file("o/x-000000.tar")));
  write_file(dir.file("data.bin"), std::string_view("PK\x03\x04 zip file"));
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("data.bin"), {.output_prefix = dir.file("o/x")}); })
                .find("unrecognised source"),
            std::string::npos);
  fs::create_directories(dir.path() / "ok" / "a");
  write_file(dir.file("ok/a/x.png"), make_png(3, 3));
  EXPECT_NE(message_of([&] {
              pack_dataset(dir.file("ok"), {.output_prefix = dir.file("o/x"), .class_names = {"a"}});
            }).find("come from its subfolder names"),
            std::string::npos);
  EXPECT_NE(message_of([&] { pack_dataset(dir.file("ok"), {.output_prefix = dir.file("o/x"), .jpeg_quality = 0}); })
                .find("jpeg_quality 0 is outside 1..100"),
            std::string::npos);
}

// ---- Pack: shards, determinism, re-encode, metadata ----------------------------------------------

// n PNG images of 16×16 spread over 3 classes.
fs::path make_folder(const TempDir& dir, int n) {
  const fs::path root = dir.path() / "src";
  for (int i = 0; i < n; ++i) {
    const fs::path cls = root / ("c" + std::to_string(i % 3));
    fs::create_directories(cls);
    char name[32];
    std::snprintf(name, sizeof name, "%04d.png", i);
    write_file((cls / name).string(), make_png(16, 16, i));
  }
  return root;
}

TEST(Pack, RollsShardsBySampleCount) {
  TempDir dir;
  const fs::path root = make_folder(dir, 10);
  const PackReport report = pack_dataset(root.string(), {.output_prefix = dir.file("out/s"), .max_samples_per_shard = 4});
  ASSERT_EQ(report.shards.size(), 3u);
  EXPECT_EQ(report.shards[2], dir.file("out/s-000002.tar"));
  EXPECT_EQ(formats::ShardReader(report.shards[0]).samples().size(), 4u);
  EXPECT_EQ(formats::ShardReader(report.shards[2]).samples().size(), 2u);
  EXPECT_EQ(read_all(report.shards).size(), 10u);
  std::uint64_t total = 0;
  for (const auto& s : report.shards) total += fs::file_size(s);
  EXPECT_EQ(report.bytes, total);
}

TEST(Pack, RollsShardsByBytes) {
  TempDir dir;
  const fs::path root = make_folder(dir, 12);
  const PackReport one = pack_dataset(root.string(), {.output_prefix = dir.file("out/one")});
  ASSERT_EQ(one.shards.size(), 1u);
  const std::uint64_t limit = one.bytes / 3;
  const PackReport report = pack_dataset(root.string(), {.output_prefix = dir.file("out/b"), .max_shard_bytes = limit});
  EXPECT_GE(report.shards.size(), 3u);
  for (const auto& s : report.shards) EXPECT_LE(fs::file_size(s), limit) << s;
  const auto a = read_all(one.shards);
  const auto b = read_all(report.shards);
  EXPECT_EQ(a, b);
}

TEST(Pack, OutputIsByteIdenticalAcrossRuns) {
  TempDir dir;
  const fs::path root = make_folder(dir, 9);
  const PackOptions opts{.output_prefix = dir.file("a/t"), .max_samples_per_shard = 4, .jpeg_quality = 85};
  PackOptions opts_b = opts;
  opts_b.output_prefix = dir.file("b/t");
  const PackReport a = pack_dataset(root.string(), opts);
  const PackReport b = pack_dataset(root.string(), opts_b);
  ASSERT_EQ(a.shards.size(), 3u);
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (std::size_t i = 0; i < a.shards.size(); ++i) {
    EXPECT_EQ(test::read_bytes(a.shards[i]), test::read_bytes(b.shards[i])) << a.shards[i];
  }
  EXPECT_EQ(test::read_bytes(dir.file("a/t.json")), test::read_bytes(dir.file("b/t.json")));
}

TEST(Pack, MaxSideDownscalesOnlyLargerImages) {
  TempDir dir;
  const fs::path root = dir.path() / "src";
  fs::create_directories(root / "a");
  const auto big = make_jpeg(64, 48, 1);
  const auto tall_png = make_png(20, 50, 2);
  const auto small = make_png(10, 8, 3);
  write_file((root / "a" / "1.jpg").string(), big);
  write_file((root / "a" / "2.png").string(), tall_png);
  write_file((root / "a" / "3.png").string(), small);
  const PackReport report = pack_dataset(root.string(), {.output_prefix = dir.file("out/m"), .max_side = 32});
  const auto samples = read_all(report.shards);
  ASSERT_EQ(samples.size(), 3u);
  const ImageInfo a = probe_image(samples[0].second.at("jpg"));
  EXPECT_EQ(a.width, 32);
  EXPECT_EQ(a.height, 24);
  const ImageInfo b = probe_image(samples[1].second.at("png"));  // PNG stays PNG
  EXPECT_EQ(b.width, 13);
  EXPECT_EQ(b.height, 32);
  EXPECT_EQ(samples[2].second.at("png"), small);  // not larger: source bytes as-is

  // Downscaled pixels are close to the source's average colour structure (a smooth gradient).
  const Image full = decode_image(big, 3);
  const Image reduced = decode_image(samples[0].second.at("jpg"), 3);
  const auto mean = [](const Image& img) {
    double s = 0;
    for (auto p : img.pixels) s += p;
    return s / static_cast<double>(img.pixels.size());
  };
  EXPECT_NEAR(mean(full), mean(reduced), 4.0);

  const PackReport q = pack_dataset(root.string(), {.output_prefix = dir.file("out/q"), .jpeg_quality = 70, .max_side = 32});
  const auto qs = read_all(q.shards);
  ASSERT_EQ(qs.size(), 3u);
  for (const auto& s : qs) EXPECT_TRUE(s.second.contains("jpg"));  // --jpeg-quality re-encodes all as JPEG
  EXPECT_EQ(probe_image(qs[2].second.at("jpg")).width, 10);
}

TEST(Pack, WritesClassesTxtAndMetadata) {
  TempDir dir;
  const fs::path root = make_folder(dir, 7);
  fs::create_directories(root / "c1");
  write_file((root / "c1" / "zz.jpg").string(), std::string_view("broken"));
  const PackReport report = pack_dataset(root.string(),
                                         {.output_prefix = dir.file("out/train"), .max_samples_per_shard = 3, .limit = 6});
  EXPECT_EQ(report.samples, 6u);
  EXPECT_EQ(read_file(dir.file("out/classes.txt")), "c0\nc1\nc2\n");
  const auto meta = nlohmann::json::parse(read_file(dir.file("out/train.json")));
  EXPECT_EQ(meta["source"], root.string());
  EXPECT_EQ(meta["source_kind"], "imagefolder");
  EXPECT_EQ(meta["format"], "webdataset");
  EXPECT_EQ(meta["samples"], 6);
  EXPECT_EQ(meta["skipped"], 1);  // c1/zz.jpg comes before the limit is reached
  EXPECT_EQ(meta["shards"], nlohmann::json({"train-000000.tar", "train-000001.tar"}));
  EXPECT_EQ(meta["classes"], nlohmann::json({"c0", "c1", "c2"}));
  EXPECT_EQ(meta["bytes"], report.bytes);
  EXPECT_EQ(meta["image_members"], nlohmann::json({{"png", 6}}));
  EXPECT_EQ(meta["options"]["max_samples_per_shard"], 3);
  EXPECT_TRUE(meta["options"]["jpeg_quality"].is_null());
  EXPECT_EQ(meta["options"]["limit"], 6);
}

TEST(Pack, RemovesStaleShardsOfAnEarlierLongerRun) {
  TempDir dir;
  const fs::path root = make_folder(dir, 6);
  const auto first = pack_dataset(root.string(), {.output_prefix = dir.file("out/t"), .max_samples_per_shard = 2});
  ASSERT_EQ(first.shards.size(), 3u);
  write_file(dir.file("out/t-extra.tar"), std::string_view("not ours"));
  const auto second = pack_dataset(root.string(), {.output_prefix = dir.file("out/t"), .max_samples_per_shard = 4});
  ASSERT_EQ(second.shards.size(), 2u);
  EXPECT_FALSE(fs::exists(dir.file("out/t-000002.tar")));
  EXPECT_TRUE(fs::exists(dir.file("out/t-extra.tar")));
}

}  // namespace
}  // namespace hotpath::data
