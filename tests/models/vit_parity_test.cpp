// ViT vs torchvision's VisionTransformer: the same state_dict (written by python's safetensors.torch.save_file,
// every constant-initialised parameter randomised) and the same input give the same eval-mode logits
// within 1e-4; and a state hotpath saves loads into torchvision with load_state_dict(strict=True) and gives
// hotpath's logits there.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <string>

#include "hotpath/models/registry.h"
#include "hotpath/models/vision/vit.h"
#include "hotpath/models/weights.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

using test::TempDir;

constexpr double kTolerance = 1e-4;  // fp32, issue 4's bar

// models_ref.py's "vit_small_p8": VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=3,
// hidden_dim=192, mlp_dim=768, num_classes=10).
ModelHandle small_p8() {
  return std::make_shared<ViT>(ViTConfig{.patch_size = 8,
                                         .num_layers = 2,
                                         .num_heads = 3,
                                         .hidden_dim = 192,
                                         .mlp_dim = 768,
                                         .options = {.num_classes = 10, .image_size = 32}});
}

// One python run makes both cases (its start-up dominates); each case is checked in turn.
TEST(ViTParity, ForwardMatchesTorchvision) {
  TempDir dir;
  const std::string summary = test::run_python(test::source_path("tests/oracles/models_ref.py"), {"make-vit", dir.path()});
  const std::map<std::string, ModelHandle> cases = {
      {"vit_small_p8", small_p8()},
      {"vit_tiny", create_model("vit_tiny", {.num_classes = 10})},  // 224×224, 12 layers
  };
  for (const auto& [name, model] : cases) {
    SCOPED_TRACE(name);
    const LoadReport report = load_safetensors(*model, dir.file(name + ".safetensors"));  // allow_partial off
    EXPECT_TRUE(report.complete()) << report.summary();
    model->eval();
    const auto io = read_tensors(dir.file(name + "_io.safetensors"));
    const at::Tensor expected = io.at("output");
    const at::NoGradGuard no_grad;
    const at::Tensor got = model->forward(io.at("input"));
    ASSERT_EQ(got.sizes(), expected.sizes());
    const double diff = (got - expected).abs().max().item<double>();
    EXPECT_LE(diff, kTolerance) << "max |hotpath - torchvision| over logits up to "
                                << expected.abs().max().item<double>();
    // The check means something only if the logits are not all alike.
    EXPECT_GT(expected.std().item<double>(), 0.5);
    std::cout << name << ": max abs diff " << diff << " (logits up to " << expected.abs().max().item<double>()
              << ")\n";
  }
}

TEST(ViTParity, SavedStateLoadsIntoTorchvision) {
  TempDir dir;
  const ModelHandle model = small_p8();
  at::manual_seed(7);
  {
    // Move every parameter off its constant initial value, as after training.
    const at::NoGradGuard no_grad;
    for (auto& [name, tensor] : named_state(*model)) {
      if (name == "class_token" || name.ends_with("bias") || name == "heads.head.weight") {
        tensor.normal_(0.0, 0.1);
      } else if (name.find(".ln") != std::string::npos && name.ends_with("weight")) {
        tensor.uniform_(0.5, 1.5);
      }
    }
  }
  model->eval();
  const at::Tensor x = at::randn({2, 3, 32, 32});
  save_safetensors(*model, dir.file("model.safetensors"));
  write_tensors(dir.file("input.safetensors"), {{"input", x}});
  test::run_python(test::source_path("tests/oracles/models_ref.py"),
                   {"forward", "vit_small_p8", dir.file("model.safetensors"), dir.file("input.safetensors"),
                    dir.file("output.safetensors")});
  const at::Tensor expected = read_tensors(dir.file("output.safetensors")).at("output");
  const at::NoGradGuard no_grad;
  const at::Tensor got = model->forward(x);
  EXPECT_GT(expected.std().item<double>(), 0.05);
  EXPECT_LE((got - expected).abs().max().item<double>(), kTolerance);
}

}  // namespace
}  // namespace hotpath::models
