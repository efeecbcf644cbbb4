#include "hotpath/infer/engine.h"

#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include "hotpath/core/cpu.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/package.h"
#include "hotpath/ops/attention.h"
#include "hotpath/ops/int8_kernels.h"
#include "hotpath/ops/int8_linear.h"
#include "cuda/cuda_engine.h"
#include "engine_impl.h"

namespace hotpath::infer {

using detail::Rows;
using detail::ShapePlan;
using detail::Step;
using detail::StepIo;
using detail::kMaxPackedLinearRows;
using detail::kMaxPackedLinearShapes;

namespace {

bool native_bf16() { return cpu::max_isa() >= cpu::Isa::kAvx512Bf16; }

// Blocks until counter >= target: a short spin (the other thread is usually a few µs away), then a futex wait.
void wait_for(const std::atomic<std::int64_t>& counter, std::int64_t target) {
  for (int spin = 0; spin < 2048; ++spin) {
    if (counter.load(std::memory_order_acquire) >= target) return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  for (std::int64_t seen = counter.load(); seen < target; seen = counter.load()) counter.wait(seen);
}

}  // namespace

// The type the steps compute in (and why, when it is not what the package asks): CUDA's, fp32, or bf16 where the
// CPU has native bf16 (or emulates it on request).
void Engine::Impl::choose_compute() {
  if (options.device.is_cuda()) {
    compute = prepare_cuda_engine(graph, options);  // cuda/cuda_engine.h
  } else if (options.precision == Precision::kFp32) {
    compute = at::kFloat;
  } else if (options.precision == Precision::kInt8) {
    compute = at::kFloat;
    precision_note = "the nodes left unquantized run fp32, the precision the export measured";
  } else if (native_bf16()) {
    compute = at::kBFloat16;
  } else if (options.emulate_bf16 && cpu::max_isa() >= cpu::Isa::kAvx512) {
    compute = at::kBFloat16;
    precision_note = std::string("emulated: this CPU (or HOTPATH_MAX_ISA cap, now ") + cpu::isa_name(cpu::max_isa()) +
                     ") lacks AVX512_BF16, oneDNN emulates bf16 (slow; for parity checks)";
  } else {
    compute = at::kFloat;
    precision_note = std::string("bf16 activations not used: this CPU (or HOTPATH_MAX_ISA cap, now ") +
                     cpu::isa_name(cpu::max_isa()) + ") lacks AVX512_BF16, so fp32 runs instead";
  }
}

void Engine::Impl::prepare() {
  graph.validate();
  HOTPATH_CHECK(options.threads >= 0 && options.threads <= 4096, "engine: threads is ", options.threads,
                ", expected 0 (keep) to 4096");
  choose_compute();
  std::map<std::string, int> slot;
  const auto slot_of = [&](const std::string& name) {
    auto [it, fresh] = slot.emplace(name, num_slots);
    if (fresh) ++num_slots;
    return it->second;
  };
  for (const ValueSpec& in : graph.inputs) input_slots.push_back(slot_of(in.name));
  std::map<int, std::size_t> last_read;
  for (const Node& n : graph.nodes) {
    Step s;
    s.node = &n;
    s.op = n.op;
    for (const std::string& in : n.inputs) s.in.push_back(in.empty() ? -1 : slot.at(in));
    for (int i : s.in) {
      if (i >= 0) last_read[i] = steps.size();
    }
    s.out = slot_of(n.output);
    prepare_step(s, n);
    steps.push_back(std::move(s));
  }
  for (const std::string& out : graph.outputs) output_slots.push_back(slot.at(out));
  const bool image_graph = std::any_of(steps.begin(), steps.end(), [](const Step& s) {
    return s.op == OpKind::kConv2d || s.op == OpKind::kMaxPool2d || s.op == OpKind::kGlobalAvgPool;
  });
  for (const Step& s : steps) {
    if (s.op == OpKind::kConv2d || s.op == OpKind::kMaxPool2d || s.op == OpKind::kGlobalAvgPool) {
      split_note = "image graph (convolutions and pools keep their own parallelism)";
    } else if (s.op == OpKind::kSelect && s.dim == 0) {
      split_note = "node " + s.node->name + " selects along the batch";
    }
    if (!split_note.empty()) break;
  }
  for (const ValueSpec& in : graph.inputs) {
    if (split_note.empty() && in.shape.empty()) split_note = "input " + in.name + " has no batch dimension";
  }
  // fp32 linears of image graphs (the ViT's, classifier heads) through MKL's packed sgemm; text graphs
  // are left out: every sequence length is a new row count, hence a new copy of the weight.
  const bool mkl_ok = image_graph && options.device.is_cpu() && compute == at::kFloat && detail::has_mkl_linear();
  for (Step& s : steps) s.mkl = mkl_ok && s.op == OpKind::kLinear && !s.qlinear;
  if (split_note.empty() && !options.split_batch) split_note = "split_batch off";
#ifndef _OPENMP
  if (split_note.empty()) split_note = "engine.cpp built without OpenMP";  // at::parallel_for would be serial
#endif
  for (const auto& [value, step] : last_read) {
    const bool output = std::find(output_slots.begin(), output_slots.end(), value) != output_slots.end();
    if (!output) steps[step].release.push_back(value);
  }
  prepare_fusions();
}

// LayerNorm → int8 linear: the LayerNorm writes the linear's int8 rows and scales in the same pass (extra
// outputs in slots of their own); then the per-slot lifetimes the plans use, and the row split's phases.
void Engine::Impl::prepare_fusions() {
  const bool cpu_f32 = options.device.is_cpu() && compute == at::kFloat;
  for (Step& s : steps) {
    s.fast_ln = cpu_f32 && (s.op == OpKind::kLayerNorm || s.op == OpKind::kBertEmbed);
  }
  for (std::size_t t = 0; t < steps.size(); ++t) {
    Step& ln = steps[t];
    if (!ln.fast_ln || ln.op != OpKind::kLayerNorm) continue;
    std::vector<std::size_t> consumers;
    bool quantized_only = true;
    for (std::size_t u = t + 1; u < steps.size(); ++u) {
      const Step& c = steps[u];
      if (c.in.empty() || c.in[0] != ln.out) continue;
      if (c.op == OpKind::kLinear && c.qlinear && c.qlinear->in_features() == ln.weight.size(0)) {
        consumers.push_back(u);
      } else {
        quantized_only = false;
      }
    }
    if (consumers.empty() || !quantized_only) continue;
    ln.extra_out = {num_slots, num_slots + 1};
    num_slots += 2;
    for (const std::size_t u : consumers) steps[u].extra_in = ln.extra_out;
  }
  const auto n = static_cast<std::size_t>(num_slots);
  def_step.assign(n, 0);
  last_use.assign(n, 0);
  is_output.assign(n, 0);
  for (int o : output_slots) is_output[static_cast<std::size_t>(o)] = 1;
  for (std::size_t t = 0; t < steps.size(); ++t) {
    Step& s = steps[t];
    std::vector<int> outs = {s.out};
    outs.insert(outs.end(), s.extra_out.begin(), s.extra_out.end());
    for (int o : outs) def_step[static_cast<std::size_t>(o)] = last_use[static_cast<std::size_t>(o)] = t;
    std::vector<int> ins = s.in;
    ins.insert(ins.end(), s.extra_in.begin(), s.extra_in.end());
    for (int i : ins) {
      if (i >= 0) last_use[static_cast<std::size_t>(i)] = t;
    }
  }
  for (const Step& s : steps) {  // the extra slots: released after their last reader
    for (int o : s.extra_out) steps[last_use[static_cast<std::size_t>(o)]].release.push_back(o);
  }
  if (!options.plan_buffers) plan_note = "plan_buffers off";
  if (options.device.is_cuda()) plan_note = "CUDA runs allocate through the caching allocator";
  if (options.planned_shapes == 0) plan_note = "planned_shapes is 0";
  // Row split: per-token steps over values that are per token (the text inputs and what such steps write).
  std::vector<char> rowed(n, 0);
  for (int i : input_slots) rowed[static_cast<std::size_t>(i)] = 1;
  for (Step& s : steps) {
    bool capable = s.op == OpKind::kLinear || s.op == OpKind::kAdd || s.op == OpKind::kAttention ||
                   ((s.op == OpKind::kLayerNorm || s.op == OpKind::kBertEmbed) && s.fast_ln);
    for (int i : s.in) capable = capable && (i < 0 || rowed[static_cast<std::size_t>(i)] != 0);
    s.rows = capable;
    rowed[static_cast<std::size_t>(s.out)] = capable ? 1 : 0;
    for (int o : s.extra_out) rowed[static_cast<std::size_t>(o)] = capable ? 1 : 0;
  }
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const Step& s = steps[t];
    if (segments.empty() || segments.back().rows != s.rows || s.op == OpKind::kAttention) {
      segments.push_back({t, t, s.rows});
    } else {
      segments.back().last = t;
    }
  }
  const bool any_rows = std::any_of(steps.begin(), steps.end(), [](const Step& s) { return s.rows; });
  if (!split_note.empty() && split_note != "split_batch off") {
    rows_note = split_note;
  } else if (!options.split_rows) {
    rows_note = "split_rows off";
  } else if (!plan_note.empty()) {
    rows_note = "needs planned buffers (" + plan_note + ")";
  } else if (!cpu_f32) {
    rows_note = "bf16 compute";
  } else if (!any_rows) {
    rows_note = "no per-token nodes";
  }
#ifndef _OPENMP
  if (rows_note.empty()) rows_note = "engine.cpp built without OpenMP";
#endif
  if (!rows_note.empty()) segments.clear();
}
void Engine::Impl::run_step_checked(const Step& s, std::vector<at::Tensor>& v, const StepIo& io, const Rows& r) const {
  try {
    run_step(s, v, io, r);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // LibTorch's messages carry a C++ trace: keep the first line
    const std::string what = e.what();
    throw Error("engine: node " + s.node->name + " (" + std::string(op_name(s.node->op)) + ") failed: " + what.substr(0, what.find('\n')));
  }
}

StepIo Engine::Impl::io_for(std::size_t t, const ShapePlan* plan, const detail::Arena* arena,
                            std::vector<std::vector<std::optional<detail::TensorSpec>>>* record) const {
  StepIo io;
  io.device = options.device;
  if (plan != nullptr && arena != nullptr) {
    io.views = &arena->views;
    io.specs = &plan->step_specs[t];
  }
  if (record != nullptr) io.record = &(*record)[t];
  return io;
}

void Engine::Impl::run_steps(std::vector<at::Tensor>& v, const NodeObserver& observer, const ShapePlan* plan,
                             const detail::Arena* arena,
                             std::vector<std::vector<std::optional<detail::TensorSpec>>>* record) const {
  std::vector<at::Tensor> seen;
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const Step& s = steps[t];
    if (observer) {
      seen.clear();
      for (int i : s.in) seen.push_back(i >= 0 ? v[static_cast<std::size_t>(i)] : at::Tensor());
    }
    run_step_checked(s, v, io_for(t, plan, arena, record), Rows{});
    if (observer) observer(*s.node, seen, v[static_cast<std::size_t>(s.out)]);
  }
}

