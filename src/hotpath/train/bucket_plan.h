// Private to train/: the gradient bucket layout that GradSync (DDP) and ZeroSync (ZeRO-2) share, so that
// both issue the same collectives in the same order on every rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hotpath::train {

// Splits `params` (already in flat order: reverse registration, the order backward produces gradients)
// into consecutive buckets: the first up to `first_bucket_bytes`, the others up to `bucket_bytes`, a new
// bucket wherever the dtype changes; a parameter larger than the cap is a bucket of its own. Returns
// each bucket's indices into `params`.
std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<at::Tensor>& params,
                                                   std::int64_t first_bucket_bytes, std::int64_t bucket_bytes);

}  // namespace hotpath::train
