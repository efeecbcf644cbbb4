// IDX reader (MNIST / Fashion-MNIST). zlib's gzopen reads gzip and plain files alike, so one
// path serves both; the header is checked before the payload is read, and the payload buffer
// grows only as bytes actually arrive (a lying header cannot make us allocate gigabytes).
#include "hotpath/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>

#include "hotpath/core/error.h"

namespace hotpath::data {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// An IDX image bigger than this (rows × cols) is certainly not MNIST-like data.
constexpr std::uint64_t kMaxImagePixels = 1ULL << 24;
constexpr std::size_t kReadChunk = 1 << 20;

GzFile open_gz(const std::string& path) {
  std::error_code ec;
  HOTPATH_CHECK(std::filesystem::is_regular_file(path, ec), path, ": no such file");
  gzFile raw = gzopen(path.c_str(), "rb");
  HOTPATH_CHECK(raw != nullptr, path, ": cannot open: ", std::strerror(errno));
  return GzFile(raw);
}

std::string gz_error(gzFile f) {
  int code = Z_OK;
  const char* message = gzerror(f, &code);
  return code == Z_ERRNO ? std::string(std::strerror(errno)) : std::string(message);
}

// Reads up to `size` bytes; returns how many arrived (fewer only at end of data). Throws on a
// corrupt gzip stream, naming the file.
std::size_t read_some(gzFile f, const std::string& path, std::uint8_t* dst, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const auto want = static_cast<unsigned>(std::min<std::size_t>(size - done, kReadChunk));
    const int got = gzread(f, dst + done, want);
    HOTPATH_CHECK(got >= 0, path, ": read error: ", gz_error(f));
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

std::uint32_t read_be32(gzFile f, const std::string& path, const char* field) {
  std::array<std::uint8_t, 4> b{};
  const std::size_t got = read_some(f, path, b.data(), b.size());
  HOTPATH_CHECK(got == b.size(), path, ": truncated header: missing field '", field, "'");
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
}

std::string hex(std::uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s = "0x00000000";
  for (int i = 9; i >= 2; --i, v >>= 4) s[static_cast<std::size_t>(i)] = kDigits[v & 0xF];
  return s;
}

// Reads exactly `expected` payload bytes and checks nothing follows them.
std::vector<std::uint8_t> read_payload(gzFile f, const std::string& path, std::uint64_t expected,
                                       const std::string& what) {
  std::vector<std::uint8_t> out;
  std::uint64_t done = 0;
  while (done < expected) {
    const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(expected - done, kReadChunk));
    out.resize(static_cast<std::size_t>(done) + step);
    const std::size_t got = read_some(f, path, out.data() + done, step);
    done += got;
    HOTPATH_CHECK(got == step, path, ": truncated: the header declares ", what, " (", expected,
                  " bytes of data) but the file ends after ", done, " bytes of data");
  }
  std::uint8_t extra = 0;
  HOTPATH_CHECK(read_some(f, path, &extra, 1) == 0, path, ": ", expected,
                " bytes of data expected from the header (", what,
                ") but the file holds more: the count field does not match the data");
  return out;
}

}  // namespace

std::optional<std::uint32_t> read_idx_magic(const std::string& path) {
  const GzFile f = open_gz(path);
  std::array<std::uint8_t, 4> b{};
  if (read_some(f.get(), path, b.data(), b.size()) < b.size()) return std::nullopt;
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
}

IdxImages read_idx_images(const std::string& path) {
  const GzFile f = open_gz(path);
  const std::uint32_t magic = read_be32(f.get(), path, "magic");
  HOTPATH_CHECK(magic == kIdxImagesMagic, path, ": bad magic ", hex(magic), ": expected ",
                hex(kIdxImagesMagic), " (IDX unsigned-byte images, 3 dimensions)");
  IdxImages images;
  images.count = read_be32(f.get(), path, "count");
  images.rows = read_be32(f.get(), path, "rows");
  images.cols = read_be32(f.get(), path, "cols");
  HOTPATH_CHECK(images.rows > 0 && images.cols > 0, path, ": bad image size ", images.rows, "x",
                images.cols, " in fields 'rows'/'cols': both must be positive");
  const std::uint64_t per_image = std::uint64_t{images.rows} * images.cols;
  HOTPATH_CHECK(per_image <= kMaxImagePixels, path, ": image size ", images.rows, "x", images.cols,
                " in fields 'rows'/'cols' exceeds the limit of ", kMaxImagePixels, " pixels");
  images.pixels = read_payload(f.get(), path, per_image * images.count,
                               std::to_string(images.count) + " images of " + std::to_string(images.rows) +
                                   "x" + std::to_string(images.cols));
  return images;
}

std::vector<std::uint8_t> read_idx_labels(const std::string& path) {
  const GzFile f = open_gz(path);
  const std::uint32_t magic = read_be32(f.get(), path, "magic");
  HOTPATH_CHECK(magic == kIdxLabelsMagic, path, ": bad magic ", hex(magic), ": expected ",
                hex(kIdxLabelsMagic), " (IDX unsigned-byte labels, 1 dimension)");
  const std::uint32_t count = read_be32(f.get(), path, "count");
  return read_payload(f.get(), path, count, std::to_string(count) + " labels");
}

std::string idx_labels_path_for(const std::string& images_path) {
  const std::filesystem::path p(images_path);
  std::string name = p.filename().string();
  const auto at = name.find("images-idx3");
  if (at == std::string::npos) return "";
  name.replace(at, std::strlen("images-idx3"), "labels-idx1");
  return (p.parent_path() / name).string();
}

}  // namespace hotpath::data
