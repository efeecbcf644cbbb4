#include "hotpath/ops/dropout.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>

#include "counter_hash.h"
#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "serial_note.h"

namespace hotpath::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using BF16 = c10::BFloat16;

// Mask layout (dropout.h): rows of 2¹⁶ elements share a row key; a block of 32 elements takes 16
// hashes, each deciding two elements (low and high 16 bits), as attention's dropout_block does.
constexpr int kRowBits = 16;
constexpr std::int64_t kBlock = 32;
constexpr std::int64_t kGrainBlocks = 1024;  // 32 Ki elements per task: well above parallel_for's overhead

// ---- the mask, one element at a time (tails, dropout_mask) ----------------------------------------

struct MaskKey {
  std::uint64_t stream = 0;  // mix64(mix64(seed) ^ offset)
  std::int32_t threshold = 0;  // keep when the element's 16 hash bits are ≥ this (p·2¹⁶ rounded)
  float scale = 1.0F;          // 1/(1−p)
};

MaskKey mask_key(const DropoutDraw& draw) {
  MaskKey k;
  k.stream = detail::mix64(detail::mix64(draw.seed) ^ draw.offset);
  k.threshold = static_cast<std::int32_t>(std::min(65535.0, std::round(draw.p * 65536.0)));
  k.scale = static_cast<float>(1.0 / (1.0 - draw.p));
  return k;
}

// A sample's stream (per-sample keys, dropout.h): the call's stream mixed with its global index.
std::uint64_t sample_stream(const MaskKey& k, std::int64_t g) {
  return detail::mix64(k.stream ^ static_cast<std::uint64_t>(g));
}

std::uint64_t row_key(std::uint64_t stream, std::int64_t n) {
  return detail::mix64(stream ^ static_cast<std::uint64_t>(n >> kRowBits));
}

// Element n of the segment keyed by `stream` (the whole tensor, or one sample's row).
bool keep_element(std::uint64_t stream, std::int32_t threshold, std::int64_t n) {
  const std::uint64_t key = row_key(stream, n);
  const auto j = static_cast<std::uint32_t>(n & ((1 << kRowBits) - 1));
  const std::uint32_t t = j % kBlock;
  std::uint32_t bits = (j - t) / 2 + t % (kBlock / 2) + static_cast<std::uint32_t>(key);
  detail::lowbias32(bits);
  bits ^= static_cast<std::uint32_t>(key >> 32);
  detail::lowbias32(bits);
  const std::uint32_t half = t < kBlock / 2 ? bits & 0xFFFFU : bits >> 16;
  return static_cast<std::int32_t>(half) >= threshold;
}

// ---- the kernel: 8-lane GCC vectors, compiled for the baseline and for AVX2+FMA -----------------

#define HOTPATH_INLINE inline __attribute__((always_inline))
constexpr int kLanes = 8;
typedef float F __attribute__((vector_size(4 * kLanes)));
typedef std::int32_t I __attribute__((vector_size(4 * kLanes)));
typedef std::uint32_t U __attribute__((vector_size(4 * kLanes)));
typedef std::uint16_t H __attribute__((vector_size(2 * kLanes)));
static_assert(kBlock / 2 % kLanes == 0);

struct NoResidual {};  // the residual's element type for plain dropout

struct KernelArgs {
  const void* x = nullptr;
  at::ScalarType x_type = at::kFloat;
  const void* residual = nullptr;  // nullptr: plain dropout
  at::ScalarType residual_type = at::kFloat;
  void* out = nullptr;
  at::ScalarType out_type = at::kFloat;
  std::int64_t numel = 0;
  MaskKey key;
  // Segments keyed on their own: one (the flat form, samples == nullptr) or one per sample (row of
  // dim 0, keyed by samples[b]), each of segment_numel elements.
  const std::int64_t* samples = nullptr;
  std::int64_t segments = 1;
  std::int64_t segment_numel = 0;
  [[nodiscard]] std::int64_t segment_blocks() const { return (segment_numel + kBlock - 1) / kBlock; }
  [[nodiscard]] std::uint64_t stream(std::int64_t segment) const {
    return samples == nullptr ? key.stream : sample_stream(key, samples[segment]);
  }
};

