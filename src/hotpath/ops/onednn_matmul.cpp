// int8 matmul through Debian's libdnnl (oneDNN v2) on its brgemm kernels (AMX or AVX512_VNNI).
// See include/hotpath/ops/onednn_matmul.h.
#include "hotpath/ops/onednn_matmul.h"

#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"

#ifdef HOTPATH_HAVE_ONEDNN
#include "onednn_common.h"
#endif

namespace hotpath::ops {

namespace {

std::string product_name(std::int64_t k, std::int64_t n) {
  return "the int8 product of " + std::to_string(k) + " -> " + std::to_string(n);
}

}  // namespace

#ifdef HOTPATH_HAVE_ONEDNN

namespace {

using Tag = dnnl::memory::format_tag;
using Dt = dnnl::memory::data_type;

// The row count the constructor probes for a brgemm kernel with (any count gets the same implementation).
constexpr std::int64_t kProbeRows = 128;

// oneDNN's brgemm int8 kernels with an int8 dot product instruction: AMX's tiles or AVX512_VNNI's vpdpbusd. (Its
// brgemm without VNNI, and the GEMM and reference implementations, are left to the caller's product.)
bool brgemm_int8(const std::string& impl) {
  return onednn::usable_implementation(impl) && impl.rfind("brg:", 0) == 0 &&
         (impl.find("amx") != std::string::npos || impl.find("vnni") != std::string::npos);
}

}  // namespace

struct OneDnnInt8Matmul::Impl {
  std::int64_t k = 0, n = 0;
  const std::int8_t* weight_kn = nullptr;  // the caller's weight (it outlives this), for reorders into a layout
  mutable std::string implementation;  // the first primitive's (set once, in the constructor)

  struct Primitive {
    dnnl::matmul matmul;
    dnnl::memory weights;  // in this primitive's layout (a handle shared with the other row counts' where equal)
    dnnl::memory::desc src, dst, scratch;
  };
  mutable std::mutex mu;
  mutable std::map<std::int64_t, Primitive> by_rows;
  mutable std::vector<dnnl::memory> layouts;  // the weight in each layout made so far

