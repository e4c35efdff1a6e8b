// The communicator's and the launcher's knobs as typed values (the tables are in
// comm_knobs.cc).
//
// CommunicatorKnobs is parsed once per communicator at creation (core/comm/communicator_create.cc)
// from its snapshot, with the typed Options fields already applied as overrides.
// LaunchKnobs are process-wide (how this process was started): parsed from the
// communicator's snapshot, which holds the environment's values, or from
// Config::fromEnvironment() by the tools.
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "collie/status.h"
#include "collie/types.h"
#include "core/config/config.h"
#include "core/transport/transport.h"
#include "core/tune/tuner.h"

namespace collie {

struct CommunicatorKnobs {
  std::chrono::microseconds timeout{0};    // COLLIE_TIMEOUT
  std::string transport;                   // COLLIE_TRANSPORT: "" picks per pair
  Algorithm algorithm = Algorithm::kAuto;  // COLLIE_ALGO (NCCL_ALGO)
  HostStage hostStage = HostStage::kAuto;  // COLLIE_HIER_HOSTS
  int nchannels = 1;                       // COLLIE_NCHANNELS (NCCL_MIN_NCHANNELS)
  bool channelsFixed = false;              // COLLIE_NCHANNELS was set
  size_t chunkBytes = 0;                   // COLLIE_CHUNKSIZE; 0: the tuner picks
  std::string hostId;                      // COLLIE_HOST_ID: "" this host's own

  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused (COLLIE_ALGO naming no algorithm).
  static Result<CommunicatorKnobs> parse(const Config& config);
};

struct LaunchKnobs {
  std::string uniqueId;          // COLLIE_UNIQUE_ID: set by `collie run`, "" otherwise (a secret)
  std::string jobSecret;         // COLLIE_JOB_SECRET: 32 hex digits or "" (a secret)
  std::optional<int> rank;       // COLLIE_RANK
  std::optional<int> worldSize;  // COLLIE_WORLD_SIZE
  std::optional<int> localRank;  // COLLIE_LOCAL_RANK
  int nodeRank = 0;              // COLLIE_NODE_RANK
  std::string masterAddr;        // COLLIE_MASTER_ADDR: "host:port" or ""
  bool keepGoing = false;        // COLLIE_KEEP_GOING
  std::string tmpdir;            // COLLIE_TMPDIR

  // Under `collie run` (a unique id that parses): its secret and this host's node rank,
  // which name the job's shared-memory segments (TransportContext::launcher).
  std::optional<LauncherScope> launcherScope() const;

  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused (an unvalidated fromEnvironment() holds them).
  static Result<LaunchKnobs> parse(const Config& config);
};

}  // namespace collie
