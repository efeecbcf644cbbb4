// TextBatch → at::Tensor: shapes, dtypes, values, and that the tensors own their memory.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <memory>
#include <vector>

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

}  // namespace
}  // namespace hotpath::text
