// Quantization-aware training of an image graph (qat.h): the graph interpreted with ATen ops under autograd,
// fake quantization where the int8 engine quantizes, distillation from the fp32 engine, ATen's fused AdamW.
#include "hotpath/infer/qat.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/ops/int8_conv.h"
#include "hotpath/ops/int8_kernels.h"
#include "hotpath/ops/int8_linear.h"

namespace hotpath::infer {
namespace {

using Ranges = std::map<std::string, std::pair<double, double>>;

bool image_op(OpKind op) {
  switch (op) {
    case OpKind::kConv2d:
    case OpKind::kMaxPool2d:
    case OpKind::kGlobalAvgPool:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kLinear:
      return true;
    default:
      return false;
  }
}

// The weight bits this CPU's engine keeps for convs and linears (7 where a u8·s8 pair would saturate int16 or
// where hotpath's own AVX2 gemm runs faster at 7 bits): read from the ops themselves, not guessed.
std::pair<int, int> engine_weight_bits() {
  const at::Tensor w = at::ones({1, 1, 1, 1}, at::kChar);
  const at::Tensor s = at::ones({1}, at::kFloat);
  const int conv = ops::Int8Conv2d::prepare(w, s, at::Tensor(), {}, {}).weight_bits();
  const int linear = ops::Int8Linear::prepare(w.view({1, 1}), s, at::Tensor()).weight_bits();
  return {conv, linear};
}

// Per output channel symmetric, as quantize_weight rounds (max|w|/127, an all-zero row scale 1); at 7 bits the
// engine rounds the 8-bit weight again to 63/127 of its grid, so the simulation rounds twice too.
at::Tensor fake_quant_weight(const at::Tensor& w, int bits) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 1; d < w.dim(); ++d) dims.push_back(d);
  at::Tensor absmax = w.detach().abs().amax(dims);
  absmax = at::where(absmax == 0, at::full_like(absmax, 127.0), absmax);
  const at::Tensor scale = absmax / 127.0;
  const at::Tensor zero = at::zeros(scale.sizes(), scale.options().dtype(at::kInt));
  at::Tensor q = at::fake_quantize_per_channel_affine(w, scale, zero, 0, -127, 127);
  if (bits == 7) q = at::fake_quantize_per_channel_affine(q, scale * (127.0 / 63.0), zero, 0, -63, 63);
  return q;
}

// Per-tensor affine u8 over [min(lo, 0), max(hi, 0)]: the static int8 conv's input.
at::Tensor fake_quant_u8(const at::Tensor& x, const std::pair<double, double>& range) {
  const ops::Int8InputQuant q = ops::int8_affine_u8_params(range.first, range.second);
  return at::fake_quantize_per_tensor_affine(x, q.scale, q.zero_point, 0, 255);
}

// Per row symmetric, max|x_row|/127: the dynamic int8 linear's input (its range always covers the row).
at::Tensor fake_quant_rows(const at::Tensor& x) {
  const at::Tensor flat = x.reshape({-1, x.size(-1)});
  at::Tensor scale = flat.detach().abs().amax({1}, /*keepdim=*/true) / 127.0;
  scale = at::where(scale == 0, at::ones_like(scale), scale);
  const at::Tensor q = at::round(flat.detach() / scale).clamp(-127, 127) * scale;
  return (flat + (q - flat.detach())).view(x.sizes());
}

// The graph interpreted with ATen ops (differentiable), fake-quantized as configured.
struct QatInterpreter {
  const Graph& graph;
  const std::map<std::string, at::Tensor>& params;  // the trained (or given) float parameters, by key
  Ranges& ranges;                                   // conv input ranges, by node name
  // Learned input quantization (LSQ): each conv's u8 scale and zero point as trained tensors, by node name; a conv
  // found here is fake-quantized by them, not by `ranges`.
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> learned{};
  std::set<std::string> keep;
  int conv_bits = 8;
  int linear_bits = 8;
  bool quantize_linear = true;
  bool observe = false;            // update the ranges from this batch (moving average)
  bool fill_missing = false;       // a conv without a range takes this batch's min/max (training)
  std::int64_t step = 0;           // for messages
  double momentum = 0.1;

