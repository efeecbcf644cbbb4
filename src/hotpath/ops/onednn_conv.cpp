// fp32 convolution through Debian's libdnnl (oneDNN v2), called directly. Torch-free on purpose: see
// include/hotpath/ops/onednn_conv.h for why.
#include "hotpath/ops/onednn_conv.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <new>
#include <unordered_map>
#include <utility>

#include "hotpath/core/error.h"

#ifdef HOTPATH_HAVE_ONEDNN
#include "onednn_common.h"
#endif

namespace hotpath::ops {

std::int64_t ConvGeometry::out_height() const {
  return (height + padding[0] + padding[2] - dilation[0] * (kernel_h - 1) - 1) / stride[0] + 1;
}

std::int64_t ConvGeometry::out_width() const {
  return (width + padding[1] + padding[3] - dilation[1] * (kernel_w - 1) - 1) / stride[1] + 1;
}

namespace {

// "a 3x3 conv of 8 -> 12 channels (groups 2)": how every message names the conv.
[[maybe_unused]] std::string conv_name(const ConvGeometry& g) {  // unused without libdnnl
  return "a " + std::to_string(g.kernel_h) + "x" + std::to_string(g.kernel_w) + " conv of " +
         std::to_string(g.in_channels) + " -> " + std::to_string(g.out_channels) + " channels (groups " +
         std::to_string(g.groups) + ")";
}

void check_geometry(const ConvGeometry& g) {
  HOTPATH_CHECK(g.batch > 0 && g.in_channels > 0 && g.height > 0 && g.width > 0 && g.out_channels > 0 &&
                    g.kernel_h > 0 && g.kernel_w > 0 && g.groups > 0,
                "onednn conv: every size must be positive, got batch ", g.batch, ", in ", g.in_channels, "x",
                g.height, "x", g.width, ", out ", g.out_channels, ", kernel ", g.kernel_h, "x", g.kernel_w,
                ", groups ", g.groups);
  HOTPATH_CHECK(g.in_channels % g.groups == 0 && g.out_channels % g.groups == 0, "onednn conv: ", g.in_channels,
                " input and ", g.out_channels, " output channels do not split into ", g.groups, " groups");
  HOTPATH_CHECK(g.stride[0] > 0 && g.stride[1] > 0 && g.dilation[0] > 0 && g.dilation[1] > 0,
                "onednn conv: stride and dilation must be positive");
  for (std::int64_t p : g.padding) HOTPATH_CHECK(p >= 0, "onednn conv: padding must be >= 0, got ", p);
  HOTPATH_CHECK(g.out_height() > 0 && g.out_width() > 0, "onednn conv: a ", g.height, "x", g.width,
                " input gives no output for kernel ", g.kernel_h, "x", g.kernel_w);
}

}  // namespace

#ifdef HOTPATH_HAVE_ONEDNN

namespace {

using Tag = dnnl::memory::format_tag;
using Dt = dnnl::memory::data_type;
using onednn::cpu_engine;
using onednn::Scratch;

void append_activation(dnnl::post_ops& po, ConvActivation act) {
  const auto add = [&](dnnl::algorithm alg, float alpha, float beta) { po.append_eltwise(1.0F, alg, alpha, beta); };
  switch (act) {
    case ConvActivation::kNone: return;
    case ConvActivation::kRelu: add(dnnl::algorithm::eltwise_relu, 0.0F, 0.0F); return;
    case ConvActivation::kRelu6: add(dnnl::algorithm::eltwise_clip, 0.0F, 6.0F); return;
    case ConvActivation::kGelu: add(dnnl::algorithm::eltwise_gelu_erf, 0.0F, 0.0F); return;
    case ConvActivation::kSilu: add(dnnl::algorithm::eltwise_swish, 1.0F, 0.0F); return;
    case ConvActivation::kSigmoid: add(dnnl::algorithm::eltwise_logistic, 0.0F, 0.0F); return;
  }
}

}  // namespace

namespace {

// A user-mode scratchpad and the Winograd path's blocked buffers, carved from one per-thread Scratch.
struct Carve {
  char* base;
  std::size_t used = 0;
  void* take(std::size_t n) {
    void* p = base + used;
    used += (n + 63) / 64 * 64;
    return p;
  }
};

std::size_t rounded(std::size_t n) { return (n + 63) / 64 * 64; }

// The direct conv, or the Winograd one between two reorders (NHWC -> nChw16c -> NHWC).
struct Variant {
  dnnl::convolution_forward conv;
  dnnl::memory weights, bias;  // in this primitive's layout, owned (or shared with another shape's conv)
  dnnl::memory::desc src_md, dst_md, scratch_md;
  std::string implementation;
  // Winograd only:
  dnnl::reorder to_blocked, from_blocked;
  dnnl::memory::desc to_scratch_md, from_scratch_md;

