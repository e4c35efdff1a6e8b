// The tuner's knobs as typed values (the table is in tune_knobs.cc): parsed once per
// communicator at creation into EngineConfig::tune, and by `collie info` for what it shows.
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <string>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct TuneKnobs {
  // As given ("" when unset); the probe decodes and range-checks them together
  // (core/engine/tune_probe.h).
  std::string alphaUs;     // COLLIE_TUNE_ALPHA_US
  std::string bwGBps;      // COLLIE_TUNE_BW_GBPS
  std::string netAlphaUs;  // COLLIE_TUNE_NET_ALPHA_US
  std::string netBwGBps;   // COLLIE_TUNE_NET_BW_GBPS
  std::string cacheDir;    // COLLIE_TUNE_CACHE: "" the default place, "off"/"0" none

  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<TuneKnobs> parse(const Config& config);
};

}  // namespace collie
