// hotpath/text/text_batch_tensor.h — a TextBatch as at::Tensors (header-only, so hotpath_text
// stays torch-free; include it only from code that links LibTorch).
//
//   std::optional<TextBatch> b = loader.next();
//   TextBatchTensors t = to_tensors(*b);             // [B, L] int64 (BERT's embedding lookups take int64)
//   auto logits = model(t.input_ids, t.attention_mask, t.token_type_ids);
//   TextBatchTensors u = to_padded_tensors(tokenizer.encode_batch(texts, {.max_length = 128}), tokenizer.pad_id());
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstddef>
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

// The one texts → model inputs step (the classifiers, the server, export's calibration, embeddings): rows `rows`
// of `encodings`, each at most `length` tokens, written as [rows.size(), length] int64 into `ids`, `mask` and
// `types` (each holding at least that many elements), padded with `pad_id` (mask 0, type 0).
inline void write_padded_rows(const std::vector<Encoding>& encodings, const std::vector<std::size_t>& rows,
                              std::int64_t length, std::int64_t pad_id, std::int64_t* ids, std::int64_t* mask,
                              std::int64_t* types) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Encoding& e = encodings[rows[i]];
    const auto n = static_cast<std::int64_t>(e.size());
    HOTPATH_CHECK(n <= length, "text batch: row ", rows[i], " has ", n, " tokens, more than the batch's ", length);
    std::int64_t* id = ids + static_cast<std::int64_t>(i) * length;
    std::int64_t* m = mask + static_cast<std::int64_t>(i) * length;
    std::int64_t* t = types + static_cast<std::int64_t>(i) * length;
    for (std::int64_t j = 0; j < n; ++j) {
      id[j] = e.ids[static_cast<std::size_t>(j)];
      m[j] = e.attention_mask[static_cast<std::size_t>(j)];
      t[j] = e.type_ids[static_cast<std::size_t>(j)];
    }
    std::fill(id + n, id + length, pad_id);
    std::fill(m + n, m + length, 0);
    std::fill(t + n, t + length, 0);
  }
}

// `encodings` in order → fresh [N, L] int64 tensors, L = the longest row, shorter rows padded with `pad_id`
// (Tokenizer::pad_id()); labels stay undefined.
inline TextBatchTensors to_padded_tensors(const std::vector<Encoding>& encodings, std::int64_t pad_id) {
  const auto n = static_cast<std::int64_t>(encodings.size());
  std::int64_t length = 0;
  for (const Encoding& e : encodings) length = std::max<std::int64_t>(length, static_cast<std::int64_t>(e.size()));
  TextBatchTensors t{at::empty({n, length}, at::kLong), at::empty({n, length}, at::kLong),
                     at::empty({n, length}, at::kLong), {}};
  std::vector<std::size_t> rows(encodings.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  write_padded_rows(encodings, rows, length, pad_id, t.input_ids.data_ptr<std::int64_t>(),
                    t.attention_mask.data_ptr<std::int64_t>(), t.token_type_ids.data_ptr<std::int64_t>());
  return t;
}

}  // namespace hotpath::text
