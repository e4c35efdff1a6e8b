#include "transports/ucx/ucx_tcp_sockets.h"

#include <cstring>
#include <mutex>

#include "core/log/log.h"
#include "core/net/process_sockets.h"

namespace collie::ucx {
namespace {

bool tune(int fd, const std::string& congestion) {
  int err = 0;
  if (net::setCongestionControl(fd, congestion, &err)) return true;
  static std::once_flag logged;
  std::call_once(logged, [&] {
    COLLIE_LOG(INFO, NET) << "ucx: TCP congestion control '" << congestion
                          << "' not available on UCX's sockets (" << std::strerror(err)
                          << "); keeping the system default";
  });
  return false;
}

}  // namespace

Result<std::set<uint64_t>> tcpSocketInodes() {
  Result<std::vector<net::TcpSocketInfo>> sockets = net::processTcpSockets();
  if (!sockets.isOk()) return sockets.status();
  std::set<uint64_t> inodes;
  for (const net::TcpSocketInfo& socket : *sockets) inodes.insert(socket.inode);
  return inodes;
}

Result<std::vector<std::string>> tuneNewTcpListeners(const std::set<uint64_t>& before,
                                                     const std::string& congestion) {
  Result<std::vector<net::TcpSocketInfo>> sockets = net::processTcpSockets();
  if (!sockets.isOk()) return sockets.status();
  std::vector<std::string> listeners;
  for (const net::TcpSocketInfo& socket : *sockets) {
    if (!socket.listening || before.count(socket.inode) != 0) continue;
    if (net::setsCongestionControl(congestion)) tune(socket.fd, congestion);
    listeners.push_back(socket.local);
  }
  return listeners;
}

Result<int> tuneTcpSocketsTo(const std::vector<std::string>& listeners,
                             const std::string& congestion) {
  if (!net::setsCongestionControl(congestion) || listeners.empty()) return 0;
  Result<std::vector<net::TcpSocketInfo>> sockets = net::processTcpSockets();
  if (!sockets.isOk()) return sockets.status();
  int tuned = 0;
  for (const net::TcpSocketInfo& socket : *sockets) {
    if (socket.listening) continue;
    for (const std::string& listener : listeners) {
      if (net::reachesListener(socket.peer, listener)) {
        tuned += tune(socket.fd, congestion) ? 1 : 0;
        break;
      }
    }
  }
  return tuned;
}

}  // namespace collie::ucx
