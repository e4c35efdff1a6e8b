// Congestion control for UCX's tcp sockets. UCX opens them itself and leaves them on
// the system's default (bbr on this project's machine, whose paced sends cost the
// sender CPU per packet), while collie's tcp transport sets COLLIE_TCP_CONGESTION on
// its own: over tcp the same knob now reaches UCX's wires too (docs/multihost.md,
// "Congestion control"). UCX's sockets are recognised without touching the
// application's: its listeners are the TCP listeners that appear while the worker is
// created (a listener hands its setting to every connection it accepts), and its
// outgoing connections are those that reach a peer's published UCX listener.
//
// Each call fails (the error of net::processTcpSockets()) when this process cannot list
// its sockets; the caller logs it and UCX's sockets keep the system default.
//
// Thread safety: reentrant; see core/net/process_sockets.h for the snapshot caveat.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "collie/status.h"

namespace collie::ucx {

// The inodes of this process's TCP sockets now (taken before UCX creates a worker).
Result<std::set<uint64_t>> tcpSocketInodes();

// The TCP listeners opened since `before` (UCX's, when nothing else opened one in
// between): sets `congestion` (unless empty or "system") on each and returns their "ip:port".
Result<std::vector<std::string>> tuneNewTcpListeners(const std::set<uint64_t>& before,
                                                     const std::string& congestion);

// Sets `congestion` on this process's connected TCP sockets that reach one of
// `listeners` ("ip:port", the peers' UCX listeners); returns how many it set.
Result<int> tuneTcpSocketsTo(const std::vector<std::string>& listeners,
                             const std::string& congestion);

}  // namespace collie::ucx
