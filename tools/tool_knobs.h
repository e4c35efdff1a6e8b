// The `collie` tool's own knobs as typed values (the table is in tool_knobs.cc, added by
// main before any Config is built). Process-wide: parsed from the environment.
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <string>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie::tools {

struct ToolKnobs {
  std::string tracePath;  // COLLIE_TRACE: ddp-demo's timeline file, "" none
  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<ToolKnobs> parse(const Config& config);
};

}  // namespace collie::tools