  [[nodiscard]] bool blocked() const { return static_cast<bool>(to_blocked); }
  [[nodiscard]] std::size_t scratch_bytes() const {
    std::size_t n = rounded(scratch_md.get_size());
    if (blocked()) {
      n += rounded(src_md.get_size()) + rounded(dst_md.get_size()) +
           rounded(std::max(to_scratch_md.get_size(), from_scratch_md.get_size()));
    }
    return n;
  }
};

}  // namespace

struct OneDnnConv::Impl {
  ConvGeometry g;
  bool residual = false;
  std::string implementation;
  dnnl::memory::desc nhwc_src, nhwc_dst;
  Variant v;

  void run(const Variant& x, const float* src, float* dst, const float* residual_data) const;
};

namespace {

const auto usable = onednn::usable_implementation;

// Weights [out, in/groups, kh, kw] reordered into pd's layout, or `shared`'s where it already has that layout.
void place_weights(Variant& v, const dnnl::memory::desc& wanted, const dnnl::memory::desc& user_md, const float* weight,
                   const float* bias, std::int64_t out_channels, const Variant* shared) {
  const dnnl::engine& eng = cpu_engine();
  if (shared != nullptr && shared->weights && shared->weights.get_desc() == wanted) {
    v.weights = shared->weights;  // a reference-counted handle: shared, not copied
    v.bias = shared->bias;
    return;
  }
  dnnl::stream stream(eng);
  dnnl::memory user_w(user_md, eng, const_cast<float*>(weight));  // NOLINT(cppcoreguidelines-pro-type-const-cast): read only
  v.weights = dnnl::memory(wanted, eng);
  dnnl::reorder(user_w, v.weights).execute(stream, user_w, v.weights);
  stream.wait();
  if (bias != nullptr) {
    v.bias = dnnl::memory({{out_channels}, Dt::f32, Tag::a}, eng);
    std::memcpy(v.bias.get_data_handle(), bias, static_cast<std::size_t>(out_channels) * sizeof(float));
  }
}

}  // namespace

void OneDnnConv::Impl::run(const Variant& x, const float* src, float* dst, const float* residual_data) const {
  thread_local Scratch scratch;
  thread_local dnnl::stream stream(cpu_engine());
  const dnnl::engine& eng = cpu_engine();
  Carve carve{static_cast<char*>(scratch.at_least(x.scratch_bytes() + 64))};
  // NOLINTBEGIN(cppcoreguidelines-pro-type-const-cast): oneDNN takes void* for inputs it only reads
  const dnnl::memory user_src(nhwc_src, eng, const_cast<float*>(src));
  const dnnl::memory user_dst(nhwc_dst, eng, dst);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_WEIGHTS, x.weights}};
  if (x.bias) args.emplace(DNNL_ARG_BIAS, x.bias);
  if (residual) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                 dnnl::memory(nhwc_dst, eng, const_cast<float*>(residual_data)));
  }
  // NOLINTEND(cppcoreguidelines-pro-type-const-cast)
  if (x.scratch_md.get_size() > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(x.scratch_md, eng, carve.take(x.scratch_md.get_size())));
  }
  if (!x.blocked()) {
    args.emplace(DNNL_ARG_SRC, user_src);
    args.emplace(DNNL_ARG_DST, user_dst);
    x.conv.execute(stream, args);
    stream.wait();
    return;
  }
  const dnnl::memory bsrc(x.src_md, eng, carve.take(x.src_md.get_size()));
  const dnnl::memory bdst(x.dst_md, eng, carve.take(x.dst_md.get_size()));
  void* reorder_scratch = carve.take(std::max(x.to_scratch_md.get_size(), x.from_scratch_md.get_size()));
  const auto reorder = [&](const dnnl::reorder& r, const dnnl::memory::desc& md, const dnnl::memory& from,
                           const dnnl::memory& to) {
    std::unordered_map<int, dnnl::memory> a{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    if (md.get_size() > 0) a.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(md, eng, reorder_scratch));
    r.execute(stream, a);
  };
  reorder(x.to_blocked, x.to_scratch_md, user_src, bsrc);
  args.emplace(DNNL_ARG_SRC, bsrc);
  args.emplace(DNNL_ARG_DST, bdst);
  x.conv.execute(stream, args);
  reorder(x.from_blocked, x.from_scratch_md, bdst, user_dst);
  stream.wait();
}

