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
          knobs::everyRankAlike(knobs::integer(
              "COLLIE_DEVICE_BOARD_BYTES", "256K", 0, 64 * 1024 * kKnobKiB,
              "bytes of each of the two board slots in a rank's device window (a multiple of "
              "4 KiB; 0: none). A device all-reduce, reduce-scatter or all-gather of 2-8 "
              "ranks on one host whose input fits runs as one kernel: every rank copies its "
              "input onto its board and reads every peer's (algorithm auto or board). The "
              "window takes 2 x this much more device memory on every rank")),
          knobs::everyRankAlike(knobs::integer(
              "COLLIE_DEVICE_RING_SLICE_BYTES", "128K", 0, 16 * 1024 * kKnobKiB,
              "bytes of one slot of the ring program's FIFOs (a multiple of 4 KiB; 0: no ring "
              "program). A device collective beyond the board whose schedule only sends to "
              "the next rank and receives from the previous one (ring all-reduce, "
              "reduce-scatter, all-gather; chain broadcast, reduce) runs as one kernel of up "
              "to 16 blocks, each pipelining its share through a FIFO of 4 such slots. The "
              "window takes 64 x this much more device memory on every rank")),
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
  knobs.boardBytes = static_cast<size_t>(read.integer("COLLIE_DEVICE_BOARD_BYTES"));
  knobs.ringSliceBytes = static_cast<size_t>(read.integer("COLLIE_DEVICE_RING_SLICE_BYTES"));
  knobs.profile = read.integer("COLLIE_DEVICE_PROFILE") != 0;
  Result<DeviceKnobs> parsed = read.finish(knobs);
  if (parsed.isOk() && parsed->boardBytes % (4 * kKnobKiB) != 0) {
    return invalidArgument("COLLIE_DEVICE_BOARD_BYTES=" + std::to_string(parsed->boardBytes) +
                           ": board slots must be a multiple of 4 KiB (or 0: none)");
  }
  if (parsed.isOk() && parsed->ringSliceBytes % (4 * kKnobKiB) != 0) {
    return invalidArgument(
        "COLLIE_DEVICE_RING_SLICE_BYTES=" + std::to_string(parsed->ringSliceBytes) +
        ": ring slices must be a multiple of 4 KiB (or 0: no ring program)");
  }
  return parsed;
}

}  // namespace collie
