// Optimizers applied identically on every replica after Reducer::finalize():
//   SGD with momentum (PyTorch's form): v = mu v + g; p -= lr v
//   Adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//         p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// The state (per-parameter buffers and the step count) is exposed for checkpoints.
//
// Thread safety: none; one optimizer per replica.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ddp/gradient_sink.h"

namespace collie::ddp {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  virtual void step(std::vector<std::span<float>>& params, GradientSink& grads) = 0;
  // Buffers in a fixed order (SGD: one per parameter; Adam: m then v per parameter).
  std::vector<std::vector<float>>& state() { return state_; }
  int64_t& steps() { return steps_; }

 protected:
  std::vector<std::vector<float>> state_;
  int64_t steps_ = 0;
};

struct OptimizerConfig {
  std::string name = "sgd";  // "sgd" or "adam"
  float lr = 0.05f;
  float momentum = 0.9f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};

// nullptr for an unknown name.
std::unique_ptr<Optimizer> makeOptimizer(const OptimizerConfig& config,
                                         const std::vector<size_t>& paramSizes);

}  // namespace collie::ddp
