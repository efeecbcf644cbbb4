#include "hotpath/ops/fused_bn_relu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "serial_note.h"

namespace hotpath::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Reductions run over chunks of about this many elements, fixed by the shape alone (never by the
// thread count), and the per-chunk double partials are added in chunk order: deterministic sums.
constexpr std::int64_t kChunkElements = 1 << 15;
// Inside a chunk, float accumulators take this many rows (NHWC) or 8-lane steps (NCHW) before
// they are folded into double: float keeps the inner loop vectorised, double keeps long sums exact.
constexpr std::int64_t kFlushSteps = 64;
constexpr std::int64_t kLanes = 8;

// The activation as the kernels see it: N images of `hw` pixels with C channels, stored either as
// [N*hw, C] rows (channels-last) or as N*C planes of hw values (contiguous NCHW).
struct Geometry {
  std::int64_t n = 0;
  std::int64_t c = 0;
  std::int64_t hw = 0;
  bool nhwc = false;

  [[nodiscard]] std::int64_t count() const { return n * hw; }  // values per channel
};

Geometry geometry_of(const at::Tensor& x) {
  // For C == 1 or H*W == 1 both layouts hold and address memory identically; prefer NHWC.
  return {x.size(0), x.size(1), x.size(2) * x.size(3), x.is_contiguous(at::MemoryFormat::ChannelsLast)};
}

at::MemoryFormat memory_format_of(const Geometry& g) {
  return g.nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// ---- kernels: loops over raw buffers -------------------------------------------------------------
// Each loop is written once, as an always-inline body, and compiled twice: for baseline x86-64
// (SSE2) and for AVX2 (Twin below); the auto-vectoriser does the rest. Neither build may use FMA,
// so both give bit-identical results and the forward's ReLU and the backward's mask, computed by
// the same affine(), agree bit for bit (a contracted x*s+b in one place only would break that).
#define HOTPATH_BODY inline __attribute__((always_inline))

namespace body {

HOTPATH_BODY float affine(float x, float scale, float shift) { return x * scale + shift; }
// threshold_backward's rule: the gradient passes unless the output is <= 0 (a NaN passes, as in ATen).
// Both operands are loaded unconditionally so the select vectorises (a conditional load would not).
HOTPATH_BODY float masked(float pre, float dy) { return pre <= 0.0f ? 0.0f : dy; }
HOTPATH_BODY float relu(float pre) { return std::max(pre, 0.0f); }  // max(NaN, 0) is NaN, as torch.relu

// Elements [0, count) in kLanes independent accumulators: the lane of an element depends on its
// index only, so any vector width adds in the same order.
template <typename Step>
HOTPATH_BODY void for_lanes(std::int64_t count, Step step) {
  std::int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (std::int64_t j = 0; j < kLanes; ++j) step(i + j, j);
  }
  for (std::int64_t j = 0; i < count; ++i, ++j) step(i, j);
}

// Statistics: a1 += d, a2 += d*d with d = x - shift (the channel's first value: shifting keeps
// E[d^2] - E[d]^2 free of cancellation when |mean| >> std).
HOTPATH_BODY void moments_rows(const float* __restrict x, std::int64_t rows, std::int64_t C,
                               const float* __restrict shift, float* __restrict a1, float* __restrict a2) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * C;
    for (std::int64_t c = 0; c < C; ++c) {
      const float d = xr[c] - shift[c];
      a1[c] += d;
      a2[c] += d * d;
    }
  }
}
HOTPATH_BODY void moments_plane(const float* __restrict x, std::int64_t count, float shift, float* __restrict a1,
                                float* __restrict a2) {
  for_lanes(count, [&](std::int64_t i, std::int64_t j) {
    const float d = x[i] - shift;
    a1[j] += d;
    a2[j] += d * d;
  });
}

// Forward: y = relu(x * scale + shift).
HOTPATH_BODY void normalize_rows(const float* __restrict x, float* __restrict y, std::int64_t rows, std::int64_t C,
                                 const float* __restrict scale, const float* __restrict shift) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < C; ++c) y[r * C + c] = relu(affine(x[r * C + c], scale[c], shift[c]));
  }
}
HOTPATH_BODY void normalize_plane(const float* __restrict x, float* __restrict y, std::int64_t count, float scale,
                                  float shift) {
  for (std::int64_t i = 0; i < count; ++i) y[i] = relu(affine(x[i], scale, shift));
}