// Loads and stores by reference: a 32-byte vector returned by value from code built without AVX
// changes the ABI (-Wpsabi); always inlined, each ISA's caller gets its own instructions.
HOTPATH_INLINE void load(F& v, const float* p) { std::memcpy(&v, p, sizeof v); }
HOTPATH_INLINE void load(F& v, const BF16* p) {
  H h;
  std::memcpy(&h, p, sizeof h);
  v = __builtin_bit_cast(F, __builtin_convertvector(h, U) << 16);
}
HOTPATH_INLINE void store(float* p, const F& v) { std::memcpy(p, &v, sizeof v); }
// Round to nearest even, NaN to the quiet NaN c10::BFloat16 makes: what .to(at::kBFloat16) gives.
HOTPATH_INLINE void store(BF16* p, const F& v) {
  const U bits = __builtin_bit_cast(U, v);
  U rounded = (bits + (((bits >> 16) & 1U) + 0x7FFFU)) >> 16;
  rounded = v != v ? U{} + 0x7FC0U : rounded;
  const H h = __builtin_convertvector(rounded, H);
  std::memcpy(p, &h, sizeof h);
}

// out[0, 32) = mask·scale·x (+ residual) for the block starting at element j of the row with key `key`.
template <typename TX, typename TR, typename TO>
HOTPATH_INLINE void block(const TX* x, const TR* r, TO* out, std::uint64_t key, std::uint32_t j, std::int32_t threshold,
                          float scale) {
  U lane;
  for (int l = 0; l < kLanes; ++l) lane[l] = static_cast<std::uint32_t>(l);
  const std::uint32_t base = j / 2 + static_cast<std::uint32_t>(key);
  const auto hi = static_cast<std::uint32_t>(key >> 32);
  for (int t = 0; t < kBlock / 2; t += kLanes) {
    U bits = lane + (base + static_cast<std::uint32_t>(t));
    detail::lowbias32(bits);
    bits ^= hi;
    detail::lowbias32(bits);
    // Both halves are < 2¹⁶: the signed compare is exact.
    const I low = __builtin_bit_cast(I, bits & 0xFFFFU);
    const I high = __builtin_bit_cast(I, bits >> 16);
    F xl;
    F xh;
    load(xl, x + t);
    load(xh, x + kBlock / 2 + t);
    F yl = low >= threshold ? xl * scale : F{};
    F yh = high >= threshold ? xh * scale : F{};
    if constexpr (!std::is_same_v<TR, NoResidual>) {
      F rl;
      F rh;
      load(rl, r + t);
      load(rh, r + kBlock / 2 + t);
      yl += rl;
      yh += rh;
    }
    store(out + t, yl);
    store(out + kBlock / 2 + t, yh);
  }
}

// Blocks [b0, b1) of the segment that starts at element `base`, has `numel` elements and is keyed by
// `stream`.
template <typename TX, typename TR, typename TO>
HOTPATH_INLINE void run_segment(const KernelArgs& a, std::int64_t base, std::int64_t numel, std::uint64_t stream,
                                std::int64_t b0, std::int64_t b1) {
  const TX* x = static_cast<const TX*>(a.x) + base;
  const TR* r = static_cast<const TR*>(a.residual);
  if constexpr (!std::is_same_v<TR, NoResidual>) r += base;
  TO* out = static_cast<TO*>(a.out) + base;
  const std::int64_t full = numel / kBlock;
  std::int64_t row = -1;
  std::uint64_t key = 0;
  for (std::int64_t b = b0; b < std::min(b1, full); ++b) {
    const std::int64_t n = b * kBlock;
    if (n >> kRowBits != row) {
      row = n >> kRowBits;
      key = row_key(stream, n);
    }
    const auto j = static_cast<std::uint32_t>(n & ((1 << kRowBits) - 1));
    if constexpr (std::is_same_v<TR, NoResidual>) {
      block(x + n, r, out + n, key, j, a.key.threshold, a.key.scale);
    } else {
      block(x + n, r + n, out + n, key, j, a.key.threshold, a.key.scale);
    }
  }
  if (b1 > full) {  // the last, partial block: one element at a time, the same arithmetic
    for (std::int64_t n = full * kBlock; n < numel; ++n) {
      float y = keep_element(stream, a.key.threshold, n) ? static_cast<float>(x[n]) * a.key.scale : 0.0F;
      if constexpr (!std::is_same_v<TR, NoResidual>) y += static_cast<float>(r[n]);
      out[n] = static_cast<TO>(y);
    }
  }
}

