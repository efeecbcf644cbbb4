// A tiny encoder whose module paths are BERT's (encoder.layer.N.attention.self.query, ...,
// classifier), for the LoRA tests; tests/oracles/lora_ref.py builds the same tree in python.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "hotpath/models/lora.h"

namespace hotpath::models::lora_test {

struct SelfAttention : torch::nn::Module {
  explicit SelfAttention(std::int64_t h)
      : query(register_module("query", LoraLinear(h, h))),
        key(register_module("key", LoraLinear(h, h))),
        value(register_module("value", LoraLinear(h, h))) {}
  LoraLinear query, key, value;
};

struct Dense : torch::nn::Module {
  Dense(std::int64_t in, std::int64_t out) : dense(register_module("dense", LoraLinear(in, out))) {}
  LoraLinear dense;
};

struct Attention : torch::nn::Module {
  explicit Attention(std::int64_t h)
      : self(register_module("self", std::make_shared<SelfAttention>(h))),
        output(register_module("output", std::make_shared<Dense>(h, h))) {}
  std::shared_ptr<SelfAttention> self;
  std::shared_ptr<Dense> output;
};

// "output.dense" stays a plain torch::nn::Linear: apply_lora must refuse to target it.
struct PlainOutput : torch::nn::Module {
  explicit PlainOutput(std::int64_t h) : dense(register_module("dense", torch::nn::Linear(h, h))) {}
  torch::nn::Linear dense;
};

struct Layer : torch::nn::Module {
  explicit Layer(std::int64_t h)
      : attention(register_module("attention", std::make_shared<Attention>(h))),
        output(register_module("output", std::make_shared<PlainOutput>(h))) {}
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor q = attention->self->query->forward(x);
    const at::Tensor k = attention->self->key->forward(x);
    const at::Tensor v = attention->self->value->forward(x);
    const at::Tensor p = at::softmax(at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(x.size(-1))), -1);
    const at::Tensor h = x + attention->output->dense->forward(at::matmul(p, v));
    return h + at::tanh(output->dense->forward(h));
  }
  std::shared_ptr<Attention> attention;
  std::shared_ptr<PlainOutput> output;
};

struct Encoder : torch::nn::Module {
  Encoder(std::int64_t h, std::int64_t layers) : layer(register_module("layer", torch::nn::ModuleList())) {
    for (std::int64_t i = 0; i < layers; ++i) layer->push_back(std::make_shared<Layer>(h));
  }
  torch::nn::ModuleList layer;
};

// x [B, L, H] → logits [B, labels].
struct TinyClassifier : torch::nn::Module {
  TinyClassifier(std::int64_t h = 8, std::int64_t layers = 2, std::int64_t labels = 3)
      : encoder(register_module("encoder", std::make_shared<Encoder>(h, layers))),
        classifier(register_module("classifier", torch::nn::Linear(h, labels))) {}
  at::Tensor forward(at::Tensor x) {
    for (const auto& l : *encoder->layer) x = l->as<Layer>()->forward(x);
    return classifier->forward(x.mean(1));
  }
  std::shared_ptr<Encoder> encoder;
  torch::nn::Linear classifier;
};

}  // namespace hotpath::models::lora_test