std::shared_ptr<ShapePlan> Engine::Impl::make_plan(
    std::vector<std::int64_t> key, std::vector<std::vector<std::int64_t>> shapes,
    const std::vector<std::vector<std::optional<detail::TensorSpec>>>& rec) const {
  auto plan = std::make_shared<ShapePlan>();
  plan->key = std::move(key);
  plan->shapes = std::move(shapes);
  std::vector<detail::TensorSpec> specs;
  std::vector<detail::Lifetime> lifetimes;
  plan->step_specs.resize(steps.size());
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const Step& s = steps[t];
    std::vector<int>& ids = plan->step_specs[t];
    ids.assign(rec[t].size(), -1);
    if (rec[t].empty() || !rec[t][0]) ++plan->unplanned;  // an op without an out= path
    for (std::size_t i = 0; i < rec[t].size(); ++i) {
      if (!rec[t][i]) continue;
      int slot = -1;
      if (i == 0) slot = s.out;
      if (i >= 1 && i <= s.extra_out.size()) slot = s.extra_out[i - 1];
      if (slot >= 0 && is_output[static_cast<std::size_t>(slot)] != 0) {
        ++plan->unplanned;  // returned to the caller: fresh memory every run
        continue;
      }
      const std::int64_t bytes = rec[t][i]->bytes();
      if (bytes == 0) continue;
      const std::size_t last = slot >= 0 ? std::max(t, last_use[static_cast<std::size_t>(slot)]) : t;
      ids[i] = static_cast<int>(specs.size());
      specs.push_back(*rec[t][i]);
      lifetimes.push_back({bytes, t, last});
      plan->planned_bytes += bytes;
    }
  }
  // The row split needs every per-token step's outputs in the arena (threads write their rows in place)
  // and each int8 linear's int32 sums for all rows at once (each thread its own rows of them).
  bool rows = !segments.empty() && !plan->shapes.empty() && !plan->shapes[0].empty() && plan->shapes[0][0] == 1 &&
              plan->shapes[0].size() == 2;
  for (std::size_t t = 0; rows && t < steps.size(); ++t) {
    const Step& s = steps[t];
    if (!s.rows) continue;
    const std::vector<int>& ids = plan->step_specs[t];
    for (std::size_t i = 0; i <= s.extra_out.size(); ++i) rows = rows && i < ids.size() && ids[i] >= 0;
    if (rows && s.qlinear) {
      const detail::TensorSpec& out = specs[static_cast<std::size_t>(ids[0])];
      rows = ids.size() > 3 && ids[3] >= 0 &&
             specs[static_cast<std::size_t>(ids[3])].sizes[0] * out.sizes.back() == c10::multiply_integers(out.sizes);
    }
  }
  if (rows) {
    // Threads move through a phase's steps at their own pace: a tensor is live from the start of its first
    // phase to the end of its last, so nothing another thread may still read or write shares its bytes.
    std::vector<std::size_t> phase_of(steps.size(), 0);
    for (std::size_t g = 0; g < segments.size(); ++g) {
      for (std::size_t t = segments[g].first; t <= segments[g].last; ++t) phase_of[t] = g;
    }
    for (detail::Lifetime& l : lifetimes) {
      l.first = segments[phase_of[l.first]].first;
      l.last = segments[phase_of[l.last]].last;
    }
  }
  const detail::BufferAssignment a = detail::assign_buffers(lifetimes);
  plan->buffers = a.buffers;
  plan->planned = static_cast<int>(specs.size());
  plan->rows = rows;
  plan->pool = std::make_unique<detail::ArenaPool>(std::move(specs), a.offsets, a.arena_bytes);
  return plan;
}

