// hotpath_int8_bench (Google Benchmark): hotpath's INT8 kernels against the float paths they replace.
//   Linear on BERT-base shapes (M = 128 / 4096 tokens; 768→768, 768→3072, 3072→768):
//     fp32 at::linear, bf16 at::linear, int8 Int8Linear::forward (quantize + _int_mm + fused epilogue),
//     its pieces (_int_mm alone on the stored [K, N] weight, and on a [N, K] weight's transposed view; oneDNN's
//     brgemm kernel called directly on the same weight, OneDnnInt8Matmul, where the CPU has AMX or AVX512_VNNI),
//     and onednn::qlinear_pointwise.tensor with a prepacked weight and a per-tensor u8 activation.
//   Conv on ResNet-50 layer shapes (batch 4, channels-last): fp32 at::conv2d + relu vs Int8Conv2d::forward
//     (u8 quantize + qconv_pointwise, relu fused), and with a fused residual add.
//   hotpath's int8_gemm (the product where LibTorch's _int_mm is a scalar loop: CPUs without AVX512_VNNI) against
//   that loop and fp32. An AVX2 CPU's view on an AVX-512 one: HOTPATH_MAX_ISA=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
//   ONEDNN_MAX_CPU_ISA=AVX2 (docs/benchmarks.md).
//   hotpath_int8_bench --threads 2 --benchmark_filter=Linear --benchmark_min_time=0.5s
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "hotpath/core/cpu.h"
#include "hotpath/ops/int8_conv.h"
#include "hotpath/ops/int8_gemm.h"
#include "hotpath/ops/int8_linear.h"
#include "hotpath/ops/onednn_matmul.h"

