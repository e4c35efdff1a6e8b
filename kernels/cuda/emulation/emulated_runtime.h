// Test hooks of the emulated DeviceRuntime (emulated_runtime.cc; the runtime itself is
// reached through core/device/device_runtime.h: emulatedDeviceRuntime()).
//
// Contract: emulatedKernelLaunches() counts step kernels and emulatedCopies() counts
// memcpyAsync calls enqueued by the emulated runtime since the process started (tests
// use them to prove the device path or the staging ran).
// Thread safety: any thread.
#pragma once

#include <cstdint>

namespace collie {

uint64_t emulatedKernelLaunches();
uint64_t emulatedCopies();

}  // namespace collie