void Engine::Impl::run_planned(std::vector<at::Tensor>& v) const {
  std::vector<std::int64_t> key;
  std::vector<std::vector<std::int64_t>> shapes;
  for (int slot : input_slots) {
    const at::Tensor& x = v[static_cast<std::size_t>(slot)];
    key.push_back(x.dim());
    key.insert(key.end(), x.sizes().begin(), x.sizes().end());
    shapes.emplace_back(x.sizes().begin(), x.sizes().end());
  }
  std::shared_ptr<ShapePlan> plan;
  {
    const std::lock_guard<std::mutex> lock(plans_mutex);
    for (auto it = plans.begin(); it != plans.end(); ++it) {
      if ((*it)->key != key) continue;
      plan = *it;
      plans.splice(plans.begin(), plans, it);  // most recently used first
      break;
    }
  }
  if (!plan) {  // first run of this shape: allocate as it goes and record what each step asked for
    std::vector<std::vector<std::optional<detail::TensorSpec>>> rec(steps.size());
    run_steps(v, nullptr, nullptr, nullptr, &rec);
    std::shared_ptr<ShapePlan> made = make_plan(key, std::move(shapes), rec);
    const std::lock_guard<std::mutex> lock(plans_mutex);
    const bool known = std::any_of(plans.begin(), plans.end(), [&](const auto& p) { return p->key == key; });
    if (!known) {
      plans.push_front(std::move(made));
      while (plans.size() > options.planned_shapes) plans.pop_back();  // in-flight runs keep theirs alive
    }
    return;
  }
  const detail::ArenaLease lease(*plan->pool);
  const std::int64_t threads = options.threads > 0 ? options.threads : at::get_num_threads();
  if (plan->rows && threads >= 2 && !at::in_parallel_region()) {
    run_rows(v, *plan, lease.arena(), threads);
    return;
  }
  run_steps(v, nullptr, plan.get(), &lease.arena(), nullptr);
}

