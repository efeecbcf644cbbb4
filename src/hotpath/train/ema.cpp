// train.ema_decay's moving average (ema.h).
#include "ema.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace hotpath::train {

Ema::Ema(torch::nn::Module& module, const NamedParameters& trainable, double decay) : decay_(decay) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : trainable) add(name, p);
  for (const auto& item : module.named_buffers()) {
    if (item.value().is_floating_point()) add(item.key(), item.value());
  }
}

void Ema::update() {
  at::NoGradGuard no_grad;
  at::_foreach_lerp_(averages_, live_, 1.0 - decay_);
}

TensorMap Ema::state() const {
  TensorMap out;
  for (std::size_t i = 0; i < names_.size(); ++i) out[names_[i]] = averages_[i];
  return out;
}

void Ema::swap() {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < live_.size(); ++i) {
    const at::Tensor live = live_[i].detach().clone();
    live_[i].copy_(averages_[i]);
    averages_[i].copy_(live);
  }
}

void Ema::add(const std::string& name, const at::Tensor& t) {
  names_.push_back(name);
  live_.push_back(t);
  averages_.push_back(t.detach().clone());
}

EmaSwap::EmaSwap(Ema* ema) : ema_(ema) {
  if (ema_) ema_->swap();
}

EmaSwap::~EmaSwap() {
  try {
    if (ema_) ema_->swap();
  } catch (...) {  // NOLINT(bugprone-empty-catch)
  }
}

}  // namespace hotpath::train