  [[nodiscard]] at::Tensor param(const Node& n, const std::string& role) const {
    auto it = n.params.find(role);
    return it == n.params.end() ? at::Tensor() : params.at(it->second);
  }

  at::Tensor conv(const Node& n, at::Tensor x, const at::Tensor& residual) {
    at::Tensor w = param(n, "weight");
    if (keep.count(n.name) == 0) {
      if (observe || (fill_missing && ranges.count(n.name) == 0)) {
        const auto [lo_t, hi_t] = at::aminmax(x.detach());
        const double lo = lo_t.item<double>(), hi = hi_t.item<double>();
        HOTPATH_CHECK(std::isfinite(lo) && std::isfinite(hi), "qat: step ", step, ": the input of conv ", n.name,
                      " is not finite; lower the learning rate or check the data");
        auto [it, fresh] = ranges.try_emplace(n.name, lo, hi);
        if (!fresh) {
          it->second.first += momentum * (lo - it->second.first);
          it->second.second += momentum * (hi - it->second.second);
        }
      }
      if (auto l = learned.find(n.name); l != learned.end()) {
        const double grad_factor = 1.0 / std::sqrt(static_cast<double>(x[0].numel()) * 255.0);
        x = at::_fake_quantize_learnable_per_tensor_affine(x, l->second.first, l->second.second, 0, 255, grad_factor);
        w = fake_quant_weight(w, conv_bits);
      } else if (auto it = ranges.find(n.name); it != ranges.end()) {
        x = fake_quant_u8(x, it->second);
        w = fake_quant_weight(w, conv_bits);
      }
    }
    const auto p = n.attr_ints("padding", {0, 0, 0, 0});
    at::Tensor y = at::conv2d(at::constant_pad_nd(x, {p[1], p[3], p[0], p[2]}, 0.0), w, param(n, "bias"),
                              n.attr_ints("stride", {1, 1}), at::IntArrayRef{0, 0}, n.attr_ints("dilation", {1, 1}),
                              n.attr_int("groups", 1));
    if (residual.defined()) y = y + residual;
    return ops::apply_activation_reference(y, n.attr_str("act", "none"));
  }

  at::Tensor linear(const Node& n, at::Tensor x, const at::Tensor& residual) const {
    at::Tensor w = param(n, "weight");
    if (quantize_linear && keep.count(n.name) == 0) {
      x = fake_quant_rows(x);
      w = fake_quant_weight(w, linear_bits);
    }
    at::Tensor y = at::linear(x, w, param(n, "bias"));
    if (residual.defined()) y = y + residual;
    return ops::apply_activation_reference(y, n.attr_str("act", "none"));
  }

  std::vector<at::Tensor> forward(const at::Tensor& images) {
    std::map<std::string, at::Tensor> values{{graph.inputs.front().name, images}};
    const auto in = [&](const Node& n, std::size_t i) -> at::Tensor {
      const std::string& name = n.input(i);
      return name.empty() ? at::Tensor() : values.at(name);
    };
    for (const Node& n : graph.nodes) {
      at::Tensor y;
      switch (n.op) {
        case OpKind::kConv2d: y = conv(n, in(n, 0), in(n, 1)); break;
        case OpKind::kLinear: y = linear(n, in(n, 0), in(n, 1)); break;
        case OpKind::kMaxPool2d: {
          const auto pad = n.attr_ints("padding", {0, 0});
          y = at::max_pool2d(in(n, 0), n.attr_ints("kernel", {}), n.attr_ints("stride", {}), pad);
          break;
        }
        case OpKind::kGlobalAvgPool: y = in(n, 0).mean({2, 3}, n.attr_int("keepdims", 0) != 0); break;
        case OpKind::kAdd:
          y = ops::apply_activation_reference(in(n, 0) + in(n, 1), n.attr_str("act", "none"));
          break;
        case OpKind::kMul: y = in(n, 0) * in(n, 1); break;
        default: HOTPATH_CHECK(false, "qat: node ", n.name, " is a ", n.op, ", which QAT does not run");
      }
      values[n.output] = std::move(y);
    }
    std::vector<at::Tensor> out;
    for (const std::string& name : graph.outputs) out.push_back(values.at(name));
    return out;
  }
};

