// store_sample: flip + normalise + dtype + layout in one pass over the sample, written straight
// into its batch slot. Rows go through in chunks of up to kChunk pixels; a flipped chunk is first
// mirrored into a small stack buffer so every inner loop reads forward. The loops here are the
// reference; x86/store_avx2.h has the AVX2 twins for 3 channels (bit-identical).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/data/transforms.h"
#include "x86/store_avx2.h"

namespace hotpath::data {
namespace {

// Both variants give bit-identical results; tests run each through the cap (cpu::ScopedMaxIsa).
const cpu::OpDispatch kDispatch{"store_sample",
                                {{"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels}, {"reference", cpu::Isa::kScalar}}};

constexpr int kChunk = 256;  // pixels per chunk
constexpr int kMaxChannels = 3;

std::uint16_t to_bfloat16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest, ties to even (inputs are finite)
  return static_cast<std::uint16_t>(bits >> 16);
}

float convert(float v, float* /*tag*/) { return v; }
std::uint16_t convert(float v, std::uint16_t* /*tag*/) { return to_bfloat16(v); }

struct Affine {
  float scale[kMaxChannels];
  float bias[kMaxChannels];
};

Affine make_affine(const Normalization& norm, const StoreFormat& format, int channels) {
  Affine a{};
  for (int c = 0; c < channels; ++c) {
    if (format.normalize) {
      HOTPATH_CHECK(norm.std[c] != 0.0f, "store_sample: std[", c, "] must not be zero");
      a.scale[c] = 1.0f / (255.0f * norm.std[c]);
      a.bias[c] = -norm.mean[c] / norm.std[c];
    } else {
      a.scale[c] = 1.0f / 255.0f;
      a.bias[c] = 0.0f;
    }
  }
  return a;
}

// Reference loops over pixels [x, n) of a chunk already in output order.
template <int C, typename Out>
void chunk_hwc(const std::uint8_t* in, int x, int n, Out* out, const Affine& a) {
  for (; x < n; ++x) {
    for (int c = 0; c < C; ++c) {
      out[x * C + c] = convert(static_cast<float>(in[x * C + c]) * a.scale[c] + a.bias[c], out);
    }
  }
}

template <int C, typename Out>
void chunk_chw(const std::uint8_t* in, int x0, int n, Out* out, std::size_t plane, const Affine& a) {
  for (int c = 0; c < C; ++c) {
    Out* dst = out + c * plane;
    for (int x = x0; x < n; ++x) dst[x] = convert(static_cast<float>(in[x * C + c]) * a.scale[c] + a.bias[c], out);
  }
}

template <int C>
void chunk_chw_u8(const std::uint8_t* in, int x0, int n, std::uint8_t* out, std::size_t plane) {
  for (int c = 0; c < C; ++c) {
    for (int x = x0; x < n; ++x) out[c * plane + x] = in[x * C + c];
  }
}

// out pixel i = in pixel n-1-i.
template <int C>
void mirror(const std::uint8_t* in, int n, std::uint8_t* out, bool avx2) {
#ifdef HOTPATH_X86_KERNELS
  if constexpr (C == 3) {
    if (avx2) return x86::mirror_rgb_avx2(in, n, out);
  }
#endif
  (void)avx2;
  for (int i = 0; i < n; ++i) std::memcpy(out + i * C, in + (n - 1 - i) * C, C);
}

template <int C, typename Out>
void store_float_like(const std::uint8_t* hwc, int width, int height, bool flip, PixelLayout layout, const Affine& a,
                      Out* dst, bool avx2) {
  const std::size_t plane = static_cast<std::size_t>(width) * height;
  std::uint8_t mirrored[kChunk * C + 16];  // + the spare byte mirror_rgb_avx2 writes
  for (int y = 0; y < height; ++y) {
    const std::uint8_t* row = hwc + static_cast<std::size_t>(y) * width * C;
    for (int x0 = 0; x0 < width; x0 += kChunk) {
      const int n = std::min(kChunk, width - x0);
      const std::uint8_t* in = row + static_cast<std::size_t>(x0) * C;
      if (flip) {
        // Output pixels x0.. come from input pixels width-1-x0 downwards.
        mirror<C>(row + static_cast<std::size_t>(width - x0 - n) * C, n, mirrored, avx2);
        in = mirrored;
      }
      const std::size_t at = static_cast<std::size_t>(y) * width + x0;
      int done = 0;
      if (layout == PixelLayout::kHWC) {
#ifdef HOTPATH_X86_KERNELS
        if constexpr (C == 3) {
          if (avx2) done = x86::hwc_rgb_avx2(in, n, dst + at * C, a.scale, a.bias);
        }
#endif
        chunk_hwc<C>(in, done, n, dst + at * C, a);
      } else {
#ifdef HOTPATH_X86_KERNELS
        if constexpr (C == 3) {
          if (avx2) done = x86::chw_rgb_avx2(in, n, dst + at, plane, a.scale, a.bias);
        }
#endif
        chunk_chw<C>(in, done, n, dst + at, plane, a);
      }
    }
  }
}

template <int C>
void store_uint8(const std::uint8_t* hwc, int width, int height, bool flip, PixelLayout layout, std::uint8_t* dst,
                 bool avx2) {
  const std::size_t plane = static_cast<std::size_t>(width) * height;
  std::uint8_t mirrored[kChunk * C + 16];
  for (int y = 0; y < height; ++y) {
    const std::uint8_t* row = hwc + static_cast<std::size_t>(y) * width * C;
    for (int x0 = 0; x0 < width; x0 += kChunk) {
      const int n = std::min(kChunk, width - x0);
      const std::uint8_t* in = row + static_cast<std::size_t>(x0) * C;
      if (flip) {
        mirror<C>(row + static_cast<std::size_t>(width - x0 - n) * C, n, mirrored, avx2);
        in = mirrored;
      }
      const std::size_t at = static_cast<std::size_t>(y) * width + x0;
      if (layout == PixelLayout::kHWC) {
        std::memcpy(dst + at * C, in, static_cast<std::size_t>(n) * C);
        continue;
      }
      int done = 0;
#ifdef HOTPATH_X86_KERNELS
      if constexpr (C == 3) {
        if (avx2) done = x86::chw_rgb_u8_avx2(in, n, dst + at, plane);
      }
#endif
      chunk_chw_u8<C>(in, done, n, dst + at, plane);
    }
  }
}

template <int C>
void store_typed(const std::uint8_t* hwc, int width, int height, bool flip, const Normalization& norm,
                 const StoreFormat& format, void* dst, bool avx2) {
  switch (format.type) {
    case PixelType::kUInt8:
      store_uint8<C>(hwc, width, height, flip, format.layout, static_cast<std::uint8_t*>(dst), avx2);
      return;
    case PixelType::kFloat32:
      store_float_like<C>(hwc, width, height, flip, format.layout, make_affine(norm, format, C),
                          static_cast<float*>(dst), avx2);
      return;
    case PixelType::kBFloat16:
      store_float_like<C>(hwc, width, height, flip, format.layout, make_affine(norm, format, C),
                          static_cast<std::uint16_t*>(dst), avx2);
      return;
  }
  HOTPATH_CHECK(false, "store_sample: unknown pixel type ", static_cast<int>(format.type));
}

}  // namespace

void store_sample(const std::uint8_t* hwc, int width, int height, int channels, bool flip, const Normalization& norm,
                  const StoreFormat& format, void* dst) {
  HOTPATH_CHECK(hwc != nullptr && dst != nullptr, "store_sample: null buffer");
  HOTPATH_CHECK(width > 0 && height > 0, "store_sample: size ", width, "x", height, " must be positive");
  HOTPATH_CHECK(channels == 1 || channels == 3, "store_sample: channels ", channels, " must be 1 or 3");
  const bool avx2 = kDispatch.select() == 0;
  if (channels == 1) {
    store_typed<1>(hwc, width, height, flip, norm, format, dst, avx2);
  } else {
    store_typed<3>(hwc, width, height, flip, norm, format, dst, avx2);
  }
}

namespace {

template <typename T>
void fill_rect(const PixelRect& rect, int width, int height, int channels, PixelLayout layout, const T* fill, void* dst) {
  auto* out = static_cast<T*>(dst);
  for (int y = rect.y0; y < rect.y1; ++y) {
    for (int x = rect.x0; x < rect.x1; ++x) {
      for (int c = 0; c < channels; ++c) {
        const std::size_t at = layout == PixelLayout::kHWC
                                   ? (static_cast<std::size_t>(y) * width + x) * channels + c
                                   : (static_cast<std::size_t>(c) * height + y) * width + x;
        out[at] = fill[c];
      }
    }
  }
}

}  // namespace

std::uint8_t mean_pixel_level(const Normalization& norm, int channel) {
  HOTPATH_CHECK(channel >= 0 && channel < kMaxChannels, "mean_pixel_level: channel ", channel, " is not 0, 1 or 2");
  return static_cast<std::uint8_t>(std::clamp(std::nearbyint(norm.mean[channel] * 255.0f), 0.0f, 255.0f));
}

void erase_sample(const PixelRect& rect, int width, int height, int channels, const Normalization& norm,
                  const StoreFormat& format, void* dst) {
  HOTPATH_CHECK(dst != nullptr, "erase_sample: null buffer");
  HOTPATH_CHECK(channels == 1 || channels == 3, "erase_sample: channels ", channels, " must be 1 or 3");
  if (rect.width() <= 0 || rect.height() <= 0) return;
  HOTPATH_CHECK(rect.x0 >= 0 && rect.y0 >= 0 && rect.x1 <= width && rect.y1 <= height, "erase_sample: rectangle ",
                rect.width(), "x", rect.height(), " at (", rect.x0, ", ", rect.y0, ") is not inside the ", width, "x",
                height, " image");
  float value[kMaxChannels] = {};
  for (int c = 0; c < channels; ++c) value[c] = format.normalize ? 0.0f : norm.mean[c];
  switch (format.type) {
    case PixelType::kFloat32:
      fill_rect(rect, width, height, channels, format.layout, value, dst);
      return;
    case PixelType::kBFloat16: {
      std::uint16_t bits[kMaxChannels] = {};
      for (int c = 0; c < channels; ++c) bits[c] = to_bfloat16(value[c]);
      fill_rect(rect, width, height, channels, format.layout, bits, dst);
      return;
    }
    case PixelType::kUInt8: {
      std::uint8_t bytes[kMaxChannels] = {};
      for (int c = 0; c < channels; ++c) bytes[c] = mean_pixel_level(norm, c);
      fill_rect(rect, width, height, channels, format.layout, bytes, dst);
      return;
    }
  }
  HOTPATH_CHECK(false, "erase_sample: unknown pixel type ", static_cast<int>(format.type));
}

}  // namespace hotpath::data
