// Private to infer/: the engine's per-shape buffer plan (engine.h, EngineOptions::plan_buffers). The first
// run of an input shape records every tensor a node asks for (its output, extra outputs, scratch) with its
// lifetime in steps; assign_buffers() packs them into one arena where two tensors share bytes only when
// their lifetimes do not overlap; later runs of that shape get views of an Arena instead of allocating.
// Plans are immutable once built; an Arena belongs to one run at a time (ArenaPool hands them out), so
// concurrent runs of one shape each hold their own.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace hotpath::infer::detail {

// A tensor's geometry as recorded: sizes, strides (elements), dtype.
struct TensorSpec {
  std::vector<std::int64_t> sizes, strides;
  at::ScalarType dtype = at::kFloat;

  static TensorSpec of(const at::Tensor& t);
  // Bytes from the first to one past the last element (the tensor is dense: no overlap, no gaps).
  [[nodiscard]] std::int64_t bytes() const;
};

// A tensor to place: its bytes and the steps [first, last] (inclusive) during which it is live.
struct Lifetime {
  std::int64_t bytes = 0;
  std::size_t first = 0, last = 0;
};

struct BufferAssignment {
  std::vector<std::int64_t> offsets;  // per lifetime: byte offset in the arena (64-byte aligned)
  std::vector<int> buffer;            // per lifetime: which buffer holds it
  std::int64_t arena_bytes = 0;
  int buffers = 0;
};

// Greedy by definition order: a tensor takes the smallest free buffer (free = its last tenant died before
// this tensor's first step) that is large enough, else the largest free one grown to fit, else a new
// buffer; buffers are laid out one after another. Two tensors whose step ranges overlap never share bytes.
BufferAssignment assign_buffers(const std::vector<Lifetime>& lifetimes);

// The memory of one plan for one run: a byte tensor and a view per planned tensor (undefined where the
// plan has none), indexed as the plan's specs.
struct Arena {
  at::Tensor storage;
  std::vector<at::Tensor> views;
};

// Arenas of one plan not in use; acquire() reuses one or makes one (storage of arena_bytes, views of the
// specs at their offsets), release() returns it. Thread-safe.
class ArenaPool {
 public:
  ArenaPool(std::vector<TensorSpec> specs, std::vector<std::int64_t> offsets, std::int64_t arena_bytes);
  [[nodiscard]] std::unique_ptr<Arena> acquire();
  void release(std::unique_ptr<Arena> arena);
  [[nodiscard]] std::int64_t arena_bytes() const { return arena_bytes_; }
  [[nodiscard]] std::size_t arenas_made() const;

 private:
  std::vector<TensorSpec> specs_;
  std::vector<std::int64_t> offsets_;  // -1: not planned
  std::int64_t arena_bytes_ = 0;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Arena>> idle_;
  std::size_t made_ = 0;
};

// RAII: an arena of `pool` for the lifetime of one run, returned on every exit path.
class ArenaLease {
 public:
  explicit ArenaLease(ArenaPool& pool) : pool_(&pool), arena_(pool.acquire()) {}
  ArenaLease(const ArenaLease&) = delete;
  ArenaLease& operator=(const ArenaLease&) = delete;
  ~ArenaLease() { pool_->release(std::move(arena_)); }
  [[nodiscard]] const Arena& arena() const { return *arena_; }

 private:
  ArenaPool* pool_;
  std::unique_ptr<Arena> arena_;
};

}  // namespace hotpath::infer::detail
