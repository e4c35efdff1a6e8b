// Test support: the emulated device runtime (a component of its own,
// libcollie_device_emulation.so; kernels/cuda/emulation/emulated_runtime.h) for the tests
// that need it. A build without it cannot run them: the binary stops at the first use,
// saying why, instead of crashing on a null runtime.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "core/device/device_runtime.h"

namespace collie::testing {

inline DeviceRuntime& emulatedDevice() {
  static DeviceRuntime* const runtime = [] {
    Result<DeviceRuntime*> loaded = emulatedDeviceRuntime();
    if (!loaded.isOk()) {
      std::fprintf(stderr, "this test needs the device emulation: %s\n",
                   loaded.status().toString().c_str());
      std::abort();
    }
    return *loaded;
  }();
  return *runtime;
}

}  // namespace collie::testing
