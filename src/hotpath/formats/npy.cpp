#include "hotpath/formats/npy.h"

#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"

namespace hotpath::formats {

static_assert(std::endian::native == std::endian::little, "the .npy data is written as little-endian host memory");

namespace {

constexpr std::string_view kMagic("\x93NUMPY", 6);
constexpr std::size_t kAlign = 64;                     // numpy's ARRAY_ALIGN
constexpr std::size_t kMaxHeader = std::size_t{1} << 20;  // numpy itself stops at 10,000 bytes by default
constexpr std::size_t kMaxDims = 64;                   // numpy's NPY_MAXDIMS

// Product of the dimensions × itemsize, or nullopt when it overflows.
std::optional<std::uint64_t> byte_count(const std::vector<std::int64_t>& shape, std::size_t itemsize) {
  std::uint64_t n = itemsize;
  for (const std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d)) return std::nullopt;
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

// The Python dict literal of a .npy header: {'key': value, ...} with string, True/False and tuple-of-int
// values. Every step checks the bounds of `text`.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where) : text_(text), where_(where) {}

  NpyArray parse() {
    NpyArray out;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = string_literal();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        HOTPATH_CHECK(!seen_descr, where_, ": header repeats 'descr'");
        seen_descr = true;
        const std::string descr = string_literal();
        if (descr == "<f4") {
          out.dtype = NpyDtype::kFloat32;
        } else if (descr == "<i8") {
          out.dtype = NpyDtype::kInt64;
        } else {
          HOTPATH_CHECK(false, where_, ": dtype '", printable(descr), "' is not supported (expected '<f4' or '<i8')");
        }
      } else if (key == "fortran_order") {
        HOTPATH_CHECK(!seen_order, where_, ": header repeats 'fortran_order'");
        seen_order = true;
        HOTPATH_CHECK(!boolean_literal(), where_, ": Fortran-order arrays are not supported (expected C order)");
      } else if (key == "shape") {
        HOTPATH_CHECK(!seen_shape, where_, ": header repeats 'shape'");
        seen_shape = true;
        out.shape = int_tuple();
      } else {
        HOTPATH_CHECK(false, where_, ": unexpected header key '", printable(key),
                      "' (expected descr, fortran_order and shape)");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
      } else {
        HOTPATH_CHECK(peek() == '}', where_, ": expected ',' or '}' in the header at byte ", pos_);
      }
    }
    ++pos_;  // '}'
    HOTPATH_CHECK(seen_descr && seen_order && seen_shape, where_,
                  ": header lacks ", !seen_descr ? "'descr'" : !seen_order ? "'fortran_order'" : "'shape'");
    // numpy pads with spaces and ends the header with '\n'.
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
    HOTPATH_CHECK(pos_ + 1 == text_.size() && text_[pos_] == '\n', where_,
                  ": header must end with spaces and '\\n' after the dict");
    return out;
  }

 private:
  // 0 at the end: never a character the grammar accepts.
  [[nodiscard]] char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }

  void expect(char c) {
    HOTPATH_CHECK(peek() == c, where_, ": expected '", c, "' in the header at byte ", pos_);
    ++pos_;
  }

  // 'text' or "text", no escapes (numpy writes none for these keys and dtypes).
  std::string string_literal() {
    const char quote = peek();
    HOTPATH_CHECK(quote == '\'' || quote == '"', where_, ": expected a quoted string in the header at byte ", pos_);
    const std::size_t end = text_.find(quote, pos_ + 1);
    HOTPATH_CHECK(end != std::string_view::npos, where_, ": unterminated string in the header at byte ", pos_);
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    HOTPATH_CHECK(s.find('\\') == std::string::npos, where_, ": escapes in header strings are not supported");
    pos_ = end + 1;
    return s;
  }

  bool boolean_literal() {
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    HOTPATH_CHECK(false, where_, ": expected True or False in the header at byte ", pos_);
    return false;
  }

  std::int64_t integer() {
    HOTPATH_CHECK(peek() >= '0' && peek() <= '9', where_, ": expected a dimension in the header at byte ", pos_);
    std::int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      HOTPATH_CHECK(v <= (std::numeric_limits<std::int64_t>::max() - digit) / 10, where_,
                    ": dimension too large in the header at byte ", pos_);
      v = v * 10 + digit;
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // Python 2 longs, as old numpy wrote them
    return v;
  }

  // (), (n,), (a, b), (a, b,)
  std::vector<std::int64_t> int_tuple() {
    std::vector<std::int64_t> dims;
    expect('(');
    skip_space();
    while (peek() != ')') {
      HOTPATH_CHECK(dims.size() < kMaxDims, where_, ": shape has more than ", kMaxDims, " dimensions");
      dims.push_back(integer());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else {
        HOTPATH_CHECK(peek() == ')', where_, ": expected ',' or ')' in the shape at byte ", pos_);
      }
    }
    ++pos_;
    return dims;
  }

  std::string_view text_;
  const std::string& where_;
  std::size_t pos_ = 0;
};

}  // namespace

