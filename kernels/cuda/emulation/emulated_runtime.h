// The emulated DeviceRuntime as a component of its own, and its test hooks.
//
// The emulation (emulated_runtime.cc) is built into libcollie_device_emulation.so, not
// into libcollie, so that users' libcollie (and the libnccl.so.2 drop-in) carry no fake
// GPU. libcollie loads it on first use (emulation_loader.cc, through
// emulatedDeviceRuntime() of core/device/device_runtime.h) when COLLIE_DEVICE_EMULATION=1
// asks for it: from the folder of the libcollie that runs, then from the loader's search
// path. The library is built with the CMake option COLLIE_BUILD_DEVICE_EMULATION (on
// with the tests) and never installed.
//
// Contract: the library exports one C symbol, kDeviceEmulationEntry, a function that
// returns a DeviceEmulation whose members live as long as the process.
// emulatedKernelLaunches() counts step kernels and emulatedCopies() counts memcpyAsync
// calls enqueued by the emulated runtime since it was loaded (0 while it is not): tests
// use them to prove that the device path or the staging ran.
// Thread safety: any thread.
#pragma once

#include <cstdint>

namespace collie {

class DeviceRuntime;

// What libcollie_device_emulation.so hands to libcollie.
struct DeviceEmulation {
  DeviceRuntime* runtime = nullptr;
  uint64_t (*kernelLaunches)() = nullptr;
  uint64_t (*copies)() = nullptr;
};
using DeviceEmulationEntry = const DeviceEmulation* (*)();
inline constexpr const char* kDeviceEmulationEntry = "collieDeviceEmulation";

uint64_t emulatedKernelLaunches();
uint64_t emulatedCopies();

}  // namespace collie
