// fp32 convolution through Debian's libdnnl (oneDNN v2), called directly. Torch-free on purpose: see
// include/hotpath/ops/onednn_conv.h for why.
#include "hotpath/ops/onednn_conv.h"

#include <cstring>
#include <new>
#include <unordered_map>
#include <utility>

#include "hotpath/core/error.h"

#ifdef HOTPATH_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace hotpath::ops {

std::int64_t ConvGeometry::out_height() const {
  return (height + padding[0] + padding[2] - dilation[0] * (kernel_h - 1) - 1) / stride[0] + 1;
}

std::int64_t ConvGeometry::out_width() const {
  return (width + padding[1] + padding[3] - dilation[1] * (kernel_w - 1) - 1) / stride[1] + 1;
}

namespace {

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

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A user-mode scratchpad per calling thread, grown to the largest primitive it has run.
struct Scratch {
  struct Free {
    void operator()(void* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<void, Free> data;
  std::size_t bytes = 0;

  void* at_least(std::size_t n) {
    if (n > bytes) {
      data.reset(::operator new(n, std::align_val_t{64}));
      bytes = n;
    }
    return data.get();
  }
};

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

struct OneDnnConv::Impl {
  ConvGeometry g;
  bool residual = false;
  std::string implementation;
  dnnl::memory::desc src_md, dst_md, scratch_md;
  dnnl::memory weights, bias;  // in the primitive's layout, owned
  dnnl::convolution_forward conv;
  std::size_t scratch_bytes = 0;
};

std::string OneDnnConv::unavailable() { return ""; }

OneDnnConv::OneDnnConv(const ConvGeometry& geometry, const float* weight, const float* bias,
                       ConvActivation activation, bool residual, const OneDnnConv* same_weights)
    : impl_(std::make_unique<Impl>()) {
  check_geometry(geometry);
  HOTPATH_CHECK(weight != nullptr, "onednn conv: no weight");
  Impl& m = *impl_;
  m.g = geometry;
  m.residual = residual;
  const ConvGeometry& g = geometry;
  using Dims = dnnl::memory::dims;
  const Dims src{g.batch, g.in_channels, g.height, g.width};
  const Dims dst{g.batch, g.out_channels, g.out_height(), g.out_width()};
  const bool grouped = g.groups > 1;
  const Dims wdims = grouped ? Dims{g.groups, g.out_channels / g.groups, g.in_channels / g.groups, g.kernel_h,
                                    g.kernel_w}
                             : Dims{g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
  try {
    const dnnl::engine& eng = cpu_engine();
    m.src_md = dnnl::memory::desc(src, Dt::f32, Tag::nhwc);
    m.dst_md = dnnl::memory::desc(dst, Dt::f32, Tag::nhwc);
    const dnnl::memory::desc w_any(wdims, Dt::f32, Tag::any);
    const dnnl::memory::desc b_md({g.out_channels}, Dt::f32, Tag::a);
    dnnl::post_ops po;
    if (residual) po.append_binary(dnnl::algorithm::binary_add, m.dst_md);
    append_activation(po, activation);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const Dims strides{g.stride[0], g.stride[1]};
    const Dims dilates{g.dilation[0] - 1, g.dilation[1] - 1};  // oneDNN counts dilation from 0
    const Dims pad_l{g.padding[0], g.padding[1]};
    const Dims pad_r{g.padding[2], g.padding[3]};
    const auto desc = bias != nullptr
                          ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                            dnnl::algorithm::convolution_direct, m.src_md, w_any,
                                                            b_md, m.dst_md, strides, dilates, pad_l, pad_r)
                          : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                            dnnl::algorithm::convolution_direct, m.src_md, w_any,
                                                            m.dst_md, strides, dilates, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, eng);
    // Debian's libdnnl and LibTorch's oneDNN both define the std::call_once thunks of their GEMM kernels'
    // jit_init() with vague linkage; in one process the dynamic linker binds libdnnl's to LibTorch's, so
    // libdnnl's GEMM kernels are never generated and every GEMM-based implementation fails to execute
    // (found with LD_DEBUG=bindings). So the GEMM-based ones are skipped, and so is the reference one (slow):
    // such a conv keeps ATen's path (the engine catches this error).
    const auto usable = [](const std::string& impl) {
      return impl.find("gemm:") == std::string::npos && impl.rfind("ref", 0) != 0;
    };
    while (!usable(pd.impl_info_str()) && pd.next_impl()) {
    }
    m.implementation = pd.impl_info_str();
    HOTPATH_CHECK(usable(m.implementation), "onednn conv: no direct kernel for a ", g.kernel_h, "x", g.kernel_w,
                  " conv of ", g.in_channels, " -> ", g.out_channels, " channels (groups ", g.groups,
                  ") here: oneDNN offers ", m.implementation);
    m.scratch_md = pd.scratchpad_desc();
    m.scratch_bytes = m.scratch_md.get_size();
    m.conv = dnnl::convolution_forward(pd);

    if (same_weights != nullptr && same_weights->impl_->weights &&
        same_weights->impl_->weights.get_desc() == pd.weights_desc()) {
      m.weights = same_weights->impl_->weights;  // a reference-counted handle: shared, not copied
      m.bias = same_weights->impl_->bias;
      return;
    }
    dnnl::stream stream(eng);
    const dnnl::memory user_w({wdims, Dt::f32, grouped ? Tag::goihw : Tag::oihw}, eng,
                              const_cast<float*>(weight));  // NOLINT(cppcoreguidelines-pro-type-const-cast): read only
    m.weights = dnnl::memory(pd.weights_desc(), eng);
    dnnl::reorder(user_w, m.weights).execute(stream, const_cast<dnnl::memory&>(user_w), m.weights);
    stream.wait();
    if (bias != nullptr) {
      m.bias = dnnl::memory(b_md, eng);
      std::memcpy(m.bias.get_data_handle(), bias, static_cast<std::size_t>(g.out_channels) * sizeof(float));
    }
  } catch (const dnnl::error& e) {
    throw Error("onednn conv: oneDNN refused a " + std::to_string(g.kernel_h) + "x" + std::to_string(g.kernel_w) +
                " conv of " + std::to_string(g.in_channels) + " -> " + std::to_string(g.out_channels) +
                " channels (groups " + std::to_string(g.groups) + "): " + e.what());
  }
}

void OneDnnConv::run(const float* src, float* dst, const float* residual) const {
  const Impl& m = *impl_;
  HOTPATH_CHECK(src != nullptr && dst != nullptr, "onednn conv: null source or destination");
  HOTPATH_CHECK((residual != nullptr) == m.residual, "onednn conv: built ", m.residual ? "with" : "without",
                " a residual input, run ", residual != nullptr ? "with" : "without", " one");
  thread_local Scratch scratch;
  thread_local dnnl::stream stream(cpu_engine());
  const dnnl::engine& eng = cpu_engine();
  // NOLINTBEGIN(cppcoreguidelines-pro-type-const-cast): oneDNN takes void* for inputs it only reads
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(m.src_md, eng, const_cast<float*>(src))},
      {DNNL_ARG_WEIGHTS, m.weights},
      {DNNL_ARG_DST, dnnl::memory(m.dst_md, eng, dst)}};
  if (m.bias) args.emplace(DNNL_ARG_BIAS, m.bias);
  if (m.residual) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                 dnnl::memory(m.dst_md, eng, const_cast<float*>(residual)));
  }
  // NOLINTEND(cppcoreguidelines-pro-type-const-cast)
  if (m.scratch_bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(m.scratch_md, eng, scratch.at_least(m.scratch_bytes)));
  }
  try {
    m.conv.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error("onednn conv: " + m.implementation + " failed on a " + std::to_string(m.g.kernel_h) + "x" +
                std::to_string(m.g.kernel_w) + " conv of " + std::to_string(m.g.in_channels) + " -> " +
                std::to_string(m.g.out_channels) + " channels (groups " + std::to_string(m.g.groups) +
                (m.residual ? ", residual" : "") + "): " + e.what());
  }
}

#else  // built without Debian's libdnnl-dev

struct OneDnnConv::Impl {
  ConvGeometry g;
  std::string implementation;
};

std::string OneDnnConv::unavailable() {
  return "built without oneDNN's library (Debian libdnnl-dev): convs run ATen's mkldnn op";
}

OneDnnConv::OneDnnConv(const ConvGeometry& geometry, const float* /*weight*/, const float* /*bias*/,
                       ConvActivation /*activation*/, bool /*residual*/, const OneDnnConv* /*same_weights*/) {
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
