#include "ddp/demo/model/compute.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

namespace collie::ddp {
namespace {

// Eight independent multiply-add chains (enough to keep an FMA pipeline busy);
// returns a value the caller stores so the loop is not optimised away.
float fmaLoop(int64_t iters) {
  float a[8] = {1.0f, 1.1f, 1.2f, 1.3f, 1.4f, 1.5f, 1.6f, 1.7f};
  const float m = 0.999999f, c = 1e-7f;
  for (int64_t i = 0; i < iters; ++i) {
    for (float& v : a) v = v * m + c;
  }
  float s = 0;
  for (float v : a) s += v;
  return s;
}

volatile float gSink;

}  // namespace

bool parseComputeMode(std::string_view name, ComputeMode* mode) {
  if (name == "fma") {
    *mode = ComputeMode::kFma;
  } else if (name == "sleep") {
    *mode = ComputeMode::kSleep;
  } else {
    return false;
  }
  return true;
}

void ComputeBurner::burnLayerRemainder(std::chrono::steady_clock::time_point layerStart) const {
  double spent =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - layerStart)
          .count();
  double remaining = msPerLayer_ - spent;
  if (remaining <= 0) return;
  if (mode_ == ComputeMode::kSleep) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(remaining));
    return;
  }
  // Busy until the deadline, in slices short enough to end within ~0.1 ms of it.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double, std::milli>(remaining));
  float sink = 0;
  while (std::chrono::steady_clock::now() < deadline) sink += fmaLoop(4096);
  gSink = sink;
}

}  // namespace collie::ddp