  // The primitive for m rows (an empty one where oneDNN has no brgemm kernel for m rows); nullptr when there are
  // kMaxRowCounts already. Called with mu held.
  const Primitive* primitive(std::int64_t m) const;
};

const OneDnnInt8Matmul::Impl::Primitive* OneDnnInt8Matmul::Impl::primitive(std::int64_t m) const {
  if (const auto it = by_rows.find(m); it != by_rows.end()) return &it->second;
  if (by_rows.size() >= static_cast<std::size_t>(kMaxRowCounts)) return nullptr;
  const dnnl::engine& eng = onednn::cpu_engine();
  Primitive p;
  p.src = dnnl::memory::desc({m, k}, Dt::s8, Tag::ab);
  p.dst = dnnl::memory::desc({m, n}, Dt::s32, Tag::ab);
  const dnnl::memory::desc w_any({k, n}, Dt::s8, Tag::any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // A primitive_desc's implementation iterator points into its op desc: the desc must outlive next_impl().
  const dnnl::matmul::desc desc(p.src, w_any, p.dst);
  dnnl::matmul::primitive_desc pd(desc, attr, eng);
  while (!brgemm_int8(pd.impl_info_str()) && pd.next_impl()) {
  }
  const std::string impl = pd.impl_info_str();
  if (!brgemm_int8(impl)) {
    // Refused for this row count (AMX has no kernel for very few rows: oneDNN 2.6 offers only its reference one
    // for 2 rows): remembered, so the caller's own product runs without asking again. The constructor throws.
    HOTPATH_CHECK(!implementation.empty(), "onednn int8 matmul: no brgemm (AMX or VNNI) kernel for ",
                  product_name(k, n), " at ", m, " rows here: oneDNN offers ", impl);
    return &by_rows.emplace(m, Primitive{}).first->second;
  }
  if (implementation.empty()) implementation = impl;
  p.matmul = dnnl::matmul(pd);
  p.scratch = pd.scratchpad_desc();
  const dnnl::memory::desc wanted = pd.weights_desc();
  for (const dnnl::memory& w : layouts) {
    if (w.get_desc() == wanted) p.weights = w;  // a reference-counted handle: shared, not copied
  }
  if (!p.weights) {
    dnnl::stream stream(eng);
    dnnl::memory user({{k, n}, Dt::s8, Tag::ab}, eng,
                      const_cast<std::int8_t*>(weight_kn));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    p.weights = dnnl::memory(wanted, eng);
    dnnl::reorder(user, p.weights).execute(stream, user, p.weights);
    stream.wait();
    layouts.push_back(p.weights);
  }
  return &by_rows.emplace(m, std::move(p)).first->second;
}

std::string OneDnnInt8Matmul::unavailable() { return ""; }

OneDnnInt8Matmul::OneDnnInt8Matmul(std::int64_t k, std::int64_t n, const std::int8_t* weight_kn)
    : impl_(std::make_unique<Impl>()) {
  HOTPATH_CHECK(k > 0 && n > 0, "onednn int8 matmul: k and n must be positive, got ", k, " and ", n);
  HOTPATH_CHECK(weight_kn != nullptr, "onednn int8 matmul: no weight");
  Impl& m = *impl_;
  m.k = k;
  m.n = n;
  m.weight_kn = weight_kn;
  try {
    const std::lock_guard<std::mutex> lock(m.mu);
    m.primitive(kProbeRows);  // refuses here when there is no brgemm kernel
  } catch (const dnnl::error& e) {
    throw Error("onednn int8 matmul: oneDNN refused " + product_name(k, n) + ": " + e.what());
  }
}

bool OneDnnInt8Matmul::try_run(const std::int8_t* a, std::int64_t m, std::int32_t* c) const {
  const Impl& x = *impl_;
  HOTPATH_CHECK(a != nullptr && c != nullptr, "onednn int8 matmul: null input or output");
  HOTPATH_CHECK(m > 0, "onednn int8 matmul: rows must be positive, got ", m);
  thread_local onednn::Scratch scratch;
  thread_local dnnl::stream stream(onednn::cpu_engine());
  try {
    Impl::Primitive p;
    {
      const std::lock_guard<std::mutex> lock(x.mu);
      const Impl::Primitive* found = x.primitive(m);
      if (found == nullptr || !found->matmul) return false;
      p = *found;  // handles: reference counts, no copies of the kernel or the weight
    }
    const dnnl::engine& eng = onednn::cpu_engine();
    // NOLINTBEGIN(cppcoreguidelines-pro-type-const-cast): oneDNN takes void* for inputs it only reads
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(p.src, eng, const_cast<std::int8_t*>(a))},
                                               {DNNL_ARG_WEIGHTS, p.weights},
                                               {DNNL_ARG_DST, dnnl::memory(p.dst, eng, c)}};
    // NOLINTEND(cppcoreguidelines-pro-type-const-cast)
    if (p.scratch.get_size() > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch, eng, scratch.at_least(p.scratch.get_size())));
    }
    p.matmul.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error("onednn int8 matmul: " + x.implementation + " failed on " + product_name(x.k, x.n) + " at " +
                std::to_string(m) + " rows: " + e.what());
  }
  return true;
}

#else  // built without Debian's libdnnl-dev

struct OneDnnInt8Matmul::Impl {
  std::int64_t k = 0, n = 0;
  std::string implementation;
};

std::string OneDnnInt8Matmul::unavailable() {
  return "built without oneDNN's library (Debian libdnnl-dev): int8 products run at::_int_mm or int8_gemm";
}

OneDnnInt8Matmul::OneDnnInt8Matmul(std::int64_t k, std::int64_t n, const std::int8_t* /*weight_kn*/) {
  throw Error("onednn int8 matmul: " + product_name(k, n) + ": " + unavailable());
}

bool OneDnnInt8Matmul::try_run(const std::int8_t* /*a*/, std::int64_t /*m*/, std::int32_t* /*c*/) const {
  throw Error("onednn int8 matmul: " + unavailable());
}

#endif

OneDnnInt8Matmul::OneDnnInt8Matmul(OneDnnInt8Matmul&&) noexcept = default;
OneDnnInt8Matmul& OneDnnInt8Matmul::operator=(OneDnnInt8Matmul&&) noexcept = default;
OneDnnInt8Matmul::~OneDnnInt8Matmul() = default;

std::int64_t OneDnnInt8Matmul::k() const { return impl_->k; }
std::int64_t OneDnnInt8Matmul::n() const { return impl_->n; }
const std::string& OneDnnInt8Matmul::implementation() const { return impl_->implementation; }

}  // namespace hotpath::ops
