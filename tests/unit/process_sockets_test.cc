// core/net/process_sockets: this process's TCP sockets, listener matching and
// per-socket congestion control, on loopback.
#include "core/net/process_sockets.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <string>

#include "core/net/socket.h"

namespace collie::net {
namespace {

using namespace std::chrono_literals;

// A congestion control other than the system default (reno is always built in).
std::string notTheDefault() { return systemCongestionControl() == "reno" ? "cubic" : "reno"; }

const TcpSocketInfo* findFd(const std::vector<TcpSocketInfo>& sockets, int fd) {
  for (const TcpSocketInfo& socket : sockets) {
    if (socket.fd == fd) return &socket;
  }
  return nullptr;
}

TEST(ProcessSockets, ListsListenersAndConnectionsWithTheirAddresses) {
  auto listener = listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.isOk()) << listener.status().toString();
  auto port = localPort(listener->fd());
  ASSERT_TRUE(port.isOk());
  auto client = connectWithDeadline("127.0.0.1", *port, Clock::now() + 5s);
  ASSERT_TRUE(client.isOk()) << client.status().toString();
  auto server = acceptWithDeadline(listener->fd(), Clock::now() + 5s);
  ASSERT_TRUE(server.isOk()) << server.status().toString();

  auto listed = processTcpSockets();
  ASSERT_TRUE(listed.isOk()) << listed.status().toString();
  const std::vector<TcpSocketInfo>& sockets = *listed;
  const std::string listenAddress = "127.0.0.1:" + std::to_string(*port);
  const TcpSocketInfo* l = findFd(sockets, listener->fd());
  const TcpSocketInfo* c = findFd(sockets, client->fd());
  const TcpSocketInfo* s = findFd(sockets, server->fd());
  ASSERT_TRUE(l != nullptr && c != nullptr && s != nullptr);
  EXPECT_TRUE(l->listening);
  EXPECT_EQ(l->local, listenAddress);
  EXPECT_FALSE(c->listening);
  EXPECT_EQ(c->peer, listenAddress);
  EXPECT_EQ(s->local, listenAddress);
  EXPECT_EQ(s->peer, c->local);
  EXPECT_NE(c->inode, s->inode);
  EXPECT_TRUE(reachesListener(c->peer, l->local));
  EXPECT_FALSE(reachesListener(s->peer, l->local));  // the client's ephemeral port
  // Not sockets, or not TCP: never listed.
  for (const TcpSocketInfo& socket : sockets) EXPECT_GT(socket.fd, 2);
}

TEST(ProcessSockets, ReachesListenerMatchesPortAndIpOrWildcard) {
  EXPECT_TRUE(reachesListener("10.0.0.2:5000", "10.0.0.2:5000"));
  EXPECT_TRUE(reachesListener("10.0.0.2:5000", "0.0.0.0:5000"));
  EXPECT_TRUE(reachesListener("[fe80::1]:5000", "[::]:5000"));
  EXPECT_FALSE(reachesListener("10.0.0.3:5000", "10.0.0.2:5000"));
  EXPECT_FALSE(reachesListener("10.0.0.2:50001", "10.0.0.2:5000"));
  EXPECT_FALSE(reachesListener("?", "10.0.0.2:5000"));
  EXPECT_FALSE(reachesListener("10.0.0.2:5000", "?"));
}

TEST(ProcessSockets, CongestionControlIsSetAndInheritedByAcceptedConnections) {
  const std::string algorithm = notTheDefault();
  EXPECT_FALSE(setsCongestionControl(""));
  EXPECT_FALSE(setsCongestionControl("system"));
  EXPECT_TRUE(setsCongestionControl(algorithm));
  auto listener = listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.isOk());
  ASSERT_TRUE(setCongestionControl(listener->fd(), algorithm));
  auto port = localPort(listener->fd());
  auto client = connectWithDeadline("127.0.0.1", *port, Clock::now() + 5s);
  ASSERT_TRUE(client.isOk());
  auto server = acceptWithDeadline(listener->fd(), Clock::now() + 5s);
  ASSERT_TRUE(server.isOk());
  EXPECT_EQ(congestionControlOf(server->fd()), algorithm);     // from the listener
  EXPECT_NE(congestionControlOf(client->fd()), algorithm);     // the system default
  ASSERT_TRUE(setCongestionControl(client->fd(), algorithm));  // established: allowed
  EXPECT_EQ(congestionControlOf(client->fd()), algorithm);
  int err = 0;
  EXPECT_FALSE(setCongestionControl(client->fd(), "no-such-cc", &err));
  EXPECT_EQ(err, ENOENT);
  EXPECT_EQ(congestionControlOf(client->fd()), algorithm);
}

}  // namespace
}  // namespace collie::net