void check_graph(const Graph& g, const std::vector<std::string>& keep_float) {
  g.validate();
  HOTPATH_CHECK(g.inputs.size() == 1 && g.inputs.front().dtype == at::kFloat && g.inputs.front().shape.size() == 4,
                "qat: expected an image graph with one float input [N, C, H, W]; this one has ", g.inputs.size(),
                " input(s)");
  for (const Node& n : g.nodes) {
    HOTPATH_CHECK(image_op(n.op), "qat: node ", n.name, " is a ", n.op,
                  "; QAT trains image graphs (conv2d, max_pool2d, global_avg_pool, add, mul, linear)");
    HOTPATH_CHECK(n.attr_str("quant", "").empty(), "qat: node ", n.name, " is already quantized (",
                  n.attr_str("quant", ""), "); QAT starts from the fp32 graph");
  }
  for (const std::string& name : keep_float) {
    const Node* n = g.find_node(name);
    HOTPATH_CHECK(n != nullptr && (n->op == OpKind::kLinear || n->op == OpKind::kConv2d),
                  "qat: keep_float names '", name, "', which is no linear or conv2d node of the graph");
  }
}

void check_options(const QatOptions& o) {
  HOTPATH_CHECK(o.steps >= 1 && o.steps <= 10000000, "qat: steps must be in [1, 10000000]; got ", o.steps);
  HOTPATH_CHECK(o.lr > 0.0 && std::isfinite(o.lr), "qat: lr must be > 0; got ", o.lr);
  HOTPATH_CHECK(o.weight_decay >= 0.0 && std::isfinite(o.weight_decay), "qat: weight_decay must be >= 0; got ",
                o.weight_decay);
  HOTPATH_CHECK(o.observer_steps >= -1 && o.observer_steps <= o.steps,
                "qat: observer_steps must be -1 (the default) or in [0, steps = ", o.steps, "]; got ",
                o.observer_steps);
  for (const auto& [name, range] : o.initial_ranges) {
    HOTPATH_CHECK(std::isfinite(range.first) && std::isfinite(range.second) && range.first <= range.second,
                  "qat: initial_ranges['", name, "'] must be a finite [lo, hi] with lo <= hi; got [", range.first, ", ",
                  range.second, "]");
  }
  HOTPATH_CHECK(o.observer_momentum > 0.0 && o.observer_momentum <= 1.0,
                "qat: observer_momentum must be in (0, 1]; got ", o.observer_momentum);
  HOTPATH_CHECK(o.temperature > 0.0 && std::isfinite(o.temperature), "qat: temperature must be > 0; got ",
                o.temperature);
  HOTPATH_CHECK(o.label_weight >= 0.0 && std::isfinite(o.label_weight), "qat: label_weight must be >= 0; got ",
                o.label_weight);
  HOTPATH_CHECK(o.weight_bits == 0 || o.weight_bits == 7 || o.weight_bits == 8,
                "qat: weight_bits must be 0 (the engine's), 7 or 8; got ", o.weight_bits);
}

