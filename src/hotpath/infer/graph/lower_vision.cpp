// Lowering of the image families: ResNet, the small cnn, EfficientNet, ViT.
#include <ATen/ops/rsqrt.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/pooling.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/lower.h"
#include "hotpath/models/vision/cnn.h"
#include "hotpath/models/vision/efficientnet.h"
#include "hotpath/models/vision/resnet.h"
#include "hotpath/models/vision/vit.h"
#include "graph_builder.h"

namespace hotpath::infer {
namespace {

using detail::GraphBuilder;
using ModulePtr = std::shared_ptr<torch::nn::Module>;
using Ints = std::vector<std::int64_t>;

std::map<std::string, ModulePtr> children(const torch::nn::Module& m) {
  std::map<std::string, ModulePtr> out;
  for (const auto& item : m.named_children()) out[item.key()] = item.value();
  return out;
}

template <typename T>
T& child_as(const std::map<std::string, ModulePtr>& kids, const std::string& key, const std::string& owner) {
  auto it = kids.find(key);
  HOTPATH_CHECK(it != kids.end(), "lowering: module ", owner, " has no child '", key, "'");
  T* m = it->second->as<T>();
  HOTPATH_CHECK(m != nullptr, "lowering: module ", owner, ".", key, " is a ", it->second->name(),
                ", which this model family does not expect there");
  return *m;
}

// The image lowering state: the builder plus the current spatial size (TF-same padding depends on it).
struct VisionLowering {
  GraphBuilder b;
  std::int64_t size = 0;  // height = width of the current activation

  // conv (+ batch norm folded) (+ residual) (+ act). `tf_same`: pad as TensorFlow's SAME for this input size.
  std::string conv(const std::string& name, const torch::nn::Conv2dImpl& conv, const torch::nn::BatchNorm2dImpl* bn,
                   const std::string& input, const std::string& act, const std::string& residual = "",
                   bool tf_same = false) {
    const auto& o = conv.options;
    HOTPATH_CHECK(std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode()), "lowering: conv ", name,
                  " uses a padding mode other than zeros");
    const auto* pad = std::get_if<torch::ExpandingArray<2>>(&o.padding());
    HOTPATH_CHECK(pad != nullptr, "lowering: conv ", name, " uses 'valid'/'same' padding, expected explicit sizes");
    const Ints kernel = {(*o.kernel_size())[0], (*o.kernel_size())[1]};
    const Ints stride = {(*o.stride())[0], (*o.stride())[1]};
    const Ints dilation = {(*o.dilation())[0], (*o.dilation())[1]};
    HOTPATH_CHECK(kernel[0] == kernel[1] && stride[0] == stride[1] && dilation[0] == dilation[1], "lowering: conv ",
                  name, " is not square, which the image lowering does not handle");
    Ints padding = {(**pad)[0], (**pad)[1], (**pad)[0], (**pad)[1]};
    if (tf_same) {
      const std::int64_t out = (size + stride[0] - 1) / stride[0];
      const std::int64_t total = std::max<std::int64_t>((out - 1) * stride[0] + kernel[0] - size, 0);
      padding = {total / 2, total / 2, total - total / 2, total - total / 2};
    }
    at::Tensor w = conv.weight.detach();
    at::Tensor bias = conv.bias.defined() ? conv.bias.detach() : at::Tensor();
    if (bn != nullptr) {
      HOTPATH_CHECK(bn->options.affine() && bn->options.track_running_stats(), "lowering: batch norm after ", name,
                    " has no affine parameters or running statistics");
      const at::Tensor scale = bn->weight.detach() * at::rsqrt(bn->running_var.detach() + bn->options.eps());
      w = w * scale.view({-1, 1, 1, 1});
      at::Tensor shift = bn->bias.detach() - bn->running_mean.detach() * scale;
      bias = bias.defined() ? bias * scale + shift : shift;
    }
    std::map<std::string, std::string> params = {{"weight", b.param(name + ".weight", w)}};
    if (bias.defined()) params["bias"] = b.param(name + ".bias", bias);
    std::vector<std::string> inputs = {input};
    if (!residual.empty()) inputs.push_back(residual);
    size = (size + padding[0] + padding[2] - dilation[0] * (kernel[0] - 1) - 1) / stride[0] + 1;
    return b.node(OpKind::kConv2d, name, inputs, params,
                  {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", o.groups()},
                   {"act", act}});
  }

