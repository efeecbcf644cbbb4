#include "hotpath/models/text/longformer.h"

#include <ATen/core/List.h>
#include <ATen/ops/zeros.h>

#include <optional>

#include "hotpath/core/error.h"
#include "hotpath/ops/sliding_attention.h"

namespace hotpath::models {
namespace {

// Advanced indexing by two index tensors: x[a, b].
c10::List<std::optional<at::Tensor>> index_pair(const at::Tensor& a, const at::Tensor& b) {
  c10::List<std::optional<at::Tensor>> list;
  list.push_back(a);
  list.push_back(b);
  return list;
}

}  // namespace

LongformerSelfAttentionImpl::LongformerSelfAttentionImpl(const formats::BertConfig& config, std::int64_t window)
    : torch::nn::Module("LongformerSelfAttention"), heads_(config.num_attention_heads), window_(window) {
  HOTPATH_CHECK(window >= 0, "LongformerSelfAttention: window must be >= 0, got ", window);
  const std::int64_t h = config.hidden_size;
  query = register_module("query", LoraLinear(h, h));
  key = register_module("key", LoraLinear(h, h));
  value = register_module("value", LoraLinear(h, h));
  query_global = register_module("query_global", LoraLinear(h, h));
  key_global = register_module("key_global", LoraLinear(h, h));
  value_global = register_module("value_global", LoraLinear(h, h));
}

at::Tensor LongformerSelfAttentionImpl::forward(const at::Tensor& hidden, const at::Tensor& roles,
                                                const ops::AttentionDropout& global_dropout,
                                                const ops::DropoutSource& dropout, std::uint64_t first_site) {
  HOTPATH_CHECK(hidden.dim() == 3, "LongformerSelfAttention: hidden must be [batch, length, hidden], got ",
                hidden.sizes());
  const std::int64_t b = hidden.size(0), l = hidden.size(1), width = hidden.size(2), d = width / heads_;
  const auto project = [&](LoraLinear& linear, const at::Tensor& x, std::uint64_t site) {
    return linear->forward(x, dropout, first_site + site);
  };
  const auto split = [&](const at::Tensor& x) { return x.view({b, x.size(1), heads_, d}).transpose(1, 2); };
  // Local: every token over its window and the global tokens.
  at::Tensor context = ops::sliding_window_attention(split(project(query, hidden, 3)), split(project(key, hidden, 4)),
                                                     split(project(value, hidden, 5)), window_, roles, kernel_)
                           .transpose(1, 2)
                           .reshape({b, l, width});
  const at::Tensor is_global = roles.eq(2);
  if (!is_global.any().item<bool>()) return context;
  // Global rows (_compute_global_attn_output_from_hidden): slot s of row r holds its s-th global token; rows
  // with fewer global tokens pad their slots with zeros, whose outputs are dropped.
  const at::Tensor where = is_global.nonzero();  // [N, 2]: (row, position)
  const at::Tensor row = where.select(1, 0), pos = where.select(1, 1);
  const at::Tensor slot = (is_global.to(at::kLong).cumsum(1) - 1).index(index_pair(row, pos));
  const std::int64_t slots = is_global.sum(1).max().item<std::int64_t>();
  const at::Tensor global_hidden = at::zeros({b, slots, width}, hidden.options())
                                       .index_put(index_pair(row, slot), hidden.index(index_pair(row, pos)));
  const at::Tensor global_context =
      ops::attention(split(project(query_global, global_hidden, 9)), split(project(key_global, hidden, 10)),
                     split(project(value_global, hidden, 11)), roles.ne(0), ops::AttentionKernel::kAuto, global_dropout)
          .transpose(1, 2)
          .reshape({b, slots, width});
  return context.index_put(index_pair(row, pos), global_context.index(index_pair(row, slot)).to(context.scalar_type()));
}

}  // namespace hotpath::models