std::size_t npy_itemsize(NpyDtype dtype) { return dtype == NpyDtype::kFloat32 ? 4 : 8; }

const char* npy_descr(NpyDtype dtype) { return dtype == NpyDtype::kFloat32 ? "<f4" : "<i8"; }

std::string npy_header(NpyDtype dtype, const std::vector<std::int64_t>& shape) {
  HOTPATH_CHECK(shape.size() <= kMaxDims, "npy: ", shape.size(), " dimensions, at most ", kMaxDims);
  std::string dims;
  for (const std::int64_t d : shape) {
    HOTPATH_CHECK(d >= 0, "npy: negative dimension ", d);
    dims += std::to_string(d) + ", ";
  }
  if (shape.size() == 1) dims.pop_back();   // "(n,)" like Python's repr of a 1-tuple
  else if (!shape.empty()) dims.resize(dims.size() - 2);
  std::string dict = std::string("{'descr': '") + npy_descr(dtype) + "', 'fortran_order': False, 'shape': (" + dims +
                     "), }";
  const std::size_t prefix = kMagic.size() + 2 + 2;  // magic, version, u16 length
  dict.append((kAlign - (prefix + dict.size() + 1) % kAlign) % kAlign, ' ');
  dict += '\n';
  HOTPATH_ASSERT(dict.size() <= 0xffff);
  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

void write_npy(const std::string& path, NpyDtype dtype, const std::vector<std::int64_t>& shape,
               std::span<const std::byte> data) {
  const std::optional<std::uint64_t> bytes = byte_count(shape, npy_itemsize(dtype));
  HOTPATH_CHECK(bytes && *bytes == data.size(), path, ": ", data.size(), " bytes of data do not match the shape");
  const std::string header = npy_header(dtype, shape);
  write_file_atomic(path, {std::as_bytes(std::span(header)), data});
}

NpyArray parse_npy(std::span<const std::byte> bytes, const std::string& where) {
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };
  HOTPATH_CHECK(bytes.size() >= 10 && std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) == 0, where,
                ": not a .npy file (no \\x93NUMPY magic)");
  const std::uint8_t major = byte(6);
  HOTPATH_CHECK(major >= 1 && major <= 3 && byte(7) == 0, where, ": unsupported .npy version ", int{major}, ".",
                int{byte(7)});
  std::size_t start = 10;
  std::uint64_t length = byte(8) | (std::uint64_t{byte(9)} << 8);
  if (major >= 2) {
    HOTPATH_CHECK(bytes.size() >= 12, where, ": truncated .npy header");
    start = 12;
    length |= (std::uint64_t{byte(10)} << 16) | (std::uint64_t{byte(11)} << 24);
  }
  HOTPATH_CHECK(length <= kMaxHeader, where, ": header of ", length, " bytes exceeds the limit of ", kMaxHeader);
  HOTPATH_CHECK(length <= bytes.size() - start, where, ": header of ", length, " bytes runs past the end of the file (",
                bytes.size(), " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + start, length);
  NpyArray out = HeaderParser(text, where).parse();
  const std::size_t data_start = start + length;
  const std::optional<std::uint64_t> expected = byte_count(out.shape, npy_itemsize(out.dtype));
  HOTPATH_CHECK(expected && *expected == bytes.size() - data_start, where, ": data has ", bytes.size() - data_start,
                " bytes, the header's shape and dtype need ", expected ? std::to_string(*expected) : "more than 2^64");
  out.data = bytes.subspan(data_start);
  return out;
}

}  // namespace hotpath::formats