// Backward sums: a1 += gm, a2 += gm * (x - mean), gm = dy where the ReLU let the value through.
HOTPATH_BODY void dy_sums_rows(const float* __restrict x, const float* __restrict dy, std::int64_t rows,
                               std::int64_t C, const float* __restrict scale, const float* __restrict shift,
                               const float* __restrict mean, float* __restrict a1, float* __restrict a2) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * C;
    const float* __restrict gr = dy + r * C;
    for (std::int64_t c = 0; c < C; ++c) {
      const float gm = masked(affine(xr[c], scale[c], shift[c]), gr[c]);
      a1[c] += gm;
      a2[c] += gm * (xr[c] - mean[c]);
    }
  }
}
HOTPATH_BODY void dy_sums_plane(const float* __restrict x, const float* __restrict dy, std::int64_t count,
                                float scale, float shift, float mean, float* __restrict a1, float* __restrict a2) {
  for_lanes(count, [&](std::int64_t i, std::int64_t j) {
    const float gm = masked(affine(x[i], scale, shift), dy[i]);
    a1[j] += gm;
    a2[j] += gm * (x[i] - mean);
  });
}

// Backward: dx = gm * a + (x - mean) * b + k  (native_batch_norm_backward's formula, folded per channel).
}  // namespace body

// dx coefficients per channel, see grad_input_rows.
struct GradCoefficients {
  const float* scale;
  const float* shift;
  const float* mean;
  const float* a;
  const float* b;
  const float* k;
};

namespace body {

HOTPATH_BODY void grad_input_rows(const float* __restrict x, const float* __restrict dy, float* __restrict dx,
                                  std::int64_t rows, std::int64_t C, const GradCoefficients& p) {
  const float* __restrict scale = p.scale;
  const float* __restrict shift = p.shift;
  const float* __restrict mean = p.mean;
  const float* __restrict a = p.a;
  const float* __restrict b = p.b;
  const float* __restrict k = p.k;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * C;
    const float* __restrict gr = dy + r * C;
    float* __restrict dr = dx + r * C;
    for (std::int64_t c = 0; c < C; ++c) {
      const float gm = masked(affine(xr[c], scale[c], shift[c]), gr[c]);
      dr[c] = gm * a[c] + (xr[c] - mean[c]) * b[c] + k[c];
    }
  }
}
HOTPATH_BODY void grad_input_plane(const float* __restrict x, const float* __restrict dy, float* __restrict dx,
                                   std::int64_t count, std::int64_t c, const GradCoefficients& p) {
  const float scale = p.scale[c];
  const float shift = p.shift[c];
  const float mean = p.mean[c];
  const float a = p.a[c];
  const float b = p.b[c];
  const float k = p.k[c];
  for (std::int64_t i = 0; i < count; ++i) {
    const float gm = masked(affine(x[i], scale, shift), dy[i]);
    dx[i] = gm * a + (x[i] - mean) * b + k;
  }
}

}  // namespace body

// One body, two compilations: Twin<&body>::portable and Twin<&body>::avx2 (inlined into each).
template <auto Body>
struct Twin;
template <typename... Args, void (*Body)(Args...)>
struct Twin<Body> {
  static void portable(Args... args) { Body(args...); }
#ifdef HOTPATH_X86_KERNELS
  __attribute__((target("avx2"))) static void avx2(Args... args) { Body(args...); }
#endif
};

struct Kernels {
  decltype(&body::moments_rows) moments_rows;
  decltype(&body::moments_plane) moments_plane;
  decltype(&body::normalize_rows) normalize_rows;
  decltype(&body::normalize_plane) normalize_plane;
  decltype(&body::dy_sums_rows) dy_sums_rows;
  decltype(&body::dy_sums_plane) dy_sums_plane;
  decltype(&body::grad_input_rows) grad_input_rows;
  decltype(&body::grad_input_plane) grad_input_plane;
};

