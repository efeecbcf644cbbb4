// PNG through libpng's classic API: probe, full decode (8/16-bit, palette, gray, alpha, interlaced),
// encode. PNG has no crop-decode, so decode_box_resized decodes it whole and resamples the box.
//
// Errors as in jpeg_codec.cpp: libpng's error callback records the message and longjmps back to
// the setjmp in guarded(); only libpng (C) and capture-free lambdas with trivially destructible
// locals run in between, and everything that owns memory lives in the callers' frames.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "codecs.h"
#include "hotpath/core/error.h"

namespace hotpath::data::detail {
namespace {

constexpr std::size_t kSignatureSize = 8;

// Shared by reader and writer: the libpng handles plus the message of the last error.
struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  char message[256] = {};
  // Reader: the input. Writer: the output.
  const unsigned char* data = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
  std::vector<std::byte>* out = nullptr;
};

void on_error(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof(state->message), "%s", message != nullptr ? message : "unknown error");
  png_longjmp(png, 1);
}

// Warnings (bad ancillary chunk CRCs, odd sRGB profiles, ...) leave the pixels intact.
void on_warning(png_structp /*png*/, png_const_charp /*message*/) {}

void on_read(png_structp png, png_bytep out, std::size_t n) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (state->size - state->pos < n) png_error(png, "truncated file: unexpected end of data");
  std::memcpy(out, state->data + state->pos, n);
  state->pos += n;
}

void on_write(png_structp png, png_bytep data, std::size_t n) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    state->out->insert(state->out->end(), bytes, bytes + n);
  } catch (const std::bad_alloc&) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory");  // outside the catch block: nothing is left to unwind
}

void on_flush(png_structp /*png*/) {}

// The one setjmp. Keep this function free of C++ objects with destructors.
bool guarded(PngState* state, void (*fn)(PngState*, void*), void* arg) {
  if (setjmp(png_jmpbuf(state->png)) != 0) return false;
  fn(state, arg);
  return true;
}

void run(PngState& state, const char* what, void (*fn)(PngState*, void*), void* arg = nullptr) {
  if (!guarded(&state, fn, arg)) throw Error(std::string("PNG ") + what + ": " + state.message);
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) {
    HOTPATH_CHECK(!bytes.empty(), "PNG: empty input (0 bytes)");
    HOTPATH_CHECK(bytes.size() >= kSignatureSize &&
                      png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, kSignatureSize) == 0,
                  "PNG: bad signature (not a PNG file)");
    state_.data = reinterpret_cast<const unsigned char*>(bytes.data());
    state_.size = bytes.size();
    state_.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state_, on_error, on_warning);
    HOTPATH_CHECK(state_.png != nullptr, "PNG: cannot create a libpng reader");
    state_.info = png_create_info_struct(state_.png);
    HOTPATH_CHECK(state_.info != nullptr, "PNG: cannot create a libpng info struct");
  }
  ~Reader() { png_destroy_read_struct(&state_.png, state_.info != nullptr ? &state_.info : nullptr, nullptr); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Reads the chunks up to the image data; returns the header's size and channel count.
  ImageInfo read_info(const DecodeLimits& limits) {
    run(state_, "header", [](PngState* s, void*) {
      png_set_read_fn(s->png, s, on_read);
      png_read_info(s->png, s->info);
    });
    const auto width = png_get_image_width(state_.png, state_.info);
    const auto height = png_get_image_height(state_.png, state_.info);
    const auto pixels = static_cast<std::int64_t>(width) * height;
    HOTPATH_CHECK(pixels <= limits.max_pixels, "PNG: header claims ", width, "x", height, " = ", pixels,
                  " pixels, more than the limit of ", limits.max_pixels,
                  " (decompression bomb guard, DecodeLimits.max_pixels)");
    const int file_channels = png_get_channels(state_.png, state_.info);
    const bool palette = png_get_color_type(state_.png, state_.info) == PNG_COLOR_TYPE_PALETTE;
    return {ImageFormat::kPng, static_cast<int>(width), static_cast<int>(height), palette ? 3 : file_channels};
  }

  // Decodes all rows to 8-bit `channels` (1 or 3) into `pixels`.
  void read_image(int channels, std::vector<std::uint8_t>& pixels, const ImageInfo& info) {
    struct Setup {
      int channels;
      int out_channels;
      int passes;
      std::size_t rowbytes;
    } setup{channels, 0, 1, 0};
    run(state_, "setup", [](PngState* s, void* arg) {
      auto* st = static_cast<Setup*>(arg);
      const png_byte color = png_get_color_type(s->png, s->info);
      const png_byte depth = png_get_bit_depth(s->png, s->info);
      // Like PIL: 16-bit samples keep their high byte, palettes are looked up, alpha (and a
      // palette's tRNS) is dropped without compositing, low-depth gray is scaled to 0..255.
      png_set_strip_16(s->png);
      png_set_strip_alpha(s->png);
      if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s->png);
      if ((color & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);
      if ((color & PNG_COLOR_MASK_COLOR) == 0 && st->channels == 3) png_set_gray_to_rgb(s->png);
      st->passes = png_set_interlace_handling(s->png);
      png_read_update_info(s->png, s->info);
      st->out_channels = png_get_channels(s->png, s->info);
      st->rowbytes = png_get_rowbytes(s->png, s->info);
    }, &setup);
    HOTPATH_CHECK(setup.out_channels == 1 || setup.out_channels == 3, "PNG: unexpected ", setup.out_channels,
                  " channels after conversion");
    const auto width = static_cast<std::size_t>(info.width);
    const auto height = static_cast<std::size_t>(info.height);
    HOTPATH_ASSERT(setup.rowbytes == width * static_cast<std::size_t>(setup.out_channels));
    pixels.resize(setup.rowbytes * height);

    struct Target {
      unsigned char* data;
      std::size_t rowbytes;
      png_uint_32 height;
      int passes;
    } target{pixels.data(), setup.rowbytes, static_cast<png_uint_32>(height), setup.passes};
    run(state_, "decode", [](PngState* s, void* arg) {
      const auto* t = static_cast<Target*>(arg);
      for (int pass = 0; pass < t->passes; ++pass) {
        for (png_uint_32 y = 0; y < t->height; ++y) png_read_row(s->png, t->data + y * t->rowbytes, nullptr);
      }
      png_read_end(s->png, nullptr);  // the last IDAT CRC and IEND: a cut-off file fails here
    }, &target);
    if (channels == 1 && setup.out_channels == 3) {
      rgb_to_gray_in_place(pixels.data(), width * height);
      pixels.resize(width * height);
    }
  }

 private:
  PngState state_;
};

}  // namespace