// Work units [u0, u1): unit u is block u % segment_blocks of segment u / segment_blocks.
template <typename TX, typename TR, typename TO>
HOTPATH_INLINE void run_blocks(const KernelArgs& a, std::int64_t u0, std::int64_t u1) {
  const std::int64_t per = a.segment_blocks();
  for (std::int64_t s = u0 / per; s < a.segments && s * per < u1; ++s) {
    const std::int64_t b0 = std::max(u0, s * per) - s * per;
    const std::int64_t b1 = std::min(u1, (s + 1) * per) - s * per;
    run_segment<TX, TR, TO>(a, s * a.segment_numel, a.segment_numel, a.stream(s), b0, b1);
  }
}

template <typename TX, typename TR>
HOTPATH_INLINE void run_out(const KernelArgs& a, std::int64_t b0, std::int64_t b1) {
  if (a.out_type == at::kFloat) {
    run_blocks<TX, TR, float>(a, b0, b1);
  } else {
    run_blocks<TX, TR, BF16>(a, b0, b1);
  }
}

template <typename TX>
HOTPATH_INLINE void run_residual(const KernelArgs& a, std::int64_t b0, std::int64_t b1) {
  if (a.residual == nullptr) {
    run_out<TX, NoResidual>(a, b0, b1);
  } else if (a.residual_type == at::kFloat) {
    run_out<TX, float>(a, b0, b1);
  } else {
    run_out<TX, BF16>(a, b0, b1);
  }
}

HOTPATH_INLINE void run_any(const KernelArgs& a, std::int64_t b0, std::int64_t b1) {
  if (a.x_type == at::kFloat) {
    run_residual<float>(a, b0, b1);
  } else {
    run_residual<BF16>(a, b0, b1);
  }
}

// One body, two compilations: the always-inlined helpers above take each caller's ISA.
void run_portable(const KernelArgs& a, std::int64_t b0, std::int64_t b1) { run_any(a, b0, b1); }

#ifdef HOTPATH_X86_KERNELS
__attribute__((target("avx2,fma"))) void run_avx2(const KernelArgs& a, std::int64_t b0, std::int64_t b1) {
  run_any(a, b0, b1);
}
#else
void run_avx2(const KernelArgs& a, std::int64_t b0, std::int64_t b1) { run_any(a, b0, b1); }
#endif

// Both compilations give bit-identical results (contraction is off for this file).
const cpu::OpDispatch kDispatch{"dropout",
                                {{"avx2", cpu::Isa::kAvx2, cpu::kX86Kernels}, {"portable", cpu::Isa::kScalar}},
                                {.note = detail::kSerialNote}};
#undef HOTPATH_INLINE

// x (float32/bfloat16, contiguous) → mask·x/(1−p) (+ residual, same numel) in out_type, in parallel.
at::Tensor run_kernel(const at::Tensor& x, const at::Tensor& residual, const DropoutDraw& draw,
                      at::ScalarType out_type) {
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(out_type));
  KernelArgs a;
  a.x = x.const_data_ptr();
  a.x_type = x.scalar_type();
  if (residual.defined()) {
    a.residual = residual.const_data_ptr();
    a.residual_type = residual.scalar_type();
  }
  a.out = out.data_ptr();
  a.out_type = out_type;
  a.numel = x.numel();
  a.key = mask_key(draw);
  a.segment_numel = a.numel;
  if (draw.sample_index.defined()) {
    a.samples = draw.sample_index.const_data_ptr<std::int64_t>();
    a.segments = x.size(0);
    a.segment_numel = a.numel / a.segments;
  }
  const auto run = kDispatch.select() == 0 ? &run_avx2 : &run_portable;
  const std::int64_t blocks = a.segments * a.segment_blocks();
  at::parallel_for(0, blocks, kGrainBlocks, [&](std::int64_t b0, std::int64_t b1) { run(a, b0, b1); });
  return out;
}

// ---- autograd ---------------------------------------------------------------------------------------

void save_draw(AutogradContext* ctx, const DropoutDraw& draw) {
  ctx->saved_data["p"] = draw.p;
  ctx->saved_data["seed"] = static_cast<std::int64_t>(draw.seed);  // IValue has no uint64
  ctx->saved_data["offset"] = static_cast<std::int64_t>(draw.offset);
  if (draw.sample_index.defined()) ctx->saved_data["sample_index"] = draw.sample_index;
}

