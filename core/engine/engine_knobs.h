// The engine's knobs as typed values (the table is in engine_knobs.cc): parsed once per
// communicator at creation (core/comm/communicator_create.cc) into EngineConfig.
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct EngineKnobs {
  std::chrono::microseconds busyPoll{0};  // COLLIE_BUSY_POLL
  bool rootAgreement = true;              // COLLIE_ROOT_AGREEMENT
  bool reduceOnReceive = true;            // COLLIE_RECV_REDUCE
  size_t adaptMaxBytes = 0;               // COLLIE_TUNE_ADAPT_MAX
  size_t traceDepth = 0;                  // COLLIE_TRACE_DEPTH
  std::string traceDump;                  // COLLIE_TRACE_DUMP

  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<EngineKnobs> parse(const Config& config);
};

}  // namespace collie