// `pick` maps a Twin<&body> to one of its two compilations.
constexpr Kernels kernel_table(auto pick) {
  return {pick(Twin<&body::moments_rows>{}),
          pick(Twin<&body::moments_plane>{}),
          pick(Twin<&body::normalize_rows>{}),
          pick(Twin<&body::normalize_plane>{}),
          pick(Twin<&body::dy_sums_rows>{}),
          pick(Twin<&body::dy_sums_plane>{}),
          pick(Twin<&body::grad_input_rows>{}),
          pick(Twin<&body::grad_input_plane>{})};
}

const Kernels kPortableKernels = kernel_table([](auto twin) { return &decltype(twin)::portable; });
#ifdef HOTPATH_X86_KERNELS
const Kernels kAvx2Kernels = kernel_table([](auto twin) { return &decltype(twin)::avx2; });
#endif

// AVX2 without FMA: both compilations give bit-identical results.
const cpu::OpDispatch kDispatch{"batch_norm_relu",
                                {{"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels}, {"portable", cpu::Isa::kScalar}},
                                {.note = detail::kSerialNote}};

const Kernels& kernels() {
#ifdef HOTPATH_X86_KERNELS
  if (kDispatch.select() == 0) return kAvx2Kernels;
#endif
  return kPortableKernels;
}

// ---- drivers: threads, chunks, deterministic reductions --------------------------------------------

// Two per-channel sums sum1[c], sum2[c] of values that `rows` (NHWC) or `plane` (NCHW) add into
// float accumulators:
//   rows(r0, r1, acc1, acc2)       adds rows [r0, r1) (C values each) into acc1[0..C), acc2[0..C)
//   plane(n, c, i0, i1, acc1, acc2) adds plane (n, c) elements [i0, i1) into kLanes lanes
template <typename RowsFn, typename PlaneFn>
void channel_sums(const Geometry& g, RowsFn rows_fn, PlaneFn plane_fn, std::vector<double>& sum1,
                  std::vector<double>& sum2) {
  const std::int64_t C = g.c;
  sum1.assign(static_cast<std::size_t>(C), 0.0);
  sum2.assign(static_cast<std::size_t>(C), 0.0);
  if (g.nhwc) {
    const std::int64_t rows = g.count();
    const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, kChunkElements / C);
    const std::int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
    std::vector<double> partial(static_cast<std::size_t>(chunks * 2 * C), 0.0);
    at::parallel_for(0, chunks, 1, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> acc(static_cast<std::size_t>(2 * C));
      for (std::int64_t chunk = begin; chunk < end; ++chunk) {
        double* p1 = partial.data() + chunk * 2 * C;
        double* p2 = p1 + C;
        const std::int64_t r_end = std::min(rows, (chunk + 1) * rows_per_chunk);
        for (std::int64_t r0 = chunk * rows_per_chunk; r0 < r_end; r0 += kFlushSteps) {
          std::fill(acc.begin(), acc.end(), 0.0f);
          rows_fn(r0, std::min(r_end, r0 + kFlushSteps), acc.data(), acc.data() + C);
          for (std::int64_t c = 0; c < C; ++c) {
            p1[c] += acc[static_cast<std::size_t>(c)];
            p2[c] += acc[static_cast<std::size_t>(C + c)];
          }
        }
      }
    });
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      const double* p1 = partial.data() + chunk * 2 * C;
      for (std::int64_t c = 0; c < C; ++c) {
        sum1[static_cast<std::size_t>(c)] += p1[c];
        sum2[static_cast<std::size_t>(c)] += p1[C + c];
      }
    }
    return;
  }
  // NCHW: one partial per plane, planes of a channel added in image order.
  const std::int64_t planes = g.n * C;
  std::vector<double> partial(static_cast<std::size_t>(planes * 2), 0.0);
  const std::int64_t grain = std::max<std::int64_t>(1, kChunkElements / std::max<std::int64_t>(1, g.hw));
  at::parallel_for(0, planes, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      double s1 = 0.0;
      double s2 = 0.0;
      for (std::int64_t i0 = 0; i0 < g.hw; i0 += kFlushSteps * kLanes) {
        float a1[kLanes] = {};
        float a2[kLanes] = {};
        plane_fn(p / C, p % C, i0, std::min(g.hw, i0 + kFlushSteps * kLanes), a1, a2);
        for (std::int64_t j = 0; j < kLanes; ++j) {
          s1 += a1[j];
          s2 += a2[j];
        }
      }
      partial[static_cast<std::size_t>(2 * p)] = s1;
      partial[static_cast<std::size_t>(2 * p + 1)] = s2;
    }
  });
  for (std::int64_t n = 0; n < g.n; ++n) {
    for (std::int64_t c = 0; c < C; ++c) {
      sum1[static_cast<std::size_t>(c)] += partial[static_cast<std::size_t>(2 * (n * C + c))];
      sum2[static_cast<std::size_t>(c)] += partial[static_cast<std::size_t>(2 * (n * C + c) + 1)];
    }
  }
}

