// What UCX may use on this host: the UCX_TLS selection and the UCT transports
// (tl/device pairs) UCX finds. The ucx transport uses these to decide whether UCX
// brings a wire of its own to other hosts (an RDMA transport: rc, ud, dc) or would
// only run over sockets, where collie's tcp transport is faster (docs/multihost.md).
//
// Thread safety: every function may be called from any thread; they read the
// environment's UCX_TLS (where the selection leaves it) and query UCT afresh on each
// call.
#pragma once

#include <string>
#include <vector>

#include "core/config/config.h"

namespace collie::ucx {

// What one communicator asks of its UCX context: its COLLIE_UCX_TLS and
// COLLIE_UCX_NET_DEVICES (the ucx table's knobs, ucx_knobs.cc). Empty fields leave the
// environment's UCX_TLS and UCX_NET_DEVICES (which UCX reads itself), or UCX's defaults.
struct UcxSelection {
  std::string tls;
  std::string netDevices;
  // The knobs' typed parse (ucx_knobs.cc): fails naming a knob it reads that no table
  // declares (a bug), or a value the snapshot refused.
  static Result<UcxSelection> parse(const Config& config);
  // The UCX_TLS in effect: `tls`, else the environment's UCX_TLS ("" when neither).
  std::string effectiveTls() const;
};

// The entries of the UCX_TLS in effect ("tcp,self" -> {"tcp", "self"}); empty when unset.
std::vector<std::string> tlsList(const UcxSelection& selection);

// Whether UCX_TLS leaves UCX a network transport, which peer-failure detection needs
// (its shared-memory transports cannot report a dead peer). Unset, "all" or an
// exclusion list ("^...") leave the network in.
bool networkTransportAllowed(const UcxSelection& selection);

// Whether UCX_TLS names tcp as UCX's only network transport (besides shared memory).
bool tcpOnly(const UcxSelection& selection);

struct UctResource {
  std::string transport;  // "rc_mlx5", "tcp", "posix", ...
  std::string device;     // "mlx5_0:1", "eth0", "memory", ...
};
// Every transport/device pair UCT reports on this host (what UCX_TLS and
// UCX_NET_DEVICES choose from). Empty when the query fails.
std::vector<UctResource> uctResources();

// Whether `resources` hold an RDMA transport (rc, ud or dc on some device) that the
// UCX_TLS entries `tls` allow (empty: all; "^a,b": all but those; else those named,
// with "all" and "ib" naming every RDMA family).
bool rdmaWireIn(const std::vector<UctResource>& resources, const std::vector<std::string>& tls);
// rdmaWireIn(uctResources(), tlsList(selection)): whether UCX can reach other hosts over
// RDMA. False on hosts whose only network is sockets.
bool rdmaWireUsable(const UcxSelection& selection);

}  // namespace collie::ucx
