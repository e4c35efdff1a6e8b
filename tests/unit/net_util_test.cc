// Socket helpers: interface specs, host:port parsing. (The handshake's codec is in
// handshake_test.cc.)
#include <gtest/gtest.h>
#include <sys/socket.h>

#include "core/net/socket.h"

namespace collie::net {
namespace {

TEST(Interfaces, SpecMatching) {
  EXPECT_TRUE(interfaceMatches("eth", "eth0"));
  EXPECT_TRUE(interfaceMatches("ib,eth", "eth1"));
  EXPECT_FALSE(interfaceMatches("=eth", "eth0"));
  EXPECT_TRUE(interfaceMatches("=eth0", "eth0"));
  EXPECT_FALSE(interfaceMatches("^docker,lo", "lo"));
  EXPECT_TRUE(interfaceMatches("^docker,lo", "eth0"));
  EXPECT_TRUE(interfaceMatches("^=eth", "eth0"));
  EXPECT_FALSE(interfaceMatches("^=eth0", "eth0"));
}

TEST(Interfaces, SelectLoopbackAndReportMisses) {
  auto lo = selectInterface("lo");
  ASSERT_TRUE(lo.isOk()) << lo.status().toString();
  EXPECT_EQ(lo->address, "127.0.0.1");
  auto any = selectInterface("");
  EXPECT_TRUE(any.isOk());
  auto none = selectInterface("=nosuchif0");
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("nosuchif0"), std::string::npos);
}

TEST(HostPort, SplitAndJoin) {
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(splitHostPort("[::1]:80", &host, &port).isOk());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 80);
  EXPECT_EQ(joinHostPort("::1", 80), "[::1]:80");
  EXPECT_EQ(joinHostPort("10.0.0.1", 5), "10.0.0.1:5");
  EXPECT_FALSE(splitHostPort("::1:80", &host, &port).isOk());
  EXPECT_FALSE(splitHostPort("h:99999", &host, &port).isOk());
  EXPECT_FALSE(splitHostPort("h:", &host, &port).isOk());
}

// A connected loopback pair: *client and *server.
void connectPair(Socket* client, Socket* server) {
  auto listener = listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.isOk());
  auto port = localPort(listener->fd());
  ASSERT_TRUE(port.isOk());
  auto connected = connectWithDeadline("127.0.0.1", *port, Clock::now() + std::chrono::seconds(2));
  ASSERT_TRUE(connected.isOk());
  auto accepted = acceptWithDeadline(listener->fd(), Clock::now() + std::chrono::seconds(2));
  ASSERT_TRUE(accepted.isOk());
  *client = std::move(*connected);
  *server = std::move(*accepted);
}

TEST(Sockets, ReadTimesOutAndSeesClose) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(connectPair(&client, &server));
  char byte;
  auto st = readFull(server.fd(), &byte, 1, Clock::now() + std::chrono::milliseconds(50));
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  client.reset();
  st = readFull(server.fd(), &byte, 1, Clock::now() + std::chrono::seconds(2));
  EXPECT_EQ(st.code(), StatusCode::kRemoteError);
}

// A peer that closes with our bytes unread resets the connection: the reader sees the
// peer gone (kRemoteError), as after an orderly close, not an OS failure. (A handshake
// refused while a proof was in flight failed as "recv: Connection reset by peer"
// instead of Unauthenticated.)
TEST(Sockets, ReadSeesAResetAsThePeerClosing) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(connectPair(&client, &server));
  const char sent = 1;
  ASSERT_TRUE(writeFull(client.fd(), &sent, 1, Clock::now() + std::chrono::seconds(2)).isOk());
  // Closing with a byte unread sends a reset instead of a FIN.
  server.reset();
  char byte;
  auto st = readFull(client.fd(), &byte, 1, Clock::now() + std::chrono::seconds(2));
  EXPECT_EQ(st.code(), StatusCode::kRemoteError) << st.toString();
  EXPECT_NE(st.message().find("reset by the peer"), std::string::npos) << st.toString();
}

}  // namespace
}  // namespace collie::net