// One parallel region per run: each worker claims a phase's chunks of token rows (or its one whole-run chunk)
// and runs the phase's steps on them; a phase starts when every chunk of the one before is done. Chunks are
// claimed, not assigned, so fewer threads than asked (a busy OpenMP pool) still finish.
void Engine::Impl::run_rows(std::vector<at::Tensor>& v, const ShapePlan& plan, const detail::Arena& arena,
                            std::int64_t threads) const {
  for (const Step& s : steps) {
    if (s.op == OpKind::kBertEmbed) check_embed_ids(s, v);
  }
  for (std::size_t t = 0; t < steps.size(); ++t) {  // every per-token output in place before the threads start
    const Step& s = steps[t];
    if (!s.rows) continue;
    const std::vector<int>& ids = plan.step_specs[t];
    v[static_cast<std::size_t>(s.out)] = arena.views[static_cast<std::size_t>(ids[0])];
    for (std::size_t i = 0; i < s.extra_out.size(); ++i) {
      v[static_cast<std::size_t>(s.extra_out[i])] = arena.views[static_cast<std::size_t>(ids[i + 1])];
    }
  }
  const std::int64_t len = v[static_cast<std::size_t>(input_slots.front())].size(1);
  const std::int64_t chunks = std::max<std::int64_t>(1, std::min(threads, len));
  const std::size_t phases = segments.size();
  std::vector<std::atomic<std::int64_t>> next(phases), done(phases);
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  at::parallel_for(0, threads, 1, [&](std::int64_t, std::int64_t) {
    const c10::InferenceMode inference;  // thread-local: the pool's threads need their own
    for (std::size_t g = 0; g < phases; ++g) {
      const Segment& seg = segments[g];
      const std::int64_t parts = seg.rows ? chunks : 1;
      for (std::int64_t c = next[g].fetch_add(1); c < parts; c = next[g].fetch_add(1)) {
        if (!failed.load()) {
          try {
            const Rows r = seg.rows ? Rows{len * c / parts, len * (c + 1) / parts, false} : Rows{};
            for (std::size_t t = seg.first; t <= seg.last; ++t) {
              run_step_checked(steps[t], v, io_for(t, &plan, &arena, nullptr), r);
            }
          } catch (...) {
            const std::lock_guard<std::mutex> lock(error_mutex);
            if (!error) error = std::current_exception();
            failed.store(true);
          }
        }
        done[g].fetch_add(1);
        done[g].notify_all();
      }
      wait_for(done[g], parts);
    }
  });
  if (error) std::rethrow_exception(error);
}

