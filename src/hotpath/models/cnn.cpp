#include "hotpath/models/cnn.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>

#include "hotpath/core/error.h"

namespace hotpath::models {
namespace {

void add_conv_bn_relu(torch::nn::Sequential& seq, std::int64_t in, std::int64_t out) {
  seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
  seq->push_back(torch::nn::BatchNorm2d(out));
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

at::Tensor SmallCnn::forward(const at::Tensor& images) {
  return classifier->forward(features->forward(images).flatten(1));
}

}  // namespace hotpath::models