std::string OneDnnConv::unavailable() { return ""; }

OneDnnConv::OneDnnConv(const ConvGeometry& geometry, const float* weight, const float* bias, const ConvOptions& options)
    : impl_(std::make_unique<Impl>()) {
  check_geometry(geometry);
  HOTPATH_CHECK(weight != nullptr, "onednn conv: no weight");
  Impl& m = *impl_;
  m.g = geometry;
  m.residual = options.residual;
  const ConvGeometry& g = geometry;
  using Dims = dnnl::memory::dims;
  const Dims src{g.batch, g.in_channels, g.height, g.width};
  const Dims dst{g.batch, g.out_channels, g.out_height(), g.out_width()};
  const bool grouped = g.groups > 1;
  const Dims wdims = grouped ? Dims{g.groups, g.out_channels / g.groups, g.in_channels / g.groups, g.kernel_h,
                                    g.kernel_w}
                             : Dims{g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
  const Impl* shared = options.same_weights != nullptr ? options.same_weights->impl_.get() : nullptr;
  const bool winograd_shape = g.kernel_h == 3 && g.kernel_w == 3 && g.stride == std::array<std::int64_t, 2>{1, 1} &&
                              g.dilation == std::array<std::int64_t, 2>{1, 1} && g.groups == 1 && !options.residual;
  try {
    const dnnl::engine& eng = cpu_engine();
    m.nhwc_src = dnnl::memory::desc(src, Dt::f32, Tag::nhwc);
    m.nhwc_dst = dnnl::memory::desc(dst, Dt::f32, Tag::nhwc);
    const dnnl::memory::desc w_any(wdims, Dt::f32, Tag::any);
    const dnnl::memory::desc user_w(wdims, Dt::f32, grouped ? Tag::goihw : Tag::oihw);
    const dnnl::memory::desc b_md({g.out_channels}, Dt::f32, Tag::a);
    dnnl::post_ops po;
    if (options.residual) po.append_binary(dnnl::algorithm::binary_add, m.nhwc_dst);
    append_activation(po, options.activation);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const Dims strides{g.stride[0], g.stride[1]};
    const Dims dilates{g.dilation[0] - 1, g.dilation[1] - 1};  // oneDNN counts dilation from 0
    const Dims pad_l{g.padding[0], g.padding[1]};
    const Dims pad_r{g.padding[2], g.padding[3]};
    // A primitive_desc's implementation iterator points into its op desc: the desc must outlive next_impl().
    const auto make_desc = [&](dnnl::algorithm alg, const dnnl::memory::desc& s, const dnnl::memory::desc& d) {
      return bias != nullptr ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, s, w_any,
                                                               b_md, d, strides, dilates, pad_l, pad_r)
                             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, s, w_any, d,
                                                               strides, dilates, pad_l, pad_r);
    };

    // Direct: NHWC in and out.
    const bool want_winograd =
        winograd_shape && (options.algorithm == ConvAlgorithm::kWinograd ||
                           (options.algorithm == ConvAlgorithm::kAuto && g.out_height() * g.out_width() >= kWinogradMinPlane));
    std::optional<Variant> direct;
    if (options.algorithm != ConvAlgorithm::kWinograd) {
      const auto desc = make_desc(dnnl::algorithm::convolution_direct, m.nhwc_src, m.nhwc_dst);
      dnnl::convolution_forward::primitive_desc pd(desc, attr, eng);
      // GEMM-based and reference implementations are skipped (onednn_common.h): such a conv keeps ATen's path
      // (the engine catches this error).
      while (!usable(pd.impl_info_str()) && pd.next_impl()) {
      }
      HOTPATH_CHECK(usable(pd.impl_info_str()), "onednn conv: no direct kernel for ", conv_name(g),
                    " here: oneDNN offers ", pd.impl_info_str());
      Variant& v = direct.emplace();
      v.implementation = pd.impl_info_str();
      v.src_md = m.nhwc_src;
      v.dst_md = m.nhwc_dst;
      v.scratch_md = pd.scratchpad_desc();
      v.conv = dnnl::convolution_forward(pd);
      place_weights(v, pd.weights_desc(), user_w, weight, bias, g.out_channels,
                    shared != nullptr && !shared->v.blocked() ? &shared->v : nullptr);
    }

    // Winograd: nChw16c in and out, reordered around it.
    std::optional<Variant> wino;
    if (want_winograd) {
      const dnnl::memory::desc bsrc(src, Dt::f32, Tag::nChw16c);
      const dnnl::memory::desc bdst(dst, Dt::f32, Tag::nChw16c);
      const auto desc = make_desc(dnnl::algorithm::convolution_winograd, bsrc, bdst);
      std::optional<dnnl::convolution_forward::primitive_desc> pd;
      try {
        pd.emplace(desc, attr, eng);
      } catch (const dnnl::error&) {  // no Winograd kernel on this CPU or for this shape
      }
      if (pd && usable(pd->impl_info_str())) {
        Variant& v = wino.emplace();
        v.implementation = pd->impl_info_str();
        v.src_md = bsrc;
        v.dst_md = bdst;
        v.scratch_md = pd->scratchpad_desc();
        v.conv = dnnl::convolution_forward(*pd);
        dnnl::primitive_attr rattr;
        rattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        const dnnl::reorder::primitive_desc to(eng, m.nhwc_src, eng, bsrc, rattr);
        const dnnl::reorder::primitive_desc from(eng, bdst, eng, m.nhwc_dst, rattr);
        v.to_scratch_md = to.scratchpad_desc();
        v.from_scratch_md = from.scratchpad_desc();
        v.to_blocked = dnnl::reorder(to);
        v.from_blocked = dnnl::reorder(from);
        place_weights(v, pd->weights_desc(), user_w, weight, bias, g.out_channels,
                      shared != nullptr && shared->v.blocked() ? &shared->v : nullptr);
      }
    }
    HOTPATH_CHECK(direct || wino, "onednn conv: no Winograd kernel for ", conv_name(g), " here");

    m.v = std::move(wino ? *wino : *direct);
    m.implementation = m.v.implementation;
  } catch (const dnnl::error& e) {
    throw Error("onednn conv: oneDNN refused " + conv_name(g) + ": " + e.what());
  }
}