// The batch against the graph's input (fixed dims, float) and the logits' rows (labels).
void check_batch(const Graph& g, const QatBatch& b, std::int64_t step, bool need_labels) {
  const ValueSpec& spec = g.inputs.front();
  bool fits = b.images.defined() && b.images.dim() == 4 && b.images.is_floating_point() && b.images.size(0) >= 1;
  for (std::size_t d = 0; fits && d < spec.shape.size(); ++d) {
    fits = spec.shape[d] < 0 || spec.shape[d] == b.images.size(static_cast<std::int64_t>(d));
  }
  HOTPATH_CHECK(fits, "qat: step ", step, ": the batch's images do not fit the graph's input ", spec.name, " (",
                b.images.defined() ? b.images.toString() : std::string("undefined"), " ",
                b.images.defined() ? b.images.sizes() : c10::IntArrayRef{}, ")");
  if (!need_labels) return;
  HOTPATH_CHECK(b.labels.defined() && b.labels.dim() == 1 && b.labels.size(0) == b.images.size(0) &&
                    b.labels.scalar_type() == at::kLong,
                "qat: step ", step, ": label_weight > 0 needs int64 labels [", b.images.size(0), "] with each batch");
}

// A graph's parameters as float copies, the trained ones requiring gradients: every float param (conv/linear weights
// and biases), or without `weights` only the ones some node reads as its bias.
struct Trainable {
  std::map<std::string, at::Tensor> params;  // every param, by key
  std::vector<std::string> keys;             // the trained ones' keys ...
  std::vector<at::Tensor> tensors;           // ... and tensors
};

Trainable trainable_params(const Graph& g, bool weights) {
  std::set<std::string> biases;
  for (const Node& n : g.nodes) {
    if (auto it = n.params.find("bias"); it != n.params.end()) biases.insert(it->second);
  }
  Trainable t;
  for (const auto& [key, value] : g.params) {
    at::Tensor p = value.detach().to(at::kFloat).clone();
    if (p.is_floating_point() && (weights || biases.count(key) != 0)) {
      p.requires_grad_(true);
      t.keys.push_back(key);
      t.tensors.push_back(p);
    }
    t.params.emplace(key, std::move(p));
  }
  return t;
}

// QAT's start: the fp32 graph's nodes and params with other values; plain fine-tuning's: any image graph with the
// teacher's input and outputs (a pruned copy).
void check_start_graph(const Graph& fp32, const Graph& start, bool fake_quantize) {
  if (!fake_quantize) {
    check_graph(start, {});
    HOTPATH_CHECK(start.inputs.front().shape == fp32.inputs.front().shape && start.outputs.size() == fp32.outputs.size(),
                  "qat: the start graph's input or outputs differ from the teacher's");
    return;
  }
  HOTPATH_CHECK(start.nodes.size() == fp32.nodes.size() && start.params.size() == fp32.params.size(),
                "qat: the start graph has ", start.nodes.size(), " nodes and ", start.params.size(),
                " params; the fp32 graph ", fp32.nodes.size(), " and ", fp32.params.size());
  for (const auto& [key, t] : fp32.params) {
    auto it = start.params.find(key);
    HOTPATH_CHECK(it != start.params.end() && it->second.sizes() == t.sizes(), "qat: the start graph's param ", key,
                  " is missing or of another shape");
  }
}

double mean(const std::vector<double>& v, std::size_t from, std::size_t to) {
  double s = 0.0;
  for (std::size_t i = from; i < to; ++i) s += v[i];
  return to > from ? s / static_cast<double>(to - from) : 0.0;
}

// The report's loss at the start and the end (means over up to 10 steps), seconds and each conv's input range.
void add_losses_and_ranges(nlohmann::ordered_json& report, const std::vector<double>& losses, const Ranges& ranges,
                           double seconds) {
  const std::size_t n = losses.size();
  const std::size_t window = std::max<std::size_t>(1, std::min<std::size_t>(10, n / 4));
  nlohmann::ordered_json range_json = nlohmann::ordered_json::object();
  for (const auto& [name, r] : ranges) range_json[name] = {r.first, r.second};
  report["loss_first"] = mean(losses, 0, window);
  report["loss_last"] = mean(losses, n - window, n);
  report["seconds"] = seconds;
  report["input_ranges"] = range_json;
}

}  // namespace