  std::string linear(const std::string& name, const at::Tensor& weight, const at::Tensor& bias,
                     const std::string& input, const std::string& act = "none", const std::string& residual = "") {
    std::map<std::string, std::string> params = {{"weight", b.param(name + ".weight", weight.detach())}};
    if (bias.defined()) params["bias"] = b.param(name + ".bias", bias.detach());
    std::vector<std::string> inputs = {input};
    if (!residual.empty()) inputs.push_back(residual);
    return b.node(OpKind::kLinear, name, inputs, params, {{"act", act}});
  }

  std::string linear(const std::string& name, const torch::nn::LinearImpl& l, const std::string& input,
                     const std::string& act = "none", const std::string& residual = "") {
    return linear(name, l.weight, l.bias, input, act, residual);
  }

  std::string layer_norm(const std::string& name, const torch::nn::LayerNormImpl& ln, const std::string& input) {
    HOTPATH_CHECK(ln.options.elementwise_affine(), "lowering: layer norm ", name, " has no affine parameters");
    return b.node(OpKind::kLayerNorm, name, {input},
                  {{"weight", b.param(name + ".weight", ln.weight)}, {"bias", b.param(name + ".bias", ln.bias)}},
                  {{"eps", ln.options.eps()}});
  }

  std::string avg_pool(const std::string& name, const std::string& input, bool keepdims) {
    return b.node(OpKind::kGlobalAvgPool, name, {input}, {}, {{"keepdims", std::int64_t{keepdims ? 1 : 0}}});
  }

