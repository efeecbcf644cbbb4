// JPEG through libjpeg-turbo's libjpeg API: probe, full decode, crop-and-scale decode, encode.
//
// libjpeg reports errors by calling error_exit, which must not return. We longjmp back to a
// setjmp in jpeg_guarded(); the code between them is libjpeg (C) plus small capture-free lambdas
// that hold only trivially destructible locals, so the jump skips no destructor. Everything that
// owns memory (vectors, the decompressor itself) lives in the callers' frames, outside the jump.
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first

#include <jerror.h>
#include <jpeglib.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "codecs.h"
#include "hotpath/core/error.h"

namespace hotpath::data::detail {
namespace {

// Progressive files can hold thousands of tiny scans that each cost a pass over the image: a CPU
// bomb. TurboJPEG's TJFLAG_LIMITSCANS refuses more than 500; so do we.
constexpr int kMaxScans = 500;

struct JpegError {
  jpeg_error_mgr pub;  // first: libjpeg hands &pub back as cinfo->err
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings that leave the pixels intact. Every other warning (premature end of file, bad Huffman
// code, premature end of data segment, ...) means corrupt or missing pixel data: PIL rejects a
// truncated file, and a half-grey image must not reach training silently, so it is an error.
bool is_benign_warning(int code) {
  return code == JWRN_EXTRANEOUS_DATA || code == JWRN_ADOBE_XFORM || code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC;
}

void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  if (is_benign_warning(cinfo->err->msg_code)) {
    ++cinfo->err->num_warnings;
    return;
  }
  on_error_exit(cinfo);
}

void on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const int scans = reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number;
  if (scans > kMaxScans) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "progressive JPEG with more than %d scans", kMaxScans);
    std::longjmp(err->jump, 1);
  }
}

// A libjpeg decompressor bound to its error manager. Not movable: libjpeg keeps pointers into it.
class Decompressor {
 public:
  Decompressor();
  ~Decompressor() {
    if (created_) jpeg_destroy_decompress(&cinfo);
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // Runs fn(this, arg) with the error handler armed; false when libjpeg failed (see message()).
  bool guarded(void (*fn)(Decompressor*, void*), void* arg = nullptr);
  // Like guarded(), throwing hotpath::Error "JPEG <what>: <libjpeg's message>" on failure.
  void run(const char* what, void (*fn)(Decompressor*, void*), void* arg = nullptr);
  [[nodiscard]] const char* message() const { return err_.message; }

  jpeg_decompress_struct cinfo{};

 private:
  JpegError err_{};
  jpeg_progress_mgr progress_{};
  bool created_ = false;
};

// The one setjmp. Keep this function free of C++ objects with destructors.
bool Decompressor::guarded(void (*fn)(Decompressor*, void*), void* arg) {
  if (setjmp(err_.jump) != 0) return false;
  fn(this, arg);
  return true;
}

void Decompressor::run(const char* what, void (*fn)(Decompressor*, void*), void* arg) {
  if (!guarded(fn, arg)) throw Error(std::string("JPEG ") + what + ": " + err_.message);
}

Decompressor::Decompressor() {
  cinfo.err = jpeg_std_error(&err_.pub);
  err_.pub.error_exit = on_error_exit;
  err_.pub.emit_message = on_emit_message;
  run("init", [](Decompressor* d, void*) {
    jpeg_create_decompress(&d->cinfo);
    d->created_ = true;
  });
  progress_.progress_monitor = on_progress;
  cinfo.progress = &progress_;
}

void read_header(Decompressor& d, std::span<const std::byte> bytes, const DecodeLimits& limits) {
  HOTPATH_CHECK(!bytes.empty(), "JPEG: empty input (0 bytes)");
  struct Source {
    const unsigned char* data;
    unsigned long size;
  } source{reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size())};
  d.run("header", [](Decompressor* self, void* arg) {
    const auto* src = static_cast<Source*>(arg);
    jpeg_mem_src(&self->cinfo, src->data, src->size);
    jpeg_read_header(&self->cinfo, TRUE);
  }, &source);
  const auto pixels = static_cast<std::int64_t>(d.cinfo.image_width) * d.cinfo.image_height;
  HOTPATH_CHECK(pixels <= limits.max_pixels, "JPEG: header claims ", d.cinfo.image_width, "x", d.cinfo.image_height,
                " = ", pixels, " pixels, more than the limit of ", limits.max_pixels,
                " (decompression bomb guard, DecodeLimits.max_pixels)");
}

