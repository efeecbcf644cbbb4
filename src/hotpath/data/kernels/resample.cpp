// PIL's ImagingResample (src/libImaging/Resample.c) for the BILINEAR filter on uint8 images:
// the same coefficients (precompute_coeffs), the same 22-bit fixed point (normalize_coeffs_8bpc),
// the same pass order (usually horizontal over the rows the vertical pass needs, then vertical;
// see vertical_first()) and the same rounding, so the output is bit-identical to Pillow 13's.
// The loops here are the reference; the AVX2 fast path (x86/resample_avx2.h) computes the same sums.
#include "hotpath/data/kernels/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/core/cpu.h"
#include "x86/resample_avx2.h"

namespace hotpath::data {
namespace {

// Both variants give bit-identical results; tests run each through the cap (cpu::ScopedMaxIsa).
const cpu::OpDispatch kDispatch{"resample",
                                {{"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels}, {"reference", cpu::Isa::kScalar}}};

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL: 8 bits of result, 2 bits of headroom
constexpr std::int32_t kHalf = std::int32_t{1} << (kPrecisionBits - 1);
constexpr double kBilinearSupport = 1.0;

double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

std::uint8_t clip8(std::int32_t acc) {
  const std::int32_t v = acc >> kPrecisionBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One axis as PIL's precompute_coeffs sees it: the input it may read is [lo, lo + in_size) of the
// full image, and the box runs from in0 to in1 relative to lo, in float like PIL's `float box[4]`.
struct Axis {
  int lo = 0;
  int in_size = 0;
  float in0 = 0;
  float in1 = 0;
  int out_size = 0;
  double scale = 0;
  double support = 0;
  double inv_filterscale = 0;
  int ksize = 0;
};

Axis make_axis(int full, double pos, double len, bool crop_first, int out_size) {
  Axis a;
  a.out_size = out_size;
  if (crop_first) {
    // Cropping first makes the crop the whole input: box coordinates become crop-relative.
    a.lo = std::clamp(static_cast<int>(std::floor(pos)), 0, full - 1);
    const int hi = std::clamp(static_cast<int>(std::ceil(pos + len)), a.lo + 1, full);
    a.in_size = hi - a.lo;
    a.in0 = static_cast<float>(pos - a.lo);
    a.in1 = static_cast<float>(pos - a.lo + len);
  } else {
    a.in_size = full;
    a.in0 = static_cast<float>(pos);
    a.in1 = static_cast<float>(pos + len);
  }
  a.scale = static_cast<double>(a.in1 - a.in0) / out_size;  // float subtraction, as in PIL
  const double filterscale = a.scale < 1.0 ? 1.0 : a.scale;
  a.support = kBilinearSupport * filterscale;
  a.inv_filterscale = 1.0 / filterscale;
  a.ksize = static_cast<int>(std::ceil(a.support)) * 2 + 1;
  return a;
}

// First input pixel (relative to lo), pixel count and filter centre of output pixel xx.
struct Tap {
  int first;
  int count;
  double center;
};

Tap tap_at(const Axis& a, int xx) {
  const double center = a.in0 + (xx + 0.5) * a.scale;
  int first = static_cast<int>(center - a.support + 0.5);  // truncation, as in PIL
  if (first < 0) first = 0;
  int last = static_cast<int>(center + a.support + 0.5);
  if (last > a.in_size) last = a.in_size;
  first = std::min(first, a.in_size);
  return {first, std::max(last - first, 0), center};
}

// Pillow 13 runs the vertical pass first when it removes more than twice as many rows as the
// horizontal pass removes columns (read from its ImagingResample; the order changes the rounding
// of the intermediate image, so it matters for bit-exactness). in_size is PIL's input size: the
// whole image, or the crop when crop_first.
bool vertical_first(const Axis& ax, const Axis& ay) {
  const int rows_removed = ay.in_size - ay.out_size;
  return rows_removed > 0 && rows_removed > 2 * (ax.in_size - ax.out_size);
}

// PIL's identity test (need_horizontal / need_vertical): the pass would copy its input.
bool is_identity(const Axis& a) { return a.out_size == a.in_size && a.in0 == 0.0f && a.in1 == static_cast<float>(a.out_size); }

// Coefficient tables of one axis: per output pixel the absolute first input pixel and the count
// (bounds[2i], bounds[2i+1]), then ksize fixed-point weights (zero past the count).
void fill_axis(const Axis& a, std::int32_t* bounds, std::int32_t* kk) {
  for (int xx = 0; xx < a.out_size; ++xx) {
    const Tap tap = tap_at(a, xx);
    double ww = 0.0;
    for (int x = 0; x < tap.count; ++x) ww += bilinear_filter((x + tap.first - tap.center + 0.5) * a.inv_filterscale);
    std::int32_t* k = kk + static_cast<std::ptrdiff_t>(xx) * a.ksize;
    for (int x = 0; x < tap.count; ++x) {
      double w = bilinear_filter((x + tap.first - tap.center + 0.5) * a.inv_filterscale);
      if (ww != 0.0) w /= ww;
      const double fixed = w * (1 << kPrecisionBits);
      k[x] = static_cast<std::int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    std::fill(k + tap.count, k + a.ksize, 0);
    bounds[2 * xx] = a.lo + tap.first;
    bounds[2 * xx + 1] = tap.count;
  }
}

// The input range [first, last) the whole axis reads (PIL's ybox_first / ybox_last).
std::pair<int, int> axis_span(const Axis& a) {
  const Tap head = tap_at(a, 0);
  const Tap tail = tap_at(a, a.out_size - 1);
  return {a.lo + head.first, a.lo + tail.first + tail.count};
}

template <int C>
void horizontal_pixel(const std::uint8_t* line, std::uint8_t* dst, int xx, const std::int32_t* bounds,
                      const std::int32_t* kk, int ksize) {
  const std::uint8_t* p = line + static_cast<std::ptrdiff_t>(bounds[2 * xx]) * C;
  const int n = bounds[2 * xx + 1];
  const std::int32_t* k = kk + static_cast<std::ptrdiff_t>(xx) * ksize;
  std::int32_t acc[C];
  for (int c = 0; c < C; ++c) acc[c] = kHalf;
  for (int x = 0; x < n; ++x) {
    for (int c = 0; c < C; ++c) acc[c] += p[x * C + c] * k[x];
  }
  for (int c = 0; c < C; ++c) dst[xx * C + c] = clip8(acc[c]);
}

template <int C>
void horizontal_pass(const std::uint8_t* in, std::ptrdiff_t in_stride, int rows, std::uint8_t* out,
                     std::ptrdiff_t out_stride, int out_w, const std::int32_t* bounds, const std::int32_t* kk,
                     int ksize) {
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* line = in + y * in_stride;
    std::uint8_t* dst = out + y * out_stride;
    for (int xx = 0; xx < out_w; ++xx) horizontal_pixel<C>(line, dst, xx, bounds, kk, ksize);
  }
}

// Accumulates a chunk of the row tap by tap: contiguous bytes times one coefficient, which the
// compiler vectorises (PIL's loop order, pixel-major, does not). Columns [col0, row_bytes).
void vertical_pass_reference(const std::uint8_t* in, std::ptrdiff_t in_stride, int col0, int row_bytes,
                             std::uint8_t* out, std::ptrdiff_t out_stride, int out_h, const std::int32_t* bounds,
                             const std::int32_t* kk, int ksize) {
  constexpr int kChunk = 256;
  alignas(64) std::int32_t acc[kChunk];
  for (int yy = 0; yy < out_h; ++yy) {
    const std::uint8_t* first = in + static_cast<std::ptrdiff_t>(bounds[2 * yy]) * in_stride;
    const int n = bounds[2 * yy + 1];
    const std::int32_t* k = kk + static_cast<std::ptrdiff_t>(yy) * ksize;
    std::uint8_t* dst = out + yy * out_stride;
    for (int i0 = col0; i0 < row_bytes; i0 += kChunk) {
      const int len = std::min(kChunk, row_bytes - i0);
      for (int j = 0; j < len; ++j) acc[j] = kHalf;
      for (int y = 0; y < n; ++y) {
        const std::uint8_t* src = first + y * in_stride + i0;
        const std::int32_t ky = k[y];
        for (int j = 0; j < len; ++j) acc[j] += src[j] * ky;
      }
      for (int j = 0; j < len; ++j) dst[i0 + j] = clip8(acc[j]);
    }
  }
}

// Everything one pass needs besides the pixels.
struct PassArgs {
  const std::int32_t* bounds;
  const std::int32_t* kk;
  int ksize;
};

void horizontal(bool avx2, int channels, const std::uint8_t* in, std::ptrdiff_t in_stride, int rows, std::uint8_t* out,
                std::ptrdiff_t out_stride, int out_w, const PassArgs& a, const std::uint8_t* readable_end,
                ResampleScratch& scratch) {
#ifdef HOTPATH_X86_KERNELS
  if (avx2 && channels == 3) {
    scratch.packed.resize(x86::packed_size(a.ksize, out_w));
    scratch.pairs.resize(static_cast<std::size_t>(out_w + 1) / 2);
    x86::pack_rgb_weights(a.kk, a.ksize, out_w, scratch.packed.data());
    x86::horizontal_rgb_avx2(in, in_stride, rows, out, out_stride, out_w, a.bounds, a.ksize, scratch.packed.data(),
                             scratch.pairs.data(), readable_end, kPrecisionBits,
                             [&](const std::uint8_t* line, std::uint8_t* dst, int xx) {
                               horizontal_pixel<3>(line, dst, xx, a.bounds, a.kk, a.ksize);
                             });
    return;
  }
#endif
  (void)avx2;
  (void)readable_end;
  (void)scratch;
  switch (channels) {
    case 1: return horizontal_pass<1>(in, in_stride, rows, out, out_stride, out_w, a.bounds, a.kk, a.ksize);
    case 2: return horizontal_pass<2>(in, in_stride, rows, out, out_stride, out_w, a.bounds, a.kk, a.ksize);
    case 3: return horizontal_pass<3>(in, in_stride, rows, out, out_stride, out_w, a.bounds, a.kk, a.ksize);
    case 4: return horizontal_pass<4>(in, in_stride, rows, out, out_stride, out_w, a.bounds, a.kk, a.ksize);
    default: HOTPATH_ASSERT(false);
  }
}

void vertical(bool avx2, const std::uint8_t* in, std::ptrdiff_t in_stride, int row_bytes, std::uint8_t* out,
              std::ptrdiff_t out_stride, int out_h, const PassArgs& a) {
  int done = 0;
#ifdef HOTPATH_X86_KERNELS
  if (avx2) done = x86::vertical_avx2(in, in_stride, row_bytes, out, out_stride, out_h, a.bounds, a.kk, a.ksize, kPrecisionBits);
#endif
  (void)avx2;
  if (done < row_bytes) vertical_pass_reference(in, in_stride, done, row_bytes, out, out_stride, out_h, a.bounds, a.kk, a.ksize);
}

void check_arguments(int src_w, int src_h, int channels, const Box& box, int dst_w, int dst_h) {
  HOTPATH_CHECK(src_w > 0 && src_h > 0, "resample: source size ", src_w, "x", src_h, " must be positive");
  HOTPATH_CHECK(dst_w > 0 && dst_h > 0, "resample: output size ", dst_w, "x", dst_h, " must be positive");
  HOTPATH_CHECK(channels >= 1 && channels <= 4, "resample: channels ", channels, " must be 1..4");
  HOTPATH_CHECK(std::isfinite(box.x) && std::isfinite(box.y) && std::isfinite(box.w) && std::isfinite(box.h) &&
                    box.w > 0 && box.h > 0,
                "resample: box (", box.x, ", ", box.y, ", ", box.w, ", ", box.h, ") must be finite with a positive size");
  // A little slack for boxes computed in floating point (e.g. left*W/new_w + crop*W/new_w).
  const double slack = 1e-6;
  HOTPATH_CHECK(box.x >= -slack && box.y >= -slack && box.x + box.w <= src_w + slack && box.y + box.h <= src_h + slack,
                "resample: box (", box.x, ", ", box.y, ", ", box.w, ", ", box.h, ") must lie inside the ", src_w, "x",
                src_h, " image");
}

// The box with floating-point slack removed.
Box clamp_box(const Box& box, int src_w, int src_h) {
  Box b = box;
  b.x = std::clamp(b.x, 0.0, static_cast<double>(src_w));
  b.y = std::clamp(b.y, 0.0, static_cast<double>(src_h));
  b.w = std::min(b.w, src_w - b.x);
  b.h = std::min(b.h, src_h - b.y);
  return b;
}

}  // namespace

PixelRect resample_footprint(int src_w, int src_h, const Box& box, int dst_w, int dst_h) {
  check_arguments(src_w, src_h, 1, box, dst_w, dst_h);
  const Box b = clamp_box(box, src_w, src_h);
  const Axis ax = make_axis(src_w, b.x, b.w, b.crop_first, dst_w);
  const Axis ay = make_axis(src_h, b.y, b.h, b.crop_first, dst_h);
  const auto [x0, x1] = axis_span(ax);
  const auto [y0, y1] = axis_span(ay);
  return {x0, y0, x1, y1};
}

void resample_bilinear_window(const std::uint8_t* window, std::ptrdiff_t stride, const PixelRect& rect, int src_w,
                              int src_h, int channels, const Box& box, std::uint8_t* dst, int dst_w, int dst_h,
                              ResampleScratch& scratch) {
  check_arguments(src_w, src_h, channels, box, dst_w, dst_h);
  HOTPATH_CHECK(window != nullptr && dst != nullptr, "resample: null image pointer");
  const Box b = clamp_box(box, src_w, src_h);
  const Axis ax = make_axis(src_w, b.x, b.w, b.crop_first, dst_w);
  const Axis ay = make_axis(src_h, b.y, b.h, b.crop_first, dst_h);
  const auto [x_first, x_last] = axis_span(ax);
  const auto [y_first, y_last] = axis_span(ay);
  HOTPATH_CHECK(rect.x0 <= x_first && x_last <= rect.x1 && rect.y0 <= y_first && y_last <= rect.y1,
                "resample: the window [", rect.x0, ",", rect.x1, ")x[", rect.y0, ",", rect.y1,
                ") does not hold the filter footprint [", x_first, ",", x_last, ")x[", y_first, ",", y_last, ")");

  const bool need_h = !is_identity(ax);
  const bool need_v = !is_identity(ay);
  const std::size_t h_size = static_cast<std::size_t>(dst_w) * (2 + static_cast<std::size_t>(ax.ksize));
  const std::size_t v_size = static_cast<std::size_t>(dst_h) * (2 + static_cast<std::size_t>(ay.ksize));
  if (scratch.coeffs.size() < h_size + v_size) scratch.coeffs.resize(h_size + v_size);
  std::int32_t* h_bounds = scratch.coeffs.data();
  std::int32_t* h_kk = h_bounds + 2 * static_cast<std::ptrdiff_t>(dst_w);
  std::int32_t* v_bounds = scratch.coeffs.data() + h_size;
  std::int32_t* v_kk = v_bounds + 2 * static_cast<std::ptrdiff_t>(dst_h);
  if (need_h) fill_axis(ax, h_bounds, h_kk);
  if (need_v) fill_axis(ay, v_bounds, v_kk);

  auto pixel = [&](int x, int y) {
    return window + static_cast<std::ptrdiff_t>(y - rect.y0) * stride + static_cast<std::ptrdiff_t>(x - rect.x0) * channels;
  };
  const std::uint8_t* readable_end = pixel(rect.x1, rect.y1 - 1);  // end of the window's last row
  const bool avx2 = kDispatch.select() == 0;
  const std::ptrdiff_t dst_stride = static_cast<std::ptrdiff_t>(dst_w) * channels;
  const int row_bytes = dst_w * channels;
  const PassArgs h_args{h_bounds, h_kk, ax.ksize};
  const PassArgs v_args{v_bounds, v_kk, ay.ksize};
  auto shift = [](std::int32_t* bounds, int n, int origin) {
    for (int i = 0; i < n; ++i) bounds[2 * i] -= origin;
  };

  if (need_h && need_v && vertical_first(ax, ay)) {
    // Vertical pass over the columns the horizontal pass needs, then the horizontal pass.
    const int cols = x_last - x_first;
    const std::ptrdiff_t tmp_stride = static_cast<std::ptrdiff_t>(cols) * channels;
    scratch.tmp.resize(static_cast<std::size_t>(dst_h) * static_cast<std::size_t>(tmp_stride));
    shift(v_bounds, dst_h, rect.y0);
    vertical(avx2, pixel(x_first, rect.y0), stride, cols * channels, scratch.tmp.data(), tmp_stride, dst_h, v_args);
    shift(h_bounds, dst_w, x_first);
    horizontal(avx2, channels, scratch.tmp.data(), tmp_stride, dst_h, dst, dst_stride, dst_w, h_args,
               scratch.tmp.data() + scratch.tmp.size(), scratch);
  } else if (need_h && need_v) {
    const int rows = y_last - y_first;
    scratch.tmp.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(row_bytes));
    shift(h_bounds, dst_w, rect.x0);
    horizontal(avx2, channels, pixel(rect.x0, y_first), stride, rows, scratch.tmp.data(), dst_stride, dst_w, h_args,
               readable_end, scratch);
    shift(v_bounds, dst_h, y_first);
    vertical(avx2, scratch.tmp.data(), dst_stride, row_bytes, dst, dst_stride, dst_h, v_args);
  } else if (need_h) {
    shift(h_bounds, dst_w, rect.x0);
    horizontal(avx2, channels, pixel(rect.x0, ay.lo), stride, dst_h, dst, dst_stride, dst_w, h_args, readable_end,
               scratch);
  } else if (need_v) {
    shift(v_bounds, dst_h, rect.y0);
    vertical(avx2, pixel(ax.lo, rect.y0), stride, row_bytes, dst, dst_stride, dst_h, v_args);
  } else {
    for (int y = 0; y < dst_h; ++y) std::memcpy(dst + y * dst_stride, pixel(ax.lo, ay.lo + y), static_cast<std::size_t>(row_bytes));
  }
}

void resample_bilinear(const std::uint8_t* src, int src_w, int src_h, std::ptrdiff_t src_stride, int channels,
                       const Box& box, std::uint8_t* dst, int dst_w, int dst_h, ResampleScratch& scratch) {
  resample_bilinear_window(src, src_stride, PixelRect{0, 0, src_w, src_h}, src_w, src_h, channels, box, dst, dst_w,
                           dst_h, scratch);
}

}  // namespace hotpath::data