ImageInfo png_probe(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  Reader reader(bytes);
  return reader.read_info(limits);
}

ImageInfo png_decode(std::span<const std::byte> bytes, int channels, const DecodeLimits& limits,
                     std::vector<std::uint8_t>& pixels) {
  Reader reader(bytes);
  ImageInfo info = reader.read_info(limits);
  reader.read_image(channels, pixels, info);
  info.channels = channels;
  return info;
}

std::vector<std::byte> png_encode(const std::uint8_t* pixels, int width, int height, int channels) {
  HOTPATH_CHECK(pixels != nullptr && width > 0 && height > 0, "PNG encode: empty image ", width, "x", height);
  HOTPATH_CHECK(channels >= 1 && channels <= 4, "PNG encode: channels ", channels, " must be 1..4");
  std::vector<std::byte> out;
  PngState state;
  state.out = &out;
  state.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &state, on_error, on_warning);
  HOTPATH_CHECK(state.png != nullptr, "PNG encode: cannot create a libpng writer");
  struct WriterDeleter {
    void operator()(PngState* s) const { png_destroy_write_struct(&s->png, s->info != nullptr ? &s->info : nullptr); }
  };
  std::unique_ptr<PngState, WriterDeleter> owner(&state);
  state.info = png_create_info_struct(state.png);
  HOTPATH_CHECK(state.info != nullptr, "PNG encode: cannot create a libpng info struct");
  struct Source {
    const std::uint8_t* pixels;
    png_uint_32 width;
    png_uint_32 height;
    int channels;
  } source{pixels, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), channels};
  run(state, "encode", [](PngState* s, void* arg) {
    const auto* src = static_cast<Source*>(arg);
    static constexpr int kColorTypes[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                          PNG_COLOR_TYPE_RGB_ALPHA};
    png_set_write_fn(s->png, s, on_write, on_flush);
    png_set_IHDR(s->png, s->info, src->width, src->height, 8, kColorTypes[src->channels - 1], PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(s->png, s->info);
    const std::size_t stride = static_cast<std::size_t>(src->width) * static_cast<std::size_t>(src->channels);
    for (png_uint_32 y = 0; y < src->height; ++y) png_write_row(s->png, src->pixels + y * stride);
    png_write_end(s->png, nullptr);
  }, &source);
  return out;
}

}  // namespace hotpath::data::detail
