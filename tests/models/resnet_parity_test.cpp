// ResNet vs torchvision: the same state_dict (written by python's safetensors.torch.save_file) and the
// same input give the same eval-mode logits within 1e-4 (relative to their scale, at least 1); and a state hotpath saves loads into
// torchvision with load_state_dict(strict=True) and gives hotpath's logits there.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "hotpath/models/registry.h"
#include "hotpath/models/weights.h"
#include "models/model_test_support.h"
#include "support/test_support.h"

namespace hotpath::models {
namespace {

using test::TempDir;

// fp32, issue 4's bar, relative to the logits' scale: ResNet-50's 50 layers of oneDNN convolutions differ
// from torchvision's by up to 1.1e-4 on logits of magnitude 4.6 on an AVX-512 CPU (3e-6 for ResNet-18),
// the same with every hotpath kernel capped to scalar: the convolutions' summation order, not hotpath's ops.
constexpr double kTolerance = 1e-4;

struct Case {
  std::string name;  // models_ref.py's case name = hotpath's model name
  ModelOptions options;
};

// One python run makes every case (its start-up dominates); each case is checked in turn.
TEST(ResNetParity, ForwardMatchesTorchvision) {
  TempDir dir;
  const std::string summary = test::run_python(test::source_path("tests/oracles/models_ref.py"), {"make", dir.path()});
  const Case cases[] = {
      {"resnet18", {}},
      {"resnet50", {}},
      {"resnet18_small", {.num_classes = 10, .in_channels = 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ModelHandle model = create_model(c.name, c.options);
    const LoadReport report = load_safetensors(*model, dir.file(c.name + ".safetensors"));
    EXPECT_TRUE(report.complete()) << report.summary();
    model->eval();
    const auto io = read_tensors(dir.file(c.name + "_io.safetensors"));
    const at::Tensor expected = io.at("output");
    const at::Tensor got = model->forward(io.at("input"));
    ASSERT_EQ(got.sizes(), expected.sizes());
    const double diff = (got - expected).abs().max().item<double>();
    const double scale = std::max(1.0, expected.abs().max().item<double>());
    EXPECT_LE(diff, kTolerance * scale) << "max |hotpath - torchvision| over logits up to " << scale;
    // The check means something only if the logits are not all alike.
    EXPECT_GT(expected.std().item<double>(), 0.05);
    std::cout << c.name << ": max abs diff " << diff << '\n';
  }
}

TEST(ResNetParity, SavedStateLoadsIntoTorchvision) {
  TempDir dir;
  const ModelHandle model = create_model("resnet18_small", {.num_classes = 10, .in_channels = 1});
  at::manual_seed(7);
  {
    // Non-trivial batch-norm state, as after training.
    const at::NoGradGuard no_grad;
    for (auto& [name, tensor] : named_state(*model)) {
      if (name.ends_with("running_var")) tensor.uniform_(0.5, 2.0);
      if (name.ends_with("running_mean") || name.ends_with("bn1.bias")) tensor.normal_(0.0, 0.1);
      if (name.ends_with("num_batches_tracked")) tensor.fill_(123);
    }
  }
  model->eval();
  const at::Tensor x = at::randn({2, 1, 28, 28});
  save_safetensors(*model, dir.file("model.safetensors"));
  write_tensors(dir.file("input.safetensors"), {{"input", x}});
  test::run_python(test::source_path("tests/oracles/models_ref.py"),
                   {"forward", "resnet18_small", dir.file("model.safetensors"), dir.file("input.safetensors"),
                    dir.file("output.safetensors")});
  const at::Tensor expected = read_tensors(dir.file("output.safetensors")).at("output");
  const at::Tensor got = model->forward(x);
  EXPECT_LE((got - expected).abs().max().item<double>(), kTolerance);
}

}  // namespace
}  // namespace hotpath::models
