// GradientSink: where a backward pass writes gradients and reports them ready.
//
// Backward ADDS each parameter's gradient into grad(i) (so micro-batches accumulate)
// and then calls markReady(i) once per parameter per backward. The Reducer is the
// distributed sink; LocalGradients is a plain one for single-process reference runs.
//
// Thread safety: a sink is used by one backward at a time.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "collie/status.h"

namespace collie::ddp {

class GradientSink {
 public:
  virtual ~GradientSink() = default;
  virtual std::span<float> grad(size_t param) = 0;
  virtual Status markReady(size_t param) = 0;
};

// Gradients in plain per-parameter vectors; markReady does nothing.
class LocalGradients : public GradientSink {
 public:
  explicit LocalGradients(const std::vector<size_t>& paramSizes) {
    for (size_t n : paramSizes) grads_.emplace_back(n, 0.0f);
  }
  std::span<float> grad(size_t param) override { return grads_[param]; }
  Status markReady(size_t) override { return Status::ok(); }
  void zero() {
    for (auto& g : grads_) std::fill(g.begin(), g.end(), 0.0f);
  }

 private:
  std::vector<std::vector<float>> grads_;
};

}  // namespace collie::ddp