DropoutDraw saved_draw(AutogradContext* ctx) {
  DropoutDraw draw;
  draw.p = ctx->saved_data["p"].toDouble();
  draw.seed = static_cast<std::uint64_t>(ctx->saved_data["seed"].toInt());
  draw.offset = static_cast<std::uint64_t>(ctx->saved_data["offset"].toInt());
  if (const auto it = ctx->saved_data.find("sample_index"); it != ctx->saved_data.end()) {
    draw.sample_index = it->second.toTensor();
  }
  return draw;
}

// x → mask·x/(1−p) in out_type. Saves no tensor. Backward is this Function again on the gradient (into
// x's dtype), so it is itself differentiable.
struct DropoutFunction : public torch::autograd::Function<DropoutFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const DropoutDraw& draw,
                            at::ScalarType out_type) {
    save_draw(ctx, draw);
    ctx->saved_data["x_type"] = static_cast<std::int64_t>(x.scalar_type());
    return run_kernel(x, at::Tensor(), draw, out_type);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto x_type = static_cast<at::ScalarType>(ctx->saved_data["x_type"].toInt());
    at::Tensor dx;
    if (grads[0].defined()) dx = DropoutFunction::apply(grads[0].contiguous(), saved_draw(ctx), x_type);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

// (x, residual) → mask·x/(1−p) + residual in their promoted dtype. Saves no tensor.
struct DropoutAddFunction : public torch::autograd::Function<DropoutAddFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& residual,
                            const DropoutDraw& draw) {
    save_draw(ctx, draw);
    ctx->saved_data["x_type"] = static_cast<std::int64_t>(x.scalar_type());
    ctx->saved_data["residual_type"] = static_cast<std::int64_t>(residual.scalar_type());
    return run_kernel(x, residual, draw, at::promote_types(x.scalar_type(), residual.scalar_type()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto x_type = static_cast<at::ScalarType>(ctx->saved_data["x_type"].toInt());
    const auto residual_type = static_cast<at::ScalarType>(ctx->saved_data["residual_type"].toInt());
    at::Tensor dx;
    at::Tensor dr;
    if (ctx->needs_input_grad(0)) dx = DropoutFunction::apply(g.contiguous(), saved_draw(ctx), x_type);
    if (ctx->needs_input_grad(1)) dr = g.scalar_type() == residual_type ? g : g.to(residual_type);
    return {dx, dr, at::Tensor()};
  }
};

void check_draw(const DropoutDraw& draw) {
  HOTPATH_CHECK(draw.p >= 0.0 && draw.p < 1.0, "dropout: probability must be in [0, 1); got ", draw.p);
  const at::Tensor& s = draw.sample_index;
  HOTPATH_CHECK(!s.defined() || (s.dim() == 1 && s.scalar_type() == at::kLong && s.device().is_cpu() && s.is_contiguous()),
                "dropout: expected sample_index to be a contiguous 1-D int64 CPU tensor (one global sample index "
                "per row of dim 0)");
}

// A keyed draw's rows: dim 0 of `sizes` must be sample_index's length.
void check_rows(const DropoutDraw& draw, c10::IntArrayRef sizes) {
  if (!draw.sample_index.defined()) return;
  HOTPATH_CHECK(!sizes.empty() && sizes[0] == draw.sample_index.numel(), "dropout: expected dim 0 of ", sizes,
                " to be the batch of ", draw.sample_index.numel(), " sample indices");
}

}  // namespace

DropoutDraw DropoutDraw::from_generator(double p, std::optional<at::Generator> generator) {
  DropoutDraw draw;
  draw.p = p;
  check_draw(draw);
  if (p == 0.0) return draw;
  at::Generator gen = generator && generator->defined() ? *generator : at::detail::getDefaultCPUGenerator();
  auto* cpu = at::check_generator<at::CPUGeneratorImpl>(gen);
  const std::lock_guard<std::mutex> lock(gen.mutex());
  draw.seed = cpu->random64();
  return draw;
}

DropoutSource DropoutSource::per_sample(std::uint64_t run_seed, std::int64_t epoch, at::Tensor sample_index) {
  HOTPATH_CHECK(sample_index.defined(), "DropoutSource::per_sample: expected a defined sample_index tensor");
  DropoutSource source;
  source.seed = detail::mix64(detail::mix64(run_seed) ^ static_cast<std::uint64_t>(epoch));
  source.sample_index = std::move(sample_index);
  check_draw(source.draw(0.0, 0));
  return source;
}