QatResult qat_train(const Graph& fp32, const QatData& data, const QatOptions& options, const Graph* start) {
  check_options(options);
  check_graph(fp32, options.keep_float);
  const Graph& student_start = start != nullptr ? *start : fp32;
  if (start != nullptr) check_start_graph(fp32, *start, options.fake_quantize);
  HOTPATH_CHECK(static_cast<bool>(data), "qat: no data source");
  // Training needs autograd even when the caller runs under inference mode (the export does).
  const c10::InferenceMode training(/*enabled=*/false);
  const at::AutoGradMode grad(true);
  const auto clock_start = std::chrono::steady_clock::now();
  const auto [engine_conv_bits, engine_linear_bits] = engine_weight_bits();
  const int conv_bits = options.weight_bits != 0 ? options.weight_bits : engine_conv_bits;
  const int linear_bits = options.weight_bits != 0 ? options.weight_bits : engine_linear_bits;
  const std::int64_t observer_steps =
      options.observer_steps >= 0 ? options.observer_steps : options.initial_ranges.empty() ? options.steps / 2 : 0;
  HOTPATH_CHECK(options.fake_quantize || (options.initial_ranges.empty() && options.keep_float.empty()),
                "qat: initial_ranges and keep_float are fake quantization's; fake_quantize is off");
  for (const auto& [name, range] : options.initial_ranges) {
    const Node* n = fp32.find_node(name);
    HOTPATH_CHECK(n != nullptr && n->op == OpKind::kConv2d, "qat: initial_ranges names '", name,
                  "', which is no conv2d node of the graph");
  }

  Trainable student_params = trainable_params(student_start, options.train_weights);
  std::map<std::string, at::Tensor>& params = student_params.params;
  std::vector<at::Tensor>& trained = student_params.tensors;
  Ranges ranges = options.initial_ranges;
  // Without fake quantization every conv and linear is "kept float": the interpreter runs the plain graph.
  std::set<std::string> keep(options.keep_float.begin(), options.keep_float.end());
  if (!options.fake_quantize) {
    for (const Node& n : student_start.nodes) keep.insert(n.name);
  }
  QatInterpreter student{.graph = options.fake_quantize ? fp32 : student_start,
                         .params = params,
                         .ranges = ranges,
                         .keep = std::move(keep),
                         .conv_bits = conv_bits,
                         .linear_bits = linear_bits,
                         .quantize_linear = options.linear && options.fake_quantize,
                         .fill_missing = options.fake_quantize,
                         .momentum = options.observer_momentum};
  const BatchRunner teacher = engine_runner(options.threads)(fp32);

  std::vector<at::Tensor> exp_avg, exp_avg_sq;
  const auto add_state = [&] {
    for (std::size_t i = exp_avg.size(); i < trained.size(); ++i) {
      exp_avg.push_back(at::zeros_like(trained[i]));
      exp_avg_sq.push_back(at::zeros_like(trained[i]));
    }
  };
  add_state();
  // Once the observers freeze, the ranges become trained scales and zero points (learn_ranges).
  const auto learn_ranges = [&] {
    for (const auto& [name, range] : ranges) {
      const ops::Int8InputQuant q = ops::int8_affine_u8_params(range.first, range.second);
      at::Tensor scale = at::full({1}, q.scale, at::kFloat).requires_grad_(true);
      at::Tensor zero_point = at::full({1}, static_cast<double>(q.zero_point), at::kFloat).requires_grad_(true);
      trained.push_back(scale);
      trained.push_back(zero_point);
      student.learned.emplace(name, std::make_pair(scale, zero_point));
    }
    add_state();
  };
  const std::int64_t warmup = std::max<std::int64_t>(1, options.steps / 20);
  const double t = options.temperature;
  std::vector<double> losses;
  for (std::int64_t step = 1; step <= options.steps; ++step) {
    QatBatch batch = data();
    check_batch(fp32, batch, step, options.label_weight > 0.0);
    const at::Tensor images = batch.images.to(at::kFloat).contiguous();
    at::Tensor target;
    {
      const c10::InferenceMode inference;
      target = teacher({images}).front();
    }
    target = at::softmax(target.clone() / t, -1);  // outside inference mode: autograd may save it
    student.observe = options.fake_quantize && step <= observer_steps;
    student.step = step;
    if (options.fake_quantize && options.learn_ranges && !student.observe && student.learned.empty() && step > 1) learn_ranges();
    const at::Tensor logits = student.forward(images).front();
    at::Tensor loss = at::kl_div(at::log_softmax(logits / t, -1), target, at::Reduction::None).sum(-1).mean() * (t * t);
    if (options.label_weight > 0.0) loss = loss + options.label_weight * at::cross_entropy_loss(logits, batch.labels);
    const double value = loss.item<double>();
    HOTPATH_CHECK(std::isfinite(value), "qat: step ", step, ": the loss is not finite (", value,
                  "); lower the learning rate or check the data");
    losses.push_back(value);
    loss.backward();
    std::vector<at::Tensor> grads;
    for (at::Tensor& p : trained) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    const double lr = options.lr * std::min(1.0, static_cast<double>(step) / static_cast<double>(warmup));
    const at::Tensor count = at::full({}, static_cast<double>(step), at::kFloat);
    const std::vector<at::Tensor> steps(trained.size(), count);
    {
      const at::NoGradGuard no_grad;
      at::_fused_adamw_(trained, grads, exp_avg, exp_avg_sq, at::TensorList{}, steps, lr, 0.9, 0.999,
                        options.weight_decay, 1e-8, /*amsgrad=*/false, /*maximize=*/false, std::nullopt, std::nullopt);
    }
    for (at::Tensor& p : trained) p.mutable_grad().zero_();
    for (auto& [name, l] : student.learned) {  // a scale > 0, a zero point on the u8 grid's span
      l.first.detach().clamp_min_(1e-8);
      l.second.detach().clamp_(0.0, 255.0);
    }
    if (options.progress) options.progress(step, options.steps, value);
  }

  QatResult result;
  result.graph = options.fake_quantize ? fp32 : student_start;
  for (auto& [key, p] : result.graph.params) {
    if (p.is_floating_point()) p = params.at(key).detach().clone();
  }
  for (const auto& [name, l] : student.learned) {  // the range whose u8 parameters are the learned ones
    const double scale = l.first.item<double>();
    const double zero_point = std::clamp(std::nearbyint(l.second.item<double>()), 0.0, 255.0);
    ranges[name] = {-zero_point * scale, (255.0 - zero_point) * scale};
  }
  result.input_ranges = ranges;
  result.weight_bits = conv_bits;
  result.keep_float = options.keep_float;
  result.report = {{"steps", options.steps},
                   {"lr", options.lr},
                   {"weight_decay", options.weight_decay},
                   {"observer_steps", observer_steps},
                   {"initial_ranges", options.initial_ranges.size()},
                   {"observer_momentum", options.observer_momentum},
                   {"learned_ranges", !student.learned.empty()},
                   {"trained_weights", options.train_weights},
                   {"temperature", options.temperature},
                   {"label_weight", options.label_weight},
                   {"conv_weight_bits", conv_bits},
                   {"linear_weight_bits", linear_bits},
                   {"fake_quantize", options.fake_quantize},
                   {"fake_quantized_linears", options.linear && options.fake_quantize},
                   {"keep_float", options.keep_float}};
  add_losses_and_ranges(result.report, losses, ranges,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start).count());
  return result;
}

