// The socket knobs as typed values (the table is in net_knobs.cc): which interface the
// store, the unique id and the tcp transport use, and the congestion control of data
// sockets. Read by every layer that opens such sockets (core/comm, transports/tcp,
// transports/ucx): this is the lowest of them.
//
// Thread safety: parse() is a pure function of the snapshot.
#pragma once

#include <string>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct NetKnobs {
  std::string socketInterfaces;  // COLLIE_SOCKET_IFNAME (NCCL_SOCKET_IFNAME): "" any
  std::string tcpCongestion;     // COLLIE_TCP_CONGESTION: "system" keeps the default
  // Fails naming a knob this parse reads that no table declares (a bug), or a value
  // the snapshot refused.
  static Result<NetKnobs> parse(const Config& config);
};

}  // namespace collie