const char* dropout_skip_reason(const at::Tensor& x, const at::Tensor& residual) {
  const auto fused_type = [](at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; };
  if (!x.device().is_cpu() || (residual.defined() && !residual.device().is_cpu())) return "not CPU tensors";
  if (!fused_type(x.scalar_type())) return "x is neither float32 nor bfloat16";
  if (residual.defined() && !fused_type(residual.scalar_type())) return "residual is neither float32 nor bfloat16";
  if (x.numel() == 0) return "empty input";
  return nullptr;
}

at::Tensor dropout_mask(const DropoutDraw& draw, c10::IntArrayRef sizes) {
  check_draw(draw);
  if (draw.p == 0.0) return at::ones(sizes, at::kBool);
  check_rows(draw, sizes);
  at::Tensor keep = at::empty(sizes, at::kBool);
  bool* out = keep.data_ptr<bool>();
  const MaskKey key = mask_key(draw);
  const bool keyed = draw.sample_index.defined();
  const std::int64_t* samples = keyed ? draw.sample_index.const_data_ptr<std::int64_t>() : nullptr;
  const std::int64_t segment = keyed && sizes[0] > 0 ? keep.numel() / sizes[0] : keep.numel();
  at::parallel_for(0, keep.numel(), kGrainBlocks * kBlock, [&](std::int64_t n0, std::int64_t n1) {
    for (std::int64_t n = n0; n < n1; ++n) {
      const std::uint64_t stream = keyed ? sample_stream(key, samples[n / segment]) : key.stream;
      out[n] = keep_element(stream, key.threshold, keyed ? n % segment : n);
    }
  });
  return keep;
}

at::Tensor dropout_add_reference(const at::Tensor& x, const at::Tensor& residual, const DropoutDraw& draw) {
  check_draw(draw);
  HOTPATH_CHECK(x.defined(), "dropout: x must be a defined tensor");
  HOTPATH_CHECK(!residual.defined() || residual.sizes() == x.sizes(), "dropout_add: x ", x.sizes(),
                " and residual ", residual.sizes(), " must have one shape");
  const at::ScalarType out_type =
      residual.defined() ? at::promote_types(x.scalar_type(), residual.scalar_type()) : x.scalar_type();
  const at::ScalarType math = out_type == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor keep = dropout_mask(draw, x.sizes()).to(x.device());
  at::Tensor y = at::where(keep, x.to(math) * (1.0 / (1.0 - draw.p)), 0.0);
  if (residual.defined()) y = y + residual.to(math);
  return y.to(out_type);
}

at::Tensor dropout_add(const at::Tensor& x, const at::Tensor& residual, const DropoutDraw& draw) {
  check_draw(draw);
  HOTPATH_CHECK(x.defined() && residual.defined(), "dropout_add: x and residual must be defined tensors");
  HOTPATH_CHECK(residual.sizes() == x.sizes(), "dropout_add: x ", x.sizes(), " and residual ", residual.sizes(),
                " must have one shape");
  if (draw.p == 0.0) return x + residual;
  check_rows(draw, x.sizes());
  if (const char* why = dropout_skip_reason(x, residual); why != nullptr) {
    if (x.is_cuda()) return at::dropout(x, draw.p, /*train=*/true) + residual;
    return dropout_add_reference(x, residual, draw);
  }
  return DropoutAddFunction::apply(x.contiguous(), residual.contiguous(), draw);
}

at::Tensor fused_dropout(const at::Tensor& x, const DropoutDraw& draw) {
  check_draw(draw);
  HOTPATH_CHECK(x.defined(), "dropout: x must be a defined tensor");
  if (draw.p == 0.0) return x;
  check_rows(draw, x.sizes());
  if (const char* why = dropout_skip_reason(x, at::Tensor()); why != nullptr) {
    if (x.is_cuda()) return at::dropout(x, draw.p, /*train=*/true);
    return dropout_add_reference(x, at::Tensor(), draw);
  }
  return DropoutFunction::apply(x.contiguous(), draw, x.scalar_type());
}

at::Tensor dropout_add(const at::Tensor& x, const at::Tensor& residual, double p, bool training) {
  check_draw({.p = p});
  if (!training || p == 0.0) return x + residual;
  return dropout_add(x, residual, DropoutDraw::from_generator(p));
}

at::Tensor fused_dropout(const at::Tensor& x, double p, bool training) {
  check_draw({.p = p});
  if (!training || p == 0.0) return x;
  return fused_dropout(x, DropoutDraw::from_generator(p));
}

}  // namespace hotpath::ops