std::vector<at::Tensor> qat_forward(const Graph& graph,
                                    const std::map<std::string, std::pair<double, double>>& input_ranges,
                                    const at::Tensor& images, int weight_bits, bool linear,
                                    const std::vector<std::string>& keep_float) {
  check_graph(graph, keep_float);
  HOTPATH_CHECK(weight_bits == 0 || weight_bits == 7 || weight_bits == 8,
                "qat_forward: weight_bits must be 0 (the engine's), 7 or 8; got ", weight_bits);
  const auto [engine_conv_bits, engine_linear_bits] = engine_weight_bits();
  const at::NoGradGuard no_grad;
  Ranges ranges = input_ranges;
  QatInterpreter run{.graph = graph,
                     .params = graph.params,
                     .ranges = ranges,
                     .keep = {keep_float.begin(), keep_float.end()},
                     .conv_bits = weight_bits != 0 ? weight_bits : engine_conv_bits,
                     .linear_bits = weight_bits != 0 ? weight_bits : engine_linear_bits,
                     .quantize_linear = linear};
  return run.forward(images.to(at::kFloat));
}

std::map<std::string, at::Tensor> graph_gradients(const Graph& graph, const std::vector<QatBatch>& batches) {
  check_graph(graph, {});
  HOTPATH_CHECK(!batches.empty(), "graph_gradients: no batches");
  const c10::InferenceMode training(/*enabled=*/false);
  const at::AutoGradMode grad(true);
  Trainable trainable = trainable_params(graph, /*weights=*/true);
  std::map<std::string, at::Tensor>& params = trainable.params;
  Ranges none;
  std::set<std::string> keep;
  for (const Node& n : graph.nodes) keep.insert(n.name);
  QatInterpreter run{.graph = graph, .params = params, .ranges = none, .keep = std::move(keep), .quantize_linear = false};
  std::int64_t step = 0;
  for (const QatBatch& b : batches) {
    check_batch(graph, b, ++step, /*need_labels=*/false);
    const at::Tensor logits = run.forward(b.images.to(at::kFloat).contiguous()).front();
    const at::Tensor labels = b.labels.defined() ? b.labels : logits.detach().argmax(-1);
    HOTPATH_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0) && labels.scalar_type() == at::kLong,
                  "graph_gradients: batch ", step, ": labels must be int64 [", logits.size(0), "]");
    (at::cross_entropy_loss(logits, labels) / static_cast<double>(batches.size())).backward();
  }
  std::map<std::string, at::Tensor> out;
  for (std::size_t i = 0; i < trainable.keys.size(); ++i) {
    const at::Tensor& p = trainable.tensors[i];
    out.emplace(trainable.keys[i], p.grad().defined() ? p.grad().detach() : at::zeros_like(p));
  }
  return out;
}

