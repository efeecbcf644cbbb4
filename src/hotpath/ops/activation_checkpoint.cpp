#include "hotpath/ops/activation_checkpoint.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath::ops {
namespace {

// What backward needs to re-run the block as forward ran it. Travels through the autograd context as a
// capsule (saved_data holds IValues only).
struct CheckpointState : torch::CustomClassHolder {
  CheckpointFn fn;
  std::vector<bool> requires_grad;  // per tensor input given to the Function
  at::Tensor cpu_rng;
  std::optional<at::Device> cuda_device;
  at::Tensor cuda_rng;
  bool autocast_cpu = false, autocast_cuda = false;
  at::ScalarType autocast_cpu_dtype = at::kBFloat16, autocast_cuda_dtype = at::kHalf;
};

at::Tensor rng_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void set_rng_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}
at::Generator cuda_generator(at::Device device) { return at::globalContext().defaultGenerator(device); }

// Sets an RNG state and puts the previous one back on scope exit (torch.random.fork_rng).
class RngFork {
 public:
  RngFork(at::Generator gen, const at::Tensor& state) : gen_(std::move(gen)), saved_(rng_state(gen_)) {
    set_rng_state(gen_, state);
  }
  ~RngFork() { set_rng_state(gen_, saved_); }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  at::Generator gen_;
  at::Tensor saved_;
};

// Autocast on/off and dtype for one device type, restored on scope exit.
class AutocastState {
 public:
  AutocastState(at::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device),
        prev_enabled_(at::autocast::is_autocast_enabled(device)),
        prev_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device, enabled);
    at::autocast::set_autocast_dtype(device, dtype);
  }
  ~AutocastState() {
    at::autocast::set_autocast_enabled(device_, prev_enabled_);
    at::autocast::set_autocast_dtype(device_, prev_dtype_);
  }
  AutocastState(const AutocastState&) = delete;
  AutocastState& operator=(const AutocastState&) = delete;

 private:
  at::DeviceType device_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<CheckpointState> state, at::TensorList inputs) {
    // Function::apply runs this with grad mode off: no activations are kept.
    std::vector<at::Tensor> args(inputs.begin(), inputs.end());
    at::Tensor out = state->fn(args);
    ctx->save_for_backward(args);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return {out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<CheckpointState>(ctx->saved_data["state"].toCapsule());
    const std::vector<at::Tensor> saved = ctx->get_saved_variables();
    std::vector<at::Tensor> detached;
    detached.reserve(saved.size());
    for (std::size_t i = 0; i < saved.size(); ++i) {
      at::Tensor d = saved[i].defined() ? saved[i].detach() : at::Tensor();
      if (d.defined() && state->requires_grad[i]) d.requires_grad_(true);
      detached.push_back(std::move(d));
    }
    at::Tensor out;
    {
      RngFork cpu_fork(at::detail::getDefaultCPUGenerator(), state->cpu_rng);
      std::optional<RngFork> cuda_fork;
      if (state->cuda_device) cuda_fork.emplace(cuda_generator(*state->cuda_device), state->cuda_rng);
      AutocastState cpu_autocast(at::kCPU, state->autocast_cpu, state->autocast_cpu_dtype);
      AutocastState cuda_autocast(at::kCUDA, state->autocast_cuda, state->autocast_cuda_dtype);
      at::AutoGradMode grad(true);
      out = state->fn(detached);
    }
    if (out.requires_grad() && grad_outputs.at(0).defined()) {
      torch::autograd::backward({out}, {grad_outputs[0]});
    }
    // One gradient per forward argument: the state (none), then each tensor input.
    torch::autograd::variable_list grads{at::Tensor()};
    for (std::size_t i = 0; i < detached.size(); ++i) {
      grads.push_back(state->requires_grad[i] ? detached[i].grad() : at::Tensor());
    }
    return grads;
  }
};

// ---- counting CPU allocator ----------------------------------------------------------------------

