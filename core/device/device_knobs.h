// The device path's knobs as typed values (the table is in device_knobs.cc): parsed once
// per communicator at creation (core/comm/communicator_create.cc), and by the tools that pick a
// device runtime before any communicator exists.
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <cstddef>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct DeviceKnobs {
  bool emulation = false;     // COLLIE_DEVICE_EMULATION
  size_t slotBytes = 0;       // COLLIE_DEVICE_SLOT_BYTES
  size_t boardBytes = 0;      // COLLIE_DEVICE_BOARD_BYTES
  size_t ringSliceBytes = 0;  // COLLIE_DEVICE_RING_SLICE_BYTES
  bool profile = false;       // COLLIE_DEVICE_PROFILE

  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<DeviceKnobs> parse(const Config& config);
};

}  // namespace collie
