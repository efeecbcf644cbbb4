// Weights I/O: save → load round trip, missing/unexpected/shape-mismatched keys reported by name,
// refusal leaves the module untouched, partial loads for a new head, dtype conversion, bad files.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/formats/safetensors.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/weights.h"
#include "support/test_support.h"

namespace hotpath::models {
using namespace hotpath::formats;  // Dtype, SafetensorsFile
namespace {

using test::TempDir;

// conv.weight [4,2,3,3], bn.{weight,bias,running_mean,running_var,num_batches_tracked}, fc.{weight,bias}.
struct TinyNet : torch::nn::Module {
  explicit TinyNet(std::int64_t classes = 3)
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 4, 3).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(4))),
        fc(register_module("fc", torch::nn::Linear(4, classes))) {}
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};

// Every float tensor random, every integer one a distinct count, so a round trip that mixed up
// names or skipped buffers shows.
void randomise(torch::nn::Module& module, std::uint64_t seed) {
  at::manual_seed(seed);
  const at::NoGradGuard no_grad;
  std::int64_t count = 1;
  for (auto& [name, tensor] : named_state(module)) {
    if (at::isFloatingType(tensor.scalar_type())) {
      tensor.copy_(at::rand(tensor.sizes()) + 0.5);
    } else {
      tensor.fill_(count++);
    }
  }
}

void expect_same_state(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto sa = named_state(a);
  const auto sb = named_state(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& [name, tensor] : sa) {
    ASSERT_EQ(sb.count(name), 1u) << name;
    EXPECT_EQ(tensor.scalar_type(), sb.at(name).scalar_type()) << name;
    EXPECT_TRUE(tensor.equal(sb.at(name))) << name;
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Weights, SaveLoadRoundTripsAResNet) {
  TempDir dir;
  const ModelHandle saved = create_model("resnet18_small", {.num_classes = 10, .in_channels = 1});
  randomise(*saved, 1);
  save_safetensors(*saved, dir.file("m.safetensors"));

  const SafetensorsFile file(dir.file("m.safetensors"));
  EXPECT_EQ(file.tensors().size(), 122u);
  EXPECT_EQ(file.at("layer3.1.bn1.num_batches_tracked").dtype, Dtype::I64);
  EXPECT_TRUE(file.at("layer3.1.bn1.num_batches_tracked").shape.empty());
  EXPECT_EQ(file.at("layer3.0.downsample.0.weight").dtype, Dtype::F32);

  const ModelHandle loaded = create_model("resnet18_small", {.num_classes = 10, .in_channels = 1});
  const LoadReport report = load_safetensors(*loaded, dir.file("m.safetensors"));
  EXPECT_TRUE(report.complete()) << report.summary();
  EXPECT_EQ(report.loaded.size(), 122u);
  expect_same_state(*saved, *loaded);

  saved->eval();
  loaded->eval();
  const at::Tensor x = at::randn({2, 1, 28, 28});
  EXPECT_TRUE(saved->forward(x).equal(loaded->forward(x)));
}

TEST(Weights, ReportsMissingUnexpectedAndMismatchedByName) {
  TempDir dir;
  TinyNet source;
  randomise(source, 2);
  auto tensors = named_state(source);
  tensors.erase("bn.running_var");
  tensors.emplace("head.weight", at::zeros({2, 2}));
  tensors["fc.weight"] = at::zeros({7, 4});
  write_tensors(dir.file("bad.safetensors"), tensors);

  TinyNet target;
  const at::Tensor conv_before = target.conv->weight.clone();
  const std::string message = error_of([&] { load_safetensors(target, dir.file("bad.safetensors")); });
  EXPECT_NE(message.find("bad.safetensors: loaded 6 of 8 module tensors"), std::string::npos) << message;
  EXPECT_NE(message.find("1 missing from the file (bn.running_var)"), std::string::npos) << message;
  EXPECT_NE(message.find("1 unexpected in the file (head.weight)"), std::string::npos) << message;
  EXPECT_NE(message.find("1 with another shape (fc.weight: model [3, 4], file [7, 4])"), std::string::npos)
      << message;
  EXPECT_NE(message.find("refusing to load"), std::string::npos) << message;
  EXPECT_TRUE(target.conv->weight.equal(conv_before)) << "a refused load must not touch the module";

  const LoadReport report = load_safetensors(target, dir.file("bad.safetensors"), {.allow_partial = true});
  EXPECT_EQ(report.missing, std::vector<std::string>{"bn.running_var"});
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"head.weight"});
  ASSERT_EQ(report.mismatched.size(), 1u);
  EXPECT_EQ(report.mismatched[0].name, "fc.weight");
  EXPECT_EQ(report.mismatched[0].model_shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(report.mismatched[0].file_shape, (std::vector<std::int64_t>{7, 4}));
  EXPECT_EQ(report.loaded, (std::vector<std::string>{"bn.bias", "bn.num_batches_tracked", "bn.running_mean",
                                                     "bn.weight", "conv.weight", "fc.bias"}));
  EXPECT_TRUE(target.conv->weight.equal(source.conv->weight));
  EXPECT_TRUE(target.bn->running_var.eq(1).all().item<bool>()) << "missing keys keep the module's value";
}

