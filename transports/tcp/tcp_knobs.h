// The tcp transport's knobs as typed values (the table is in tcp_knobs.cc): parsed when
// the transport is created. Its interfaces and congestion control are the net table's
// (core/net/net_knobs.h).
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <cstdint>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct TcpKnobs {
  int socketsPerPeer = 2;         // COLLIE_NSOCKS_PERPEER: per peer and channel
  int64_t socketBufferBytes = 0;  // COLLIE_SOCKET_BUFSIZE: 0 the system's
  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<TcpKnobs> parse(const Config& config);
};

}  // namespace collie