// Inside at::parallel_for every nested ATen parallel_for and oneDNN call runs on the calling thread, so
// each part runs the graph serially: no barrier between nodes, which on 2 cores cost more than the
// intra-op parallelism gained (BERT-base int8: ~20 parallel regions per layer; an idle thread spins or
// waits at each). Every node works per sample, so each part's rows are the unsplit run's.
std::vector<at::Tensor> Engine::Impl::run_split(const std::vector<at::Tensor>& v, std::int64_t batch,
                                                std::int64_t parts) const {
  std::vector<std::vector<at::Tensor>> outs(static_cast<std::size_t>(parts));
  at::parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    const c10::InferenceMode inference;  // thread-local: the pool's threads need their own
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t b0 = batch * p / parts;
      const std::int64_t b1 = batch * (p + 1) / parts;
      std::vector<at::Tensor> part(v.size());
      for (int slot : input_slots) {
        const auto i = static_cast<std::size_t>(slot);
        part[i] = v[i].narrow(0, b0, b1 - b0);
      }
      if (plan_note.empty()) {
        run_planned(part);
      } else {
        run_steps(part, nullptr);
      }
      for (int slot : output_slots) {
        const at::Tensor& y = part[static_cast<std::size_t>(slot)];
        HOTPATH_ASSERT(y.dim() >= 1 && y.size(0) == b1 - b0);
        outs[static_cast<std::size_t>(p)].push_back(y);
      }
    }
  });
  std::vector<at::Tensor> out;
  out.reserve(output_slots.size());
  for (std::size_t o = 0; o < output_slots.size(); ++o) {
    std::vector<at::Tensor> pieces;
    pieces.reserve(outs.size());
    for (const auto& part : outs) pieces.push_back(part[o].to(at::kFloat));
    out.push_back(at::cat(pieces, 0).contiguous());
  }
  return out;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine Engine::from_graph(Graph graph, EngineOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->graph = std::move(graph);
  impl->options = options;
  try {
    impl->prepare();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a LibTorch error while preparing weights: one line, no trace
    const std::string what = e.what();
    throw Error("engine: preparing the graph failed: " + what.substr(0, what.find('\n')));
  }
  return Engine(std::move(impl));
}

Engine Engine::load(const std::string& package_dir, EngineOptions options) {
  Package pkg = read_package(package_dir);
  options.precision = pkg.precision;
  return from_graph(load_package_graph(pkg), options);
}

