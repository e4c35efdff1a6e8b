// The device path's knobs (core/device/device_runtime.h).
#include "core/config/knob_registry.h"

namespace collie {

void registerDeviceKnobs(KnobRegistry& registry) {
  (void)registry.add(KnobTable{
      "device",
      "device (GPU) buffers",
      {
          knobs::everyRankAlike(knobs::choice(
              "COLLIE_DEVICE_EMULATION", "0", "0,1",
              "1: without a GPU, run the device path on the host emulation of the CUDA "
              "kernels (memory from the emulated runtime counts as device memory; for tests)")),
      }});
}

}  // namespace collie
