// Mlp: a small fully connected network with a real loss, the model of the DDP demo
// and tests. Layer l maps dim -> dim: z = W_l h + b_l, then tanh (the last layer is
// linear). Loss = mean over the batch and the outputs of 0.5 * (output - target)^2.
//
// Parameters in model order: W_0, b_0, W_1, b_1, ... (W_l is dim x dim row-major,
// parameter 2l; b_l is parameter 2l+1). Initial values depend only on the seed.
//
// forward() keeps the activations; backward() walks the layers from last to first,
// ADDS each layer's gradients (times lossScale) into the sink, tops the layer's time
// up to the simulated per-layer compute (ComputeBurner), then marks b_l and W_l ready -- the order
// in which a real autograd engine produces them. Arithmetic is in a fixed order, so the same inputs
// give the same bits.
//
// Thread safety: none; one Mlp per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collie/status.h"
#include "ddp/demo/model/compute.h"
#include "ddp/gradient_sink.h"
#include "ddp/timeline.h"

namespace collie::ddp {

class Mlp {
 public:
  Mlp(int layers, int dim, uint64_t seed);

  // The largest dim with dim*dim + dim <= paramsPerLayer (at least 1).
  static int dimForParams(size_t paramsPerLayer);

  int layers() const { return layers_; }
  int dim() const { return dim_; }
  size_t numParams() const { return params_.size(); }
  size_t numElements() const;
  std::vector<std::span<float>> parameters();
  std::vector<size_t> paramSizes() const;
  static size_t weightIndex(int layer) { return 2 * static_cast<size_t>(layer); }
  static size_t biasIndex(int layer) { return 2 * static_cast<size_t>(layer) + 1; }

  // x: batch rows of dim floats. Records kForward events when `timeline` is set.
  void forward(const float* x, size_t batch, Timeline* timeline = nullptr);
  // Returns the batch's loss (before lossScale). Requires a preceding forward().
  // Returns the first error of sink.markReady().
  Result<double> backward(const float* target, GradientSink& sink, float lossScale = 1.0f,
                          const ComputeBurner* burner = nullptr, Timeline* timeline = nullptr);
  // Skips the gradient of `layer` (neither computed nor marked ready): simulates a
  // parameter unused in this step. -1 = none.
  void setUnusedLayer(int layer) { unusedLayer_ = layer; }

 private:
  int layers_;
  int dim_;
  int unusedLayer_ = -1;
  size_t batch_ = 0;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> acts_;  // acts_[l] = input of layer l; acts_[layers] = output
};

}  // namespace collie::ddp
