// hotpath/infer/engine.h — run a lowered graph (graph.h) fast: no autograd, folded and fused ops,
// channels-last convolutions, bf16 where the CPU has native bf16, int8 where the graph was quantized.
//
//   Engine engine = Engine::load("pkg/resnet50-int8", {.threads = 2});       // a package (package_dir.h)
//   at::Tensor logits = engine.run({images}).front();                        // [N, 3, 224, 224] → [N, 1000]
//   std::cout << engine.describe();                                          // precision, kernels, why
//   Engine gpu = Engine::load("pkg/resnet50", {.device = at::Device(at::kCUDA, 0)});  // fp16 on the GPU
//
// One API for every model: inputs in the order of graph().inputs (image models: one float image batch;
// text models: input_ids, attention_mask, token_type_ids as int64 [B, L]). Outputs in the order of
// graph().outputs, float32, contiguous. run() is thread-compatible, not thread-safe: one caller at a
// time per Engine (the server gives each batcher its own).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hotpath/infer/graph.h"

namespace hotpath::infer {

enum class Precision { kFp32, kBf16, kInt8 };  // "fp32" | "bf16" | "int8"
const char* precision_name(Precision p);
Precision parse_precision(const std::string& name, const std::string& where);  // throws naming `where`

struct EngineOptions {
  // Intra-op threads for this engine's ops; 0 = keep LibTorch's current setting.
  int threads = 0;
  // fp32: float everywhere. bf16: float activations at the graph's edges, bf16 weights and activations
  // inside where the CPU has AVX512_BF16 (otherwise fp32, said in describe()). int8: the graph's quantized
  // nodes run int8, the rest as bf16 would.
  Precision precision = Precision::kFp32;
  // Text graphs (every node works per sample) given a batch of at least 2 with threads >= 2: the batch is
  // cut into `threads` parts and each thread runs the whole graph on its part with serial kernels — one
  // synchronisation per run instead of several per node. Results equal the unsplit run (every op is per
  // sample); false keeps every node's own intra-op parallelism. describe() says which.
  bool split_batch = true;
  // Channels-last memory for image activations (oneDNN's fast conv layout).
  bool channels_last = true;
  // Where the graph runs. CUDA: weights and activations on the device in cuda_dtype (fp16 by default; bf16,
  // fp32), convs through cuDNN in benchmark mode, attention through SDPA; run() takes CPU inputs (staged
  // through pinned memory) and returns CPU outputs. int8 packages run on the CPU only. (infer/cuda/)
  at::Device device = at::Device(at::kCPU);
  at::ScalarType cuda_dtype = at::kHalf;
};

class Engine {
 public:
  // A model package directory (config.json + model.safetensors, see package_dir.h); precision comes from
  // the package unless options say otherwise explicitly via from_graph.
  static Engine load(const std::string& package_dir, EngineOptions options = {});
  // Validates the graph, prepares weights (dtype, layout, packing) once.
  static Engine from_graph(Graph graph, EngineOptions options = {});

  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  // Checks each input against graph().inputs (rank, fixed dims, dtype) naming the input, then runs.
  [[nodiscard]] std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  // Called after each node with the node, the values it read (undefined for absent optional inputs) and
  // the value it wrote, in the engine's compute dtype and layout: calibration ranges, per-layer errors.
  using NodeObserver =
      std::function<void(const Node& node, const std::vector<at::Tensor>& inputs, const at::Tensor& output)>;
  [[nodiscard]] std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, const NodeObserver& observer) const;

  [[nodiscard]] const Graph& graph() const;
  [[nodiscard]] const EngineOptions& options() const;
  // Several lines: precision asked and used, per op kind the kernel chosen and why a faster one was not.
  [[nodiscard]] std::string describe() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::infer
