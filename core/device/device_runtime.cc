#include "core/device/device_runtime.h"

#include "core/config/config.h"

namespace collie {

DeviceRuntime* selectDeviceRuntime(const Config& config) {
  if (DeviceRuntime* hardware = hardwareDeviceRuntime()) return hardware;
  if (config.integer("COLLIE_DEVICE_EMULATION") != 0) return emulatedDeviceRuntime();
  return nullptr;
}

}  // namespace collie
