// fp32 convolution through oneDNN's own library (Debian libdnnl-dev), called directly: the primitive is
// created once per input shape, the weight reordered once into its layout, bias + residual add + activation
// run as post-ops, activations are NHWC (channels-last) in and out, asymmetric padding is native.
//
// Why not LibTorch's copy of oneDNN: ATen's mkldnn::_convolution_pointwise re-creates the primitive descriptor
// on every call (~30 µs each, half of EfficientNet-Lite0's batch-1 time), pads TensorFlow's "same" padding
// with a separate pass, and libtorch_cpu.so does not export oneDNN's symbols. This module is torch-free so that
// it sees Debian's dnnl.hpp (v2), not the v3 header in torch/include. The inference engine's fp32 convs run
// here; ATen's op stays its twin (EngineOptions::direct_convs = false). A build without libdnnl-dev still
// compiles: unavailable() then says why and the engine keeps ATen's path.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace hotpath::ops {

struct ConvGeometry {
  std::int64_t batch = 1, in_channels = 0, height = 0, width = 0;
  std::int64_t out_channels = 0, kernel_h = 1, kernel_w = 1, groups = 1;
  std::array<std::int64_t, 2> stride{1, 1}, dilation{1, 1};
  std::array<std::int64_t, 4> padding{0, 0, 0, 0};  // top, left, bottom, right

  [[nodiscard]] std::int64_t out_height() const;
  [[nodiscard]] std::int64_t out_width() const;
};

// The activations fused as post-ops. Not tanh nor tanh-gelu: under QEMU's Haswell model (the tests' real-AVX2
// CPU) oneDNN 2.6's AVX2 code for them crashed; the engine runs those after the conv instead.
enum class ConvActivation { kNone, kRelu, kRelu6, kGelu, kSilu, kSigmoid };

// How a 3x3 stride-1 conv without residual is computed. oneDNN's Winograd F(2x2, 3x3) kernel (AVX-512 only, relu
// or no activation) takes blocked nChw16c activations: the conv then reorders its input and output around it.
// kAuto takes it where it is faster on ResNet's shapes: an output plane of at least kWinogradMinPlane positions.
// The kernel alone against the direct one on spr (2 threads, without the reorders): 56x56x64 1.68x, 28x28x128
// 1.96x, 14x14x256 1.31x, 7x7x512 0.98x; with the reorders, ResNet-50 batch 1 (11 convs on Winograd) is 2-4 %
// faster than all-direct. A fixed rule, not a timing at load: the same package gives the same bits every run.
// kWinograd insists (throws where there is none).
enum class ConvAlgorithm { kAuto, kDirect, kWinograd };
inline constexpr std::int64_t kWinogradMinPlane = 14 * 14;

class OneDnnConv;

struct ConvOptions {
  ConvActivation activation = ConvActivation::kNone;
  // run() adds an NHWC tensor of the output's shape before the activation (a ResNet block's skip connection).
  bool residual = false;
  ConvAlgorithm algorithm = ConvAlgorithm::kAuto;
  // A conv of the same weights for another input shape (another batch size): where oneDNN wants them in the same
  // layout, the reordered copy is shared instead of made again.
  const OneDnnConv* same_weights = nullptr;
};

class OneDnnConv {
 public:
  // "" when this build calls oneDNN's library directly, else why it does not.
  static std::string unavailable();

  // weight: [out_channels, in_channels / groups, kernel_h, kernel_w], contiguous; bias: [out_channels] or
  // nullptr. Both are copied. Throws hotpath::Error on a geometry oneDNN refuses or has no direct kernel for.
  OneDnnConv(const ConvGeometry& geometry, const float* weight, const float* bias, const ConvOptions& options = {});
  OneDnnConv(OneDnnConv&&) noexcept;
  OneDnnConv& operator=(OneDnnConv&&) noexcept;
  OneDnnConv(const OneDnnConv&) = delete;
  OneDnnConv& operator=(const OneDnnConv&) = delete;
  ~OneDnnConv();

  // src: [batch, height, width, in_channels]; dst: [batch, out_height, out_width, out_channels]; residual as
  // dst (required when constructed with residual). Safe to call from several threads at once.
  void run(const float* src, float* dst, const float* residual = nullptr) const;

  [[nodiscard]] const ConvGeometry& geometry() const;
  // oneDNN's implementation, e.g. "brgconv_1x1:avx512_core" or "jit_fp32_wino_2x3:avx512_core".
  [[nodiscard]] const std::string& implementation() const;
  [[nodiscard]] bool winograd() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::ops
