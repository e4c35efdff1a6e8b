// The log filter's knobs as typed values (the table is in log_knobs.cc). Process-wide:
// parsed from the environment when the filter is first needed (core/log/log.cc).
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <string>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct LogKnobs {
  std::string level;       // COLLIE_DEBUG: NONE, WARN, INFO or TRACE (any case)
  std::string subsystems;  // COLLIE_DEBUG_SUBSYS
  // Fails naming a knob this parse reads that no table declares (a bug). A refused
  // value reads as its default (the communicator's validation names it).
  static Result<LogKnobs> parse(const Config& config);
};

}  // namespace collie