std::vector<at::Tensor> Engine::run(const std::vector<at::Tensor>& inputs) const { return run(inputs, nullptr); }

std::vector<at::Tensor> Engine::run(const std::vector<at::Tensor>& inputs, const NodeObserver& observer) const {
  const Impl& m = *impl_;
  const auto& specs = m.graph.inputs;
  HOTPATH_CHECK(inputs.size() <= specs.size(), "engine: got ", inputs.size(), " inputs, the model takes ",
                specs.size());
  const c10::InferenceMode inference;
  if (m.options.threads > 0 && at::get_num_threads() != m.options.threads) at::set_num_threads(m.options.threads);
  std::vector<at::Tensor> v(static_cast<std::size_t>(m.num_slots));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ValueSpec& spec = specs[i];
    const at::Tensor x = i < inputs.size() ? inputs[i] : at::Tensor();
    if (!x.defined()) {
      // Optional text inputs: a missing mask means "attend everywhere", missing types mean zeros.
      HOTPATH_CHECK(i > 0 && spec.dtype == at::kLong, "engine: input ", spec.name, " is required");
      HOTPATH_CHECK(inputs[0].dim() == 2, "engine: input ", specs[0].name, " must be [batch, sequence]");
      v[static_cast<std::size_t>(m.input_slots[i])] = stage_input(
          spec.name == "attention_mask" ? at::ones_like(inputs[0]) : at::zeros_like(inputs[0]), m.options.device);
      continue;
    }
    HOTPATH_CHECK(x.device().is_cpu(), "engine: input ", spec.name, " is on ", x.device(), ", expected the CPU");
    const auto stage = [&](const at::Tensor& t) { return m.options.device.is_cuda() ? stage_input(t, m.options.device) : t; };
    HOTPATH_CHECK(x.dim() == static_cast<std::int64_t>(spec.shape.size()), "engine: input ", spec.name, " is ",
                  x.sizes(), ", expected ", spec.shape.size(), " dims ", c10::IntArrayRef(spec.shape));
    for (std::size_t d = 0; d < spec.shape.size(); ++d) {
      HOTPATH_CHECK(spec.shape[d] == -1 || x.size(static_cast<std::int64_t>(d)) == spec.shape[d], "engine: input ",
                    spec.name, " is ", x.sizes(), ", expected ", c10::IntArrayRef(spec.shape),
                    " (-1 = any size)");
      HOTPATH_CHECK(x.size(static_cast<std::int64_t>(d)) >= 1, "engine: input ", spec.name, " is empty (",
                    x.sizes(), ")");
    }
    at::Tensor t;
    if (spec.dtype == at::kLong) {
      HOTPATH_CHECK(!at::isFloatingType(x.scalar_type()) && x.scalar_type() != at::kBool, "engine: input ",
                    spec.name, " is ", x.scalar_type(), ", expected integer token ids");
      t = stage(x.to(at::kLong));
      if (i > 0 && inputs[0].defined()) {
        HOTPATH_CHECK(x.sizes() == inputs[0].sizes(), "engine: input ", spec.name, " is ", x.sizes(), ", ",
                      specs[0].name, " is ", inputs[0].sizes(), "; they must match");
      }
    } else {
      HOTPATH_CHECK(at::isFloatingType(x.scalar_type()), "engine: input ", spec.name, " is ", x.scalar_type(),
                    ", expected floating point");
      t = stage(x).to(m.compute);
      if (t.dim() == 4 && m.options.channels_last) t = t.contiguous(at::MemoryFormat::ChannelsLast);
    }
    v[static_cast<std::size_t>(m.input_slots[i])] = std::move(t);
  }
  // Offline batches of text graphs: one part of the batch per thread, each running every node serially.
  const std::int64_t threads = m.options.threads > 0 ? m.options.threads : at::get_num_threads();
  const at::Tensor& first = v[static_cast<std::size_t>(m.input_slots.front())];
  const std::int64_t batch = first.size(0);
  if (!observer && m.split_note.empty() && first.device().is_cpu() && threads >= 2 && batch >= 2 &&
      !at::in_parallel_region()) {
    return m.run_split(v, batch, std::min(threads, batch));
  }
  if (observer || !m.plan_note.empty()) {
    m.run_steps(v, observer);
  } else {
    m.run_planned(v);
  }
  std::vector<at::Tensor> out;
  out.reserve(m.output_slots.size());
  for (int slot : m.output_slots) out.push_back(v[static_cast<std::size_t>(slot)].to(at::kCPU, at::kFloat).contiguous());
  return out;
}

