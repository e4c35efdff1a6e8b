// EngineConfig: what one communicator's engine runs with, resolved from the
// communicator's configuration snapshot at creation (core/comm/communicator_create.cc). A plain
// value, read only.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "collie/types.h"
#include "core/plan/layout.h"
#include "core/transport/wait_policy.h"
#include "core/tune/tune_knobs.h"
#include "core/tune/tuner.h"

namespace collie {

struct EngineConfig {
  int rank = 0;
  int nranks = 1;
  int nchannels = 1;                       // connections per peer: the most a schedule may use
  bool channelsFixed = false;              // set by config: every schedule uses nchannels
  size_t chunkBytes = 512 * 1024;          // 0: the tuner picks per collective
  Algorithm algorithm = Algorithm::kAuto;  // kAuto: the tuner picks
  std::chrono::microseconds timeout{300'000'000};
  // How the engine waits between turns without progress: COLLIE_BUSY_POLL adapted to the
  // host's ranks and CPUs at creation (core/transport/wait_policy.h).
  WaitPolicy wait;
  bool reduceOnReceive = true;  // COLLIE_RECV_REDUCE: use Connection::postRecvReduce()
  // COLLIE_TUNE_ADAPT_MAX: the largest all-reduce whose team step's cma is timed against
  // its schedule (core/engine/single_copy_choice.h); 0: never.
  size_t adaptMaxBytes = 8 << 20;
  bool rootAgreement = true;  // COLLIE_ROOT_AGREEMENT: PlanParams::agreeOnRoot
  size_t traceDepth = 64;     // COLLIE_TRACE_DEPTH: collectives kept by the flight recorder
  std::string traceDump;      // COLLIE_TRACE_DUMP: "", "stderr" or a path (%r = rank)
  size_t scheduleCacheBytes = 4 << 20;  // schedules kept for reuse (core/engine/schedule_cache.h)
  // The ranks' hosts (core/plan/layout.h) when they span several, from the topology at
  // creation; null on one host. Schedules are planned host after host on it.
  HostLayoutPtr hosts;
  // COLLIE_HIER_HOSTS: the inter-host stage of hier (core/plan/hier.h).
  HostStage hostStage = HostStage::kAuto;
  // The tuner's knobs, for its probe (core/engine/tune_probe.h).
  TuneKnobs tune;
};

}  // namespace collie
