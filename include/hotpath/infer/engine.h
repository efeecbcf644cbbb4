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
// graph().outputs, float32, contiguous, owned by the caller (never a view of the engine's buffers).
//
// Buffers (EngineOptions::plan_buffers): the first run of an input shape records every tensor each node
// writes (output, scratch) and how long it lives; a liveness pass packs them into one arena where tensors
// whose lifetimes do not overlap share bytes; later runs of that shape write every planned node's output
// into its place (out= kernels), so a steady-state text run allocates almost nothing. A bounded number of
// shapes keep plans (least recently used dropped). run() may be called from several threads at once: plans
// are shared, each concurrent run holds an arena of its own. describe() lists the arena bytes per shape.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
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
  // nodes run int8 and every other node fp32 on any CPU — the precision the export's accuracy report and
  // float fallback were measured in (bf16 there moved EfficientNet-Lite0's top-1 agreement with fp32 on
  // real photos from 98.0 % to 90.7 %: docs/inference-accuracy.md).
  Precision precision = Precision::kFp32;
  // bf16 also where the CPU lacks AVX512_BF16: oneDNN then emulates it (correct, several times slower).
  // For parity tests of the bf16 path on any AVX-512 CPU and for measuring, on such a CPU, what a bf16 CPU
  // will compute; describe() says "emulated". Needs AVX-512 (oneDNN's bf16 floor); fp32 below it.
  bool emulate_bf16 = false;
  // Text graphs (every node works per sample) given a batch of at least 2 with threads >= 2: the batch is
  // cut into `threads` parts and each thread runs the whole graph on its part with serial kernels — one
  // synchronisation per run instead of several per node. Results equal the unsplit run (every op is per
  // sample); false keeps every node's own intra-op parallelism. describe() says which.
  bool split_batch = true;
  // Batch 1 of a text graph on >= 2 threads, once its shape is planned: one parallel region per run; each
  // thread runs every per-token node (linear, LayerNorm, attention's queries, ...) on its rows of the
  // sequence and waits for the others only where a node reads every row (before each attention, before
  // the pooling tail) — one wait per layer instead of a parallel region per node. int8 results equal the
  // unsplit run bit for bit; fp32 ones within GEMM rounding.
  bool split_rows = true;
  // Per-shape buffer plans (see above); false allocates every value on every run.
  bool plan_buffers = true;
  // How many input shapes keep a plan and its arenas (least recently used dropped first).
  std::size_t planned_shapes = 8;
  // Channels-last memory for image activations (oneDNN's fast conv layout).
  bool channels_last = true;
  // fp32 convs on the CPU call oneDNN's library directly (ops/onednn_conv.h: one primitive per input shape,
  // asymmetric padding native) where the build has it; false runs ATen's mkldnn::_convolution_pointwise with
  // prepacked weights (the twin, and what a build without Debian's libdnnl-dev runs). describe() says which.
  bool direct_convs = true;
  // Where the graph runs. CUDA: weights and activations on the device in cuda_dtype (fp16 by default; bf16,
  // fp32), convs through cuDNN in benchmark mode, attention through SDPA; run() takes CPU inputs (staged
  // through pinned memory) and returns CPU outputs. int8 packages run on the CPU only. (infer/engine/cuda/)
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
  // Several lines: precision asked and used, per op kind the kernel chosen and why a faster one was not,
  // and a line per planned input shape (arena bytes, buffers, planned tensors).
  [[nodiscard]] std::string describe() const;

  // The buffer plans held now, most recently used first.
  struct BufferPlanInfo {
    std::vector<std::vector<std::int64_t>> input_shapes;
    std::int64_t arena_bytes = 0;  // one arena; each concurrent run of this shape holds one
    int buffers = 0;               // distinct buffers the tensors were packed into
    int planned = 0;               // tensors placed in the arena
    int unplanned = 0;             // node outputs that still allocate (graph outputs, ops without out= kernels)
    std::int64_t planned_bytes = 0;  // their bytes summed: what an arena without reuse would take
    std::size_t arenas = 0;        // arenas made so far (concurrent runs)
    bool split_rows = false;       // batch-1 runs of this shape split along the tokens
  };
  [[nodiscard]] std::vector<BufferPlanInfo> buffer_plans() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hotpath::infer
