#include "core/device/device_runtime.h"

#include <thread>

namespace collie {

Result<DeviceRuntime*> selectDeviceRuntime(bool emulation) {
  if (DeviceRuntime* hardware = hardwareDeviceRuntime()) return hardware;
  if (!emulation) return static_cast<DeviceRuntime*>(nullptr);
  Result<DeviceRuntime*> emulated = emulatedDeviceRuntime();
  if (!emulated.isOk()) return emulated.status().withContext("COLLIE_DEVICE_EMULATION=1");
  return emulated;
}

bool waitForEvent(DeviceRuntime& runtime, DeviceEvent event,
                  std::chrono::steady_clock::time_point deadline) {
  while (!runtime.queryEvent(event)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

}  // namespace collie
