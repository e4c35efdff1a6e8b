// core/kernel/device_memory.h and hardwareDeviceRuntime() (core/device/device_runtime.h)
// for builds without CUDA: every buffer is host memory, there is no hardware runtime.
#include "core/device/device_runtime.h"
#include "core/kernel/device_memory.h"

namespace collie {

bool isDeviceMemory(const void*) { return false; }
int cudaDeviceCount() { return 0; }
DeviceRuntime* hardwareDeviceRuntime() { return nullptr; }

}  // namespace collie