// Colour handling: gray and YCbCr/RGB files come out as RGB (gray replicated by libjpeg) or gray
// (the Y plane); CMYK/YCCK come out as CMYK and are converted like PIL below.
bool set_output(Decompressor& d, int channels) {
  auto& c = d.cinfo;
  bool cmyk = false;
  switch (c.jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
      c.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      c.out_color_space = JCS_CMYK;
      cmyk = true;
      break;
    default:
      HOTPATH_CHECK(false, "JPEG: unsupported colour space (libjpeg J_COLOR_SPACE ", static_cast<int>(c.jpeg_color_space),
                    ", ", c.num_components, " components); expected gray, YCbCr, RGB, CMYK or YCCK");
  }
  // PIL's settings: accurate integer IDCT, smooth ("fancy") chroma upsampling.
  c.dct_method = JDCT_ISLOW;
  c.do_fancy_upsampling = TRUE;
  return cmyk;
}

// PIL opens 4-component JPEGs as inverted ("Adobe") CMYK and converts to RGB with
// nk = 255 - K; R = nk - nk*C/255 (MULDIV255 rounding). In libjpeg's raw values v = 255 - x.
std::uint8_t muldiv255(int a, int b) {
  const int t = a * b + 128;
  return static_cast<std::uint8_t>(((t >> 8) + t) >> 8);
}

// In place: `count` CMYK pixels to `channels` (3 = RGB, 1 = gray) packed pixels.
void cmyk_to_output(std::uint8_t* pixels, std::size_t count, int channels) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t* in = pixels + 4 * i;
    const int nk = in[3];
    const std::uint8_t r = static_cast<std::uint8_t>(nk - muldiv255(255 - in[0], nk));
    const std::uint8_t g = static_cast<std::uint8_t>(nk - muldiv255(255 - in[1], nk));
    const std::uint8_t b = static_cast<std::uint8_t>(nk - muldiv255(255 - in[2], nk));
    if (channels == 1) {
      pixels[i] = luma_601(r, g, b);
    } else {
      pixels[3 * i] = r;
      pixels[3 * i + 1] = g;
      pixels[3 * i + 2] = b;
    }
  }
}

struct RowTarget {
  unsigned char* data;
  std::size_t stride;
  JDIMENSION rows;
};

void read_rows(Decompressor& d, unsigned char* data, std::size_t stride, JDIMENSION rows) {
  RowTarget target{data, stride, rows};
  d.run("decode", [](Decompressor* self, void* arg) {
    const auto* t = static_cast<RowTarget*>(arg);
    constexpr JDIMENSION kBatch = 16;
    JSAMPROW pointers[kBatch];
    JDIMENSION done = 0;
    while (done < t->rows) {
      const JDIMENSION n = std::min(kBatch, t->rows - done);
      for (JDIMENSION i = 0; i < n; ++i) pointers[i] = t->data + (done + i) * t->stride;
      const JDIMENSION got = jpeg_read_scanlines(&self->cinfo, pointers, n);
      if (got == 0) ERREXIT(&self->cinfo, JERR_INPUT_EOF);  // cannot happen with a memory source
      done += got;
    }
  }, &target);
}

// True when an EOI marker (FF D9) follows the scan data. The crop decode stops reading early, so
// libjpeg never sees a truncated tail; this cheap scan keeps truncated files rejected the same way
// on every call, whatever the box.
bool has_end_marker(const unsigned char* scan_start, const unsigned char* end) {
  for (const unsigned char* p = end - 1; p > scan_start; --p) {
    if (*p == 0xD9 && p[-1] == 0xFF) return true;
  }
  return false;
}