// Element-wise pass: rows(r0, r1) over NHWC row ranges, or plane(n, c) for every NCHW plane.
template <typename RowsFn, typename PlaneFn>
void for_each_range(const Geometry& g, RowsFn rows_fn, PlaneFn plane_fn) {
  if (g.nhwc) {
    const std::int64_t grain = std::max<std::int64_t>(1, kChunkElements / g.c);
    at::parallel_for(0, g.count(), grain, [&](std::int64_t begin, std::int64_t end) { rows_fn(begin, end); });
  } else {
    const std::int64_t grain = std::max<std::int64_t>(1, kChunkElements / std::max<std::int64_t>(1, g.hw));
    at::parallel_for(0, g.n * g.c, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p) plane_fn(p / g.c, p % g.c);
    });
  }
}

void batch_moments(const float* x, const Geometry& g, const float* shift, std::vector<double>& sum1,
                   std::vector<double>& sum2) {
  const Kernels& k = kernels();
  const std::int64_t C = g.c;
  channel_sums(
      g, [&](std::int64_t r0, std::int64_t r1, float* a1, float* a2) { k.moments_rows(x + r0 * C, r1 - r0, C, shift, a1, a2); },
      [&](std::int64_t n, std::int64_t c, std::int64_t i0, std::int64_t i1, float* a1, float* a2) {
        k.moments_plane(x + (n * C + c) * g.hw + i0, i1 - i0, shift[c], a1, a2);
      },
      sum1, sum2);
}

void normalize_relu(const float* x, float* y, const Geometry& g, const float* scale, const float* shift) {
  const Kernels& k = kernels();
  const std::int64_t C = g.c;
  for_each_range(
      g, [&](std::int64_t r0, std::int64_t r1) { k.normalize_rows(x + r0 * C, y + r0 * C, r1 - r0, C, scale, shift); },
      [&](std::int64_t n, std::int64_t c) {
        const std::int64_t off = (n * C + c) * g.hw;
        k.normalize_plane(x + off, y + off, g.hw, scale[c], shift[c]);
      });
}

void backward_sums(const float* x, const float* dy, const Geometry& g, const float* scale, const float* shift,
                   const float* mean, std::vector<double>& sum_dy, std::vector<double>& sum_dy_xmu) {
  const Kernels& k = kernels();
  const std::int64_t C = g.c;
  channel_sums(
      g,
      [&](std::int64_t r0, std::int64_t r1, float* a1, float* a2) {
        k.dy_sums_rows(x + r0 * C, dy + r0 * C, r1 - r0, C, scale, shift, mean, a1, a2);
      },
      [&](std::int64_t n, std::int64_t c, std::int64_t i0, std::int64_t i1, float* a1, float* a2) {
        const std::int64_t off = (n * C + c) * g.hw + i0;
        k.dy_sums_plane(x + off, dy + off, i1 - i0, scale[c], shift[c], mean[c], a1, a2);
      },
      sum_dy, sum_dy_xmu);
}

void grad_input(const float* x, const float* dy, float* dx, const Geometry& g, const GradCoefficients& p) {
  const Kernels& k = kernels();
  const std::int64_t C = g.c;
  for_each_range(
      g, [&](std::int64_t r0, std::int64_t r1) { k.grad_input_rows(x + r0 * C, dy + r0 * C, dx + r0 * C, r1 - r0, C, p); },
      [&](std::int64_t n, std::int64_t c) {
        const std::int64_t off = (n * C + c) * g.hw;
        k.grad_input_plane(x + off, dy + off, dx + off, g.hw, c, p);
      });
}