Graph qat_start_graph(const Graph& fp32, const QuantizeResult& post_training) {
  const Graph& q = post_training.graph;
  HOTPATH_CHECK(q.nodes.size() == fp32.nodes.size(), "qat_start_graph: the quantized graph has ", q.nodes.size(),
                " nodes, the fp32 graph ", fp32.nodes.size());
  Graph g = fp32;
  for (std::size_t i = 0; i < q.nodes.size(); ++i) {
    const Node& qn = q.nodes[i];
    const Node& n = g.nodes[i];
    HOTPATH_CHECK(qn.name == n.name, "qat_start_graph: node ", i, " is ", qn.name, " there and ", n.name, " here");
    if (qn.attr_str("quant", "").empty()) continue;
    const at::Tensor& w8 = q.params.at(qn.params.at("weight"));
    std::vector<std::int64_t> shape(static_cast<std::size_t>(w8.dim()), 1);
    shape[0] = -1;
    g.params[n.params.at("weight")] = w8.to(at::kFloat) * q.params.at(qn.params.at("weight_scale")).view(shape);
    if (qn.has_param("bias") && n.has_param("bias")) g.params[n.params.at("bias")] = q.params.at(qn.params.at("bias")).clone();
  }
  return g;
}

QuantizeOptions qat_quantize_options(const QatResult& result) {
  QuantizeOptions o;
  o.input_ranges = result.input_ranges;
  o.keep_float = result.keep_float;
  o.gptq = false;
  o.bias_correction = false;
  o.max_output_error = 0.0;
  o.min_output_cosine = -1.0;
  o.max_node_error = std::numeric_limits<double>::infinity();
  return o;
}

}  // namespace hotpath::infer
