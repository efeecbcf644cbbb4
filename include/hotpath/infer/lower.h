// hotpath/infer/lower.h — turn a trained model into an inference graph (graph.h): batch norms folded
// into the convolutions, bias + activation + residual add fused into the producing op, q/k/v packed.
//
//   auto model = models::create_model("resnet50", {.num_classes = 1000});   // weights loaded, any mode
//   Graph g = lower_image_model(*model, {.channels = 3, .image_size = 224});
//   Graph t = lower_text_classifier(*load_bert_classifier("bert-dir"));     // ids, mask, types → logits
//
// Each model family knows its own ops: ResNet (basic and bottleneck, small stem), the small cnn,
// EfficientNet-B0/Lite0 (TF-same padding, squeeze-excitation), ViT, BERT/DistilBERT classifiers and
// sentence embedders. LoRA adapters are merged into the graph's weights (the model is left as it is).
// The graph's params are copies: the model can change or die afterwards. A module the lowering does not
// know is one hotpath::Error naming it.
#pragma once

#include <cstdint>

#include "hotpath/infer/graph.h"
#include "hotpath/models/classifier.h"
#include "hotpath/models/text/bert.h"

namespace hotpath::infer {

struct ImageInput {
  std::int64_t channels = 3;
  std::int64_t image_size = 224;  // height = width; the batch axis is dynamic
};

// One input "images" float [batch, channels, image_size, image_size] → one output "logits".
Graph lower_image_model(const models::ImageClassifier& model, const ImageInput& input);
// Inputs "input_ids", "attention_mask", "token_type_ids" int64 [batch, sequence] → "logits".
Graph lower_text_classifier(const models::BertForSequenceClassification& model);
// Same inputs → "sentence_embedding" [batch, hidden] (sentence-transformers' name) (masked mean pool, L2-normalised when the embedder normalises).
Graph lower_sentence_embedder(const models::SentenceEmbedder& embedder);

}  // namespace hotpath::infer