struct Allocation {
  std::size_t bytes;
  void* context;
  c10::DeleterFnPtr deleter;
};

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(std::size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_[data] = Allocation{n, inner.release_context(), inner.get_deleter()};
    }
    const std::int64_t now = current_.fetch_add(static_cast<std::int64_t>(n)) + static_cast<std::int64_t>(n);
    std::int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    // context == data keeps is_simple_data_ptr() true, as with the default CPU allocator.
    return {data, data, &CountingAllocator::release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static CountingAllocator& instance() {
    // Installed once and never uninstalled or destroyed: tensors alive at exit still free through it.
    static CountingAllocator* const self = [] {
      auto* a = new CountingAllocator(c10::GetCPUAllocator());
      c10::SetCPUAllocator(a, /*priority=*/std::numeric_limits<std::uint8_t>::max());
      return a;
    }();
    return *self;
  }

  std::atomic<std::int64_t> current_{0};
  std::atomic<std::int64_t> peak_{0};

 private:
  static void release(void* data) {
    CountingAllocator& self = instance();
    Allocation a{};
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      auto it = self.live_.find(data);
      HOTPATH_ASSERT(it != self.live_.end());
      a = it->second;
      self.live_.erase(it);
    }
    self.current_.fetch_sub(static_cast<std::int64_t>(a.bytes));
    if (a.deleter != nullptr) a.deleter(a.context);
  }

  c10::Allocator* inner_;
  std::mutex mutex_;
  std::unordered_map<void*, Allocation> live_;
};

}  // namespace

at::Tensor checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs) {
  if (!c10::GradMode::is_enabled()) return fn(inputs);
  auto state = c10::make_intrusive<CheckpointState>();
  // The Function takes only defined tensors (autograd records each input's device); `positions`
  // puts them back in place, undefined elsewhere, when the block runs.
  std::vector<at::Tensor> args;
  std::vector<std::size_t> positions;
  bool any_requires_grad = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (!t.defined()) continue;
    args.push_back(t);
    positions.push_back(i);
    state->requires_grad.push_back(t.requires_grad());
    any_requires_grad = any_requires_grad || t.requires_grad();
    if (t.is_cuda() && !state->cuda_device) state->cuda_device = t.device();
  }
  if (!any_requires_grad) {
    // Keeps the Function in the graph so the block's parameters get gradients; the block never sees it.
    args.push_back(at::empty({0}, at::TensorOptions().dtype(at::kFloat)).requires_grad_(true));
    state->requires_grad.push_back(false);
  }
  state->fn = [fn, positions, n = inputs.size()](const std::vector<at::Tensor>& given) {
    std::vector<at::Tensor> all(n);
    for (std::size_t k = 0; k < positions.size(); ++k) all[positions[k]] = given[k];
    return fn(all);
  };
  state->cpu_rng = rng_state(at::detail::getDefaultCPUGenerator());
  if (state->cuda_device) state->cuda_rng = rng_state(cuda_generator(*state->cuda_device));
  state->autocast_cpu = at::autocast::is_autocast_enabled(at::kCPU);
  state->autocast_cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  state->autocast_cuda = at::autocast::is_autocast_enabled(at::kCUDA);
  state->autocast_cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  return CheckpointFunction::apply(std::move(state), at::TensorList(args)).at(0);
}

at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input) {
  return checkpoint([fn](const std::vector<at::Tensor>& in) { return fn(in[0]); }, std::vector<at::Tensor>{input});
}

PeakMemory::PeakMemory() {
  CountingAllocator::instance();
  reset();
}

void PeakMemory::reset() {
  CountingAllocator& a = CountingAllocator::instance();
  base_ = a.current_.load();
  a.peak_.store(base_);
}

std::int64_t PeakMemory::peak_bytes() const { return CountingAllocator::instance().peak_.load() - base_; }
std::int64_t PeakMemory::current_bytes() const { return CountingAllocator::instance().current_.load() - base_; }
std::int64_t PeakMemory::allocated_bytes() { return CountingAllocator::instance().current_.load(); }

}  // namespace hotpath::ops
