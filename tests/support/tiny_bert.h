// The tiny BERT / DistilBERT shape the engine tests lower and run (2 layers, hidden 32, 4 heads, vocab 50,
// 3 labels, no dropout, so a training model's forward is the reference the engine must match):
//
//   models::BertForSequenceClassification model(test::tiny_bert(formats::BertArch::kBert, 64));
#pragma once

#include <cstdint>

#include "hotpath/formats/bert_config.h"

namespace hotpath::test {

inline formats::BertConfig tiny_bert(formats::BertArch arch, std::int64_t max_position_embeddings) {
  formats::BertConfig c;
  c.arch = arch;
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 48;
  c.max_position_embeddings = max_position_embeddings;
  c.type_vocab_size = arch == formats::BertArch::kBert ? 2 : 0;
  c.num_labels = 3;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  return c;
}

}  // namespace hotpath::test
