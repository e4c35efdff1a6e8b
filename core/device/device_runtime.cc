#include "core/device/device_runtime.h"

#include "core/config/config.h"

namespace collie {

DeviceRuntime* selectDeviceRuntime() {
  if (DeviceRuntime* hardware = hardwareDeviceRuntime()) return hardware;
  if (configInt("COLLIE_DEVICE_EMULATION") != 0) return emulatedDeviceRuntime();
  return nullptr;
}

}  // namespace collie
