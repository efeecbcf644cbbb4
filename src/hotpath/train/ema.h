// ema.h (private to hotpath_train) — train.ema_decay: an exponential moving average of the trained
// parameters and the floating-point buffers (BatchNorm's running statistics: timm's ModelEmaV2 averages them
// too). Frozen parameters never change, so they are not kept; integer buffers (num_batches_tracked) are the
// live ones. Eval, best/ and the exported model see the averages by swapping them into the module for a
// scope (EmaSwap).
//
//   Ema ema(model, trainable, 0.999);
//   /* each optimizer step taken */ ema.update();
//   { const EmaSwap in(&ema); evaluate(); }      // the averages in the module for the scope
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "hotpath/train/checkpoint.h"

namespace torch::nn {
class Module;
}

namespace hotpath::train {

class Ema {
 public:
  Ema(torch::nn::Module& module, const NamedParameters& trainable, double decay);
  // average += (1 - decay) · (live - average), after each optimizer step that was taken.
  void update();
  // name → average (aliases: restoring a checkpoint copies into them).
  [[nodiscard]] TensorMap state() const;
  // Swaps averages and live values (twice = back).
  void swap();

 private:
  void add(const std::string& name, const at::Tensor& t);
  double decay_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> live_, averages_;
};

// The EMA weights in the module for a scope (no EMA: nothing happens).
class EmaSwap {
 public:
  explicit EmaSwap(Ema* ema);
  // Runs while an eval's exception unwinds too: a failing swap (out of memory) must not terminate;
  // the run is ending with the first error then, and the model it leaves is not saved.
  ~EmaSwap();
  EmaSwap(const EmaSwap&) = delete;
  EmaSwap& operator=(const EmaSwap&) = delete;

 private:
  Ema* ema_;
};

}  // namespace hotpath::train
