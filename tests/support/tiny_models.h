// Tiny trained-model directories the export, predictor and server tests export: an image run directory as
// `hotpath train` leaves it, and a one-layer BERT as a Hugging Face directory.
//
//   models::ModelHandle model;
//   const fs::path run = test::write_tiny_image_run(dir.path() / "run", model);    // cnn_small, 3 classes
//   const fs::path hf = test::write_tiny_hf_bert(dir.path() / "hf-cls", /*classifier=*/true);
#pragma once

#include <ATen/Context.h>  // at::manual_seed

#include <filesystem>
#include <string>

#include "hotpath/formats/bert_config.h"
#include "hotpath/infer/package.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "support/test_support.h"

namespace hotpath::test {

// model.json + model.safetensors of a cnn_small (seed 21, eval mode; 1×12×12 gray, resized, mean 0.5, std 0.25,
// classes circle/square/line) in `run`; `model` is the trained model the directory holds.
inline std::filesystem::path write_tiny_image_run(const std::filesystem::path& run, models::ModelHandle& model) {
  at::manual_seed(21);
  model = models::create_model("cnn_small", {.num_classes = 3, .in_channels = 1});
  model->eval();
  std::filesystem::create_directories(run);
  infer::Package p;
  p.architecture = "cnn_small";
  p.num_classes = 3;
  p.image.channels = 1;
  p.image.image_size = 12;
  p.image.crop = infer::EvalCrop::kResize;
  p.image.resize_shorter = 12;
  p.image.mean = {0.5};
  p.image.std = {0.25};
  p.labels = {"circle", "square", "line"};
  write_file((run / "model.json").string(), infer::run_directory_json(p));
  models::save_safetensors(*model, (run / "model.safetensors").string());
  return run;
}

// A one-layer BERT (vocab 30, hidden 16, 2 heads, 32 positions, 2 labels, seed 5): config.json, model.safetensors
// under HF's key names (the training model of that shape), a vocab.txt of [PAD] [UNK] [CLS] [SEP] [MASK] and ten
// words.
inline formats::BertConfig tiny_hf_bert_config() {
  formats::BertConfig c;
  c.vocab_size = 30;
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 24;
  c.max_position_embeddings = 32;
  c.num_labels = 2;
  return c;
}

// `classifier`: a BertForSequenceClassification (architectures says so), else a bare BertModel (an embedder).
inline std::filesystem::path write_tiny_hf_bert(const std::filesystem::path& hf, bool classifier) {
  std::filesystem::create_directories(hf);
  const std::string arch = classifier ? R"("architectures": ["BertForSequenceClassification"], )" : "";
  write_file((hf / "config.json").string(),
             "{" + arch + R"("model_type": "bert", "vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 1,
               "num_attention_heads": 2, "intermediate_size": 24, "max_position_embeddings": 32,
               "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12})");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const char* w : {"the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away"}) vocab += std::string(w) + "\n";
  write_file((hf / "vocab.txt").string(), vocab);
  at::manual_seed(5);
  if (classifier) {
    const models::BertForSequenceClassification m(tiny_hf_bert_config());
    models::save_safetensors(m, (hf / "model.safetensors").string());
  } else {
    const models::BertModel m(tiny_hf_bert_config());
    models::save_safetensors(m, (hf / "model.safetensors").string());
  }
  return hf;
}

}  // namespace hotpath::test
