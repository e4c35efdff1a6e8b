// CycleClock: a cheap monotonic tick counter for hot paths that must not pay for a
// clock_gettime per call (the flight recorder stamps every collective).
//
// On x86-64 a tick is one TSC cycle (rdtsc: ~10-40 cycles, no syscall, no vDSO
// call); elsewhere it is a steady_clock nanosecond. Ticks convert to wall-clock
// microseconds through two anchors, (ticks, wall time) taken at construction and at
// conversion, so no frequency calibration is needed; the error is that of linear
// interpolation between the anchors (an invariant TSC, as Linux requires to use it as
// its clock source, keeps it well below a microsecond over hours).
//
// Thread safety: now() is safe from any thread; a CycleClock is immutable after
// construction and toWallUs() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace collie {

class CycleClock {
 public:
  CycleClock() : anchorTicks_(now()), anchorUs_(wallUs()) {}

  static uint64_t now() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
#endif
  }

  // Microseconds since the Unix epoch.
  static int64_t wallUs() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // Converts ticks read by now() (0 stays 0: "never") to wall-clock microseconds.
  // `scale` comes from scale(): take it once per batch of conversions.
  int64_t toWallUs(uint64_t ticks, double scale) const {
    if (ticks == 0) return 0;
    const double delta = static_cast<double>(static_cast<int64_t>(ticks - anchorTicks_));
    return anchorUs_ + static_cast<int64_t>(delta * scale);
  }
  // Microseconds per tick, measured from the construction anchor to now.
  double scale() const {
    const uint64_t ticks = now();
    const int64_t us = wallUs();
    if (ticks == anchorTicks_) return 0.0;
    return static_cast<double>(us - anchorUs_) / static_cast<double>(ticks - anchorTicks_);
  }

 private:
  uint64_t anchorTicks_;
  int64_t anchorUs_;
};

}  // namespace collie