struct Crop {
  JDIMENSION xoffset;
  JDIMENSION width;
};

}  // namespace

ImageInfo jpeg_probe(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  Decompressor d;
  read_header(d, bytes, limits);
  return {ImageFormat::kJpeg, static_cast<int>(d.cinfo.image_width), static_cast<int>(d.cinfo.image_height),
          d.cinfo.num_components};
}

ImageInfo jpeg_probe_complete(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  Decompressor d;
  read_header(d, bytes, limits);
  const auto* begin = reinterpret_cast<const unsigned char*>(bytes.data());
  HOTPATH_CHECK(has_end_marker(d.cinfo.src->next_input_byte, begin + bytes.size()),
                "JPEG: truncated file (no end-of-image marker after the scan data)");
  return {ImageFormat::kJpeg, static_cast<int>(d.cinfo.image_width), static_cast<int>(d.cinfo.image_height),
          d.cinfo.num_components};
}

ImageInfo jpeg_decode(std::span<const std::byte> bytes, int channels, const DecodeLimits& limits,
                      std::vector<std::uint8_t>& pixels) {
  Decompressor d;
  read_header(d, bytes, limits);
  const bool cmyk = set_output(d, channels);
  d.run("start", [](Decompressor* self, void*) { jpeg_start_decompress(&self->cinfo); });
  const JDIMENSION width = d.cinfo.output_width;
  const JDIMENSION height = d.cinfo.output_height;
  const std::size_t stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(d.cinfo.output_components);
  pixels.resize(stride * height);
  read_rows(d, pixels.data(), stride, height);
  d.run("finish", [](Decompressor* self, void*) { jpeg_finish_decompress(&self->cinfo); });
  const std::size_t count = static_cast<std::size_t>(width) * height;
  if (cmyk) cmyk_to_output(pixels.data(), count, channels);
  pixels.resize(count * static_cast<std::size_t>(channels));
  return {ImageFormat::kJpeg, static_cast<int>(width), static_cast<int>(height), channels};
}

