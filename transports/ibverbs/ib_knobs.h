// The ibverbs transport's knobs as typed values (the table is in ib_knobs.cc): parsed
// when the transport is created.
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <cstddef>
#include <string>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct IbKnobs {
  std::string ports;       // COLLIE_IB_HCA (NCCL_IB_HCA): "" every port
  int gidIndex = -1;       // COLLIE_IB_GID_INDEX (NCCL_IB_GID_INDEX): -1 auto
  size_t mrCacheSize = 1;  // COLLIE_IB_MR_CACHE: idle registrations kept
  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<IbKnobs> parse(const Config& config);
};

}  // namespace collie
