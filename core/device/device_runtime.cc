#include "core/device/device_runtime.h"

#include "core/config/config.h"

namespace collie {

Result<DeviceRuntime*> selectDeviceRuntime(const Config& config) {
  if (DeviceRuntime* hardware = hardwareDeviceRuntime()) return hardware;
  if (config.integer("COLLIE_DEVICE_EMULATION") == 0) return static_cast<DeviceRuntime*>(nullptr);
  Result<DeviceRuntime*> emulated = emulatedDeviceRuntime();
  if (!emulated.isOk()) return emulated.status().withContext("COLLIE_DEVICE_EMULATION=1");
  return emulated;
}

}  // namespace collie