TEST(Weights, AllowPartialLoadsACheckpointWithAnotherHead) {
  TempDir dir;
  const ModelHandle pretrained = create_model("resnet18_small", {.num_classes = 10, .in_channels = 1});
  randomise(*pretrained, 3);
  save_safetensors(*pretrained, dir.file("pretrained.safetensors"));

  const ModelHandle finetune = create_model("resnet18_small", {.num_classes = 4, .in_channels = 1});
  const at::Tensor head_before = named_state(*finetune).at("fc.weight").clone();
  const std::string message = error_of([&] { load_safetensors(*finetune, dir.file("pretrained.safetensors")); });
  EXPECT_NE(message.find("fc.bias: model [4], file [10], fc.weight: model [4, 512], file [10, 512]"),
            std::string::npos)
      << message;

  const LoadReport report = load_safetensors(*finetune, dir.file("pretrained.safetensors"), {.allow_partial = true});
  EXPECT_EQ(report.loaded.size(), 120u);
  EXPECT_TRUE(report.missing.empty());
  EXPECT_TRUE(report.unexpected.empty());
  ASSERT_EQ(report.mismatched.size(), 2u);
  EXPECT_EQ(report.mismatched[0].name, "fc.bias");
  EXPECT_EQ(report.mismatched[1].name, "fc.weight");
  const auto a = named_state(*pretrained);
  const auto b = named_state(*finetune);
  EXPECT_TRUE(a.at("layer4.1.conv2.weight").equal(b.at("layer4.1.conv2.weight")));
  EXPECT_TRUE(a.at("layer2.0.downsample.1.running_var").equal(b.at("layer2.0.downsample.1.running_var")));
  EXPECT_TRUE(b.at("fc.weight").equal(head_before));
}

TEST(Weights, NothingInCommonIsRefusedEvenWhenPartial) {
  TempDir dir;
  write_tensors(dir.file("other.safetensors"), {{"encoder.weight", at::ones({2})}});
  TinyNet net;
  const std::string message =
      error_of([&] { load_safetensors(net, dir.file("other.safetensors"), {.allow_partial = true}); });
  EXPECT_NE(message.find("no tensor of the file matches the module"), std::string::npos) << message;
}

TEST(Weights, TruncatedFileIsAClearError) {
  TempDir dir;
  TinyNet net;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(net, path);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 10);
  TinyNet target;
  const std::string message = error_of([&] { load_safetensors(target, path); });
  EXPECT_EQ(message.rfind(path, 0), 0u) << "the error starts with the file: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;

  std::filesystem::resize_file(path, 5);  // not even the header length
  EXPECT_EQ(error_of([&] { load_safetensors(target, path); }).rfind(path, 0), 0u);
}

TEST(Weights, ConvertsFloatDtypesAndRefusesFloatIntoInteger) {
  TempDir dir;
  TinyNet source;
  randomise(source, 4);
  auto half = named_state(source);
  for (auto& [name, tensor] : half) {
    if (at::isFloatingType(tensor.scalar_type())) tensor = tensor.to(name == "fc.bias" ? at::kBFloat16 : at::kHalf);
  }
  half["bn.num_batches_tracked"] = half["bn.num_batches_tracked"].to(at::kInt);
  write_tensors(dir.file("half.safetensors"), half);
  EXPECT_EQ(SafetensorsFile(dir.file("half.safetensors")).at("fc.bias").dtype, Dtype::BF16);

  TinyNet target;
  EXPECT_TRUE(load_safetensors(target, dir.file("half.safetensors")).complete());
  EXPECT_EQ(target.conv->weight.scalar_type(), at::kFloat);
  EXPECT_TRUE(target.conv->weight.equal(half.at("conv.weight").to(at::kFloat)));
  EXPECT_TRUE(target.fc->bias.equal(half.at("fc.bias").to(at::kFloat)));
  EXPECT_EQ(target.bn->num_batches_tracked.item<std::int64_t>(), source.bn->num_batches_tracked.item<std::int64_t>());

  auto wrong = named_state(source);
  wrong["bn.num_batches_tracked"] = at::zeros({}, at::kFloat);
  write_tensors(dir.file("wrong.safetensors"), wrong);
  const std::string message = error_of([&] { load_safetensors(target, dir.file("wrong.safetensors")); });
  EXPECT_NE(message.find("tensor 'bn.num_batches_tracked' is F32 in the file but Long in the module"),
            std::string::npos)
      << message;
}

TEST(Weights, LoadsUnalignedTensorData) {
  // Hand-made file whose data starts at an odd offset (the writers never do this; other tools may).
  std::string header = R"({"bias":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  while ((8 + header.size()) % 4 != 1) header.push_back(' ');  // the format allows trailing spaces
  std::vector<std::byte> bytes(8 + header.size() + 12);
  const std::uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  const float values[3] = {1.5f, -2.0f, 0.25f};
  std::memcpy(bytes.data() + 8 + header.size(), values, sizeof values);
  const SafetensorsFile file = SafetensorsFile::from_bytes(std::move(bytes), "unaligned");

  torch::nn::Linear fc(4, 3);
  const LoadReport report = load_safetensors(*fc, file, {.allow_partial = true});
  EXPECT_EQ(report.missing, std::vector<std::string>{"weight"});
  EXPECT_TRUE(fc->bias.equal(at::tensor({1.5f, -2.0f, 0.25f})));
  EXPECT_TRUE(to_tensor(file.at("bias")).equal(at::tensor({1.5f, -2.0f, 0.25f})));
}

TEST(Weights, WriteAndReadTensors) {
  TempDir dir;
  const at::Tensor a = at::randn({2, 3});
  const at::Tensor b = at::arange(5, at::kLong);
  write_tensors(dir.file("t.safetensors"), {{"a", a.t()}, {"b", b}}, {{"format", "pt"}});  // non-contiguous a.t()
  const auto read = read_tensors(dir.file("t.safetensors"));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_TRUE(read.at("a").equal(a.t()));
  EXPECT_TRUE(read.at("b").equal(b));
  EXPECT_EQ(SafetensorsFile(dir.file("t.safetensors")).metadata().at("format"), "pt");
}

}  // namespace
}  // namespace hotpath::models
