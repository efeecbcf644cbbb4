#include "hotpath/models/vision/cnn.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>

#include "hotpath/core/error.h"
#include "hotpath/models/batch_norm.h"
#include "hotpath/ops/autocast_ops.h"

namespace hotpath::models {
using namespace hotpath::ops;  // conv2d
namespace {

void add_conv_bn_relu(torch::nn::Sequential& seq, std::int64_t in, std::int64_t out) {
  seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
  seq->push_back(batch_norm2d(out));
  seq->push_back(torch::nn::ReLU(torch::nn::ReLUOptions().inplace(true)));
}

}  // namespace

SmallCnn::SmallCnn(const SmallCnnConfig& c) {
  HOTPATH_CHECK(c.width >= 1 && c.num_classes >= 1 && c.in_channels >= 1,
                "cnn: width, num_classes and in_channels must be >= 1");
  torch::nn::Sequential seq;
  add_conv_bn_relu(seq, c.in_channels, c.width);
  add_conv_bn_relu(seq, c.width, c.width);
  seq->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
  add_conv_bn_relu(seq, c.width, 2 * c.width);
  add_conv_bn_relu(seq, 2 * c.width, 2 * c.width);
  seq->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
  add_conv_bn_relu(seq, 2 * c.width, 4 * c.width);
  seq->push_back(torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1)));
  features = register_module("features", seq);
  classifier = register_module("classifier", torch::nn::Linear(4 * c.width, c.num_classes));
}

// The Sequential's layers one by one, except that each conv → BN → ReLU triple runs its BN and
// ReLU as one op (models/batch_norm.h: ops/fused_bn_relu.h, a third fewer passes; or synchronised).
at::Tensor SmallCnn::forward(const at::Tensor& images) {
  at::Tensor x = images;
  for (auto it = features->begin(); it != features->end(); ++it) {
    auto* bn = it->ptr()->as<torch::nn::BatchNorm2dImpl>();
    const auto next = it + 1;
    if (bn != nullptr && next != features->end() && next->ptr()->as<torch::nn::ReLUImpl>() != nullptr) {
      x = batch_norm_relu(*bn, x);
      it = next;  // the ReLU ran inside the fused op
    } else if (bn != nullptr) {
      x = batch_norm(*bn, x);
    } else if (auto* conv = it->ptr()->as<torch::nn::Conv2dImpl>(); conv != nullptr) {
      x = conv2d(*conv, x);
    } else {
      x = it->forward(x);
    }
  }
  return classifier->forward(x.flatten(1));
}

}  // namespace hotpath::models
