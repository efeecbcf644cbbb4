// hotpath/text/text_batch_tensor.h — a TextBatch as at::Tensors (header-only, so hotpath_text
// stays torch-free; include it only from code that links LibTorch).
//
//   std::optional<TextBatch> b = loader.next();
//   TextBatchTensors t = to_tensors(*b);             // [B, L] int64 (BERT's embedding lookups take int64)
//   auto logits = model(t.input_ids, t.attention_mask, t.token_type_ids);
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "hotpath/text/text_loader.h"

namespace hotpath::text {

struct TextBatchTensors {
  at::Tensor input_ids;       // [B, L]
  at::Tensor attention_mask;  // [B, L]
  at::Tensor token_type_ids;  // [B, L]
  at::Tensor labels;          // [B] int64
};

// Copies out of `batch` (the tensors own their memory). `dtype`: at::kLong or at::kInt.
inline TextBatchTensors to_tensors(const TextBatch& batch, at::ScalarType dtype = at::kLong) {
  const std::vector<std::int64_t> shape{batch.batch_size, batch.length};
  const auto view = [&](const std::vector<std::int32_t>& v) {
    // from_blob never writes; the const_cast only satisfies its void* parameter.
    return at::from_blob(const_cast<std::int32_t*>(v.data()), shape, at::kInt).to(dtype, /*non_blocking=*/false, /*copy=*/true);
  };
  TextBatchTensors t{view(batch.input_ids), view(batch.attention_mask), view(batch.token_type_ids), {}};
  t.labels = at::from_blob(const_cast<std::int64_t*>(batch.labels.data()), {batch.batch_size}, at::kLong).clone();
  return t;
}

}  // namespace hotpath::text
