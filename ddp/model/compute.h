// Simulated per-layer compute cost: a backward layer takes msPerLayer in all: after
// the layer's real gradient math, the rest of the time is spent as
//   kFma:   a calibrated multiply-add loop on this thread (real CPU work, competes for
//           cores with communication like host compute does), or
//   kSleep: a sleep (the host thread idles as it would while an accelerator computes).
// The burn never touches model data, so results do not depend on it.
//
// Thread safety: burn() may be called from any thread; calibration runs once.
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
  // real math already took longer). kFma converts the remaining time into a calibrated
  // iteration count, so a core shared with other threads stretches it, as it would
  // stretch real compute.
  void burnLayerRemainder(std::chrono::steady_clock::time_point layerStart) const;
  double msPerLayer() const { return msPerLayer_; }
  ComputeMode mode() const { return mode_; }
  // FMA loop iterations per millisecond on this machine (measured on first use).
  static double fmaItersPerMs();

 private:
  ComputeMode mode_;
  double msPerLayer_;
};

}  // namespace collie::ddp