at::Tensor float_vector(const std::vector<double>& v) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(v.size())}, at::kFloat);
  float* p = t.data_ptr<float>();
  for (std::size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  return t;
}

// Inputs: input, weight, bias, running_mean, running_var; training, momentum, eps.
// Saved: input, weight, mean, invstd, scale, shift (the last two exactly as the forward used them).
struct FusedBatchNormRelu : public torch::autograd::Function<FusedBatchNormRelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var,
                            bool training, double momentum, double eps) {
    const Geometry g = geometry_of(input);
    const at::Tensor x = input.contiguous(memory_format_of(g));  // a no-op: the layout was checked
    const float* xp = x.const_data_ptr<float>();
    const float* w = weight.const_data_ptr<float>();
    const float* b = bias.const_data_ptr<float>();
    const auto C = static_cast<std::size_t>(g.c);

    std::vector<double> mean(C);
    std::vector<double> invstd(C);
    if (training) {
      std::vector<float> first(C);
      for (std::size_t c = 0; c < C; ++c) first[c] = g.nhwc ? xp[c] : xp[c * static_cast<std::size_t>(g.hw)];
      std::vector<double> s1;
      std::vector<double> s2;
      batch_moments(xp, g, first.data(), s1, s2);
      const auto n = static_cast<double>(g.count());
      float* rm = running_mean.data_ptr<float>();
      float* rv = running_var.data_ptr<float>();
      for (std::size_t c = 0; c < C; ++c) {
        const double d = s1[c] / n;
        const double var = std::max(s2[c] / n - d * d, 0.0);  // biased, for normalising
        mean[c] = first[c] + d;
        invstd[c] = 1.0 / std::sqrt(var + eps);
        rm[c] = static_cast<float>(momentum * mean[c] + (1.0 - momentum) * rm[c]);
        rv[c] = static_cast<float>(momentum * var * n / (n - 1.0) + (1.0 - momentum) * rv[c]);
      }
    } else {
      const float* rm = running_mean.const_data_ptr<float>();
      const float* rv = running_var.const_data_ptr<float>();
      for (std::size_t c = 0; c < C; ++c) {
        mean[c] = rm[c];
        invstd[c] = 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps);
      }
    }
    std::vector<double> scale(C);
    std::vector<double> shift(C);
    for (std::size_t c = 0; c < C; ++c) {
      scale[c] = invstd[c] * w[c];
      shift[c] = b[c] - mean[c] * scale[c];
    }
    const at::Tensor scale_t = float_vector(scale);
    const at::Tensor shift_t = float_vector(shift);
    at::Tensor y = at::empty_like(x, memory_format_of(g));
    normalize_relu(xp, y.data_ptr<float>(), g, scale_t.const_data_ptr<float>(), shift_t.const_data_ptr<float>());

    ctx->save_for_backward({x, weight, float_vector(mean), float_vector(invstd), scale_t, shift_t});
    ctx->saved_data["training"] = training;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const float* mean = saved[2].const_data_ptr<float>();
    const float* invstd = saved[3].const_data_ptr<float>();
    const float* scale = saved[4].const_data_ptr<float>();
    const float* shift = saved[5].const_data_ptr<float>();
    const bool training = ctx->saved_data["training"].toBool();
    const Geometry g = geometry_of(x);
    const at::Tensor dy = grads[0].contiguous(memory_format_of(g));
    const float* xp = x.const_data_ptr<float>();
    const float* gp = dy.const_data_ptr<float>();
    const float* w = weight.const_data_ptr<float>();
    const auto C = static_cast<std::size_t>(g.c);

    std::vector<double> sum_dy;
    std::vector<double> sum_dy_xmu;
    backward_sums(xp, gp, g, scale, shift, mean, sum_dy, sum_dy_xmu);

    variable_list out(8);
    if (ctx->needs_input_grad(0)) {
      // Training: dx = (gm - sum_dy/n - (x-mean) * invstd^2 * sum_dy_xmu/n) * invstd * w; eval: gm * invstd * w.
      const auto n = static_cast<double>(g.count());
      std::vector<double> a(C);
      std::vector<double> b(C, 0.0);
      std::vector<double> k(C, 0.0);
      for (std::size_t c = 0; c < C; ++c) {
        const double wi = static_cast<double>(invstd[c]) * w[c];
        a[c] = wi;
        if (training) {
          b[c] = -static_cast<double>(invstd[c]) * invstd[c] * sum_dy_xmu[c] / n * wi;
          k[c] = -sum_dy[c] / n * wi;
        }
      }
      const at::Tensor a_t = float_vector(a);
      const at::Tensor b_t = float_vector(b);
      const at::Tensor k_t = float_vector(k);
      at::Tensor dx = at::empty_like(x, memory_format_of(g));
      grad_input(xp, gp, dx.data_ptr<float>(), g,
                 {scale, shift, mean, a_t.const_data_ptr<float>(), b_t.const_data_ptr<float>(), k_t.const_data_ptr<float>()});
      out[0] = dx;
    }
    if (ctx->needs_input_grad(1)) {
      std::vector<double> gw(C);
      for (std::size_t c = 0; c < C; ++c) gw[c] = sum_dy_xmu[c] * invstd[c];
      out[1] = float_vector(gw);
    }
    if (ctx->needs_input_grad(2)) out[2] = float_vector(sum_dy);
    return out;
  }
};

