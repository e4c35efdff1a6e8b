// The device path's knobs (core/device/device_runtime.h).
#include "core/device/device_knobs.h"

#include "core/config/knob_reader.h"
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
          knobs::everyRankAlike(knobs::integer(
              "COLLIE_DEVICE_SLOT_BYTES", "8M", 4 * kKnobKiB, 64 * 1024 * kKnobKiB,
              "bytes of each of the two message slots per peer in a rank's device window "
              "(a multiple of 4 KiB): the chunk of one step kernel of the device path. "
              "Larger slots mean fewer kernel hand-offs per byte; the window takes "
              "nranks x 2 x this much device memory on every rank")),
          knobs::choice("COLLIE_DEVICE_PROFILE", "0", "0,1",
                        "1: the device path's step kernels add up how long they wait for their "
                        "peers' flags; each rank logs the sum (INFO) when its communicator "
                        "is destroyed"),
      },
      [](const Config& config) { return DeviceKnobs::parse(config).status(); }});
}

Result<DeviceKnobs> DeviceKnobs::parse(const Config& config) {
  KnobReader read(config);
  DeviceKnobs knobs;
  knobs.emulation = read.integer("COLLIE_DEVICE_EMULATION") != 0;
  knobs.slotBytes = static_cast<size_t>(read.integer("COLLIE_DEVICE_SLOT_BYTES"));
  knobs.profile = read.integer("COLLIE_DEVICE_PROFILE") != 0;
  return read.finish(knobs);
}

}  // namespace collie
