// The rendezvous store's knobs as typed values (the table is in store_knobs.cc): parsed
// when a store server starts (core/bootstrap/tcp_store_server.cc) and where the store of a
// torchrun/mpirun job chooses its address (core/comm/launcher_environment.cc).
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct StoreKnobs {
  std::chrono::microseconds handshakeTimeout{0};  // COLLIE_STORE_HANDSHAKE_TIMEOUT
  size_t maxPending = 0;                          // COLLIE_STORE_MAX_PENDING
  size_t maxPendingPerHost = 0;                   // COLLIE_STORE_MAX_PENDING_PER_HOST
  std::string bind;                               // COLLIE_STORE_BIND: "", "*" or a host
  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<StoreKnobs> parse(const Config& config);
};

}  // namespace collie
