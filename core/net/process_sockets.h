// The TCP sockets this process holds, found through /proc/self/fd, and per-socket
// congestion control. For libraries that open sockets of their own without a hook to
// tune them (UCX's tcp transport): the caller recognises them by address or by when
// they appeared and tunes them from outside.
//
// Thread safety: reentrant. The list is a snapshot: other threads may open or close
// descriptors at any time, so a listed fd may be closed (or reused) by the time it is
// used; the inode tells a reused descriptor from the listed socket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collie/status.h"

namespace collie::net {

struct TcpSocketInfo {
  int fd = -1;
  uint64_t inode = 0;      // the socket's inode (unique among open sockets)
  bool listening = false;  // SO_ACCEPTCONN
  std::string local;       // "ip:port" (SockAddr::toString), "?" when unknown
  std::string peer;        // "ip:port", "?" for listeners and unconnected sockets
};

// Every IPv4/IPv6 TCP socket among this process's descriptors (empty when there is
// none). An error (systemError) when /proc/self/fd cannot be read, so that callers
// can tell "no sockets" from "cannot see them".
Result<std::vector<TcpSocketInfo>> processTcpSockets();

// The congestion control `fd` runs ("cubic"), "?" when it cannot be read.
std::string congestionControlOf(int fd);
// The system's default for new sockets (net.ipv4.tcp_congestion_control), "?" unknown.
std::string systemCongestionControl();

// Whether a congestion-control setting (COLLIE_TCP_CONGESTION) asks for one: not empty
// and not "system" (keep the system default).
bool setsCongestionControl(const std::string& setting);

// Sets TCP_CONGESTION on `fd`; false (errno kept in *err when non-null) on failure.
// A listening socket passes its setting on to the connections it accepts.
bool setCongestionControl(int fd, const std::string& name, int* err = nullptr);

// Whether a connection to `peer` ("ip:port") reaches the listener at `listener`
// ("ip:port"; a wildcard ip, 0.0.0.0 or [::], matches any ip with that port).
bool reachesListener(const std::string& peer, const std::string& listener);

}  // namespace collie::net
