#include "buffer_plan.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::infer::detail {
namespace {

constexpr std::int64_t kAlign = 64;  // what c10's CPU allocator gives: kernels see the same alignment

std::int64_t align_up(std::int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

TensorSpec TensorSpec::of(const at::Tensor& t) {
  TensorSpec s;
  s.sizes.assign(t.sizes().begin(), t.sizes().end());
  s.strides.assign(t.strides().begin(), t.strides().end());
  s.dtype = t.scalar_type();
  return s;
}

std::int64_t TensorSpec::bytes() const {
  std::int64_t span = 1;  // elements from the first to one past the last
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    span += (sizes[d] - 1) * strides[d];
  }
  return span * static_cast<std::int64_t>(c10::elementSize(dtype));
}

BufferAssignment assign_buffers(const std::vector<Lifetime>& lifetimes) {
  BufferAssignment a;
  a.buffer.assign(lifetimes.size(), -1);
  std::vector<std::size_t> order(lifetimes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return lifetimes[x].first < lifetimes[y].first; });
  struct Buffer {
    std::int64_t bytes = 0;
    std::size_t busy_until = 0;  // last step of its latest tenant
    bool used = false;
  };
  std::vector<Buffer> buffers;
  for (const std::size_t i : order) {
    const Lifetime& l = lifetimes[i];
    HOTPATH_ASSERT(l.first <= l.last && l.bytes >= 0);
    int best = -1;
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      const Buffer& buf = buffers[b];
      if (buf.used && buf.busy_until >= l.first) continue;  // still holds a live tensor
      if (best < 0) {
        best = static_cast<int>(b);
        continue;
      }
      const Buffer& cur = buffers[static_cast<std::size_t>(best)];
      const bool fits = buf.bytes >= l.bytes;
      const bool cur_fits = cur.bytes >= l.bytes;
      // Prefer the smallest that fits; failing that, the largest (least growth).
      if ((fits && (!cur_fits || buf.bytes < cur.bytes)) || (!fits && !cur_fits && buf.bytes > cur.bytes)) {
        best = static_cast<int>(b);
      }
    }
    if (best < 0) {
      buffers.emplace_back();
      best = static_cast<int>(buffers.size() - 1);
    }
    Buffer& buf = buffers[static_cast<std::size_t>(best)];
    buf.bytes = std::max(buf.bytes, align_up(l.bytes));
    buf.busy_until = l.last;
    buf.used = true;
    a.buffer[i] = best;
  }
  std::vector<std::int64_t> base(buffers.size(), 0);
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    base[b] = a.arena_bytes;
    a.arena_bytes += buffers[b].bytes;
  }
  a.offsets.resize(lifetimes.size());
  for (std::size_t i = 0; i < lifetimes.size(); ++i) a.offsets[i] = base[static_cast<std::size_t>(a.buffer[i])];
  a.buffers = static_cast<int>(buffers.size());
  return a;
}

ArenaPool::ArenaPool(std::vector<TensorSpec> specs, std::vector<std::int64_t> offsets, std::int64_t arena_bytes)
    : specs_(std::move(specs)), offsets_(std::move(offsets)), arena_bytes_(arena_bytes) {
  HOTPATH_ASSERT(specs_.size() == offsets_.size());
}

std::unique_ptr<Arena> ArenaPool::acquire() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<Arena> a = std::move(idle_.back());
      idle_.pop_back();
      return a;
    }
    ++made_;
  }
  auto a = std::make_unique<Arena>();
  a->storage = at::empty({std::max<std::int64_t>(arena_bytes_, 1)}, at::TensorOptions().dtype(at::kByte));
  a->views.resize(specs_.size());
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const TensorSpec& s = specs_[i];
    const std::int64_t bytes = s.bytes();
    if (offsets_[i] < 0 || bytes == 0) continue;
    const auto elt = static_cast<std::int64_t>(c10::elementSize(s.dtype));
    HOTPATH_ASSERT(offsets_[i] + bytes <= arena_bytes_ && bytes % elt == 0);
    a->views[i] = a->storage.narrow(0, offsets_[i], bytes)
                      .view(s.dtype)
                      .as_strided(s.sizes, s.strides);
  }
  return a;
}

void ArenaPool::release(std::unique_ptr<Arena> arena) {
  if (!arena) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(arena));
}

std::size_t ArenaPool::arenas_made() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return made_;
}

}  // namespace hotpath::infer::detail
