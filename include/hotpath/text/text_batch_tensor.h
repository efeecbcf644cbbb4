// hotpath/text/text_batch_tensor.h — a TextBatch as at::Tensors (header-only, so hotpath_text
// stays torch-free; include it only from code that links LibTorch).
//
//   std::optional<TextBatch> b = loader.next();
//   TextBatchTensors t = to_tensors(*b);             // [B, L] int64 (BERT's embedding lookups take int64)
//   auto logits = model(t.input_ids, t.attention_mask, t.token_type_ids);
//   TextBatchTensors u = to_tensors(tokenizer.encode_batch(texts, {.padding = Padding::kLongest}));  // labels empty
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/text/text_loader.h"
#include "hotpath/text/tokenizer.h"

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

// Encodings of one length (encoded with padding, e.g. Padding::kLongest) → [N, L] tensors of `dtype`; labels
// stay undefined. The one texts → model inputs step of the predictors and the server.
inline TextBatchTensors to_tensors(const std::vector<Encoding>& encodings, at::ScalarType dtype = at::kLong) {
  const auto rows = static_cast<std::int64_t>(encodings.size());
  const auto length = rows == 0 ? std::int64_t{0} : static_cast<std::int64_t>(encodings.front().size());
  at::Tensor ids = at::empty({rows, length}, at::kInt), mask = at::empty({rows, length}, at::kInt),
             types = at::empty({rows, length}, at::kInt);
  const auto row_bytes = static_cast<std::size_t>(length) * sizeof(std::int32_t);
  for (std::int64_t r = 0; r < rows; ++r) {
    const Encoding& e = encodings[static_cast<std::size_t>(r)];
    HOTPATH_CHECK(static_cast<std::int64_t>(e.size()) == length, "text batch: row ", r, " has ", e.size(),
                  " tokens, row 0 has ", length, " (encode with padding)");
    std::memcpy(ids.data_ptr<std::int32_t>() + r * length, e.ids.data(), row_bytes);
    std::memcpy(mask.data_ptr<std::int32_t>() + r * length, e.attention_mask.data(), row_bytes);
    std::memcpy(types.data_ptr<std::int32_t>() + r * length, e.type_ids.data(), row_bytes);
  }
  return {ids.to(dtype), mask.to(dtype), types.to(dtype), {}};
}

}  // namespace hotpath::text