namespace {

using hotpath::ops::Int8Conv2d;
using hotpath::ops::Int8Linear;

// Linear shapes: {M, K, N}.
void linear_shapes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t m : {128, 4096}) {
    b->Args({m, 768, 768});
    b->Args({m, 768, 3072});
    b->Args({m, 3072, 768});
  }
  b->ArgNames({"M", "K", "N"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

struct LinearFixture {
  at::Tensor x, w, bias;
  LinearFixture(const benchmark::State& s) {
    at::manual_seed(0);
    x = at::randn({s.range(0), s.range(1)});
    w = at::randn({s.range(2), s.range(1)}) * 0.03;
    bias = at::randn({s.range(2)}) * 0.1;
  }
};

void set_items(benchmark::State& s) { s.SetItemsProcessed(s.iterations() * s.range(0)); }  // tokens/s

void LinearFp32(benchmark::State& s) {
  const LinearFixture f(s);
  for (auto _ : s) benchmark::DoNotOptimize(at::linear(f.x, f.w, f.bias));
  set_items(s);
}

void LinearBf16(benchmark::State& s) {
  const LinearFixture f(s);
  const at::Tensor x = f.x.to(at::kBFloat16), w = f.w.to(at::kBFloat16), b = f.bias.to(at::kBFloat16);
  for (auto _ : s) benchmark::DoNotOptimize(at::linear(x, w, b));
  set_items(s);
}

void LinearInt8(benchmark::State& s) {
  const LinearFixture f(s);
  const auto [w8, scale] = Int8Linear::quantize_weight(f.w);
  const Int8Linear op = Int8Linear::prepare(w8, scale, f.bias);
  for (auto _ : s) benchmark::DoNotOptimize(op.forward(f.x));
  set_items(s);
}

void LinearInt8Gelu(benchmark::State& s) {
  const LinearFixture f(s);
  const auto [w8, scale] = Int8Linear::quantize_weight(f.w);
  const Int8Linear op = Int8Linear::prepare(w8, scale, f.bias);
  for (auto _ : s) benchmark::DoNotOptimize(op.forward(f.x, "gelu"));
  set_items(s);
}

void LinearFp32Gelu(benchmark::State& s) {
  const LinearFixture f(s);
  for (auto _ : s) {
    at::Tensor y = at::linear(f.x, f.w, f.bias);
    benchmark::DoNotOptimize(at::gelu_(y));
  }
  set_items(s);
}

// The int8 matmul alone: the stored [K, N] weight vs a [N, K] weight's transposed view.
void IntMmKN(benchmark::State& s) {
  const LinearFixture f(s);
  const at::Tensor q = at::randint(-127, 128, f.x.sizes(), at::kChar);
  const at::Tensor w_kn = at::randint(-127, 128, {s.range(1), s.range(2)}, at::kChar);
  for (auto _ : s) benchmark::DoNotOptimize(at::_int_mm(q, w_kn));
  set_items(s);
}

// The same product on oneDNN's brgemm kernel called directly (the weight reordered once at construction).
void OneDnnBrgemm(benchmark::State& s) {
  const LinearFixture f(s);
  const at::Tensor q = at::randint(-127, 128, f.x.sizes(), at::kChar);
  const at::Tensor w_kn = at::randint(-127, 128, {s.range(1), s.range(2)}, at::kChar);
  at::Tensor c = at::empty({s.range(0), s.range(2)}, at::kInt);
  try {
    const hotpath::ops::OneDnnInt8Matmul mm(s.range(1), s.range(2), w_kn.const_data_ptr<std::int8_t>());
    for (auto _ : s) {
      if (!mm.try_run(q.const_data_ptr<std::int8_t>(), s.range(0), c.data_ptr<std::int32_t>())) {
        s.SkipWithError("declined this row count");
        break;
      }
      benchmark::DoNotOptimize(c.data_ptr());
    }
    s.SetLabel(mm.implementation());
  } catch (const std::exception& e) {
    s.SkipWithError(e.what());
    return;
  }
  set_items(s);
}

void IntMmNKView(benchmark::State& s) {
  const LinearFixture f(s);
  const at::Tensor q = at::randint(-127, 128, f.x.sizes(), at::kChar);
  const at::Tensor w_nk = at::randint(-127, 128, {s.range(2), s.range(1)}, at::kChar);
  for (auto _ : s) benchmark::DoNotOptimize(at::_int_mm(q, w_nk.t()));
  set_items(s);
}

// What an AVX2-only CPU runs for _int_mm: LibTorch's scalar loop (taken wherever oneDNN is off or the CPU lacks
// AVX512_VNNI; here forced by turning oneDNN off for the loop).
void IntMmScalarLoop(benchmark::State& s) {
  const LinearFixture f(s);
  const at::Tensor q = at::randint(-127, 128, f.x.sizes(), at::kChar);
  const at::Tensor w_kn = at::randint(-127, 128, {s.range(1), s.range(2)}, at::kChar);
  const bool was = at::globalContext().userEnabledMkldnn();
  at::globalContext().setUserEnabledMkldnn(false);
  for (auto _ : s) benchmark::DoNotOptimize(at::_int_mm(q, w_kn));
  at::globalContext().setUserEnabledMkldnn(was);
  set_items(s);
}

// hotpath's int8_gemm (what Int8Linear runs instead there), the variant HOTPATH_MAX_ISA allows, over weights
// in [-wmax, wmax]: 127 (8 bits) or 63 (7 bits: on AVX2 the u8·s8 product that Int8Linear's kAuto picks there).
void int8_gemm_bench(benchmark::State& s, int wmax) {
  const LinearFixture f(s);
  const at::Tensor q = at::randint(-127, 128, f.x.sizes(), at::kChar);
  const hotpath::ops::Int8PackedB w =
      hotpath::ops::int8_gemm_pack(at::randint(-wmax, wmax + 1, {s.range(1), s.range(2)}, at::kChar));
  at::Tensor c = at::empty({s.range(0), s.range(2)}, at::kInt);
  for (auto _ : s) {
    hotpath::ops::int8_gemm_out(q, w, c);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_items(s);
}
void Int8Gemm(benchmark::State& s) { int8_gemm_bench(s, 127); }
void Int8Gemm7(benchmark::State& s) { int8_gemm_bench(s, 63); }

// Int8Linear::forward with hotpath's int8_gemm forced (kAuto: 7-bit weights where its AVX2 kernel runs): the
// whole op where _int_mm is scalar.
void LinearInt8HotpathGemm(benchmark::State& s) {
  const LinearFixture f(s);
  const auto [w8, scale] = Int8Linear::quantize_weight(f.w);
  const Int8Linear op = Int8Linear::prepare(w8, scale, f.bias, hotpath::ops::Int8MatmulMode::kAuto,
                                            hotpath::ops::Int8MatmulKernel::kHotpathGemm);
  for (auto _ : s) benchmark::DoNotOptimize(op.forward(f.x));
  set_items(s);
}

void QuantizeRows(benchmark::State& s) {
  const LinearFixture f(s);
  for (auto _ : s) benchmark::DoNotOptimize(hotpath::ops::int8_quantize_rows(f.x));
  set_items(s);
}

// The fused dequantize epilogue alone (acc · x_scale · w_scale + bias → act → f32).
void epilogue(benchmark::State& s, const char* act) {
  const LinearFixture f(s);
  const at::Tensor acc = at::randint(-100000, 100000, {s.range(0), s.range(2)}, at::kInt);
  const at::Tensor x_scale = at::rand({s.range(0)}) * 1e-5, w_scale = at::rand({s.range(2)});
  for (auto _ : s) {
    benchmark::DoNotOptimize(hotpath::ops::int8_dequantize_epilogue(acc, x_scale, w_scale, f.bias, {}, act, at::kFloat));
  }
  set_items(s);
}
void Epilogue(benchmark::State& s) { epilogue(s, "none"); }
void EpilogueGelu(benchmark::State& s) { epilogue(s, "gelu"); }
// The epilogue without activation, then ATen's gelu_ in place (what the engine does for gelu today).
void EpilogueThenAtenGelu(benchmark::State& s) {
  const LinearFixture f(s);
  const at::Tensor acc = at::randint(-100000, 100000, {s.range(0), s.range(2)}, at::kInt);
  const at::Tensor x_scale = at::rand({s.range(0)}) * 1e-5, w_scale = at::rand({s.range(2)});
  for (auto _ : s) {
    at::Tensor y = hotpath::ops::int8_dequantize_epilogue(acc, x_scale, w_scale, f.bias, {}, "none", at::kFloat);
    benchmark::DoNotOptimize(at::gelu_(y));
  }
  set_items(s);
}

// Int8Linear::forward's three steps without the row blocks: one _int_mm over all rows, one epilogue.
void LinearInt8Unblocked(benchmark::State& s) {
  const LinearFixture f(s);
  const auto [w8, scale] = Int8Linear::quantize_weight(f.w);
  const Int8Linear op = Int8Linear::prepare(w8, scale, f.bias);
  for (auto _ : s) {
    const auto [q, x_scale] = hotpath::ops::int8_quantize_rows(f.x);
    benchmark::DoNotOptimize(hotpath::ops::int8_dequantize_epilogue(at::_int_mm(q, op.weight_kn()), x_scale,
                                                                    op.weight_scale(), f.bias, {}, "none", at::kFloat));
  }
  set_items(s);
}

// onednn::qlinear_pointwise.tensor: per-tensor u8 activation (absmax → scale, zero point 128), prepacked
// s8 weight, float output with bias; called boxed (the per-call cost is the same for both candidates).
void QLinearPointwise(benchmark::State& s) {
  const LinearFixture f(s);
  const auto [w8, w_scale] = Int8Linear::quantize_weight(f.w);
  auto& dispatcher = c10::Dispatcher::singleton();
  const auto prepack = dispatcher.findSchemaOrThrow("onednn::qlinear_prepack", "");
  const auto pointwise = dispatcher.findSchemaOrThrow("onednn::qlinear_pointwise", "tensor");
  std::vector<c10::IValue> stack{w8, c10::IValue(std::vector<std::int64_t>{s.range(0), s.range(1)})};
  prepack.callBoxed(stack);
  const at::Tensor packed = stack[0].toTensor();
  const at::Tensor w_zp = at::zeros({s.range(2)}, at::kLong);
  const at::Tensor x_zp = at::full({1}, 128, at::kLong);
  for (auto _ : s) {
    const at::Tensor x_scale = (f.x.abs().max() / 127.0).reshape({1});
    const at::Tensor qx = hotpath::ops::int8_quantize_u8(f.x.view({s.range(0), s.range(1), 1, 1}),
                                                         x_scale.item<double>(), 128)
                              .view({s.range(0), s.range(1)});
    std::vector<c10::IValue> args{qx,     x_scale, x_zp, packed, w_scale, w_zp, f.bias, 1.0, std::int64_t{0},
                                  at::kFloat, std::string("none"), c10::List<std::optional<at::Scalar>>(),
                                  std::string("")};
    pointwise.callBoxed(args);
    benchmark::DoNotOptimize(args[0].toTensor());
  }
  set_items(s);
}

BENCHMARK(LinearFp32)->Apply(linear_shapes);
BENCHMARK(LinearBf16)->Apply(linear_shapes);
BENCHMARK(LinearInt8)->Apply(linear_shapes);
BENCHMARK(LinearInt8Unblocked)->Apply(linear_shapes);
BENCHMARK(QLinearPointwise)->Apply(linear_shapes);
BENCHMARK(IntMmKN)->Apply(linear_shapes);
BENCHMARK(IntMmNKView)->Apply(linear_shapes);
BENCHMARK(OneDnnBrgemm)->Apply(linear_shapes);
BENCHMARK(IntMmScalarLoop)->Args({128, 768, 768})->Args({128, 768, 3072})->ArgNames({"M", "K", "N"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Int8Gemm)->Apply(linear_shapes);
BENCHMARK(Int8Gemm7)->Apply(linear_shapes);
BENCHMARK(LinearInt8HotpathGemm)->Apply(linear_shapes);
BENCHMARK(QuantizeRows)->Apply(linear_shapes);
BENCHMARK(Epilogue)->Apply(linear_shapes);
BENCHMARK(EpilogueGelu)->Apply(linear_shapes);
BENCHMARK(EpilogueThenAtenGelu)->Apply(linear_shapes);
BENCHMARK(LinearFp32Gelu)->Args({128, 768, 3072})->Args({4096, 768, 3072})->ArgNames({"M", "K", "N"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(LinearInt8Gelu)->Args({128, 768, 3072})->Args({4096, 768, 3072})->ArgNames({"M", "K", "N"})->Unit(benchmark::kMicrosecond)->UseRealTime();

// ResNet-50 conv shapes at batch 4: {in, out, kernel, stride, spatial}.
void conv_shapes(benchmark::internal::Benchmark* b) {
  b->Args({64, 64, 3, 1, 56});     // layer1 3x3
  b->Args({256, 64, 1, 1, 56});    // layer1 1x1 reduce
  b->Args({64, 256, 1, 1, 56});    // layer1 1x1 expand
  b->Args({128, 128, 3, 2, 56});   // layer2 first 3x3, stride 2
  b->Args({256, 256, 3, 1, 14});   // layer3 3x3
  b->Args({1024, 256, 1, 1, 14});  // layer3 1x1 reduce
  b->Args({512, 512, 3, 1, 7});    // layer4 3x3
  b->ArgNames({"in", "out", "k", "stride", "hw"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

struct ConvFixture {
  static constexpr std::int64_t kBatch = 4;
  at::Tensor x, w, bias, residual;
  std::vector<std::int64_t> stride, padding;
  ConvFixture(const benchmark::State& s) {
    at::manual_seed(0);
    const std::int64_t k = s.range(2), st = s.range(3), hw = s.range(4);
    x = at::relu(at::randn({kBatch, s.range(0), hw, hw})).contiguous(at::MemoryFormat::ChannelsLast);
    w = (at::randn({s.range(1), s.range(0), k, k}) * 0.05).contiguous(at::MemoryFormat::ChannelsLast);
    bias = at::randn({s.range(1)}) * 0.1;
    stride = {st, st};
    padding = {k / 2, k / 2};
    const std::int64_t out_hw = (hw + 2 * (k / 2) - k) / st + 1;
    residual = at::randn({kBatch, s.range(1), out_hw, out_hw}).contiguous(at::MemoryFormat::ChannelsLast);
  }
  Int8Conv2d int8() const {
    const auto [w8, scale] = Int8Conv2d::quantize_weight(w);
    const std::int64_t p = padding[0];
    return Int8Conv2d::prepare(w8, scale, bias, hotpath::ops::int8_affine_u8_params(0.0, x.max().item<double>()),
                               {.stride = stride, .padding = {p, p, p, p}});
  }
};

void ConvFp32Relu(benchmark::State& s) {
  const ConvFixture f(s);
  for (auto _ : s) benchmark::DoNotOptimize(at::conv2d(f.x, f.w, f.bias, f.stride, f.padding).relu_());
  s.SetItemsProcessed(s.iterations() * ConvFixture::kBatch);
}

void ConvInt8Relu(benchmark::State& s) {
  const ConvFixture f(s);
  const Int8Conv2d op = f.int8();
  for (auto _ : s) benchmark::DoNotOptimize(op.forward(f.x, "relu"));
  s.SetItemsProcessed(s.iterations() * ConvFixture::kBatch);
}

void ConvFp32AddRelu(benchmark::State& s) {
  const ConvFixture f(s);
  for (auto _ : s) benchmark::DoNotOptimize(at::conv2d(f.x, f.w, f.bias, f.stride, f.padding).add_(f.residual).relu_());
  s.SetItemsProcessed(s.iterations() * ConvFixture::kBatch);
}

void ConvInt8AddRelu(benchmark::State& s) {
  const ConvFixture f(s);
  const Int8Conv2d op = f.int8();
  for (auto _ : s) benchmark::DoNotOptimize(op.forward(f.x, "relu", f.residual));
  s.SetItemsProcessed(s.iterations() * ConvFixture::kBatch);
}

void QuantizeU8(benchmark::State& s) {
  const ConvFixture f(s);
  for (auto _ : s) benchmark::DoNotOptimize(hotpath::ops::int8_quantize_u8(f.x, 0.02, 0));
  s.SetItemsProcessed(s.iterations() * ConvFixture::kBatch);
}

BENCHMARK(ConvFp32Relu)->Apply(conv_shapes);
BENCHMARK(ConvInt8Relu)->Apply(conv_shapes);
BENCHMARK(ConvFp32AddRelu)->Apply(conv_shapes);
BENCHMARK(ConvInt8AddRelu)->Apply(conv_shapes);
BENCHMARK(QuantizeU8)->Apply(conv_shapes);

}  // namespace

// --threads N (default 2) before Google Benchmark's own flags; the dispatch report goes to stderr.
int main(int argc, char** argv) {
  int threads = 2;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  at::set_num_threads(threads);
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::AddCustomContext("threads", std::to_string(threads));
  benchmark::AddCustomContext("int8_matmul", hotpath::ops::int8_linear_matmul_note());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::cerr << hotpath::cpu::dispatch_report_text();
  return 0;
}