  std::string max_pool(const std::string& name, const std::string& input, std::int64_t kernel, std::int64_t stride,
                       std::int64_t padding) {
    size = (size + 2 * padding - kernel) / stride + 1;
    return b.node(OpKind::kMaxPool2d, name, {input}, {},
                  {{"kernel", Ints{kernel, kernel}}, {"stride", Ints{stride, stride}}, {"padding", Ints{padding, padding}}});
  }
};

std::string lower_resnet(VisionLowering& v, const models::ResNet& m, std::string x) {
  x = v.conv("conv1", *m.conv1, m.bn1.get(), x, "relu");
  if (!m.config().options.small_input) x = v.max_pool("maxpool", x, 3, 2, 1);
  const torch::nn::Sequential* stages[] = {&m.layer1, &m.layer2, &m.layer3, &m.layer4};
  for (int s = 0; s < 4; ++s) {
    std::size_t j = 0;
    for (const auto& block : **stages[s]) {
      const std::string name = "layer" + std::to_string(s + 1) + "." + std::to_string(j++);
      const auto kids = children(*block.ptr());
      const std::int64_t in_size = v.size;
      std::string identity = x;
      if (auto ds = kids.find("downsample"); ds != kids.end()) {
        const auto dk = children(*ds->second);
        identity = v.conv(name + ".downsample.0", child_as<torch::nn::Conv2dImpl>(dk, "0", name + ".downsample"),
                          &child_as<torch::nn::BatchNorm2dImpl>(dk, "1", name + ".downsample"), x, "none");
        v.size = in_size;  // the main path starts from the block input again
      }
      const auto conv = [&](const char* c) { return child_as<torch::nn::Conv2dImpl>(kids, c, name); };
      const auto bn = [&](const char* n) { return &child_as<torch::nn::BatchNorm2dImpl>(kids, n, name); };
      std::string y = v.conv(name + ".conv1", conv("conv1"), bn("bn1"), x, "relu");
      if (kids.count("conv3") != 0) {
        y = v.conv(name + ".conv2", conv("conv2"), bn("bn2"), y, "relu");
        x = v.conv(name + ".conv3", conv("conv3"), bn("bn3"), y, "relu", identity);
      } else {
        x = v.conv(name + ".conv2", conv("conv2"), bn("bn2"), y, "relu", identity);
      }
    }
  }
  x = v.avg_pool("avgpool", x, false);
  return v.linear("fc", *m.fc, x);
}

std::string lower_cnn(VisionLowering& v, const models::SmallCnn& m, std::string x) {
  const auto& seq = *m.features;
  for (std::size_t i = 0; i < seq.size(); ++i) {
    const std::string name = "features." + std::to_string(i);
    const auto& mod = seq[i];
    if (auto* conv = mod->as<torch::nn::Conv2dImpl>()) {
      const torch::nn::BatchNorm2dImpl* bn =
          i + 1 < seq.size() ? seq[i + 1]->as<torch::nn::BatchNorm2dImpl>() : nullptr;
      const bool relu = bn != nullptr && i + 2 < seq.size() && seq[i + 2]->as<torch::nn::ReLUImpl>() != nullptr;
      x = v.conv(name, *conv, bn, x, relu ? "relu" : "none");
      i += (bn != nullptr ? 1 : 0) + (relu ? 1 : 0);
    } else if (auto* pool = mod->as<torch::nn::MaxPool2dImpl>()) {
      const auto& o = pool->options;
      HOTPATH_CHECK((*o.kernel_size())[0] == (*o.kernel_size())[1] && !o.ceil_mode(), "lowering: ", name,
                    " is a non-square or ceil-mode max pool");
      x = v.max_pool(name, x, (*o.kernel_size())[0], (*o.stride())[0], (*o.padding())[0]);
    } else if (mod->as<torch::nn::AdaptiveAvgPool2dImpl>() != nullptr) {
      x = v.avg_pool(name, x, false);
    } else {
      throw Error("lowering: cnn module " + name + " is a " + mod->name() + ", which the lowering does not know");
    }
  }
  return v.linear("classifier", *m.classifier, x);
}

std::string lower_efficientnet(VisionLowering& v, const models::EfficientNet& m, std::string x) {
  const auto& config = m.config();
  const std::string act = config.activation == models::Activation::kSiLU ? "silu" : "relu6";
  const bool tf_same = config.padding == models::ConvPadding::kTfSame;
  // A ConvNormAct ("0" conv, "1" batch norm) with or without its activation.
  const auto conv_norm = [&](const torch::nn::Module& cna, const std::string& name, const std::string& in,
                             const std::string& a, const std::string& residual = "") {
    const auto kids = children(cna);
    const auto& conv = child_as<torch::nn::Conv2dImpl>(kids, "0", name);
    const bool strided = (*conv.options.stride())[0] > 1;
    return v.conv(name + ".0", conv, &child_as<torch::nn::BatchNorm2dImpl>(kids, "1", name), in, a, residual,
                  tf_same && strided);
  };
  const auto& layers = *m.feature_layers;
  HOTPATH_CHECK(layers.size() >= 2, "lowering: EfficientNet has ", layers.size(), " feature layers");
  x = conv_norm(*layers[0], "features.0", x, act);
  for (std::size_t s = 1; s + 1 < layers.size(); ++s) {
    const auto* stage = layers[s]->as<torch::nn::SequentialImpl>();
    HOTPATH_CHECK(stage != nullptr, "lowering: features.", s, " is not a stage of MBConv blocks");
    for (std::size_t j = 0; j < stage->size(); ++j) {
      const std::string name = "features." + std::to_string(s) + "." + std::to_string(j);
      const auto* block = children(*(*stage)[j]).at("block")->as<torch::nn::SequentialImpl>();
      HOTPATH_CHECK(block != nullptr, "lowering: ", name, ".block is not a Sequential");
      // The block keeps its input for the residual when it keeps the shape (stride 1, in == out).
      const std::string input = x;
      const std::int64_t in_size = v.size;
      std::int64_t in_channels = -1;
      for (std::size_t k = 0; k < block->size(); ++k) {
        const std::string sub = name + ".block." + std::to_string(k);
        const auto kids = children(*(*block)[k]);
        if (kids.count("fc1") != 0) {  // squeeze-excitation
          const std::string pooled = v.avg_pool(sub + ".avgpool", x, true);
          const std::int64_t keep = v.size;
          const std::string s1 = v.conv(sub + ".fc1", child_as<torch::nn::Conv2dImpl>(kids, "fc1", sub), nullptr,
                                        pooled, act);
          const std::string s2 = v.conv(sub + ".fc2", child_as<torch::nn::Conv2dImpl>(kids, "fc2", sub), nullptr, s1,
                                        "sigmoid");
          v.size = keep;
          x = v.b.node(OpKind::kMul, sub + ".scale", {x, s2});
          continue;
        }
        const auto& conv = child_as<torch::nn::Conv2dImpl>(kids, "0", sub);
        if (in_channels < 0) in_channels = conv.options.in_channels();
        const bool last = k + 1 == block->size();
        const bool residual = last && v.size == in_size && conv.options.out_channels() == in_channels;
        x = conv_norm(*(*block)[k], sub, x, last ? "none" : act, residual ? input : "");
      }
    }
  }
  x = conv_norm(*layers[layers.size() - 1], "features." + std::to_string(layers.size() - 1), x, act);
  x = v.avg_pool("avgpool", x, false);
  const auto* head = (*m.classifier)[m.classifier->size() - 1]->as<torch::nn::LinearImpl>();
  HOTPATH_CHECK(head != nullptr, "lowering: EfficientNet classifier does not end in a Linear");
  return v.linear("classifier." + std::to_string(m.classifier->size() - 1), *head, x);
}

std::string lower_vit(VisionLowering& v, const models::ViT& m, std::string x) {
  const auto& config = m.config();
  HOTPATH_CHECK(v.size == config.options.image_size, "lowering: this ViT is built for ", config.options.image_size,
                "×", config.options.image_size, " images (its pos_embedding), the input is ", v.size, "×", v.size);
  x = v.conv("conv_proj", *m.conv_proj, nullptr, x, "none");
  x = v.b.node(OpKind::kVitEmbed, "encoder.embed", {x},
               {{"class_token", v.b.param("class_token", m.class_token)},
                {"pos_embedding", v.b.param("encoder.pos_embedding", m.pos_embedding)}});
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const auto& layer = *m.layers[i];
    const std::string name = "encoder.layers.encoder_layer_" + std::to_string(i);
    std::string h = v.layer_norm(name + ".ln_1", *layer.ln_1, x);
    h = v.linear(name + ".self_attention.in_proj", layer.in_proj_weight, layer.in_proj_bias, h);
    h = v.b.node(OpKind::kAttention, name + ".self_attention", {h}, {}, {{"heads", config.num_heads}});
    x = v.linear(name + ".self_attention.out_proj", *layer.out_proj, h, "none", x);
    h = v.layer_norm(name + ".ln_2", *layer.ln_2, x);
    const auto* fc1 = (*layer.mlp)[0]->as<torch::nn::LinearImpl>();
    const auto* fc2 = (*layer.mlp)[3]->as<torch::nn::LinearImpl>();
    HOTPATH_CHECK(fc1 != nullptr && fc2 != nullptr, "lowering: ", name, ".mlp is not Linear, GELU, Dropout, Linear");
    h = v.linear(name + ".mlp.0", *fc1, h, "gelu");
    x = v.linear(name + ".mlp.3", *fc2, h, "none", x);
  }
  // LayerNorm is per token: normalising only the class token gives the same features.
  x = v.b.node(OpKind::kSelect, "encoder.class_token", {x}, {}, {{"dim", std::int64_t{1}}, {"index", std::int64_t{0}}});
  x = v.layer_norm("encoder.ln", *m.ln, x);
  return v.linear("heads.head", *m.head, x);
}

}  // namespace

