// TextBatch → at::Tensor: shapes, dtypes, values, and that the tensors own their memory.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <memory>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/text/text_batch_tensor.h"

namespace hotpath::text {
namespace {

TEST(TextBatchTensor, CopiesShapesDtypesAndValues) {
  at::set_num_threads(1);
  TextCorpus corpus;
  const std::vector<std::int32_t> a = {2, 7, 3};
  const std::vector<std::int32_t> b = {2, 9, 9, 9, 3};
  corpus.add(a, {}, 1);
  corpus.add(b, {}, 4);
  const std::vector<std::uint32_t> rows = {0, 1};
  auto batch = std::make_unique<TextBatch>(collate(corpus, rows, {.pad_to_multiple_of = 4}, 0));
  const TextBatchTensors t = to_tensors(*batch);
  batch.reset();  // the tensors must not point into the batch
  EXPECT_EQ(t.input_ids.sizes(), (std::vector<std::int64_t>{2, 8}));
  EXPECT_EQ(t.input_ids.scalar_type(), at::kLong);
  EXPECT_EQ(t.input_ids[0][1].item<std::int64_t>(), 7);
  EXPECT_EQ(t.input_ids[0][3].item<std::int64_t>(), 0);
  EXPECT_EQ(t.attention_mask.sum().item<std::int64_t>(), 8);
  EXPECT_EQ(t.token_type_ids.sum().item<std::int64_t>(), 0);
  EXPECT_EQ(t.labels[1].item<std::int64_t>(), 4);
  const std::vector<std::uint32_t> one = {1};
  EXPECT_EQ(to_tensors(collate(corpus, one, {}, 0), at::kInt).input_ids.scalar_type(), at::kInt);
}

std::vector<std::int64_t> values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous().to(at::kLong);
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

Encoding encoding(std::vector<std::int32_t> ids, std::int32_t type) {
  Encoding e;
  e.type_ids.assign(ids.size(), type);
  e.attention_mask.assign(ids.size(), 1);
  e.ids = std::move(ids);
  return e;
}

// Unpadded encodings of several lengths → [N, longest] int64, each row's tokens then pad_id, mask 0, type 0: what
// the tokenizer's own Padding::kLongest gives, for the classifiers, the server and export's calibration.
TEST(TextBatchTensor, PaddedTensorsPadEachRowToTheLongestWithThePadId) {
  const std::vector<Encoding> enc = {encoding({101, 7, 102}, 0), encoding({101, 9, 9, 9, 102}, 1), encoding({}, 0)};
  const TextBatchTensors t = to_padded_tensors(enc, /*pad_id=*/5);
  EXPECT_EQ(t.input_ids.sizes(), (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(t.input_ids.scalar_type(), at::kLong);
  EXPECT_EQ(values(t.input_ids), (std::vector<std::int64_t>{101, 7, 102, 5, 5, 101, 9, 9, 9, 102, 5, 5, 5, 5, 5}));
  EXPECT_EQ(values(t.attention_mask.sum(1)), (std::vector<std::int64_t>{3, 5, 0}));
  EXPECT_EQ(values(t.token_type_ids.sum(1)), (std::vector<std::int64_t>{0, 5, 0}));
  EXPECT_FALSE(t.labels.defined());
}

// The rows of a batch picked in any order, written into buffers the caller reuses (SentenceEncoder's); a row
// longer than the batch's length is refused naming it, never written past the buffer.
TEST(TextBatchTensor, PaddedRowsGoWhereTheCallerSaysAndNeverPastTheLength) {
  const std::vector<Encoding> enc = {encoding({1, 2}, 0), encoding({3, 4, 5}, 0)};
  std::vector<std::int64_t> ids(6, -1), mask(6, -1), types(6, -1);
  write_padded_rows(enc, {1, 0}, 3, 0, ids.data(), mask.data(), types.data());
  EXPECT_EQ(ids, (std::vector<std::int64_t>{3, 4, 5, 1, 2, 0}));
  EXPECT_EQ(mask, (std::vector<std::int64_t>{1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(types, (std::vector<std::int64_t>{0, 0, 0, 0, 0, 0}));
  EXPECT_THROW(write_padded_rows(enc, {1}, 2, 0, ids.data(), mask.data(), types.data()), hotpath::Error);
}

}  // namespace
}  // namespace hotpath::text
