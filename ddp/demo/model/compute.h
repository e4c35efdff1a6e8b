// Simulated per-layer compute cost: a backward layer takes msPerLayer of wall time in
// all: after the layer's real gradient math, the rest of the time is spent as
//   kFma:   a busy multiply-add loop on this thread until the layer's deadline (real
//           CPU work that competes for cores with communication, as host compute does;
//           deadline-based rather than a calibrated count, so a loaded machine shrinks
//           the work done instead of stretching the layer unpredictably), or
//   kSleep: a sleep (the host thread idles as it would while an accelerator computes).
// The burn never touches model data, so results do not depend on it.
//
// Thread safety: burnLayerRemainder() may be called from any thread.
#pragma once

#include <chrono>
#include <string_view>

namespace collie::ddp {

enum class ComputeMode { kFma, kSleep };

// "fma" or "sleep"; false for anything else.
bool parseComputeMode(std::string_view name, ComputeMode* mode);

class ComputeBurner {
 public:
  ComputeBurner(ComputeMode mode, double msPerLayer) : mode_(mode), msPerLayer_(msPerLayer) {}
  // Spends what is left of one layer's msPerLayer since `layerStart` (nothing when the
  // real math already took longer).
  void burnLayerRemainder(std::chrono::steady_clock::time_point layerStart) const;
  double msPerLayer() const { return msPerLayer_; }
  ComputeMode mode() const { return mode_; }

 private:
  ComputeMode mode_;
  double msPerLayer_;
};

}  // namespace collie::ddp