bool is_float_vector(const at::Tensor& t, std::int64_t size) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == size &&
         t.is_contiguous();
}

at::Tensor reference_batch_norm_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                     const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                                     double momentum, double eps) {
  return at::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
                        /*cudnn_enabled=*/true)
      .relu_();
}

}  // namespace

const char* batch_norm_relu_skip_reason(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                        const at::Tensor& running_mean, const at::Tensor& running_var,
                                        bool training) {
  if (!input.defined() || input.dim() != 4) return "input is not a 4-D tensor";
  if (!input.device().is_cpu()) return "input is not on the CPU";
  if (input.scalar_type() != at::kFloat) return "input is not float32 (bf16 under autocast, half, double)";
  if (input.numel() == 0) return "empty input";
  if (!input.is_contiguous(at::MemoryFormat::ChannelsLast) && !input.is_contiguous())
    return "input is neither channels-last nor NCHW contiguous";
  const std::int64_t C = input.size(1);
  if (!is_float_vector(weight, C) || !is_float_vector(bias, C)) return "no float32 affine weight and bias (affine=false)";
  if (!is_float_vector(running_mean, C) || !is_float_vector(running_var, C))
    return "no float32 running statistics (track_running_stats=false)";
  if (training && input.size(0) * input.size(2) * input.size(3) < 2) return "one value per channel in training";
  return nullptr;
}

at::Tensor batch_norm_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                           double momentum, double eps) {
  if (batch_norm_relu_skip_reason(input, weight, bias, running_mean, running_var, training) != nullptr) {
    return reference_batch_norm_relu(input, weight, bias, running_mean, running_var, training, momentum, eps);
  }
  return FusedBatchNormRelu::apply(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

const char* fused_bn_relu_skip_reason(const torch::nn::BatchNorm2dImpl& bn, const at::Tensor& input) {
  if (!bn.options.affine()) return "affine=false";
  if (!bn.options.track_running_stats()) return "track_running_stats=false";
  return batch_norm_relu_skip_reason(input, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.is_training());
}

at::Tensor fused_bn_relu(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& input) {
  if (fused_bn_relu_skip_reason(bn, input) != nullptr) return bn.forward(input).relu_();
  // BatchNormImplBase::forward's bookkeeping: count the batch; momentum=None means a cumulative average.
  double momentum = bn.options.momentum().value_or(0.0);
  if (bn.is_training()) {
    HOTPATH_ASSERT(bn.num_batches_tracked.defined());
    bn.num_batches_tracked += 1;
    if (!bn.options.momentum().has_value()) momentum = 1.0 / bn.num_batches_tracked.item<double>();
  }
  return FusedBatchNormRelu::apply(input, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.is_training(),
                                   momentum, bn.options.eps());
}

}  // namespace hotpath::ops