std::vector<Engine::BufferPlanInfo> Engine::buffer_plans() const {
  const Impl& m = *impl_;
  std::vector<BufferPlanInfo> out;
  const std::lock_guard<std::mutex> lock(m.plans_mutex);
  for (const auto& p : m.plans) {
    BufferPlanInfo info;
    info.input_shapes = p->shapes;
    info.arena_bytes = p->pool->arena_bytes();
    info.buffers = p->buffers;
    info.planned = p->planned;
    info.unplanned = p->unplanned;
    info.planned_bytes = p->planned_bytes;
    info.arenas = p->pool->arenas_made();
    info.split_rows = p->rows;
    out.push_back(std::move(info));
  }
  return out;
}

const Graph& Engine::graph() const { return impl_->graph; }
const EngineOptions& Engine::options() const { return impl_->options; }

std::string Engine::describe() const {
  const Impl& m = *impl_;
  std::ostringstream os;
  os << "precision: " << precision_name(m.options.precision) << " asked, compute dtype "
     << (m.compute == at::kBFloat16 ? "bf16" : "fp32");
  if (!m.precision_note.empty()) os << " (" << m.precision_note << ")";
  os << "\n";
  os << "layout: " << (m.options.channels_last ? "channels-last" : "contiguous") << " image activations\n";
  os << "conv: " << (m.conv_note.empty() ? "oneDNN, weights prepacked, bias/activation/residual fused"
                                         : m.conv_note);
  {
    std::size_t direct = 0, winograd = 0, aten = 0;
    const std::lock_guard<std::mutex> lock(m.pack_mutex);
    for (const Step& s : m.steps) {
      for (const auto& [shape, conv] : s.direct_by_shape) {
        if (!conv) ++aten;
        else if (conv->winograd()) ++winograd;
        else ++direct;
      }
    }
    if (direct + winograd + aten > 0) {
      os << "; created so far: " << direct << " direct, " << winograd << " Winograd (3x3 stride 1, output plane >= 14x14)";
      if (aten > 0) os << ", " << aten << " on ATen's op (no direct kernel)";
    }
  }
  os << "\n";
  os << "nodes: " << m.steps.size();
  for (const auto& [op, count] : m.int8_counts) os << ", int8 " << op << " " << count;
  os << "\n";
  if (std::any_of(m.steps.begin(), m.steps.end(), [](const Step& s) { return s.mkl; })) {
    os << "linear: fp32 through MKL's packed sgemm, the weight packed per row count (<= " << kMaxPackedLinearRows
       << " rows, " << kMaxPackedLinearShapes << " counts), else at::addmm\n";
  }
  os << "attention: " << ops::attention_kernel_name() << "\n";
  os << "batch: " << (m.split_note.empty() ? "batches of >= 2 split across the threads, one part each"
                                           : "every node parallel on its own (" + m.split_note + ")") << "\n";
  os << "batch 1: "
     << (m.rows_note.empty() ? "split along the tokens across >= 2 threads once the shape is planned, one wait per attention"
                             : "every node parallel on its own (" + m.rows_note + ")")
     << "\n";
  if (!m.plan_note.empty()) {
    os << "buffers: allocated per run (" << m.plan_note << ")\n";
  } else {
    const auto plans = buffer_plans();
    os << "buffers: planned per input shape (at most " << m.options.planned_shapes << "), " << plans.size()
       << " planned now\n";
    for (const BufferPlanInfo& p : plans) {
      os << "  shape";
      for (const auto& shape : p.input_shapes) os << " " << c10::IntArrayRef(shape);
      os << ": arena " << p.arena_bytes << " bytes in " << p.buffers << " buffers for " << p.planned
         << " tensors of " << p.planned_bytes << " bytes; " << p.unplanned << " outputs allocate; " << p.arenas
         << (p.arenas == 1 ? " arena" : " arenas") << (p.split_rows ? "; split along the tokens" : "") << "\n";
    }
  }
  if (m.options.device.is_cuda()) os << cuda_engine_description(m.options) << "\n";
  const std::string int8 = detail::int8_kernel_description();
  if (!m.int8_counts.empty() && !int8.empty()) os << "int8: " << int8 << "\n";
  return os.str();
}

}  // namespace hotpath::infer