void OneDnnConv::run(const float* src, float* dst, const float* residual) const {
  const Impl& m = *impl_;
  HOTPATH_CHECK(src != nullptr && dst != nullptr, "onednn conv: null source or destination");
  HOTPATH_CHECK((residual != nullptr) == m.residual, "onednn conv: built ", m.residual ? "with" : "without",
                " a residual input, run ", residual != nullptr ? "with" : "without", " one");
  try {
    m.run(m.v, src, dst, residual);
  } catch (const dnnl::error& e) {
    throw Error("onednn conv: " + m.implementation + " failed on " + conv_name(m.g) +
                (m.residual ? " with a residual" : "") + ": " + e.what());
  }
}

bool OneDnnConv::winograd() const { return impl_->v.blocked(); }

#else  // built without Debian's libdnnl-dev

struct OneDnnConv::Impl {
  ConvGeometry g;
  std::string implementation;
};

bool OneDnnConv::winograd() const { return false; }

std::string OneDnnConv::unavailable() {
  return "built without oneDNN's library (Debian libdnnl-dev): convs run ATen's mkldnn op";
}

OneDnnConv::OneDnnConv(const ConvGeometry& geometry, const float* /*weight*/, const float* /*bias*/,
                       const ConvOptions& /*options*/) {
  check_geometry(geometry);
  throw Error("onednn conv: " + unavailable());
}

void OneDnnConv::run(const float* /*src*/, float* /*dst*/, const float* /*residual*/) const {
  throw Error("onednn conv: " + unavailable());
}

#endif

OneDnnConv::OneDnnConv(OneDnnConv&&) noexcept = default;
OneDnnConv& OneDnnConv::operator=(OneDnnConv&&) noexcept = default;
OneDnnConv::~OneDnnConv() = default;

const ConvGeometry& OneDnnConv::geometry() const { return impl_->g; }
const std::string& OneDnnConv::implementation() const { return impl_->implementation; }

}  // namespace hotpath::ops
