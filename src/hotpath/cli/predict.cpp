// `hotpath predict --model-dir RUN IMAGE...`: top-k classes of image files with a trained model
// package (or `--model efficientnet_lite0 --pretrained`: the real ImageNet weights).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <iomanip>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/data/transforms.h"
#include "hotpath/models/pretrained.h"
#include "hotpath/train/package.h"

namespace hotpath::cli {
namespace {

struct PredictArgs {
  std::string model_dir;
  std::string model;
  bool pretrained = false;
  std::vector<std::string> images;
  int top_k = 5;
  int threads = 0;
  bool json = false;
};

// One image file → [C, H, W] float, preprocessed as the package's eval transform (exact, no DCT scaling).
at::Tensor preprocess(const std::string& path, const train::ModelPackage& p) {
  const std::string bytes = read_file(path);
  const auto span = std::as_bytes(std::span(bytes.data(), bytes.size()));
  const data::ImageInfo info = data::probe_image(span);
  const int size = static_cast<int>(p.image_size);
  const int channels = static_cast<int>(p.in_channels);
  data::Box box{0, 0, static_cast<double>(info.width), static_cast<double>(info.height)};
  if (p.eval_crop == "resize_center_crop") {
    box = data::resize_center_crop_box(info.width, info.height, static_cast<int>(p.resize_shorter), size);
  }
  std::vector<std::uint8_t> hwc(static_cast<std::size_t>(size) * size * channels);
  data::DecodeScratch scratch;
  data::decode_box_resized(span, box, size, size, {.channels = channels, .allow_dct_scaling = false}, hwc.data(),
                           scratch);
  at::Tensor out = at::empty({channels, size, size}, at::kFloat);
  data::Normalization norm;
  for (int c = 0; c < channels && c < 3; ++c) {
    norm.mean[c] = static_cast<float>(p.mean[static_cast<std::size_t>(c)]);
    norm.std[c] = static_cast<float>(p.std[static_cast<std::size_t>(c)]);
  }
  data::store_sample(hwc.data(), size, size, channels, /*flip=*/false, norm, data::StoreFormat{}, out.data_ptr());
  return out;
}

void run(const PredictArgs& a) {
  at::set_num_threads(a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  HOTPATH_CHECK(a.model_dir.empty() != a.model.empty(), "predict: give either --model-dir RUN or --model NAME --pretrained");
  train::ModelPackage package;
  models::ModelHandle model;
  if (!a.model_dir.empty()) {
    package = train::read_package(a.model_dir);
    model = train::load_package_model(package);
  } else {
    HOTPATH_CHECK(a.pretrained, "predict: --model ", a.model, " needs --pretrained (or use --model-dir RUN)");
    const models::Preprocessing& pre = models::pretrained_preprocessing(a.model);
    package.model = a.model;
    package.num_classes = 1000;
    package.in_channels = 3;
    package.image_size = pre.crop;
    package.eval_crop = "resize_center_crop";
    package.resize_shorter = pre.resize_shorter;
    package.mean.assign(pre.mean.begin(), pre.mean.end());
    package.std.assign(pre.std.begin(), pre.std.end());
    package.class_names = models::pretrained_class_names(a.model);
    model = models::load_pretrained_model(a.model);
  }
  torch::NoGradGuard no_grad;
  const auto k = std::min<std::int64_t>(a.top_k, package.num_classes);
  for (const std::string& image : a.images) {
    at::Tensor x;
    try {
      x = preprocess(image, package).unsqueeze(0);
    } catch (const Error& e) {
      HOTPATH_CHECK(false, image, ": ", e.what());
    }
    const at::Tensor probs = at::softmax(model->forward(x).to(at::kFloat), 1).squeeze(0);
    const auto [values, indices] = probs.topk(k);
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (std::int64_t i = 0; i < k; ++i) {
      const auto idx = indices[i].item<std::int64_t>();
      const std::string label = idx < static_cast<std::int64_t>(package.class_names.size())
                                    ? package.class_names[static_cast<std::size_t>(idx)]
                                    : std::to_string(idx);
      top.push_back({{"index", idx}, {"label", label}, {"prob", values[i].item<double>()}});
    }
    if (a.json) {
      std::cout << nlohmann::ordered_json{{"image", image}, {"top", top}}.dump() << "\n";
    } else {
      std::cout << image << "\n";
      for (const auto& t : top) {
        std::cout << "  " << std::fixed << std::setprecision(4) << t["prob"].get<double>() << "  "
                  << t["label"].get<std::string>() << " (" << t["index"].get<std::int64_t>() << ")\n";
      }
    }
  }
}

}  // namespace

void add_predict(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand("predict", "Top-k classes of image files (JPEG/PNG) with a trained model");
  cmd->add_option("--model-dir", args->model_dir, "Run directory with model.json + model.safetensors");
  cmd->add_option("--model", args->model, "A registry model with --pretrained weights (efficientnet_lite0)");
  cmd->add_flag("--pretrained", args->pretrained, "Use the model's pretrained ImageNet weights");
  cmd->add_option("images", args->images, "Image files")->required()->check(CLI::ExistingFile);
  cmd->add_option("--top-k,-k", args->top_k)->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", args->threads, "LibTorch intra-op threads (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", args->json, "One JSON object per image");
  cmd->callback([args] { run(*args); });
}

}  // namespace hotpath::cli
