// The shm transport's knobs as typed values (the table is in shm_knobs.cc): parsed when
// the transport is created (transports/shm/shm_transport.cc), and for the team offer
// `collie info --tuning` and `collie sim` show. The CPUs its waits are sized by are the
// wait table's (core/transport/wait_policy.h).
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <chrono>
#include <cstdint>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct ShmKnobs {
  int64_t fifoBytes = 0;              // COLLIE_BUFFSIZE (NCCL_BUFFSIZE): each FIFO, asked for
  int64_t oneShotMaxBytes = 0;        // COLLIE_SHM_ONESHOT_MAX: board slot; 0 no team collectives
  int64_t cmaMaxBytes = 0;            // COLLIE_SHM_CMA_MAX
  int64_t cmaMinBytes = 0;            // COLLIE_SHM_CMA_MIN: the cma/direct-vs-board crossover
  int64_t directMinBytes = 0;         // COLLIE_SHM_DIRECT_MIN
  int64_t twoShotMinBytes = 0;        // COLLIE_SHM_TWOSHOT_MIN; 0 one shot at every size
  int64_t hugePageMinBytes = 0;       // COLLIE_SHM_THP_MIN; 0 never
  std::chrono::microseconds spin{0};  // COLLIE_SHM_SPIN
  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<ShmKnobs> parse(const Config& config);
};

}  // namespace collie