void jpeg_decode_box_resized(std::span<const std::byte> bytes, const Box& box, int out_w, int out_h,
                             const DecodeResizeOptions& options, std::uint8_t* dst, DecodeScratch& scratch) {
  Decompressor d;
  read_header(d, bytes, options.limits);
  const auto* begin = reinterpret_cast<const unsigned char*>(bytes.data());
  HOTPATH_CHECK(has_end_marker(d.cinfo.src->next_input_byte, begin + bytes.size()),
                "JPEG: truncated file (no end-of-image marker after the scan data)");
  const bool cmyk = set_output(d, options.channels);
  const int width = static_cast<int>(d.cinfo.image_width);
  const int height = static_cast<int>(d.cinfo.image_height);
  resample_footprint(width, height, box, out_w, out_h);  // checks the box against the image

  // The largest DCT-domain reduction that still leaves the box at least out_w × out_h pixels.
  int denom = 1;
  if (options.allow_dct_scaling) {
    for (const int candidate : {8, 4, 2}) {
      if (box.w / candidate >= out_w && box.h / candidate >= out_h) {
        denom = candidate;
        break;
      }
    }
  }
  scratch.dct_denominator = denom;
  d.cinfo.scale_num = 1;
  d.cinfo.scale_denom = static_cast<unsigned int>(denom);
  d.run("start", [](Decompressor* self, void*) { jpeg_start_decompress(&self->cinfo); });
  const int scaled_w = static_cast<int>(d.cinfo.output_width);
  const int scaled_h = static_cast<int>(d.cinfo.output_height);
  HOTPATH_ASSERT(scaled_w == (width + denom - 1) / denom && scaled_h == (height + denom - 1) / denom);
  // Scaled pixel i covers source pixels [i*denom, (i+1)*denom).
  Box scaled = box;
  scaled.x /= denom;
  scaled.y /= denom;
  scaled.w /= denom;
  scaled.h /= denom;
  const PixelRect need = resample_footprint(scaled_w, scaled_h, scaled, out_w, out_h);

  // Columns: one pixel of margin inside the image, because fancy upsampling treats the edges of
  // a cropped row like image edges (libjpeg.txt, "Partial image decompression"). libjpeg then
  // moves xoffset left to an iMCU boundary.
  Crop crop{static_cast<JDIMENSION>(std::max(need.x0 - 1, 0)), 0};
  crop.width = static_cast<JDIMENSION>(std::min(need.x1 + 1, scaled_w)) - crop.xoffset;
  if (crop.xoffset > 0 || crop.width < static_cast<JDIMENSION>(scaled_w)) {
    d.run("crop", [](Decompressor* self, void* arg) {
      auto* c = static_cast<Crop*>(arg);
      jpeg_crop_scanline(&self->cinfo, &c->xoffset, &c->width);
    }, &crop);
  }
  HOTPATH_ASSERT(static_cast<int>(crop.xoffset) <= need.x0 && need.x1 <= static_cast<int>(crop.xoffset + crop.width));
  if (need.y0 > 0) {
    JDIMENSION skip = static_cast<JDIMENSION>(need.y0);
    d.run("skip", [](Decompressor* self, void* arg) {
      const JDIMENSION lines = *static_cast<JDIMENSION*>(arg);
      if (jpeg_skip_scanlines(&self->cinfo, lines) != lines) ERREXIT(&self->cinfo, JERR_INPUT_EOF);
    }, &skip);
  }
  const auto rows = static_cast<JDIMENSION>(need.height());
  const std::size_t stride = static_cast<std::size_t>(crop.width) * static_cast<std::size_t>(d.cinfo.output_components);
  scratch.pixels.resize(stride * rows);
  read_rows(d, scratch.pixels.data(), stride, rows);
  // The rows below the footprint are never decoded; the destructor releases the decompressor.

  std::size_t row_stride = stride;
  if (cmyk) {
    cmyk_to_output(scratch.pixels.data(), static_cast<std::size_t>(crop.width) * rows, options.channels);
    row_stride = static_cast<std::size_t>(crop.width) * static_cast<std::size_t>(options.channels);
  }
  const PixelRect window{static_cast<int>(crop.xoffset), need.y0, static_cast<int>(crop.xoffset + crop.width), need.y1};
  resample_bilinear_window(scratch.pixels.data(), static_cast<std::ptrdiff_t>(row_stride), window, scaled_w, scaled_h,
                           options.channels, scaled, dst, out_w, out_h, scratch.resample);
}

std::vector<std::byte> jpeg_encode(const std::uint8_t* pixels, int width, int height, int channels, int quality) {
  HOTPATH_CHECK(pixels != nullptr && width > 0 && height > 0, "JPEG encode: empty image ", width, "x", height);
  HOTPATH_CHECK(channels == 1 || channels == 3, "JPEG encode: channels ", channels, " must be 1 or 3");
  HOTPATH_CHECK(quality >= 1 && quality <= 100, "JPEG encode: quality ", quality, " must be 1..100");
  struct HandleDeleter {
    void operator()(void* h) const { tjDestroy(h); }
  };
  struct BufferDeleter {
    void operator()(unsigned char* p) const { tjFree(p); }
  };
  std::unique_ptr<void, HandleDeleter> handle(tjInitCompress());
  HOTPATH_CHECK(handle != nullptr, "JPEG encode: ", tjGetErrorStr2(nullptr));
  unsigned char* raw = nullptr;
  unsigned long size = 0;
  // TurboJPEG's defaults are libjpeg's (and PIL's): ISLOW DCT, standard tables, no optimisation.
  const int rc = tjCompress2(handle.get(), pixels, width, 0, height, channels == 1 ? TJPF_GRAY : TJPF_RGB, &raw, &size,
                             channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  std::unique_ptr<unsigned char, BufferDeleter> buffer(raw);
  HOTPATH_CHECK(rc == 0, "JPEG encode: ", tjGetErrorStr2(handle.get()));
  std::vector<std::byte> out(size);
  std::memcpy(out.data(), buffer.get(), size);
  return out;
}

}  // namespace hotpath::data::detail