Graph lower_image_model(const models::ImageClassifier& model, const ImageInput& input) {
  HOTPATH_CHECK(input.channels >= 1 && input.channels <= 4 && input.image_size >= 1 && input.image_size <= 8192,
                "lowering: image input ", input.channels, "×", input.image_size, "×", input.image_size,
                " is out of range");
  VisionLowering v;
  v.size = input.image_size;
  v.b.input({"images", at::kFloat, {-1, input.channels, input.image_size, input.image_size},
             {"batch", "channels", "height", "width"}});
  const at::NoGradGuard no_grad;
  std::string out;
  if (const auto* resnet = dynamic_cast<const models::ResNet*>(&model)) {
    out = lower_resnet(v, *resnet, "images");
  } else if (const auto* cnn = dynamic_cast<const models::SmallCnn*>(&model)) {
    out = lower_cnn(v, *cnn, "images");
  } else if (const auto* eff = dynamic_cast<const models::EfficientNet*>(&model)) {
    out = lower_efficientnet(v, *eff, "images");
  } else if (const auto* vit = dynamic_cast<const models::ViT*>(&model)) {
    out = lower_vit(v, *vit, "images");
  } else {
    throw Error("lowering: no inference lowering for model " + model.name());
  }
  v.b.output_as(out, "logits");
  return v.b.finish();
}

}  // namespace hotpath::infer
